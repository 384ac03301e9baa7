// Package quant decodes ggml's weight formats, quantizes activations the way
// ggml's CPU backend does, and computes the row dot products of a
// matrix-vector product between a weight row and quantized activations.
//
// Everything here is pure Go and allocation-free on the hot path. It is the
// portable fallback and the numerical oracle for any assembly kernels: the
// integer parts of every dot product are exact and the float combination has
// the same shape as ggml's reference C (ggml-quants.c and
// ggml-cpu/ggml-cpu-quants.c), so results agree with llama.cpp's CPU backend
// up to float32 summation order. The IQ4 types go further: their pure-Go
// and assembly kernels both follow ggml's x86 AVX2 kernels lane for lane,
// bit for bit (see iq4.go), and MXFP4's follows ggml's x86 AVX2 kernel
// the same way (see mxfp4.go). IQ3_S follows ggml's generic C vec_dot bit
// for bit (see iq3.go).
//
// Block layouts (all little-endian, f16 scales unless noted), sizes as in
// format/ggml:
//
//	Q4_0 {d; qs[16]}                          18 bytes / 32
//	Q4_1 {d; m; qs[16]}                       20 bytes / 32
//	Q5_0 {d; qh[4]; qs[16]}                   22 bytes / 32
//	Q5_1 {d; m; qh[4]; qs[16]}                24 bytes / 32
//	Q8_0 {d; int8 qs[32]}                     34 bytes / 32
//	Q8_1 {d; s; int8 qs[32]}                  36 bytes / 32
//	Q2_K {scales[16]; qs[64]; d; dmin}        84 bytes / 256
//	Q3_K {hmask[32]; qs[64]; scales[12]; d}  110 bytes / 256
//	Q4_K {d; dmin; scales[12]; qs[128]}      144 bytes / 256
//	Q5_K {d; dmin; scales[12]; qh[32]; qs[128]} 176 bytes / 256
//	Q6_K {ql[128]; qh[64]; int8 scales[16]; d}  210 bytes / 256
//	Q8_K {f32 d; int8 qs[256]; int16 bsums[16]} 292 bytes / 256
//	IQ3_S {d; qs[64]; qh[8]; signs[32]; scales[4]} 110 bytes / 256
//	IQ4_NL {d; qs[16]}                        18 bytes / 32
//	IQ4_XS {d; u16 scales_h; scales_l[4]; qs[128]} 136 bytes / 256
//	MXFP4 {u8 e (E8M0); qs[16]}              17 bytes / 32
//
// The IQ4 quants are 4-bit indices into a fixed table of 16 non-linear
// int8 levels (see iq4.go); IQ4_XS adds a 6-bit scale per 32 elements.
// IQ3_S's are 9-bit indices into a fixed codebook of 512 points of four
// magnitudes each, with a sign bit per element and a 4-bit scale per 32
// elements (see iq3.go). MXFP4's are 4-bit E2M1 floats (a 16-entry table
// again) under a power-of-two scale per 32 elements (see mxfp4.go).
package quant

import (
	"fmt"

	"github.com/zrtdev/zrt/format/ggml"
)

// Block geometry used by the kernels. These restate format/ggml's table as
// constants so the compiler can prove slice bounds; init checks they agree.
const (
	qk      = 32 // elements per block of the legacy quants (Q4_0 … Q8_1)
	qkK     = ggml.QK_K
	q4_0Len = 18
	q4_1Len = 20
	q5_0Len = 22
	q5_1Len = 24
	q8_0Len = 34
	q8_1Len = 36
	q2_KLen = 84
	q3_KLen = 110
	q4_KLen = 144
	q5_KLen = 176
	q6_KLen = 210
	q8_KLen = 292

	iq3_SLen  = 110
	iq4_NLLen = 18
	iq4_XSLen = 136
	mxfp4Len  = 17
)

// kernel is everything the package knows about one type. A nil field means
// the operation is not supported for that type.
type kernel struct {
	blockSize  int
	blockBytes int
	// dequant decodes len(dst) elements; src holds exactly the row's bytes.
	dequant func(src []byte, dst []float32)
	// quant encodes activations (only for the vec-dot types).
	quant func(x []float32, dst []byte)
	// dot is the row dot product with activations in vecDot's type.
	dot    func(n int, w, x []byte) float32
	vecDot ggml.Type
}

// The block loops of the pure-Go kernels, written once: each type gives
// only what it does with one block. A block function receives slices of
// exactly one block's bytes and elements, which it views as fixed-size
// arrays so that the compiler drops the bounds checks inside.

// dequantBlocks is the dequantizer of a type whose blocks hold bs elements
// in bLen bytes: block decodes the block b into its elements y, for every
// whole block dst holds.
func dequantBlocks(bs, bLen int, block func(b []byte, y []float32)) func(src []byte, dst []float32) {
	return func(src []byte, dst []float32) {
		for i := 0; i+bs <= len(dst); i += bs {
			block(src[i/bs*bLen:][:bLen], dst[i:i+bs])
		}
	}
}

