// Package config is the model config: the settings zrtc compiles with.
// Every field has a default from the GGUF metadata; an optional TOML file
// overrides them. `zrtc config MODEL.gguf` prints the effective result.
package config

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/zrtdev/zrt/compiler/ir"
	"github.com/zrtdev/zrt/format/gguf"
	"github.com/zrtdev/zrt/format/support"
	"github.com/zrtdev/zrt/kernels"
)

// Config is the effective model config.
type Config struct {
	// Target is the compile target: cpu, cuda:sm_90, amd:gfx1201.
	Target string `toml:"target"`
	// ContextLength is the longest sequence one slot holds, in tokens.
	ContextLength int `toml:"context_length"`
	// MaxSlots is how many sequences the page table covers: the most one
	// decode step can serve (default: the largest of DecodeSlots, else
	// DefaultSlots for the target).
	MaxSlots int `toml:"max_slots"`
	// PrefillChunk is the most prompt tokens one prefill step evaluates:
	// the largest of PrefillRows.
	PrefillChunk int `toml:"prefill_chunk"`
	// DecodeSlots lists the decode variants to compile by the sequences
	// one step serves, each a ShapeKey decode.sS.rN with S = max_slots
	// (default: [max_slots] when max_slots is given, else the target's
	// DecodeLadder).
	DecodeSlots []int `toml:"decode_slots"`
	// PrefillRows lists the prefill variants by the prompt rows one step
	// evaluates, each a ShapeKey prefill.sS.rN (default: [prefill_chunk]
	// when that is given, else the target's: [128], or [128, 512, 1024]
	// on T-CUDA).
	PrefillRows []int `toml:"prefill_rows"`
	// KVPages sizes the KV cache: a pool of 16-token pages shared by all
	// slots, not slots × context (default: max_slots sequences of
	// DefaultKVTokensPerSlot tokens, at least one whole context).
	KVPages int `toml:"kv_pages"`
	// SWAFull keeps sliding-window layers' K and V in the shared pages
	// for a sequence's whole length, as llama.cpp's --swa-full does.
	// Off (the default), each slot keeps them in a ring of pages just
	// long enough for the window and one prefill chunk, so a long
	// sequence holds much less KV, at the price of the prefix cache and
	// of recomputing a preempted request (the ring is the slot's, as a
	// recurrent state is).
	SWAFull bool `toml:"swa_full"`
	// CacheTypeK and CacheTypeV are the element types of the KV cache's
	// K and V rows, as llama.cpp's -ctk and -ctv name them: f16 (the
	// default) or q8_0 (llama.cpp's blocks of 32 values in 34 bytes,
	// about 53% of F16's bytes per token, so the same kv_pages take half
	// the memory). Tiers whose kernels only address F16 pages refuse
	// q8_0 at build time.
	CacheTypeK string `toml:"cache_type_k"`
	CacheTypeV string `toml:"cache_type_v"`
	// DraftLayers, when positive, adds draft variants for
	// self-speculation (draft.sS.rR, one for each decode variant): the
	// model's first DraftLayers layers and its own output norm and head
	// on their output (an early exit, as LayerSkip and Draft & Verify
	// draft), sharing the model's weights and, for those layers, its KV
	// pages; 0 builds none. Unset (nil), the graph builder chooses
	// (DefaultDraft): DefaultDraftLayers of the model's layers where
	// those layers can draft and speculation can run, and records the
	// count it took; else it stays unset, left out of the recorded
	// config, so those builds keep their bytes.
	DraftLayers *int `toml:"draft_layers"`
	// Megakernel, on a cuda target, puts T-CUDA's persistent decode
	// kernel (docs/design/megakernel.md) into the bundle, and the tier
	// runs each decode variant it can serve on it instead of the
	// variant's CUDA graph. Off by default until it is measured faster
	// than the graph path (left out of the recorded config then, so
	// builds without it keep their bytes).
	Megakernel bool `toml:"megakernel,omitzero"`
	// MegakernelTiles is the tiles a multiprocessor the megakernel
	// schedules of a cuda target split a matrix product into at most, 1
	// to 8 (default 0: 2; left out of the recorded config then): fewer,
	// longer tasks a step, or more in flight at once.
	MegakernelTiles int    `toml:"megakernel_tiles,omitzero"`
	Rope            Rope   `toml:"rope"`
	ChatTemplate    string `toml:"chat_template"`

	// scalingFrom names where Rope.Scaling came from (a GGUF key or the
	// TOML file), so an unsupported value is reported where the user can
	// find it.
	scalingFrom string
	// contextFrom says where the default context came from.
	contextFrom string
	// defaults are the lines Defaults returns.
	defaults []string
}

