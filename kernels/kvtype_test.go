package kernels

import (
	"strings"
	"testing"

	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/format/ggml"
)

// TestKVLayout holds the layout to the F16 formula it replaced and to
// q8_0's 34 bytes per 32 values (about 53% of F16's page).
func TestKVLayout(t *testing.T) {
	f16 := KVLayout{Slots: 3, Width: 256, Types: F16KV}
	if f16.PageBytes() != KVPageBytes(3, 256) {
		t.Errorf("F16 page %d, want %d", f16.PageBytes(), KVPageBytes(3, 256))
	}
	for _, c := range [][4]int{{0, 0, 0, 0}, {2, 1, 0, 5}, {1, 2, 1, 15}} {
		page, slot, which, tok := c[0], c[1], c[2], c[3]
		want := page*KVPageBytes(3, 256) + ((slot*2+which)*KVPageTokens+tok)*256*2
		if got := f16.Offset(page, slot, which, tok); got != want {
			t.Errorf("F16 offset %v = %d, want %d", c, got, want)
		}
	}
	q8 := KVLayout{Slots: 3, Width: 256, Types: KVTypes{K: ggml.Q8_0, V: ggml.Q8_0}}
	if q8.PageBytes() != 3*2*16*256/32*34 {
		t.Errorf("q8_0 page %d", q8.PageBytes())
	}
	if r := float64(q8.PageBytes()) / float64(f16.PageBytes()); r < 0.53 || r > 0.54 {
		t.Errorf("q8_0 page is %.3f of F16's, want 17/32", r)
	}
	if got, want := q8.Offset(1, 2, 1, 3), q8.PageBytes()+2*2*16*272+16*272+3*272; got != want {
		t.Errorf("q8_0 offset %d, want %d", got, want)
	}
	mixed := KVLayout{Slots: 1, Width: 32, Types: KVTypes{K: ggml.Q8_0, V: ggml.F16}}
	if mixed.PageBytes()%64 != 0 || mixed.PageBytes() < 16*34+16*64 {
		t.Errorf("mixed page %d: not padded to 64 or too small", mixed.PageBytes())
	}
	if got, want := mixed.Offset(2, 0, 1, 7), 2*mixed.PageBytes()+16*34+7*64; got != want {
		t.Errorf("mixed V offset %d, want %d", got, want)
	}
	if got, want := mixed.Offset(1, 0, 0, 5), mixed.PageBytes()+5*34; got != want {
		t.Errorf("mixed K offset %d, want %d", got, want)
	}
}

// TestKVInstanceNames round-trips the instance names of KV-typed families:
// the F16 cache's is the family name (the goldens' names), others carry
// both types, and SplitInstance takes them.
func TestKVInstanceNames(t *testing.T) {
	fa, _ := Lookup("flash_attn")
	mm, _ := Lookup("matmul")
	if n := KVInstanceName(fa, F16KV); n != "flash_attn" {
		t.Errorf("F16 instance %q", n)
	}
	q8 := KVTypes{K: ggml.Q8_0, V: ggml.F16}
	n := KVInstanceName(fa, q8)
	if n != "flash_attn.kv-q8_0-f16" {
		t.Errorf("instance %q", n)
	}
	if got, err := InstanceKV(n); err != nil || got != q8 {
		t.Errorf("InstanceKV(%q) = %v, %v", n, got, err)
	}
	if a, _, err := SplitInstance(n); err != nil || a != fa {
		t.Errorf("SplitInstance(%q): %v", n, err)
	}
	rot := KVTypes{K: ggml.Q8_0, V: ggml.Q8_0, RotK: 128, RotV: 64}
	if n := KVInstanceName(fa, rot); n != "flash_attn.kv-q8_0-q8_0-rk128-rv64" {
		t.Errorf("rotated instance %q", n)
	} else if got, err := InstanceKV(n); err != nil || got != rot {
		t.Errorf("InstanceKV(%q) = %v, %v", n, got, err)
	}
	if k, v := KVRotation(ggml.Q8_0, ggml.Q8_0, 192, true); k != 64 || v != 64 {
		t.Errorf("KVRotation(192) = %d, %d; want 64, 64", k, v)
	}
	if k, v := KVRotation(ggml.Q8_0, ggml.F16, 256, true); k != 256 || v != 0 {
		t.Errorf("KVRotation(q8_0/f16, 256) = %d, %d; want 256, 0", k, v)
	}
	if k, v := KVRotation(ggml.Q8_0, ggml.Q8_0, 128, false); k != 0 || v != 0 {
		t.Errorf("mixed head sizes rotated: %d, %d", k, v)
	}
	if KVInstanceName(mm, q8) != "matmul" {
		t.Errorf("a family that does not touch the cache got a cache suffix")
	}
	for _, bad := range []string{"flash_attn.q8_0", "flash_attn.kv-q4_0-q8_0", "flash_attn.kv-q8_0", "kv_write.kv-f16-", "kv_write.kv-f16-f16", "flash_attn.kv-f16-q8_0-rk64",
		"flash_attn.kv-q8_0-q8_0-rv64-rk64", "flash_attn.kv-q8_0-q8_0-rk96", "flash_attn.kv-q8_0-q8_0-rk064"} {
		if _, _, err := SplitInstance(bad); err == nil {
			t.Errorf("SplitInstance(%q) accepted", bad)
		}
	}
	h := &bundle.Hparams{CacheTypeK: "q8_0"}
	if kv, err := BundleKV(h); err != nil || kv != (KVTypes{K: ggml.Q8_0, V: ggml.F16}) {
		t.Errorf("BundleKV = %v, %v", kv, err)
	}
	if err := RequireF16KV(h, "cuda"); err == nil {
		t.Errorf("a q8_0 bundle passed RequireF16KV")
	}
	if _, err := BundleKV(&bundle.Hparams{CacheTypeV: "q4_0"}); err == nil {
		t.Errorf("a q4_0 cache type accepted")
	}
}

