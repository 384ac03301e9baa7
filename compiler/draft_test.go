package compiler_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/compiler/ir"
	"github.com/zrtdev/zrt/compiler/synth"
	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/format/support"
	"github.com/zrtdev/zrt/internal/testmodel"
)

// drafts counts the draft variants of fe's graphs, failing t unless
// there is one for each decode variant or none at all.
func drafts(t *testing.T, fe *compiler.Frontend) int {
	t.Helper()
	var decode, draft int
	for _, g := range fe.Unit.Graphs {
		switch g.Key.Stage {
		case ir.Decode:
			decode++
		case ir.Draft:
			draft++
		}
	}
	if draft != 0 && draft != decode {
		t.Errorf("%d draft variants for %d decode variants", draft, decode)
	}
	return draft
}

// loadWith loads model with the model config text (none when empty) and
// opt.
func loadWith(t *testing.T, model, config string, opt compiler.Options) (*compiler.Frontend, error) {
	t.Helper()
	if config != "" {
		opt.ConfigPath = filepath.Join(t.TempDir(), "m.toml")
		if err := os.WriteFile(opt.ConfigPath, []byte(config), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fe, err := compiler.Load(model, opt)
	if err == nil {
		t.Cleanup(func() { fe.Close() })
	}
	return fe, err
}

// TestDefaultDraft: with draft_layers unset, a build has draft variants
// of a quarter of the model's layers (at least 1), and records the count
// it took, where the model can draft; none, silently and with the config
// recorded as it was, for a model of one layer, one whose first layers
// are recurrent, or one keeping per-slot state (a recurrent state, a
// window ring), on which zrt-run does not speculate; asking for a draft
// of those keeps its error where the draft's layers cannot be built.
func TestDefaultDraft(t *testing.T) {
	llama := func(layers int) synth.Shape {
		s := synth.Tiny
		s.Layers = layers
		return s
	}
	qwen35 := synth.Shape{Arch: "qwen35", Layers: 4, Embd: 64, Heads: 4, HeadsKV: 2, HeadDim: 32, FF: 128, Vocab: 320, Context: 256,
		Type: ggml.Q8_0, SSMState: 32, SSMGroups: 2, SSMHeads: 4, Seed: 11}
	// Gemma 2 alternates sliding-window and global layers: its window
	// layers keep a ring of pages per slot unless swa_full.
	gemma2 := synth.Shape{Arch: "gemma2", Layers: 4, Embd: 64, Heads: 4, HeadsKV: 2, HeadDim: 32, FF: 128, Vocab: 300, Context: 1024,
		Type: ggml.Q8_0, Window: 8, Seed: 7}
	for _, c := range []struct {
		name   string
		s      synth.Shape
		config string
		want   int
		// explicit is what draft_layers = 1 gives: "" builds it, else
		// a piece of the error.
		explicit string
	}{
		{"llama 2 layers", llama(2), "", 1, ""},
		{"llama 8 layers", llama(8), "", 2, ""},
		{"llama 11 layers", llama(11), "", 2, ""},
		{"llama 1 layer", llama(1), "", 0, "fewer layers than the model's 1"},
		{"qwen35", qwen35, "", 0, "layer 0 is recurrent"},
		{"gemma2 ring", gemma2, "", 0, ""},
		{"gemma2 swa_full", gemma2, "swa_full = true\n", 1, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			model := testmodel.New(t, c.s)
			fe, err := loadWith(t, model, c.config, compiler.Options{Slots: 2})
			if err != nil {
				t.Fatal(err)
			}
			if n := drafts(t, fe); (n > 0) != (c.want > 0) || fe.Config.Draft() != c.want {
				t.Errorf("%d draft variants of %d layers, want %d layers", n, fe.Config.Draft(), c.want)
			}
			recorded := fe.Config.TOML()
			switch {
			case c.want > 0 && !strings.Contains(recorded, fmt.Sprintf("draft_layers = %d\n", c.want)):
				t.Errorf("the recorded config does not say draft_layers = %d:\n%s", c.want, recorded)
			case c.want == 0 && strings.Contains(recorded, "draft_layers"):
				t.Errorf("a build without a draft records draft_layers:\n%s", recorded)
			}
			if d := fe.Config.Defaults(); !strings.Contains(strings.Join(d, "\n"), "draft_layers = ") {
				t.Errorf("the defaults %q do not say what draft_layers became", d)
			}
			_, err = loadWith(t, model, c.config+"draft_layers = 1\n", compiler.Options{Slots: 2})
			switch {
			case c.explicit == "" && err != nil:
				t.Errorf("draft_layers = 1: %v", err)
			case c.explicit != "" && (err == nil || !strings.Contains(err.Error(), c.explicit)):
				t.Errorf("draft_layers = 1: %v, want an error saying %q", err, c.explicit)
			}
		})
	}
	// A recurrent first layer is a model zrtc cannot draft, not a
	// mistake: typed as unsupported.
	if _, err := loadWith(t, testmodel.New(t, qwen35), "", compiler.Options{DraftLayers: new(1)}); !support.Is(err) {
		t.Errorf("--draft-layers 1 on a recurrent first layer: %v, want unsupported", err)
	}
}

// TestDraftLayersZero: draft_layers = 0 in the config, or the override
// (zrtc build --draft-layers 0) over a config that asks for a draft,
// builds no draft variant and records draft_layers = 0, so the recorded
// config builds none again; the bundle is reproducible and differs from
// the default build's only by what the drafts add.
func TestDraftLayersZero(t *testing.T) {
	model := testmodel.Shared(t, "stories260K.gguf")
	fe, err := loadWith(t, model, "", compiler.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if drafts(t, fe) == 0 || fe.Config.Draft() != 1 {
		t.Fatalf("the default build of stories260K (5 layers) has %d draft variants of %d layers, want 1 layer", drafts(t, fe), fe.Config.Draft())
	}
	for _, c := range []struct {
		config string
		opt    compiler.Options
	}{
		{"draft_layers = 0\n", compiler.Options{}},
		{"draft_layers = 2\n", compiler.Options{DraftLayers: new(0)}},
		{"", compiler.Options{DraftLayers: new(0)}},
	} {
		fe, err := loadWith(t, model, c.config, c.opt)
		if err != nil {
			t.Fatal(err)
		}
		if n := drafts(t, fe); n != 0 {
			t.Errorf("%q with --draft-layers %v: %d draft variants", c.config, c.opt.DraftLayers, n)
		}
		if !strings.Contains(fe.Config.TOML(), "draft_layers = 0\n") {
			t.Errorf("%q with --draft-layers %v: the recorded config lacks draft_layers = 0:\n%s", c.config, c.opt.DraftLayers, fe.Config.TOML())
		}
	}
	if _, err := loadWith(t, model, "", compiler.Options{DraftLayers: new(-1)}); err == nil {
		t.Error("--draft-layers -1 accepted")
	}

	// Built, twice without drafts and once by default: the bundles
	// without drafts are the same bytes; the default one lists the same
	// variants and a draft after them.
	dir := t.TempDir()
	var outs []string
	for i, opt := range []compiler.Options{{DraftLayers: new(0)}, {DraftLayers: new(0)}, {}} {
		out := filepath.Join(dir, fmt.Sprint(i))
		if err := compiler.Compile(context.Background(), model, out, opt); err != nil {
			t.Fatal(err)
		}
		outs = append(outs, out)
	}
	testmodel.SameTree(t, outs[0], outs[1], 3)
	none, _, err := bundle.ReadGraph(outs[0])
	if err != nil {
		t.Fatal(err)
	}
	def, _, err := bundle.ReadGraph(outs[2])
	if err != nil {
		t.Fatal(err)
	}
	var decode []bundle.Variant
	for i, v := range none.Variants {
		if v.Stage == bundle.StageDraft || v.Stage != def.Variants[i].Stage || v.Rows != def.Variants[i].Rows {
			t.Errorf("variant %d: %v of %d rows without drafts, %v of %d by default", i, v.Stage, v.Rows, def.Variants[i].Stage, def.Variants[i].Rows)
		}
		if v.Stage == bundle.StageDecode {
			decode = append(decode, v)
		}
	}
	if extra := def.Variants[len(none.Variants):]; len(extra) != len(decode) {
		t.Errorf("the default build adds %d variants to %d, want a draft for each of %d decode variants", len(extra), len(none.Variants), len(decode))
	} else {
		for i, v := range extra {
			if v.Stage != bundle.StageDraft || v.Rows != decode[i].Rows || v.Slots != decode[i].Slots {
				t.Errorf("added variant %d: %v of %d rows, want a draft of %d", i, v.Stage, v.Rows, decode[i].Rows)
			}
		}
	}
	if !strings.Contains(def.ConfigTOML, "draft_layers = 1\n") || strings.Replace(def.ConfigTOML, "draft_layers = 1\n", "draft_layers = 0\n", 1) != none.ConfigTOML {
		t.Errorf("recorded configs differ by more than draft_layers:\n%s\n---\n%s", def.ConfigTOML, none.ConfigTOML)
	}
}