// Rope holds the rotary-embedding settings.
type Rope struct {
	FreqBase float64 `toml:"freq_base"`
	// Scaling is one of llama.cpp's RoPE scaling types; zrt computes
	// "none" and "linear" (FreqScale applies to linear).
	Scaling   string  `toml:"scaling"`
	FreqScale float64 `toml:"freq_scale"`
}

// Defaults for settings GGUF does not carry.
const (
	DefaultPrefillChunk = 128
	// DefaultContext is the context when the GGUF states none.
	DefaultContext      = 4096
	DefaultRopeFreqBase = 10000
	DefaultTarget       = "cpu"
	// DefaultKVTokensPerSlot sizes the default KV pool: max_slots
	// sequences of this many tokens each (or of the context, if
	// shorter), and never less than one sequence of the whole context.
	// A pool of max_slots full contexts would be most of a GPU's memory
	// for a long-context model; pages are handed out as sequences grow,
	// so the pool bounds the tokens in flight, not any one sequence.
	DefaultKVTokensPerSlot = 2048
	// MaxContext is the longest context_length a config may have.
	MaxContext = 1 << 20
	// DefaultCacheType is the KV cache's element type unless the config
	// says otherwise.
	DefaultCacheType = "f16"
)

// cacheTypes are llama.cpp's KV cache types (common/arg.cpp's
// kv_cache_types) and fp8_e4m3, each with whether zrt lays it out, and
// for which targets: none for every target, else the targets' name
// prefixes. fp8_e4m3 is a GPU format; T-CPU lays it out too, as the
// oracle its T-CUDA kernels are tested against (whether a target's
// kernels address it is the compiler's check).
var cacheTypes = map[string]struct {
	ok   bool
	only []string
}{
	"f16": {true, nil}, "q8_0": {true, nil},
	"f32": {}, "bf16": {}, "q4_0": {}, "q4_1": {}, "iq4_nl": {}, "q5_0": {}, "q5_1": {},
	"fp8_e4m3": {true, []string{"cpu", "cuda:"}},
}

// checkCacheType checks the value of cache_type_k or cache_type_v (key)
// for target.
func checkCacheType(key, value, target string) error {
	ct, known := cacheTypes[value]
	switch {
	case !known:
		return fmt.Errorf("config: %s = %q: unknown KV cache type (llama.cpp's: f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1; and fp8_e4m3 for cpu and cuda targets)", key, value)
	case ct.only != nil && !slices.ContainsFunc(ct.only, func(p string) bool { return strings.HasPrefix(target, p) }):
		names := make([]string, len(ct.only))
		for i, p := range ct.only {
			names[i] = strings.TrimSuffix(p, ":")
		}
		return fmt.Errorf("config: %s = %q is for %s targets only, not %s", key, value, strings.Join(names, " and "), target)
	case !ct.ok:
		return &support.Error{What: "KV cache type", Value: strconv.Quote(value), Where: support.Key(key),
			Detail: "zrt lays out f16, q8_0 and fp8_e4m3 caches"}
	}
	return nil
}

