package kernels

import (
	"fmt"
	"strings"

	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/format/ggml"
)

// KVTypes are the element types of a KV cache's K rows and V rows, chosen
// per model (cache_type_k, cache_type_v, as llama.cpp names them). A row
// of Q8_0 is llama.cpp's block layout (an f16 scale and 32 int8 quants per
// 32 values, 34 bytes), so a cache can be compared with one written by
// llama.cpp -ctk q8_0 -ctv q8_0.
type KVTypes struct{ K, V ggml.Type }

// F16KV is the default cache: K and V in F16.
var F16KV = KVTypes{ggml.F16, ggml.F16}

// kvTypeNames are the cache types zrt lays out, by llama.cpp's names.
var kvTypeNames = map[string]ggml.Type{"f16": ggml.F16, "q8_0": ggml.Q8_0}

// ParseKVType returns the cache element type llama.cpp calls name (f16,
// q8_0).
func ParseKVType(name string) (ggml.Type, bool) {
	t, ok := kvTypeNames[name]
	return t, ok
}

// KVTypeName is llama.cpp's name of a cache element type.
func KVTypeName(t ggml.Type) string { return strings.ToLower(t.String()) }

// IsF16 reports whether both K and V are F16 (every bundle older than the
// option, and the default).
func (t KVTypes) IsF16() bool { return t == F16KV }

// String is "k=q8_0 v=q8_0".
func (t KVTypes) String() string { return "k=" + KVTypeName(t.K) + " v=" + KVTypeName(t.V) }

// kvBlock returns the values per block and bytes per block of a cache
// element type.
func kvBlock(t ggml.Type) (values, bytes int) {
	if t == ggml.Q8_0 {
		return 32, 34
	}
	return 1, 2
}

// KVRowBytes is the bytes of one cached row of n values of type t (n a
// whole number of t's blocks: CheckKVWidth).
func KVRowBytes(t ggml.Type, n int) int {
	v, b := kvBlock(t)
	return n / v * b
}

// CheckKVWidth reports whether rows of width n (a head, or a layer's K or
// V width) can be cached as type t: quantized rows are whole blocks of each
// head.
func CheckKVWidth(t ggml.Type, n int) error {
	if v, _ := kvBlock(t); n%v != 0 {
		return fmt.Errorf("a %s KV row holds blocks of %d values; a width of %d is not a whole number of them", KVTypeName(t), v, n)
	}
	return nil
}

// KVLayout is how one page of a cache lays out its layers: Slots regions
// of Width columns each (a layer is addressed by its index among regions
// of its own width, which is how the compiler places layers of several
// widths), each region KVPageTokens rows of K then KVPageTokens rows of V,
// in the element types Types. A page is padded to a multiple of 64 bytes.
type KVLayout struct {
	Slots, Width int
	Types        KVTypes
}

// kRun and vRun are the bytes of a region's K rows and V rows.
func (l KVLayout) kRun() int { return KVPageTokens * KVRowBytes(l.Types.K, l.Width) }
func (l KVLayout) vRun() int { return KVPageTokens * KVRowBytes(l.Types.V, l.Width) }

// PageBytes is one page's bytes.
func (l KVLayout) PageBytes() int {
	return (l.Slots*(l.kRun()+l.vRun()) + 63) &^ 63
}

// Offset is the byte offset of the row of (page, slot, which = 0 for K or
// 1 for V, token in page).
func (l KVLayout) Offset(page, slot, which, tok int) int {
	off := page*l.PageBytes() + slot*(l.kRun()+l.vRun())
	if which == 0 {
		return off + tok*KVRowBytes(l.Types.K, l.Width)
	}
	return off + l.kRun() + tok*KVRowBytes(l.Types.V, l.Width)
}

// BundleKV returns the cache element types a bundle's hyperparameters
// record: F16 where they say nothing (bundles older than the option).
func BundleKV(h *bundle.Hparams) (KVTypes, error) {
	out := F16KV
	for _, f := range []struct {
		name string
		t    *ggml.Type
		key  string
	}{{h.CacheTypeK, &out.K, "cache_type_k"}, {h.CacheTypeV, &out.V, "cache_type_v"}} {
		if f.name == "" {
			continue
		}
		t, ok := ParseKVType(f.name)
		if !ok {
			return KVTypes{}, fmt.Errorf("bundle: %s = %q is no cache type this zrt lays out (f16, q8_0): rebuild the bundle with this zrtc or use a newer zrt-run", f.key, f.name)
		}
		*f.t = t
	}
	return out, nil
}

// RequireF16KV refuses a bundle whose cache is not F16 on a tier (named)
// whose kernels only address F16 pages, naming the option.
func RequireF16KV(h *bundle.Hparams, tier string) error {
	t, err := BundleKV(h)
	if err != nil {
		return err
	}
	if !t.IsF16() {
		return fmt.Errorf("%s has no kernels for a %s KV cache (cache_type_k, cache_type_v): rebuild the bundle with f16 KV, or run it on the cpu tier", tier, t)
	}
	return nil
}

// kvSuffix starts the instance suffix of a KV-typed family's instance
// whose cache is not all F16: "flash_attn.kv-q8_0-q8_0". An F16 cache's
// instance is the family name alone, as before the option existed.
const kvSuffix = "kv-"

// KVInstanceName is the name of a KV-typed family's instance for a cache
// of types t.
func KVInstanceName(a *ABI, t KVTypes) string {
	if !a.KVTyped || t.IsF16() {
		return a.Name
	}
	return a.Name + "." + kvSuffix + KVTypeName(t.K) + "-" + KVTypeName(t.V)
}

// InstanceKV returns the cache types an instance name addresses: F16 for
// every family that does not touch the cache and for an unsuffixed
// KV-typed instance.
func InstanceKV(name string) (KVTypes, error) {
	fam, suffix, ok := strings.Cut(name, ".")
	a, known := byName[fam]
	if !known {
		return KVTypes{}, fmt.Errorf("kernels: unknown kernel %q", name)
	}
	if !ok || !a.KVTyped {
		return F16KV, nil
	}
	rest, ok := strings.CutPrefix(suffix, kvSuffix)
	k, v, ok2 := strings.Cut(rest, "-")
	kt, okK := ParseKVType(k)
	vt, okV := ParseKVType(v)
	if !ok || !ok2 || !okK || !okV || (KVTypes{kt, vt}).IsF16() {
		return KVTypes{}, fmt.Errorf("kernels: kernel %q: want %s.%sK-V with K and V each f16 or q8_0, not both f16 (that instance is %s)", name, fam, kvSuffix, fam)
	}
	return KVTypes{kt, vt}, nil
}
