package cuda

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestNoteSlowLoad: a kernel load that outlasts the threshold is announced
// while it runs and timed when it ends; a quick one says nothing.
func TestNoteSlowLoad(t *testing.T) {
	var mu sync.Mutex
	var lines []string
	log := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, fmt.Sprintf(format, args...))
	}
	loaded := noteSlowLoad(log, 312, time.Hour)
	loaded()
	loaded()
	if len(lines) != 0 {
		t.Fatalf("a quick load logged %q", lines)
	}
	loaded = noteSlowLoad(log, 312, time.Millisecond)
	time.Sleep(50 * time.Millisecond)
	loaded()
	loaded()
	mu.Lock()
	defer mu.Unlock()
	if len(lines) != 2 || !strings.Contains(lines[0], "compiling 312 kernels") || !strings.HasPrefix(lines[1], "T-CUDA: kernels ready in") {
		t.Fatalf("a slow load logged %q", lines)
	}
	noteSlowLoad(nil, 1, time.Nanosecond)() // no log: nothing to call
}