// DefaultSlots is the number of concurrent sequences a build serves by
// default on a target's tier: the decode variants and max_slots follow
// from it (see DecodeLadder). T-CPU serves 16, T-CUDA 64; AMD targets
// keep one slot until their tiers are measured batched.
func DefaultSlots(target string) int {
	switch {
	case target == "cpu":
		return 16
	case strings.HasPrefix(target, "cuda:"):
		return 64
	}
	return 1
}

// DecodeLadder is the default decode variants for up to slots
// concurrent sequences on target: a step runs the smallest variant that
// holds its sequences, so the ladder bounds the rows wasted. T-CPU's
// cost grows with the rows, so it doubles; a GPU decode step costs
// about the same for 4 rows as for 1 (it reads the weights once), so
// T-CUDA quadruples and compiles (and captures) fewer variants.
func DecodeLadder(target string, slots int) []int {
	step := 2
	if strings.HasPrefix(target, "cuda:") {
		step = 4
	}
	var out []int
	for n := 1; n < slots; n *= step {
		out = append(out, n)
	}
	return append(out, slots)
}

// defaultPrefillRows is the default prefill variants on target: T-CUDA
// adds 512- and 1024-row variants, so a long prompt takes an eighth of the
// steps. Measured on an H200 (qwen3 0.6B shape Q4_K_M, run 26b): a
// 1024-row step evaluates 94 000 prompt tokens a second against 70 800
// in 512-row steps, and 64 streamed clients got 6.7% more tokens a
// second with TTFT p95 66 ms instead of 90; 2048 rows gained little more
// (104 000) for twice the step a decoding row waits behind.
func defaultPrefillRows(target string) []int {
	if strings.HasPrefix(target, "cuda:") {
		return []int{DefaultPrefillChunk, 4 * DefaultPrefillChunk, 8 * DefaultPrefillChunk}
	}
	return []int{DefaultPrefillChunk}
}

// Overrides are settings given on the command line (zrtc build
// --target, --ctx-size, --slots; zrt-run's one-command path). They win
// over the TOML file and the defaults; zero (nil) leaves a setting
// alone.
type Overrides struct {
	// Target is the compile target.
	Target string
	// ContextLength is the longest sequence one slot holds.
	ContextLength int
	// Slots is the most sequences served at once: max_slots, and the
	// decode variants up to it (DecodeLadder), replacing any decode_slots.
	Slots int
	// DraftLayers, when set, is draft_layers: self-speculation draft
	// variants of the first *DraftLayers layers, none for 0.
	DraftLayers *int
}

// fromGGUF returns the defaults the GGUF gives; the variant lists and the
// page pool are resolved after any TOML overrides (see resolve).
func fromGGUF(f *gguf.File) (*Config, error) {
	arch, err := f.String("general.architecture")
	if err != nil {
		return nil, err
	}
	c := &Config{Target: DefaultTarget, CacheTypeK: DefaultCacheType, CacheTypeV: DefaultCacheType}
	c.ContextLength = DefaultContext
	c.contextFrom = fmt.Sprintf("no %s.context_length in the GGUF", arch)
	if n, err := f.Uint(arch + ".context_length"); err == nil && n > 0 {
		c.contextFrom = fmt.Sprintf("the GGUF's %s.context_length", arch)
		c.ContextLength = int(min(n, MaxContext))
		if n > MaxContext {
			c.contextFrom = fmt.Sprintf("the GGUF's %s.context_length %d, capped at the most zrt compiles", arch, n)
		}
	}
	c.Rope.FreqBase = DefaultRopeFreqBase
	if x, err := f.Float(arch + ".rope.freq_base"); err == nil {
		c.Rope.FreqBase = x
	}
	c.Rope.Scaling, c.Rope.FreqScale = "none", 1
	if s, err := f.String(arch + ".rope.scaling.type"); err == nil && s != "none" {
		c.Rope.Scaling, c.scalingFrom = s, arch+".rope.scaling.type"
		if x, err := f.Float(arch + ".rope.scaling.factor"); err == nil && x > 0 {
			c.Rope.FreqScale = 1 / x
		}
	}
	if s, err := f.String("tokenizer.chat_template"); err == nil {
		c.ChatTemplate = s
	}
	return c, nil
}