// FuzzInstanceKV holds the instance-name parser to never panicking and to
// accepting only canonical names: whatever it takes comes back the same
// from KVInstanceName, and SplitInstance agrees with it.
func FuzzInstanceKV(f *testing.F) {
	for _, s := range []string{"flash_attn", "flash_attn.kv-q8_0-q8_0", "kv_write.kv-q8_0-f16-rk128", "rope_kv_write.kv-f16-q8_0-rv64",
		"flash_attn_ext.kv-q8_0-q8_0-rk64-rv64", "flash_attn.kv-q8_0-q8_0-rk", "matmul.q4_k", "flash_attn.kv--", "x.kv-q8_0-q8_0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		kv, err := InstanceKV(name)
		_, _, splitErr := SplitInstance(name)
		fam, _, _ := strings.Cut(name, ".")
		a, known := Lookup(fam)
		if err != nil || !known || !a.KVTyped {
			return
		}
		if splitErr != nil {
			t.Fatalf("InstanceKV(%q) = %v but SplitInstance fails: %v", name, kv, splitErr)
		}
		if back := KVInstanceName(a, kv); back != name {
			t.Fatalf("InstanceKV(%q) = %v, which names %q", name, kv, back)
		}
	})
}

// TestFP8KV: fp8_e4m3 is a cache type of its own (no GGUF tensor type
// shares its value), 68 bytes a 64-value block (17/32 of F16's page),
// never rotated, named in instances and bundles by llama.cpp-style name,
// and refused for heads that are no whole block.
func TestFP8KV(t *testing.T) {
	if FP8E4M3.Known() {
		t.Fatalf("FP8E4M3 (%d) is a GGUF tensor type", uint32(FP8E4M3))
	}
	if typ, ok := ParseKVType("fp8_e4m3"); !ok || typ != FP8E4M3 || KVTypeName(typ) != "fp8_e4m3" {
		t.Errorf("ParseKVType(fp8_e4m3) = %v, %v; name %q", typ, ok, KVTypeName(typ))
	}
	fp8 := KVTypes{K: FP8E4M3, V: FP8E4M3}
	f16 := KVLayout{Slots: 3, Width: 256, Types: F16KV}
	l := KVLayout{Slots: 3, Width: 256, Types: fp8}
	if l.PageBytes()*32 != f16.PageBytes()*17 || KVRowBytes(FP8E4M3, 128) != 136 {
		t.Errorf("fp8 page %d bytes against F16's %d; a 128-wide row %d bytes", l.PageBytes(), f16.PageBytes(), KVRowBytes(FP8E4M3, 128))
	}
	if err := CheckKVWidth(FP8E4M3, 96); err == nil || !strings.Contains(err.Error(), "fp8_e4m3") {
		t.Errorf("a 96-wide fp8 head: %v", err)
	}
	if k, v := KVRotation(FP8E4M3, FP8E4M3, 128, true); k != 0 || v != 0 {
		t.Errorf("fp8 rows rotated %d, %d", k, v)
	}
	fa, _ := Lookup("flash_attn")
	n := KVInstanceName(fa, fp8)
	if got, err := InstanceKV(n); n != "flash_attn.kv-fp8_e4m3-fp8_e4m3" || err != nil || got != fp8 {
		t.Errorf("instance %q: InstanceKV = %v, %v", n, got, err)
	}
	got, err := BundleKV(&bundle.Hparams{HeadDim: 128, CacheTypeK: "fp8_e4m3", CacheTypeV: "fp8_e4m3"})
	if err != nil || got != fp8 {
		t.Errorf("BundleKV(fp8) = %v, %v", got, err)
	}
}

// BenchmarkKVOffset times KVLayout.Offset, which T-CPU's attention calls
// per page run of keys (a llama 110M shape's F16 page).
func BenchmarkKVOffset(b *testing.B) {
	l := KVLayout{Slots: 12, Width: 768, Types: F16KV}
	s := 0
	for i := 0; i < b.N; i++ {
		s += l.Offset(i&255, i%12, i&1, i&15)
	}
	if s == -1 {
		b.Fatal(s)
	}
}
