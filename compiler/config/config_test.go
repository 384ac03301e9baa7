package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/compiler/ir"
	"github.com/zrtdev/zrt/compiler/synth"
	"github.com/zrtdev/zrt/format/gguf"
	"github.com/zrtdev/zrt/format/support"
)

// load resolves the tiny synthetic model's config with the TOML text.
func load(t *testing.T, text string) (*Config, error) {
	t.Helper()
	b, err := synth.Write(synth.Tiny)
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	path := ""
	if text != "" {
		path = filepath.Join(t.TempDir(), "m.toml")
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return Load(f, path)
}

func TestVariantList(t *testing.T) {
	key := func(s ir.Stage, slots, rows int) ir.ShapeKey { return ir.ShapeKey{Stage: s, Slots: slots, Rows: rows} }
	cases := []struct {
		toml string
		keys []ir.ShapeKey
		kv   int
	}{
		// Tiny's context is 256 tokens: 16 pages a slot.
		{"", []ir.ShapeKey{key(ir.Prefill, 1, 128), key(ir.Decode, 1, 1)}, 16},
		{"max_slots = 2\nprefill_chunk = 8\n", []ir.ShapeKey{key(ir.Prefill, 2, 8), key(ir.Decode, 2, 2)}, 32},
		// Lists set the largest; they are sorted and deduplicated.
		{"decode_slots = [4, 1, 4, 2]\nprefill_rows = [64, 16]\n",
			[]ir.ShapeKey{key(ir.Prefill, 4, 16), key(ir.Prefill, 4, 64), key(ir.Decode, 4, 1), key(ir.Decode, 4, 2), key(ir.Decode, 4, 4)}, 64},
		// max_slots may exceed the largest decode variant; kv_pages is its own.
		{"max_slots = 8\ndecode_slots = [2]\nkv_pages = 5\n", []ir.ShapeKey{key(ir.Prefill, 8, 128), key(ir.Decode, 8, 2)}, 5},
	}
	for _, c := range cases {
		cfg, err := load(t, c.toml)
		if err != nil {
			t.Errorf("%q: %v", c.toml, err)
			continue
		}
		if got := cfg.ShapeKeys(); !reflect.DeepEqual(got, c.keys) || cfg.KVPages != c.kv {
			t.Errorf("%q: keys %v, kv_pages %d; want %v, %d", c.toml, got, cfg.KVPages, c.keys, c.kv)
		}
	}
	for toml, want := range map[string]string{
		"max_slots = 2\ndecode_slots = [4]\n":         "decode_slots [4]: each must be in [1, max_slots = 2]",
		"decode_slots = [0, 2]\n":                     "decode_slots [0 2]",
		"prefill_chunk = 32\nprefill_rows = [16]\n":   "prefill_chunk 32 differs from the largest of prefill_rows [16]",
		"kv_pages = -1\n":                             "kv_pages -1 out of range",
		"decode_slot = [2]\n":                         "unknown keys: decode_slot",
		"[rope]\nscaling = \"longrope\"\n":            `unsupported rope scaling "longrope" (rope.scaling in `,
		"[rope]\nscaling = \"spiral\"\nfreq_base=1\n": `unknown rope scaling "spiral"`,
	} {
		_, err := load(t, toml)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want an error containing %q", toml, err, want)
		}
		if unsupported := errors.Is(err, support.ErrUnsupported); unsupported != strings.HasPrefix(want, "unsupported") {
			t.Errorf("%q: support.Is = %v", toml, unsupported)
		}
	}
}