// Load returns the defaults for f overridden by the TOML file at path
// (none when path is empty), then by o. Unknown keys are an error, so a
// typo cannot silently do nothing. The defaults depend only on the GGUF
// and the target, so a build stays reproducible; Defaults lists the
// ones this config took.
func Load(f *gguf.File, path string, o Overrides) (*Config, error) {
	c, err := fromGGUF(f)
	if err != nil {
		return nil, err
	}
	explicit := func(string) bool { return false }
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		md, err := toml.Decode(string(b), c)
		if err != nil {
			return nil, fmt.Errorf("config: %s: %w", path, err)
		}
		if und := md.Undecoded(); len(und) > 0 {
			keys := make([]string, len(und))
			for i, k := range und {
				keys[i] = k.String()
			}
			return nil, fmt.Errorf("config: %s: unknown keys: %s", path, strings.Join(keys, ", "))
		}
		if md.IsDefined("rope", "scaling") {
			c.scalingFrom = "rope.scaling in " + path
		}
		explicit = func(key string) bool { return md.IsDefined(key) }
	}
	if err := c.resolve(explicit, o); err != nil {
		return nil, err
	}
	return c, c.Validate()
}

// Defaults lists the settings that came from the defaults rather than
// the TOML file or the overrides, one line each with why: what zrtc
// build prints, so a build without a config says what it chose.
func (c *Config) Defaults() []string { return slices.Clone(c.defaults) }

func (c *Config) chose(format string, a ...any) {
	c.defaults = append(c.defaults, fmt.Sprintf(format, a...))
}

// resolve applies the overrides, then fills the variant lists and the
// page pool from the settings they default to, and the settings from the
// lists where only those were given (explicit says which keys the TOML
// file set).
func (c *Config) resolve(explicit func(key string) bool, o Overrides) error {
	if o.Target != "" {
		c.Target = o.Target
	}
	switch {
	case o.ContextLength < 0 || o.Slots < 0:
		return fmt.Errorf("config: context length %d and slots %d: each must be positive (0 keeps the config's)", o.ContextLength, o.Slots)
	case o.DraftLayers != nil && *o.DraftLayers < 0:
		return fmt.Errorf("config: draft layers %d: want 0 (no draft variant) or more", *o.DraftLayers)
	case o.ContextLength > 0:
		c.ContextLength = o.ContextLength
	case !explicit("context_length"):
		c.chose("context_length = %d (%s)", c.ContextLength, c.contextFrom)
	}
	if o.DraftLayers != nil {
		c.DraftLayers = new(*o.DraftLayers)
	}
	switch {
	case o.Slots > 0:
		c.MaxSlots, c.DecodeSlots = o.Slots, DecodeLadder(c.Target, o.Slots)
	case len(c.DecodeSlots) == 0 && !explicit("max_slots"):
		n := DefaultSlots(c.Target)
		c.MaxSlots, c.DecodeSlots = n, DecodeLadder(c.Target, n)
		c.chose("max_slots = %d, decode_slots = %v (%d requests at once, %s's default)", n, c.DecodeSlots, n, c.Target)
	case len(c.DecodeSlots) == 0:
		c.DecodeSlots = []int{c.MaxSlots}
	default:
		slices.Sort(c.DecodeSlots)
		c.DecodeSlots = slices.Compact(c.DecodeSlots)
		if !explicit("max_slots") {
			c.MaxSlots = c.DecodeSlots[len(c.DecodeSlots)-1]
		}
	}
	switch {
	case len(c.PrefillRows) == 0 && explicit("prefill_chunk"):
		c.PrefillRows = []int{c.PrefillChunk}
	case len(c.PrefillRows) == 0:
		c.PrefillRows = defaultPrefillRows(c.Target)
		c.PrefillChunk = c.PrefillRows[len(c.PrefillRows)-1]
		c.chose("prefill_rows = %v (%s's default)", c.PrefillRows, c.Target)
	default:
		slices.Sort(c.PrefillRows)
		c.PrefillRows = slices.Compact(c.PrefillRows)
		largest := c.PrefillRows[len(c.PrefillRows)-1]
		if explicit("prefill_chunk") && c.PrefillChunk != largest {
			return fmt.Errorf("config: prefill_chunk %d differs from the largest of prefill_rows %v; set one of them", c.PrefillChunk, c.PrefillRows)
		}
		c.PrefillChunk = largest
	}
	if c.KVPages == 0 && !explicit("kv_pages") && c.ContextLength > 0 && c.MaxSlots > 0 {
		perSlot := (DefaultKVTokensPerSlot + kernels.KVPageTokens - 1) / kernels.KVPageTokens
		c.KVPages = max(c.MaxPages(), c.MaxSlots*min(c.MaxPages(), perSlot))
		c.chose("kv_pages = %d (%d tokens: %d slots × min(context %d, %d), at least one whole context)",
			c.KVPages, c.KVPages*kernels.KVPageTokens, c.MaxSlots, c.ContextLength, DefaultKVTokensPerSlot)
	}
	return nil
}

