package bundle

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/format/gguf"
)

// TestVerifyWeightsSurvivesTruncation: a weights file truncated under its
// mapping faults on read (SIGBUS); verification reports it as an error
// instead of killing the process.
func TestVerifyWeightsSurvivesTruncation(t *testing.T) {
	p := filepath.Join(t.TempDir(), WeightsFile)
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	pw, err := NewPackWriter(f, []string{"w"}, []int64{1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if err := pw.Put(0, 0, make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	hash, err := pw.Close()
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	pack, unmap, err := gguf.MapFile(p)
	if err != nil {
		t.Fatal(err)
	}
	defer unmap()
	if err := VerifyWeights(pack, hash); err != nil {
		t.Fatalf("intact pack: %v", err)
	}
	if err := os.Truncate(p, 8192); err != nil {
		t.Fatal(err)
	}
	err = VerifyWeights(pack, hash)
	if err == nil || !strings.Contains(err.Error(), "truncated or changed while mapped") {
		t.Fatalf("got %v", err)
	}
}
