package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/compiler/ir"
	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/internal/clitest"
	"github.com/zrtdev/zrt/internal/testmodel"
)

// zrtc runs the command line in-process and returns its stdout.
func zrtc(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, _, err := clitest.Run("zrtc", args, buildCmd(), inspectCmd(), dumpCmd(), synthCmd())
	return out, err
}

func TestBuildPhaseFlags(t *testing.T) {
	model := testmodel.Tiny(t)
	dir := t.TempDir()
	straight, resumed, dumps := filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(dir, "dumps")
	if _, err := zrtc(t, "build", model, "-q", "-o", straight, "--dump-after=all", "--dump-dir", dumps); err != nil {
		t.Fatal(err)
	}
	zirs, _ := filepath.Glob(filepath.Join(dumps, "*-memplan.*.zir"))
	tables, _ := filepath.Glob(filepath.Join(dumps, "*-liveness.*.liveness.txt"))
	plans, _ := filepath.Glob(filepath.Join(dumps, "*-memplan.json"))
	// T-CPU's defaults: prefill r128, decode r1, r2, r4, r8, r16, and a
	// draft variant of each decode variant (Tiny's 2 layers draft 1).
	if len(zirs) != 11 || len(tables) != 11 || len(plans) != 1 {
		t.Fatalf("dump dir holds %v %v %v", zirs, tables, plans)
	}

	// compile-to on stdout, then compile-from that text.
	text, err := zrtc(t, "build", model, "-q", "--compile-to=regalloc")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ir.Parse([]byte(text)); err != nil || !strings.HasPrefix(text, "graph ") {
		t.Fatalf("compile-to wrote %.200q: %v", text, err)
	}
	irPath := filepath.Join(dir, "r.zir")
	os.WriteFile(irPath, []byte(text), 0o644)
	if _, err := zrtc(t, "build", model, irPath, "-q", "--compile-from=regalloc", "-o", resumed); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(filepath.Join(straight, bundle.GraphFile))
	b, _ := os.ReadFile(filepath.Join(resumed, bundle.GraphFile))
	if len(a) == 0 || !bytes.Equal(a, b) {
		t.Fatalf("graph file of the resumed build differs from a straight build (%d vs %d bytes)", len(a), len(b))
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"build", model, "-q", "--compile-from=regalloc", "-o", resumed}, "needs the text IR file after MODEL.gguf"},
		{[]string{"build", model, irPath, "-q", "-o", resumed}, "needs --compile-from=PHASE"},
		{[]string{"build", model, "-q"}, "-o OUT is required"},
		{[]string{"build", model, "-q", "--compile-to=regalloc", "--compile-from=memplan", irPath}, "stops at or before"},
		{[]string{"build", model, "-q", "-o", resumed, "--dump-after=liveness"}, "--dump-after and --dump-dir go together"},
	} {
		if _, err := zrtc(t, c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: got %v, want %q", c.args, err, c.want)
		}
	}
}

func TestDumpIR(t *testing.T) {
	model := testmodel.Tiny(t)
	built, err := zrtc(t, "dump", "ir", model)
	if err != nil {
		t.Fatal(err)
	}
	lowered, err := zrtc(t, "dump", "ir", model, "--after", "lower")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(built, "=> ") || !strings.Contains(lowered, "=> ") {
		t.Error("dump ir shows kernels before lowering, or none after it")
	}
	if _, err := zrtc(t, "dump", "ir", model, "--after", "codegen"); err == nil || !strings.Contains(err.Error(), `unknown pass "codegen"`) {
		t.Errorf("--after codegen: %v", err)
	}
}

