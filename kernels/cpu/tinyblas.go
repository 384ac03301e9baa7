package cpu

import (
	"sync"
	"unsafe"

	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/kernels/quant"
)

// tinyBLASFits says whether ggml would run an F16 matrix product of this
// shape through llamafile's tinyBLAS (llamafile_sgemm), as it does for
// two or more activation rows when k is a multiple of its 16 lanes and
// the output features of 4: a prompt evaluated as one batch. A single
// row (decode) goes through ggml_vec_dot_f16 instead. (F32 products take
// tinyBLAS too; matching them is not measured yet, so they keep gemm.)
func tinyBLASFits(t ggml.Type, rows, k, n int) bool {
	return t == ggml.F16 && rows >= 2 && k%16 == 0 && n%4 == 0
}

// tinyBLASRows is the most activation rows one micro-tile takes (the
// AVX-512 kernels' widest tile, kernels/cpu/gen's constant of the same
// name): four weight rows times six activation rows.
const tinyBLASRows = 6

// tinyBLASBlockBytes bounds the activation rows one pass over a group of
// weight rows sweeps (rounded F16 values as float32): about an L2's share,
// so the block is read from cache by every weight group of a chunk while
// each group's four weight rows stay in L1 across the block.
const tinyBLASBlockBytes = 192 << 10

// tinyBLASTile is a micro-kernel: out[4*r+m] = tinyBLASDot of the weight
// row m (F16, at w plus m*ldw bytes) and the activation row r (rounded to
// F16, at x plus r*ldx bytes) over k columns, for the tile's activation
// rows r (its index in tinyBLASKernels.tiles, plus one).
type tinyBLASTile func(w *uint16, ldw int, x *float32, ldx int, k int, out *float32)

// tinyBLASKernels is one instruction set's micro-tiles, by activation
// rows, and its roundF16.
type tinyBLASKernels struct {
	name  string
	tiles [tinyBLASRows]tinyBLASTile
	round func(x *float32, n int)
}

// tinyBLASUse is the kernel set gemmTinyBLAS runs: the fastest this CPU
// has, nil for the Go forms. The tests switch it to run every set on the
// same CPU.
var tinyBLASUse = func() *tinyBLASKernels {
	if s := tinyBLASSets(); len(s) > 0 {
		return s[0]
	}
	return nil
}()

// tinyBLASMaxBlock caps the activation rows of a block (a multiple of
// tinyBLASRows): for small k tinyBLASBlockBytes would allow thousands,
// and the block's outputs are staged on the stack.
const tinyBLASMaxBlock = 96

// tinyBLASActs recycles the rounded activations of gemmTinyBLAS, so that a
// step allocates none once warm. (The executor scratch cannot hold them:
// the fused kernels keep their normalized rows right after the bytes gemm
// uses, fewer than these.)
var tinyBLASActs sync.Pool

// gemmTinyBLAS computes the prompt rows (those rows for which prompt
// says so) of an F16 matrix product in tinyBLAS's arithmetic on the
// AVX-512 build: the activations rounded to F16 (as ggml converts them to
// the weights' vec_dot_type), each output one 16-lane accumulator of
// fused multiply-adds over k in steps of 16, then summed across lanes as
// GCC's _mm512_reduce_add_ps does (tinyBLASDot). Prompt rows are decided
// by their request (kernels.RowPrompt), as attention's path is, so a
// prompt's bits do not depend on what it was batched with.
//
// The product is tiled as tinyBLAS tiles it: workers split the output
// features in groups of four weight rows, and each group meets the
// activation rows six at a time in a micro-tile (tinyBLASUse's where the
// CPU has AVX-512 or AVX2, tinyBLASTileGo elsewhere) that reads each weight
// vector once for all six rows. Every output is computed on its own in
// the same order whatever the tile, so the tiling changes no bits.
func gemmTinyBLAS(a *Args, x []float32, w []byte, rows, k, n int, dst func(i, j int) []float32, bias []float32, prompt func(i int) bool) error {
	var ps []int
	for i := 0; i < rows; i++ {
		if prompt(i) {
			ps = append(ps, i)
		}
	}
	if len(ps) == 0 {
		return nil
	}
	np := len(ps)
	ks := tinyBLASUse
	w = w[:n*2*k]
	xp, _ := tinyBLASActs.Get().(*[]float32)
	if xp == nil || cap(*xp) < np*k {
		xp = new(make([]float32, np*k))
	}
	defer tinyBLASActs.Put(xp)
	xh := (*xp)[:np*k]
	if err := a.Pool.For(np, 4, func(_, lo, hi int) {
		for pi := lo; pi < hi; pi++ {
			i := ps[pi]
			roundF16(ks, xh[pi*k:(pi+1)*k], x[i*k:(i+1)*k])
		}
	}); err != nil {
		return err
	}
	ib := min(tinyBLASMaxBlock, max(tinyBLASRows, tinyBLASBlockBytes/(4*k)/tinyBLASRows*tinyBLASRows))
	return a.Pool.For(n/4, 4, func(_, lo, hi int) {
		// tile holds a block's outputs for 16 features (four groups), so
		// that each row's go to dst in one run, not four
		var out [4 * tinyBLASRows]float32
		var tile [tinyBLASMaxBlock * 16]float32
		var wf []float32
		if ks == nil {
			wf = make([]float32, 4*k)
		}
		for i0 := 0; i0 < np; i0 += ib {
			iend := min(np, i0+ib)
			for g0 := lo; g0 < hi; g0 += 4 {
				gn := min(4, hi-g0)
				for gg := 0; gg < gn; gg++ {
					j := 4 * (g0 + gg)
					if wf != nil {
						dequantF16Rows(wf, w[j*2*k:(j+4)*2*k])
					}
					// the block's rows in as few micro-tiles as fit, of
					// sizes that differ by at most one (32 rows: 6, 6, 5,
					// 5, 5, 5, not five of 6 and a thin one of 2)
					nt := (iend - i0 + tinyBLASRows - 1) / tinyBLASRows
					for t, i := 0, i0; t < nt; t++ {
						m := (iend - i0) / nt
						if t < (iend-i0)%nt {
							m++
						}
						if wf != nil {
							tinyBLASTileGo(wf, xh[i*k:(i+m)*k], k, out[:4*m])
						} else {
							ks.tiles[m-1]((*uint16)(unsafe.Pointer(&w[j*2*k])), 2*k, &xh[i*k], 4*k, k, &out[0])
						}
						for r := 0; r < m; r++ {
							copy(tile[(i-i0+r)*16+4*gg:], out[4*r:4*r+4])
						}
						i += m
					}
				}
				for r := 0; r < iend-i0; r++ {
					storeRun(dst, ps[i0+r], 4*g0, tile[r*16:r*16+4*gn], bias)
				}
			}
		}
	})
}