// quantBlocks is the quantizer of an activation type whose blocks hold bs
// elements in bLen bytes: block encodes the elements x into the block b,
// for every whole block x holds.
func quantBlocks(bs, bLen int, block func(x []float32, b []byte)) func(x []float32, dst []byte) {
	return func(x []float32, dst []byte) {
		for i := 0; i+bs <= len(x); i += bs {
			block(x[i:i+bs], dst[i/bs*bLen:][:bLen])
		}
	}
}

// dotBlocks is the dot product of a weight type whose blocks hold bs
// elements in wLen bytes with activations of xLen bytes a block, as
// ggml's block loops compute it: one float32 sum, to which block adds the
// product of each weight block w with its activation block x in turn.
func dotBlocks(bs, wLen, xLen int, block func(w, x []byte, sum float32) float32) func(n int, w, x []byte) float32 {
	return func(n int, w, x []byte) float32 {
		nb := n / bs
		w = w[:nb*wLen]
		x = x[:nb*xLen]
		var sum float32
		for i := 0; i < nb; i++ {
			sum = block(w[i*wLen:(i+1)*wLen], x[i*xLen:(i+1)*xLen], sum)
		}
		return sum
	}
}

// maxType bounds the kernel table: every ggml type id is below it.
const maxType = ggml.TypeCount

// kernels is indexed by ggml.Type: it is the single truth of which type
// decodes how, which activation type it pairs with, and which dot kernel
// runs. Dispatch is one array load per row, not a switch per element.
var kernels [maxType]kernel

func init() {
	set := func(t ggml.Type, k kernel) {
		ti, ok := t.Info()
		if !ok || ti.BlockSize != k.blockSize || ti.BlockBytes != k.blockBytes {
			panic(fmt.Sprintf("quant: geometry of %v disagrees with format/ggml", t))
		}
		kernels[t] = k
	}
	set(ggml.F32, kernel{1, 4, dequantF32, quantF32, dotF32, ggml.F32})
	set(ggml.F16, kernel{1, 2, dequantF16, quantF16, dotF16, ggml.F16})
	set(ggml.BF16, kernel{1, 2, dequantBF16, quantBF16, dotBF16, ggml.BF16})
	set(ggml.Q4_0, kernel{qk, q4_0Len, dequantQ4_0, nil, dotQ4_0, ggml.Q8_0})
	set(ggml.Q4_1, kernel{qk, q4_1Len, dequantQ4_1, nil, dotQ4_1, ggml.Q8_1})
	set(ggml.Q5_0, kernel{qk, q5_0Len, dequantQ5_0, nil, dotQ5_0, ggml.Q8_0})
	set(ggml.Q5_1, kernel{qk, q5_1Len, dequantQ5_1, nil, dotQ5_1, ggml.Q8_1})
	set(ggml.Q8_0, kernel{qk, q8_0Len, dequantQ8_0, quantQ8_0, dotQ8_0, ggml.Q8_0})
	// Q8_1 and Q8_K only ever hold activations: ggml has no vec_dot with
	// them as the weight side, so dot stays nil.
	set(ggml.Q8_1, kernel{qk, q8_1Len, dequantQ8_1, quantQ8_1, nil, ggml.Q8_1})
	set(ggml.Q2_K, kernel{qkK, q2_KLen, dequantQ2_K, nil, dotQ2_K, ggml.Q8_K})
	set(ggml.Q3_K, kernel{qkK, q3_KLen, dequantQ3_K, nil, dotQ3_K, ggml.Q8_K})
	set(ggml.Q4_K, kernel{qkK, q4_KLen, dequantQ4_K, nil, dotQ4_K, ggml.Q8_K})
	set(ggml.Q5_K, kernel{qkK, q5_KLen, dequantQ5_K, nil, dotQ5_K, ggml.Q8_K})
	set(ggml.Q6_K, kernel{qkK, q6_KLen, dequantQ6_K, nil, dotQ6_K, ggml.Q8_K})
	set(ggml.Q8_K, kernel{qkK, q8_KLen, dequantQ8_K, quantQ8_K, nil, ggml.Q8_K})
	set(ggml.IQ3_S, kernel{qkK, iq3_SLen, dequantIQ3_S, nil, dotIQ3_S, ggml.Q8_K})
	set(ggml.IQ4_NL, kernel{qk, iq4_NLLen, dequantIQ4_NL, nil, dotIQ4_NL, ggml.Q8_0})
	set(ggml.IQ4_XS, kernel{qkK, iq4_XSLen, dequantIQ4_XS, nil, dotIQ4_XS, ggml.Q8_K})
	set(ggml.MXFP4, kernel{qk, mxfp4Len, dequantMXFP4, nil, dotMXFP4, ggml.Q8_0})
	installSIMD() // simd.go: replace dot products with assembly where the CPU allows
}