// TestWritersKeepWhatTheyDidNotWrite: -o naming a directory that is not a
// bundle, or a file that is not of the kind written, is refused and left
// as it was.
func TestWritersKeepWhatTheyDidNotWrite(t *testing.T) {
	model := testmodel.Tiny(t)
	dir := t.TempDir()
	notes := filepath.Join(dir, "notes")
	os.Mkdir(notes, 0o755)
	os.WriteFile(filepath.Join(notes, "todo.txt"), []byte("keep"), 0o644)
	text := filepath.Join(dir, "text.txt")
	os.WriteFile(text, []byte("keep"), 0o644)
	for _, args := range [][]string{
		{"build", model, "-o", notes},
		{"build", model, "-o", text},
		{"build", model, "--compile-to=fuse", "-o", text},
		{"synth", "-o", text},
		{"synth", "-o", notes},
	} {
		_, err := zrtc(t, args...)
		if err == nil || !strings.Contains(err.Error(), "refusing to replace it") {
			t.Errorf("%q: %v", args, err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(notes, "todo.txt")); string(b) != "keep" {
		t.Error("the notes directory changed")
	}
	if b, _ := os.ReadFile(text); string(b) != "keep" {
		t.Error("the text file changed")
	}
	// What zrtc wrote, it replaces.
	out := filepath.Join(dir, "b")
	for range 2 {
		if _, err := zrtc(t, "build", model, "-o", out); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := zrtc(t, "build", model, "--compile-to=fuse", "-o", filepath.Join(dir, "m.zir")); err != nil {
		t.Fatal(err)
	}
	if _, err := zrtc(t, "build", model, "--compile-to=fuse", "-o", filepath.Join(dir, "m.zir")); err != nil {
		t.Fatal(err)
	}
}

// TestBuildWarnsPastMemoryBudget: the plan's resident bytes are printed,
// and a plan past --memory-budget gets a warning (the bundle is still
// written: it may be meant for a larger machine).
func TestBuildWarnsPastMemoryBudget(t *testing.T) {
	model := testmodel.Tiny(t)
	_, stderr, err := clitest.Run("zrtc", []string{"build", model, "--memory-budget", "64KiB", "-o", filepath.Join(t.TempDir(), "b")}, buildCmd())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"zrtc: plan: weights", "resident", "zrtc: warning: the plan keeps", "more than the 0.1 MiB budget"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if _, err := zrtc(t, "build", model, "--memory-budget", "lots", "-o", filepath.Join(t.TempDir(), "b")); err == nil || !strings.Contains(err.Error(), "is not a size") {
		t.Errorf("bad budget: %v", err)
	}
}

// TestBuildDraftLayers: a default build of stories260K has a draft
// variant for each decode variant, of a quarter of its 5 layers (1), as
// zrtc config says beforehand; --draft-layers 0, or draft_layers = 0 in
// the config, builds none, and --draft-layers N wins over the config.
func TestBuildDraftLayers(t *testing.T) {
	model := testmodel.Shared(t, "stories260K.gguf")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "m.toml")
	if err := os.WriteFile(cfg, []byte("draft_layers = 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for i, c := range []struct {
		flags  []string
		layers int // 0: no draft variant
	}{
		{nil, 1},
		{[]string{"--draft-layers", "0"}, 0},
		{[]string{"--config", cfg}, 0},
		{[]string{"--config", cfg, "--draft-layers", "2"}, 2},
	} {
		out := filepath.Join(dir, strconv.Itoa(i))
		if _, err := zrtc(t, append([]string{"build", model, "-q", "--slots", "2", "-o", out}, c.flags...)...); err != nil {
			t.Fatalf("%v: %v", c.flags, err)
		}
		g, _, err := bundle.ReadGraph(out)
		if err != nil {
			t.Fatal(err)
		}
		var stages []string
		for _, v := range g.Variants {
			stages = append(stages, fmt.Sprintf("%v.r%d", v.Stage, v.Rows))
		}
		want := "prefill.r128 decode.r1 decode.r2"
		if c.layers > 0 {
			want += " draft.r1 draft.r2"
		}
		if got := strings.Join(stages, " "); got != want {
			t.Errorf("%v: variants %s, want %s", c.flags, got, want)
		}
		if line := fmt.Sprintf("draft_layers = %d\n", c.layers); !strings.Contains(g.ConfigTOML, line) {
			t.Errorf("%v: the recorded config lacks %q:\n%s", c.flags, line, g.ConfigTOML)
		}
		printed, _, err := clitest.Run("zrtc", append([]string{"config", model}, c.flags...), configCmd())
		if err != nil || !strings.Contains(printed, fmt.Sprintf("draft_layers = %d\n", c.layers)) {
			t.Errorf("zrtc config %v: %v\n%s", c.flags, err, printed)
		}
	}
}

// TestSynthRefusesBadShapes: every shape flag is checked with its range
// before anything is allocated, and a shape larger than memory is refused.
func TestSynthRefusesBadShapes(t *testing.T) {
	out := filepath.Join(t.TempDir(), "m.gguf")
	for _, c := range []struct{ flags, want string }{
		{"--embd 0", "--embd 0 out of range"},
		{"--embd -64", "--embd -64 out of range"},
		{"--heads 0", "--heads 0 out of range"},
		{"--ffn 0", "--ffn 0 out of range"},
		{"--heads-kv 3", "not a multiple of --heads-kv 3"},
		{"--embd 98", "--embd 98 is not a multiple of --heads 4"},
		{"--vocab 10", "--vocab 10 out of range"},
		{"--embd 65536 --heads 64 --layers 1000 --ffn 200000", "of memory"},
		{"--arch gemma4 --layers 10 --shared-kv 4", "layer 5 must be global"},
		{"--arch gemma4 --per-layer 48 --type Q8_0", "per-layer 48 is not a multiple of Q8_0's block of 32"},
	} {
		_, err := zrtc(t, append([]string{"synth", "-o", out}, strings.Fields(c.flags)...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", c.flags, err, c.want)
		}
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("a refused synth wrote its output")
	}
}
