package bundleset

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/format/publish"
)

func index() *Index {
	return &Index{Producer: "zrtc test", Model: Model{Source: "m.gguf", SHA256: "ab", Architecture: "llama"},
		Bundles: []Member{
			{Target: "cpu", Dir: SanitizeTarget("cpu"), Requires: Requires{Tier: "cpu"}, Key: "k1"},
			{Target: "cuda:sm_90", Dir: SanitizeTarget("cuda:sm_90"), Requires: Requires{Tier: "cuda", CUDAComputeCapability: "9.0"}, Key: "k2"},
		}}
}

// members writes a graph file into each member's directory.
func members(x *Index) func(tmp string) error {
	return func(tmp string) error {
		for _, m := range x.Bundles {
			if err := os.Mkdir(m.Path(tmp), 0o755); err != nil {
				return err
			}
			g := &bundle.Graph{Ident: bundle.Ident{Target: m.Target}}
			if err := os.WriteFile(filepath.Join(m.Path(tmp), bundle.GraphFile), g.Encode(), 0o644); err != nil {
				return err
			}
		}
		return nil
	}
}

func TestWriteRead(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "set")
	x := index()
	if err := Write(out, x, members(x)); err != nil {
		t.Fatal(err)
	}
	if !IsSet(out) || IsSet(filepath.Join(out, "cpu")) {
		t.Fatal("IsSet wrong")
	}
	got, err := Read(out)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(x, got) {
		t.Fatalf("read back differs:\nwrote %+v\nread  %+v", x, got)
	}
	if got.Bundles[1].Dir != "cuda_sm_90" || len(got.Bundles[0].GraphSHA256) != 64 {
		t.Fatalf("members: %+v", got.Bundles)
	}
	for _, m := range got.Bundles {
		if err := VerifyMember(out, m); err != nil {
			t.Error(err)
		}
	}
	// Written twice, the same bytes.
	first, _ := os.ReadFile(filepath.Join(out, IndexFile))
	x2 := index()
	if err := Write(out, x2, members(x2)); err != nil {
		t.Fatal(err)
	}
	second, _ := os.ReadFile(filepath.Join(out, IndexFile))
	if string(first) != string(second) {
		t.Error("the same set written twice differs")
	}
	// A bundle may replace a set and a set a bundle; a user's directory
	// is refused and kept.
	notes := filepath.Join(dir, "notes")
	os.Mkdir(notes, 0o755)
	os.WriteFile(filepath.Join(notes, "todo"), []byte("keep"), 0o644)
	x3 := index()
	if err := Write(notes, x3, members(x3)); !errors.Is(err, publish.ErrNotOurs) {
		t.Fatalf("writing over a user's directory: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(notes, "todo")); string(b) != "keep" {
		t.Fatal("the user's directory changed")
	}
}

func TestCheckRefuses(t *testing.T) {
	for _, c := range []struct {
		edit func(x *Index)
		want string
	}{
		{func(x *Index) { x.Format = "other" }, "not a zrt-bundle-set"},
		{func(x *Index) { x.Version = Version + 1 }, "this zrt reads"},
		{func(x *Index) { x.Bundles = nil }, "no bundles"},
		{func(x *Index) { x.Bundles[1].Target = "cpu" }, "listed twice"},
		{func(x *Index) { x.Bundles[1].Dir = "../../etc" }, "not a plain name"},
		{func(x *Index) { x.Bundles[1].Dir = ".." }, "not a plain name"},
		{func(x *Index) { x.Bundles[1].Dir = x.Bundles[0].Dir }, "not a plain name"},
	} {
		x := index()
		x.Format, x.Version = FormatName, Version
		c.edit(x)
		if err := x.Check(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v, want %q", err, c.want)
		}
	}
}

func TestSanitizeTarget(t *testing.T) {
	for in, want := range map[string]string{"cpu": "cpu", "cuda:sm_90": "cuda_sm_90", "amd:gfx1201": "amd_gfx1201", "a/b\\c": "a_b_c", "..": "_..", "": "_"} {
		if got := SanitizeTarget(in); got != want {
			t.Errorf("SanitizeTarget(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestTensorParallelIndex holds a tensor-parallel index to its rules:
// every target has all its ranks, each once, and Targets and Member see
// a target once, through its rank 0.
func TestTensorParallelIndex(t *testing.T) {
	x := &Index{Format: FormatName, Version: Version, TPRanks: 2, Bundles: []Member{
		{Target: "cpu", Dir: "cpu.tp0"}, {Target: "cpu", Dir: "cpu.tp1", Rank: 1}}}
	if err := x.Check(); err != nil {
		t.Fatal(err)
	}
	if got := x.Targets(); len(got) != 1 || got[0] != "cpu" {
		t.Errorf("targets %v", got)
	}
	if m, ok := x.Member("cpu"); !ok || m.Dir != "cpu.tp0" {
		t.Errorf("member %+v", m)
	}
	if r := x.Ranks("cpu"); len(r) != 2 || r[1].Dir != "cpu.tp1" {
		t.Errorf("ranks %+v", r)
	}
	for name, bad := range map[string]func(*Index){
		"missing rank":   func(x *Index) { x.Bundles = x.Bundles[:1] },
		"rank twice":     func(x *Index) { x.Bundles[1].Rank = 0 },
		"rank past set":  func(x *Index) { x.Bundles[1].Rank = 2 },
		"one rank":       func(x *Index) { x.TPRanks = 1 },
		"rank, no ranks": func(x *Index) { x.TPRanks = 0 },
	} {
		y := *x
		y.Bundles = append([]Member(nil), x.Bundles...)
		bad(&y)
		if err := y.Check(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