// storeRun stores row i's outputs v of the features from j on, plus their
// bias when there is one, through as many of dst's runs as they span.
func storeRun(dst func(i, j int) []float32, i, j int, v []float32, bias []float32) {
	for len(v) > 0 {
		d := dst(i, j)
		d = d[:min(len(d), len(v))]
		copy(d, v)
		if bias != nil {
			for c, b := range bias[j : j+len(d)] {
				d[c] += b
			}
		}
		v, j = v[len(d):], j+len(d)
	}
}

// roundF16 sets dst[i] = float32(float16(src[i])) (len(src) a multiple of
// 16), rounding to nearest even as quant.F32ToF16 does, with ks's
// rounding (in Go when ks is nil).
func roundF16(ks *tinyBLASKernels, dst, src []float32) {
	dst = dst[:len(src)]
	if ks != nil && len(src) > 0 {
		copy(dst, src)
		ks.round(&dst[0], len(dst))
		return
	}
	for c, v := range src {
		dst[c] = quant.F16ToF32(quant.F32ToF16(v))
	}
}

// dequantF16Rows converts the halves of w (little-endian) into dst.
func dequantF16Rows(dst []float32, w []byte) {
	if err := quant.Dequantize(ggml.F16, w, dst); err != nil {
		panic(err) // sizes come from the kernel's own arguments
	}
}

// tinyBLASTileGo is the micro-tile in Go: out[4*r+m] = tinyBLASDotF16 of
// weight row m (wf[m*k:], converted from F16) and activation row r
// (x[r*k:], rounded to F16), for the len(out)/4 rows of x.
func tinyBLASTileGo(wf, x []float32, k int, out []float32) {
	for r := 0; r < len(out)/4; r++ {
		xr := x[r*k : (r+1)*k]
		for m := 0; m < 4; m++ {
			out[4*r+m] = tinyBLASDotF16(wf[m*k:(m+1)*k], xr)
		}
	}
}

// tinyBLASDot is one tinyBLAS output: w·x (len a multiple of 16) in 16
// lanes of FMAs, reduced as _mm512_reduce_add_ps: the upper eight lanes
// onto the lower, then four, two, one.
func tinyBLASDot(w, x []float32) float32 {
	var acc [16]float32
	for l := 0; l+16 <= len(w); l += 16 {
		wl, xl := (*[16]float32)(w[l:]), (*[16]float32)(x[l:])
		for i := range acc {
			acc[i] = fma32(wl[i], xl[i], acc[i])
		}
	}
	return reduce16(&acc)
}

// tinyBLASDotF16 is tinyBLASDot for w and x that hold F16 values, with a
// multiply and an add where tinyBLASDot fuses them: the product of two
// halves has at most 22 significant bits and lies between 2^-48 and
// 2^32, so float32 holds it exactly, and rounding the exact sum of it and
// the lane once (the fused form) is then the float32 add of the two. It
// is the same bits, several times faster than fma32 in Go.
func tinyBLASDotF16(w, x []float32) float32 {
	var acc [16]float32
	x = x[:len(w)]
	for l := 0; l+16 <= len(w); l += 16 {
		wl, xl := (*[16]float32)(w[l:]), (*[16]float32)(x[l:])
		for i := range acc {
			acc[i] += float32(wl[i] * xl[i])
		}
	}
	return reduce16(&acc)
}

// reduce16 is _mm512_reduce_add_ps's order: the upper eight lanes onto the
// lower, then four, then (0+2)+(1+3).
func reduce16(acc *[16]float32) float32 {
	for i := 0; i < 8; i++ {
		acc[i] += acc[i+8]
	}
	for i := 0; i < 4; i++ {
		acc[i] += acc[i+4]
	}
	return (acc[0] + acc[2]) + (acc[1] + acc[3])
}
