package kernels

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/kernels/quant"
)

// KVTypes are the element types of a KV cache's K rows and V rows, chosen
// per model (cache_type_k, cache_type_v, as llama.cpp names them). A row
// of Q8_0 is llama.cpp's block layout (an f16 scale and 32 int8 quants per
// 32 values, 34 bytes), so a cache can be compared with one written by
// llama.cpp -ctk q8_0 -ctv q8_0.
//
// As llama.cpp does for a quantized cache (llama_kv_cache's attn_rot_k
// and attn_rot_v), the rows may be stored rotated by an orthonormal
// Walsh-Hadamard matrix, which spreads outliers across a block before it
// is quantized: RotK > 0 rotates each run of RotK values of K (and of the
// query, so that q·k is unchanged), RotV > 0 each run of RotV values of V
// (and the attention output back, the matrix being its own inverse).
type KVTypes struct {
	K, V       ggml.Type
	RotK, RotV int
}

// F16KV is the default cache: K and V in F16.
var F16KV = KVTypes{K: ggml.F16, V: ggml.F16}

// FP8E4M3 is zrt's FP8 cache element type, which GGUF has no type for
// (the value is outside ggml's numbering): blocks of quant.FP8Block
// values, each a float32 scale (the block's largest magnitude over 448)
// then one E4M3 code a value, 68 bytes for 64 values (53% of F16's).
// The block is a whole head of 64 values, a head of 128 two blocks: the
// scale is per token and KV head (or half-head), computed as the row is
// written, so the cache needs no calibration. The scale is float32, not
// F16, so that a quiet head (amax under 448·2^-14) keeps a normal,
// exact-enough scale, and so that rows stay 4-byte aligned for the GPU.
const FP8E4M3 ggml.Type = 1<<16 | 0xE4

// kvTypeNames are the cache types zrt lays out, by llama.cpp's names
// (and fp8_e4m3, zrt's).
var kvTypeNames = map[string]ggml.Type{"f16": ggml.F16, "q8_0": ggml.Q8_0, "fp8_e4m3": FP8E4M3}

// ParseKVType returns the cache element type llama.cpp calls name (f16,
// q8_0), or fp8_e4m3.
func ParseKVType(name string) (ggml.Type, bool) {
	t, ok := kvTypeNames[name]
	return t, ok
}

// KVTypeName is llama.cpp's name of a cache element type.
func KVTypeName(t ggml.Type) string {
	if t == FP8E4M3 {
		return "fp8_e4m3"
	}
	return strings.ToLower(t.String())
}

// IsF16 reports whether both K and V are F16 (every bundle older than the
// option, and the default).
func (t KVTypes) IsF16() bool { return t == F16KV }

// String is "k=q8_0 v=q8_0", with the rotations when there are any.
func (t KVTypes) String() string {
	s := "k=" + KVTypeName(t.K) + " v=" + KVTypeName(t.V)
	if t.RotK > 0 || t.RotV > 0 {
		s += fmt.Sprintf(" (Hadamard rotation k %d, v %d)", t.RotK, t.RotV)
	}
	return s
}

// KVRotation returns the rotations llama.cpp applies to a cache of
// element types k and v whose attention layers all have heads of hd
// values (uniform false: several head sizes, which llama.cpp does not
// rotate): for a quantized K with hd a multiple of 64, runs of the
// largest power of two that divides hd; for a quantized V, runs of 64.
// Only Q8_0 rows are rotated: FP8's codes keep a relative precision over
// a range of 2^17, so an outlier costs the other values of its block
// little, and the GPU writes them without a matrix product.
func KVRotation(k, v ggml.Type, hd int, uniform bool) (rotK, rotV int) {
	if !uniform || hd <= 0 || hd%64 != 0 {
		return 0, 0
	}
	if k == ggml.Q8_0 {
		rotK = 64
		for hd%(2*rotK) == 0 {
			rotK *= 2
		}
	}
	if v == ggml.Q8_0 {
		rotV = 64
	}
	return rotK, rotV
}

// validRot reports whether n is a rotation size: 0 (none) or a power of
// two from 64 on.
func validRot(n int) bool { return n == 0 || (n >= 64 && n&(n-1) == 0 && n <= 1<<16) }