// MaxPages is the KV pages one full-length sequence occupies.
func (c *Config) MaxPages() int {
	return (c.ContextLength + kernels.KVPageTokens - 1) / kernels.KVPageTokens
}

// Draft is the layers of the draft variants: draft_layers, 0 for none
// (and while it is unset, before DefaultDraft).
func (c *Config) Draft() int {
	if c.DraftLayers == nil {
		return 0
	}
	return *c.DraftLayers
}

// DefaultDraftLayers is the draft_layers a model of layers layers
// defaults to where its first layers can draft: a quarter of them,
// rounded down, at least 1; 0 (none) for a model of fewer than 2, which
// has no early exit.
func DefaultDraftLayers(layers int) int {
	if layers < 2 {
		return 0
	}
	return max(1, layers/4)
}

// DefaultDraft settles an unset draft_layers: the graph builder, which
// knows the model's layers, calls it with DefaultDraftLayers of them, or
// 0 where they cannot draft, and why. A positive n is set, so the
// recorded config says what was built; 0 leaves draft_layers unset. Set
// by the TOML file or an override, draft_layers stays as it is.
func (c *Config) DefaultDraft(n int, why string) {
	if c.DraftLayers != nil {
		return
	}
	if n > 0 {
		c.DraftLayers = new(n)
	}
	c.chose("draft_layers = %d (%s)", n, why)
}

// ShapeKeys lists the variants to compile: every prefill row count, then
// every decode slot count, in increasing order, then when DraftLayers
// asks for them the draft variants, one for each decode slot count: the
// engine drafts a token position of every speculating request in one
// step, as it decodes them.
func (c *Config) ShapeKeys() []ir.ShapeKey {
	var keys []ir.ShapeKey
	for _, r := range c.PrefillRows {
		keys = append(keys, ir.ShapeKey{Stage: ir.Prefill, Slots: c.MaxSlots, Rows: r})
	}
	for _, s := range c.DecodeSlots {
		keys = append(keys, ir.ShapeKey{Stage: ir.Decode, Slots: c.MaxSlots, Rows: s})
	}
	if c.Draft() > 0 {
		for _, s := range c.DecodeSlots {
			keys = append(keys, ir.ShapeKey{Stage: ir.Draft, Slots: c.MaxSlots, Rows: s})
		}
	}
	return keys
}

