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
	return loadWith(t, synth.Tiny, text, Overrides{})
}

// loadWith resolves the config of a synthetic model of shape s with the
// TOML text and overrides.
func loadWith(t *testing.T, s synth.Shape, text string, o Overrides) (*Config, error) {
	t.Helper()
	b, err := synth.Write(s)
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
	return Load(f, path, o)
}

func TestVariantList(t *testing.T) {
	key := func(s ir.Stage, slots, rows int) ir.ShapeKey { return ir.ShapeKey{Stage: s, Slots: slots, Rows: rows} }
	cases := []struct {
		toml string
		keys []ir.ShapeKey
		kv   int
	}{
		// Tiny's context is 256 tokens: 16 pages a slot. T-CPU's default:
		// 16 slots, decode variants doubling up to them, 16 short contexts.
		{"", []ir.ShapeKey{key(ir.Prefill, 16, 128), key(ir.Decode, 16, 1), key(ir.Decode, 16, 2), key(ir.Decode, 16, 4),
			key(ir.Decode, 16, 8), key(ir.Decode, 16, 16)}, 256},
		// max_slots alone keeps its one variant, as before.
		{"max_slots = 1\n", []ir.ShapeKey{key(ir.Prefill, 1, 128), key(ir.Decode, 1, 1)}, 16},
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

// TestDefaults checks the serving defaults: they depend on the target,
// take the GGUF's whole context, size the KV pool by tokens in flight
// rather than slots × context, give way to the config file and the
// overrides, and are listed by Defaults.
func TestDefaults(t *testing.T) {
	long := synth.Tiny
	long.Context = 131072
	cases := []struct {
		name      string
		shape     synth.Shape
		toml      string
		o         Overrides
		ctx       int
		slots     int
		decode    []int
		prefill   []int
		kvPages   int
		defaulted int // lines in Defaults
	}{
		{"cpu", synth.Tiny, "", Overrides{}, 256, 16, []int{1, 2, 4, 8, 16}, []int{128}, 16 * 16, 4},
		{"cuda", synth.Tiny, "", Overrides{Target: "cuda:sm_90"}, 256, 64, []int{1, 4, 16, 64}, []int{128, 512, 1024}, 64 * 16, 4},
		{"cuda from the config file", synth.Tiny, "target = \"cuda:sm_90\"\n", Overrides{}, 256, 64, []int{1, 4, 16, 64}, []int{128, 512, 1024}, 64 * 16, 4},
		{"amd", synth.Tiny, "", Overrides{Target: "amd:gfx1201"}, 256, 1, []int{1}, []int{128}, 16, 4},
		// 131072 tokens, no cap: the pool holds one whole context, more
		// than 16 slots × 2048 tokens.
		{"long context", long, "", Overrides{}, 131072, 16, []int{1, 2, 4, 8, 16}, []int{128}, 131072 / 16, 4},
		{"--slots 12 --ctx-size 4096", long, "", Overrides{Slots: 12, ContextLength: 4096}, 4096, 12, []int{1, 2, 4, 8, 12}, []int{128}, 12 * 128, 2},
		{"--slots over the file's lists", synth.Tiny, "decode_slots = [1, 3]\ncontext_length = 64\n", Overrides{Slots: 5}, 64, 5, []int{1, 2, 4, 5}, []int{128}, 5 * 4, 2},
		{"the file's settings", synth.Tiny, "max_slots = 2\ncontext_length = 128\nprefill_chunk = 32\nkv_pages = 9\n", Overrides{}, 128, 2, []int{2}, []int{32}, 9, 0},
	}
	for _, c := range cases {
		cfg, err := loadWith(t, c.shape, c.toml, c.o)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if cfg.ContextLength != c.ctx || cfg.MaxSlots != c.slots || !reflect.DeepEqual(cfg.DecodeSlots, c.decode) ||
			!reflect.DeepEqual(cfg.PrefillRows, c.prefill) || cfg.KVPages != c.kvPages {
			t.Errorf("%s: context %d, max_slots %d, decode %v, prefill %v, kv_pages %d; want %d, %d, %v, %v, %d",
				c.name, cfg.ContextLength, cfg.MaxSlots, cfg.DecodeSlots, cfg.PrefillRows, cfg.KVPages, c.ctx, c.slots, c.decode, c.prefill, c.kvPages)
		}
		if d := cfg.Defaults(); len(d) != c.defaulted {
			t.Errorf("%s: Defaults lists %d settings, want %d:\n%s", c.name, len(d), c.defaulted, strings.Join(d, "\n"))
		}
	}
	cfg, err := loadWith(t, long, "", Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	if d := cfg.Defaults(); len(d) == 0 || !strings.Contains(d[0], "context_length = 131072 (the GGUF's llama.context_length)") {
		t.Errorf("Defaults does not say where the context came from: %q", d)
	}
	if _, err := loadWith(t, synth.Tiny, "", Overrides{Slots: -1}); err == nil {
		t.Errorf("negative slots accepted")
	}
	if _, err := loadWith(t, synth.Tiny, "", Overrides{Slots: 2000}); err == nil || !strings.Contains(err.Error(), "max_slots 2000 out of range") {
		t.Errorf("2000 slots: %v", err)
	}
}

func TestDecodeLadder(t *testing.T) {
	for _, c := range []struct {
		target string
		slots  int
		want   []int
	}{
		{"cpu", 1, []int{1}}, {"cpu", 16, []int{1, 2, 4, 8, 16}}, {"cpu", 20, []int{1, 2, 4, 8, 16, 20}},
		{"cuda:sm_90", 64, []int{1, 4, 16, 64}}, {"cuda:sm_90", 100, []int{1, 4, 16, 64, 100}}, {"cuda:sm_90", 2, []int{1, 2}},
	} {
		if got := DecodeLadder(c.target, c.slots); !reflect.DeepEqual(got, c.want) {
			t.Errorf("DecodeLadder(%s, %d) = %v, want %v", c.target, c.slots, got, c.want)
		}
	}
}

// TestCacheTypes holds cache_type_k and cache_type_v to llama.cpp's names:
// f16 by default, q8_0 accepted, the other llama.cpp types unsupported
// (not malformed), fp8_e4m3 accepted on cpu and cuda targets and refused
// off them, anything else an
// error naming the key.
func TestCacheTypes(t *testing.T) {
	cfg, err := load(t, "")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.CacheTypeK != "f16" || cfg.CacheTypeV != "f16" {
		t.Errorf("default cache types %q, %q; want f16", cfg.CacheTypeK, cfg.CacheTypeV)
	}
	if !strings.Contains(cfg.TOML(), "cache_type_k = \"f16\"") {
		t.Errorf("the effective config does not say its cache type:\n%s", cfg.TOML())
	}
	cfg, err = load(t, "cache_type_k = \"q8_0\"\ncache_type_v = \"q8_0\"\n")
	if err != nil || cfg.CacheTypeK != "q8_0" || cfg.CacheTypeV != "q8_0" {
		t.Fatalf("q8_0: %v %+v", err, cfg)
	}
	for _, target := range []string{"", "cuda:sm_90"} {
		cfg, err = loadWith(t, synth.Tiny, "cache_type_k = \"fp8_e4m3\"\ncache_type_v = \"fp8_e4m3\"\n", Overrides{Target: target})
		if err != nil || cfg.CacheTypeK != "fp8_e4m3" || cfg.CacheTypeV != "fp8_e4m3" {
			t.Fatalf("fp8_e4m3 on %q: %v %+v", target, err, cfg)
		}
	}
	cases := []struct {
		toml, target string
		unsupported  bool
		want         string
	}{
		{"cache_type_v = \"q4_0\"\n", "", true, "cache_type_v"},
		{"cache_type_k = \"fp8_e4m3\"\n", "amd:gfx1201", false, "cpu and cuda targets only"},
		{"cache_type_k = \"q9\"\n", "", false, "unknown KV cache type"},
	}
	for _, c := range cases {
		_, err := loadWith(t, synth.Tiny, c.toml, Overrides{Target: c.target})
		var se *support.Error
		switch {
		case err == nil:
			t.Errorf("%q on %q accepted", c.toml, c.target)
		case errors.As(err, &se) != c.unsupported:
			t.Errorf("%q on %q: unsupported = %v, want %v (%v)", c.toml, c.target, !c.unsupported, c.unsupported, err)
		case !strings.Contains(err.Error(), c.want):
			t.Errorf("%q on %q: %v; want it to say %q", c.toml, c.target, err, c.want)
		}
	}
}

// TestDraftLayers: draft_layers adds a draft variant for each decode
// variant after the others, from the file or the --draft-layers override
// (which wins, 0 included); a negative count is refused; 0 builds none
// and is recorded, so the recorded config builds none again; unset, it
// builds none until the graph builder settles it, and is not recorded.
func TestDraftLayers(t *testing.T) {
	c, err := loadWith(t, synth.Tiny, "draft_layers = 1\n", Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	keys := c.ShapeKeys()
	drafts := keys[len(keys)-len(c.DecodeSlots):]
	for i, k := range drafts {
		if k.Stage != ir.Draft || k.Rows != c.DecodeSlots[i] || k.Slots != c.MaxSlots {
			t.Errorf("draft variant %d: %v, want draft.s%d.r%d", i, k, c.MaxSlots, c.DecodeSlots[i])
		}
	}
	if !strings.Contains(c.TOML(), "draft_layers = 1") {
		t.Errorf("recorded config lacks draft_layers:\n%s", c.TOML())
	}
	for _, n := range []int{2, 0} {
		if c, err = loadWith(t, synth.Tiny, "draft_layers = 1\n", Overrides{DraftLayers: new(n)}); err != nil || c.Draft() != n {
			t.Errorf("--draft-layers %d over draft_layers = 1: %d, %v", n, c.Draft(), err)
		}
	}
	if _, err := load(t, "draft_layers = -1\n"); err == nil || !strings.Contains(err.Error(), "draft_layers") {
		t.Errorf("draft_layers = -1: %v", err)
	}
	if _, err := loadWith(t, synth.Tiny, "", Overrides{DraftLayers: new(-1)}); err == nil || !strings.Contains(err.Error(), "draft layers") {
		t.Errorf("--draft-layers -1: %v", err)
	}
	noDrafts := func(what string, c *Config) {
		t.Helper()
		for _, k := range c.ShapeKeys() {
			if k.Stage == ir.Draft {
				t.Errorf("%s: a draft variant %v", what, k)
			}
		}
	}
	for _, o := range []Overrides{{}, {DraftLayers: new(0)}} {
		c, err := loadWith(t, synth.Tiny, "draft_layers = 0\n", o)
		if err != nil {
			t.Fatal(err)
		}
		noDrafts("draft_layers = 0", c)
		if c.DraftLayers == nil || !strings.Contains(c.TOML(), "draft_layers = 0\n") {
			t.Errorf("draft_layers = 0 is not recorded:\n%s", c.TOML())
		}
		c.DefaultDraft(1, "test")
		if c.Draft() != 0 {
			t.Errorf("DefaultDraft overrode draft_layers = 0 with %d", c.Draft())
		}
	}
	c, err = load(t, "")
	if err != nil {
		t.Fatal(err)
	}
	noDrafts("draft_layers unset", c)
	if c.DraftLayers != nil || strings.Contains(c.TOML(), "draft_layers") {
		t.Errorf("recorded config with draft_layers unset names it:\n%s", c.TOML())
	}
	before := c.TOML()
	c.DefaultDraft(0, "none")
	if c.DraftLayers != nil || c.TOML() != before {
		t.Errorf("DefaultDraft(0) changed the recorded config:\n%s", c.TOML())
	}
	if d := c.Defaults(); !strings.Contains(d[len(d)-1], "draft_layers = 0 (none)") {
		t.Errorf("defaults %q do not say draft_layers was left at none", d)
	}
	c, _ = load(t, "")
	c.DefaultDraft(3, "a quarter")
	if c.Draft() != 3 || !strings.Contains(c.TOML(), "draft_layers = 3\n") {
		t.Errorf("DefaultDraft(3): %d, recorded:\n%s", c.Draft(), c.TOML())
	}
	if k := c.ShapeKeys(); k[len(k)-1].Stage != ir.Draft {
		t.Errorf("DefaultDraft(3): variants %v end without a draft", k)
	}
}

// TestDefaultDraftLayers: a quarter of the layers, rounded down, at least
// one; none below two layers.
func TestDefaultDraftLayers(t *testing.T) {
	for layers, want := range map[int]int{0: 0, 1: 0, 2: 1, 3: 1, 4: 1, 7: 1, 8: 2, 28: 7, 30: 7, 36: 9} {
		if got := DefaultDraftLayers(layers); got != want {
			t.Errorf("DefaultDraftLayers(%d) = %d, want %d", layers, got, want)
		}
	}
}

// TestMegakernelTiles: megakernel_tiles is recorded when set, absent from
// the recorded config when not, and refused out of [1, 8].
func TestMegakernelTiles(t *testing.T) {
	c, err := load(t, "megakernel_tiles = 1\n")
	if err != nil || c.MegakernelTiles != 1 || !strings.Contains(c.TOML(), "megakernel_tiles = 1") {
		t.Fatalf("megakernel_tiles = 1: %v, recorded:\n%s", err, c.TOML())
	}
	if c, err = load(t, ""); err != nil || strings.Contains(c.TOML(), "megakernel_tiles") {
		t.Fatalf("no megakernel_tiles: %v, recorded:\n%s", err, c.TOML())
	}
	for _, bad := range []string{"megakernel_tiles = 9\n", "megakernel_tiles = -1\n"} {
		if _, err := load(t, bad); err == nil || !strings.Contains(err.Error(), "megakernel_tiles") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}