// kvBlock returns the values per block and bytes per block of a cache
// element type.
func kvBlock(t ggml.Type) (values, bytes int) {
	switch t {
	case ggml.Q8_0:
		return 32, 34
	case FP8E4M3:
		return quant.FP8Block, quant.FP8BlockBytes
	}
	return 1, 2
}

// KVRowBytes is the bytes of one cached row of n values of type t (n a
// whole number of t's blocks: CheckKVWidth).
func KVRowBytes(t ggml.Type, n int) int {
	v, b := kvBlock(t)
	if v == 1 {
		return n * b // F16 and the like: no division, which attention's offsets pay per page run
	}
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
	// PageBytes, kRun and vRun, each row's bytes taken once: T-CPU's
	// attention asks for an offset per page run of keys.
	rk, rv := KVRowBytes(l.Types.K, l.Width), KVRowBytes(l.Types.V, l.Width)
	region := KVPageTokens * (rk + rv)
	off := page*((l.Slots*region+63)&^63) + slot*region
	if which == 0 {
		return off + tok*rk
	}
	return off + KVPageTokens*rk + tok*rv
}

// BundleKV returns the cache element types a bundle's hyperparameters
// record: F16 where they say nothing (bundles older than the option).
func BundleKV(h *bundle.Hparams) (KVTypes, error) {
	out := F16KV
	out.RotK, out.RotV = h.CacheRotK, h.CacheRotV
	switch {
	case !validRot(out.RotK) || !validRot(out.RotV):
		return KVTypes{}, fmt.Errorf("bundle: cache rotations %d and %d: each must be 0 or a power of two from 64", out.RotK, out.RotV)
	case out.RotK > 0 && out.RotK > h.HeadDim && h.HeadDim > 0:
		return KVTypes{}, fmt.Errorf("bundle: cache rotation %d is wider than a head of %d", out.RotK, h.HeadDim)
	}
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
			return KVTypes{}, fmt.Errorf("bundle: %s = %q is no cache type this zrt lays out (f16, q8_0, fp8_e4m3): rebuild the bundle with this zrtc or use a newer zrt-run", f.key, f.name)
		}
		*f.t = t
	}
	if (out.RotK > 0 && out.K == ggml.F16) || (out.RotV > 0 && out.V == ggml.F16) {
		return KVTypes{}, fmt.Errorf("bundle: an F16 cache is not rotated (cache rotations %d, %d for %s)", out.RotK, out.RotV, out)
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
// of types t: flash_attn.kv-q8_0-q8_0, with -rk128 and -rv64 where the
// rows are rotated.
func KVInstanceName(a *ABI, t KVTypes) string {
	if !a.KVTyped || t.IsF16() {
		return a.Name
	}
	s := a.Name + "." + kvSuffix + KVTypeName(t.K) + "-" + KVTypeName(t.V)
	if t.RotK > 0 {
		s += fmt.Sprintf("-rk%d", t.RotK)
	}
	if t.RotV > 0 {
		s += fmt.Sprintf("-rv%d", t.RotV)
	}
	return s
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
	bad := fmt.Errorf("kernels: kernel %q: want %s.%sK-V[-rkN][-rvN] with K and V each f16, q8_0 or fp8_e4m3, not both f16 (that instance is %s), and rotations of quantized rows only", name, fam, kvSuffix, fam)
	rest, ok := strings.CutPrefix(suffix, kvSuffix)
	parts := strings.Split(rest, "-")
	if !ok || len(parts) < 2 || len(parts) > 4 {
		return KVTypes{}, bad
	}
	kt, okK := ParseKVType(parts[0])
	vt, okV := ParseKVType(parts[1])
	if !okK || !okV {
		return KVTypes{}, bad
	}
	out := KVTypes{K: kt, V: vt}
	for _, p := range parts[2:] {
		var n int
		switch {
		case strings.HasPrefix(p, "rk") && out.RotK == 0 && out.RotV == 0:
			n, _ = strconv.Atoi(p[2:])
			out.RotK = n
		case strings.HasPrefix(p, "rv") && out.RotV == 0:
			n, _ = strconv.Atoi(p[2:])
			out.RotV = n
		}
		if n <= 0 || !validRot(n) || strconv.Itoa(n) != p[2:] {
			return KVTypes{}, bad
		}
	}
	if out.IsF16() || (out.RotK > 0 && kt == ggml.F16) || (out.RotV > 0 && vt == ggml.F16) {
		return KVTypes{}, bad
	}
	return out, nil
}
