package usage_test

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"

	"github.com/zrtdev/zrt/internal/usage"
)

// TestError: the error says what it wraps, stays in the chain for
// errors.Is and errors.As, and is found as a usage mistake through any
// wrapping, the way the commands look for it.
func TestError(t *testing.T) {
	err := fmt.Errorf("build: %w", &usage.Error{Err: fmt.Errorf("--tp 1: %w", fs.ErrInvalid)})
	if got := err.Error(); got != "build: --tp 1: invalid argument" {
		t.Errorf("message %q", got)
	}
	if !errors.Is(err, fs.ErrInvalid) {
		t.Error("the wrapped error is not in the chain")
	}
	var u interface{ Usage() bool }
	if !errors.As(err, &u) || !u.Usage() {
		t.Error("not found as a usage mistake")
	}
	if errors.As(fmt.Errorf("build: %w", fs.ErrInvalid), &u) {
		t.Error("an error without usage.Error is a usage mistake")
	}
}