// ropeScalings are llama.cpp's RoPE scaling types, true where zrt
// computes them.
var ropeScalings = map[string]bool{"none": true, "linear": true, "yarn": true, "longrope": false}

// Validate checks ranges. A valid setting zrt cannot compute yet is a
// *support.Error.
func (c *Config) Validate() error {
	switch {
	case c.ContextLength < 1 || c.ContextLength > MaxContext:
		return fmt.Errorf("config: context_length %d out of range [1, 1048576]", c.ContextLength)
	case c.MaxSlots < 1 || c.MaxSlots > 1024:
		return fmt.Errorf("config: max_slots %d out of range [1, 1024]", c.MaxSlots)
	case c.PrefillChunk < 1 || c.PrefillChunk > 8192:
		return fmt.Errorf("config: prefill_chunk %d out of range [1, 8192]", c.PrefillChunk)
	case len(c.DecodeSlots) == 0 || c.DecodeSlots[0] < 1 || c.DecodeSlots[len(c.DecodeSlots)-1] > c.MaxSlots:
		return fmt.Errorf("config: decode_slots %v: each must be in [1, max_slots = %d]", c.DecodeSlots, c.MaxSlots)
	case len(c.PrefillRows) == 0 || c.PrefillRows[0] < 1:
		return fmt.Errorf("config: prefill_rows %v: each must be in [1, prefill_chunk = %d]", c.PrefillRows, c.PrefillChunk)
	case c.KVPages < 1 || c.KVPages > 1<<24:
		return fmt.Errorf("config: kv_pages %d out of range [1, 16777216]", c.KVPages)
	case c.Draft() < 0:
		return fmt.Errorf("config: draft_layers %d must be at least 0 (0: no draft variant)", c.Draft())
	case c.MegakernelTiles < 0 || c.MegakernelTiles > 8:
		return fmt.Errorf("config: megakernel_tiles %d out of range [1, 8] (0: the default, 2)", c.MegakernelTiles)
	case c.Megakernel && !strings.HasPrefix(c.Target, "cuda:"):
		return fmt.Errorf("config: megakernel = true is for cuda targets only, not %s", c.Target)
	case !positiveFinite(c.Rope.FreqBase):
		return fmt.Errorf("config: rope.freq_base %v must be positive and finite", c.Rope.FreqBase)
	case !ropeScalings[c.Rope.Scaling]:
		from := c.scalingFrom
		if from == "" {
			from = "rope.scaling"
		}
		if _, known := ropeScalings[c.Rope.Scaling]; known {
			return &support.Error{What: "rope scaling", Value: strconv.Quote(c.Rope.Scaling), Where: support.Key(from),
				Detail: "zrt computes none, linear and yarn"}
		}
		return fmt.Errorf("config: %s: unknown rope scaling %q (llama.cpp's types: none, linear, yarn, longrope)", from, c.Rope.Scaling)
	case !positiveFinite(c.Rope.FreqScale):
		return fmt.Errorf("config: rope.freq_scale %v must be positive and finite", c.Rope.FreqScale)
	}
	if err := checkCacheType("cache_type_k", c.CacheTypeK, c.Target); err != nil {
		return err
	}
	return checkCacheType("cache_type_v", c.CacheTypeV, c.Target)
}

// positiveFinite reports x > 0 and finite; NaN fails it, as every
// comparison with NaN does, so write checks with it rather than x <= 0.
func positiveFinite(x float64) bool { return x > 0 && !math.IsInf(x, 1) }

// TOML renders the config as a TOML document.
func (c *Config) TOML() string {
	var b bytes.Buffer
	if err := toml.NewEncoder(&b).Encode(c); err != nil {
		panic(err) // Config holds only encodable fields
	}
	return b.String()
}

// LoadModel is Load for the GGUF model at model.
func LoadModel(model, path string, o Overrides) (*Config, error) {
	f, err := gguf.OpenModel(model)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Load(f, path, o)
}
