package main

import (
	"bytes"
	"testing"

	"github.com/zrtdev/zrt/kernels/internal/asmgen"
)

// TestGeneratedFresh fails when a committed .s file is not what the
// generator writes from the current tables: run make generate. CI also
// checks this by running make generate on a clean clone; this test says
// so sooner, in go test.
func TestGeneratedFresh(t *testing.T) {
	stale, err := asmgen.Stale("..", render())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range stale {
		t.Errorf("kernels/cpu/%s differs from the generator's output: run make generate", name)
	}
}

// TestRenderDeterministic guards the CI check: output that varied between
// runs would make make generate dirty a clean tree.
func TestRenderDeterministic(t *testing.T) {
	a, b := render(), render()
	for name := range a {
		if !bytes.Equal(a[name], b[name]) {
			t.Errorf("%s differs between two runs", name)
		}
	}
}
