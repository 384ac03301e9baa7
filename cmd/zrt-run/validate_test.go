package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/cmd/internal/exitcode"
	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/internal/testmodel"
)

// TestValidateCommand compares two cpu builds of one synthetic model with
// different variants (equal bit for bit), one slot and then two a decode
// step, and checks the flags' errors.
func TestValidateCommand(t *testing.T) {
	model := testmodel.Tiny(t)
	var bundles []string
	for i, config := range []string{"max_slots = 4\n", "max_slots = 4\ndecode_slots = [1, 2]\nprefill_rows = [16]\n"} {
		out := filepath.Join(filepath.Dir(model), string(rune('a'+i)))
		bundles = append(bundles, testmodel.Compile(t, model, out, config, compiler.Options{}))
	}
	out, _, err := execCommand(validateCmd(), bundles[0], "--oracle", bundles[1], "--steps", "2", "--threads", "1")
	if err != nil {
		t.Fatalf("validate: %v\n%s", err, out)
	}
	for _, want := range []string{"2 decode steps", "layer 0", "decode 2 max|Δ|", "logits", "every point within tolerance 0.1"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	out, _, err = execCommand(validateCmd(), bundles[0], "--oracle", bundles[1], "--layers", "1", "--steps", "0", "--threads", "1")
	if err != nil || strings.Contains(out, "layer 0") || !strings.Contains(out, "layer 1") {
		t.Errorf("--layers 1: %v\n%s", err, out)
	}
	// Batched: a decode step of a row per slot, each slot at its own position.
	out, _, err = execCommand(validateCmd(), bundles[0], "--oracle", bundles[1], "--slots", "2", "--steps", "2", "--threads", "1")
	if err != nil || !strings.Contains(out, "2 decode steps of 2 slots") || !strings.Contains(out, "every point within tolerance") {
		t.Errorf("--slots 2: %v\n%s", err, out)
	}
	if _, _, err := execCommand(validateCmd(), bundles[0], "--oracle", bundles[1], "--slots", "3", "--threads", "1"); err == nil ||
		!strings.Contains(err.Error(), "no decode variant of 3 rows") {
		t.Errorf("--slots 3 against a bundle whose decode variants stop at 2: %v", err)
	}
	for _, args := range [][]string{
		{bundles[0], "--oracle", bundles[1], "--slots", "0"},
		{bundles[0]},
		{bundles[0], "--oracle", bundles[1], "--layers", "3-1"},
		{bundles[0], "--oracle", bundles[1], "--tolerance", "-1"},
		{bundles[0], "--oracle", bundles[1], "--steps", "-2"},
	} {
		if _, _, err := execCommand(validateCmd(), args...); exitcode.Code(err) != 2 {
			t.Errorf("validate %v: %v (exit %d), want a usage error", args, err, exitcode.Code(err))
		}
	}
}