// lookup returns t's kernel, or nil when t is not a type this package knows.
func lookup(t ggml.Type) *kernel {
	if uint32(t) >= maxType || kernels[t].blockSize == 0 {
		return nil
	}
	return &kernels[t]
}

// rowBytes checks that n elements form whole blocks of k and returns their
// byte count.
func (k *kernel) rowBytes(t ggml.Type, n int) (int, error) {
	if n < 0 || n%k.blockSize != 0 {
		return 0, fmt.Errorf("quant: %v row of %d elements is not a multiple of the block size %d", t, n, k.blockSize)
	}
	return n / k.blockSize * k.blockBytes, nil
}

// held is rowBytes for a buffer of have bytes, which must hold the row:
// the error names it as what (a row, a weight row, activations) and says
// what it needs.
func (k *kernel) held(t ggml.Type, n, have int, what, needs string) (int, error) {
	nb, err := k.rowBytes(t, n)
	if err != nil {
		return 0, err
	}
	if have < nb {
		return 0, fmt.Errorf("quant: %v %s of %d elements %s %d bytes, have %d", t, what, n, needs, nb, have)
	}
	return nb, nil
}

// Dequantize decodes n = len(dst) elements of type t from src, which must
// hold at least the row's bytes (extra bytes are ignored). Supported: F32,
// F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q2_K, Q3_K, Q4_K, Q5_K,
// Q6_K, Q8_K, IQ3_S, IQ4_NL, IQ4_XS and MXFP4; the results are
// bit-identical to ggml's dequantize_row_*.
// It fails when src is short, n is not a whole number of blocks, or t is not
// supported.
func Dequantize(t ggml.Type, src []byte, dst []float32) error {
	k := lookup(t)
	if k == nil || k.dequant == nil {
		return fmt.Errorf("quant: cannot dequantize type %v", t)
	}
	nb, err := k.held(t, len(dst), len(src), "row", "needs")
	if err != nil {
		return err
	}
	k.dequant(src[:nb], dst)
	return nil
}

// WeightTypes lists, in id order, the types T-CPU computes with as
// weights: those that both dequantize (embedding rows) and have a dot
// product (matrix products). A model with a weight of any other type is
// refused at build time for the cpu target.
func WeightTypes() []ggml.Type {
	var out []ggml.Type
	for _, t := range ggml.Types() {
		if IsWeightType(t) {
			out = append(out, t)
		}
	}
	return out
}

// IsWeightType reports whether t is one of WeightTypes.
func IsWeightType(t ggml.Type) bool {
	k := lookup(t)
	return k != nil && k.dequant != nil && k.dot != nil
}

// VecDotType returns the type ggml's CPU backend quantizes activations to
// before a dot product with a weight row of type t (its type_traits_cpu
// vec_dot_type): F32, F16 and BF16 pair with themselves, Q4_0/Q5_0/Q8_0,
// IQ4_NL and MXFP4 with Q8_0, Q4_1/Q5_1 with Q8_1, and the k-quants, IQ3_S
// and IQ4_XS with Q8_K. For a type with no dot product it returns t itself.
func VecDotType(t ggml.Type) ggml.Type {
	if k := lookup(t); k != nil {
		return k.vecDot
	}
	return t
}

// QuantizeRow quantizes the activations x into dst as type vt, which must be
// one of F32, F16, BF16, Q8_0, Q8_1 or Q8_K, exactly as ggml's CPU backend
// does before a matrix-vector product (see quantQ8_0 for the one rounding
// choice that differs from ggml's scalar reference). len(x) must be a
// multiple of vt's block size and dst must hold the row's bytes.
func QuantizeRow(vt ggml.Type, x []float32, dst []byte) error {
	k := lookup(vt)
	if k == nil || k.quant == nil {
		return fmt.Errorf("quant: cannot quantize activations to type %v", vt)
	}
	nb, err := k.held(vt, len(x), len(dst), "row", "needs")
	if err != nil {
		return err
	}
	k.quant(x, dst[:nb])
	return nil
}

// CheckVecDot reports whether VecDot(t, n, w, xq) is valid for a weight
// slice of wLen bytes and activations of xqLen bytes: t must have a dot
// product, n must be a whole number of blocks, and both slices must hold
// their rows. Callers check once per matrix and then call VecDot per row.
func CheckVecDot(t ggml.Type, n, wLen, xqLen int) error {
	k := lookup(t)
	if k == nil || k.dot == nil {
		return fmt.Errorf("quant: no dot product for weight type %v", t)
	}
	if _, err := k.held(t, n, wLen, "weight row", "needs"); err != nil {
		return err
	}
	_, err := kernels[k.vecDot].held(k.vecDot, n, xqLen, "activations", "need")
	return err
}

// VecDot returns the dot product of the n-element weight row w (type t)
// with activations xq already quantized to VecDotType(t). It assumes the
// sizes are valid (check them once with CheckVecDot); invalid ones may panic
// with an index error. It does not allocate.
func VecDot(t ggml.Type, n int, w []byte, xq []byte) float32 {
	return kernels[t].dot(n, w, xq)
}
