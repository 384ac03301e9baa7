package cpu

import (
	"math"

	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/kernels/quant"
)

// Flash attention, following ggml's CPU kernel (ggml-cpu/ops.cpp,
// ggml_compute_forward_flash_attn_ext_f16 and the functions it calls) for
// an F16 K/V cache on the x86 AVX-512 build the references come from.
// ggml picks one of three paths, and their roundings differ by up to about
// 1e-3 in the output. That is float noise for F16/F32 weights, but the next
// matmul of a quantized model re-quantizes these activations to Q8 blocks
// and flips roundings, which grows into logit errors of 1e-1, so the path
// and its arithmetic must match:
//
//   - fewer than faTileQ query rows in the batch (short prefills, and decode
//     while the cache view is under faSplitMinKV): the scalar loop of
//     ggml_compute_forward_flash_attn_ext_f16_one_chunk. The query is rounded
//     to F16, scores are ggml_vec_dot_f16, and the output accumulator is kept
//     in F16 (VKQ16): every rescale and every V·p update rounds to F16.
//   - faTileQ or more query rows: ggml_compute_forward_flash_attn_ext_tiled,
//     in F32 throughout (the query is not rounded), keys in tiles of faTileKV
//     with ggml's polynomial expf (ggml_v_expf) in the softmax.
//   - a single query row over a cache view of faSplitMinKV keys or more: the
//     split-KV path, the one_chunk loop over faSplitChunks key ranges whose
//     F32 partial results ggml_flash_attn_ext_reduce_partials then combines.
//
// The cache view ggml attends over (n_kv) is the used length rounded up to
// a multiple of 256 (llama_kv_cache::get_n_kv); keys past a row's position
// are masked and contribute nothing, but n_kv decides the split and its
// chunk boundaries.
const (
	faTileQ       = 64  // GGML_FA_TILE_Q
	faTileKV      = 64  // GGML_FA_TILE_KV
	faF32Lanes    = 16  // GGML_F32_EPR with AVX-512: the tiled path needs DV % 16 == 0
	faF16Step     = 64  // GGML_F16_STEP with AVX-512 (F16 via F32 lanes)
	faKVPad       = 256 // n_kv padding of llama_kv_cache::get_n_kv
	faSplitMinKV  = 512 // the split-KV path needs n_kv >= 512
	faSplitChunks = 2   // ggml splits by its thread count; the references ran with 2
)

// flashAttn attends each row's query heads over its slot's keys at
// positions 0..pos, by whichever of ggml's paths llama.cpp would take for
// this batch (see above).
func flashAttn(a *Args) error {
	q, kv, r, y := f32s(a.Bufs[0]), a.Bufs[1], req(a.Bufs[2]), f32s(a.Bufs[3])
	layer := int(a.Push[0])
	nLayer, nHead, nHeadKV, hd := int(a.Spec[0]), int(a.Spec[1]), int(a.Spec[2]), int(a.Spec[3])
	scale := math.Float32frombits(a.Spec[4])
	kvDim, group := nHeadKV*hd, nHead/nHeadKV
	rows := r.rows()
	tiled := rows >= faTileQ && hd%faF32Lanes == 0
	return a.Pool.For(rows*nHead, 1, func(_, lo, hi int) {
		w := faWork{
			q16: make([]uint16, hd), acc16: make([]uint16, hd),
			acc: make([]float32, hd), part: make([]float32, hd),
		}
		for item := lo; item < hi; item++ {
			i, h := item/nHead, item%nHead
			slot, pos := int(r.row(i, kernels.IORowSlot)), int(r.row(i, kernels.IORowPos))
			kvh := h / group
			cache := func(which, t int) []uint16 {
				page, tok := r.page(slot, t), t%kernels.KVPageTokens
				return u16s(kv[kvOffset(page, layer, nLayer, kvDim, which, tok)+kvh*hd*2:])[:hd]
			}
			qh := q[(i*nHead+h)*hd : (i*nHead+h+1)*hd]
			out := y[(i*nHead+h)*hd : (i*nHead+h+1)*hd]
			nKV := max(faKVPad, (pos+1+faKVPad-1)/faKVPad*faKVPad)
			switch {
			case tiled:
				w.tiled(qh, out, pos, scale, cache)
			case rows == 1 && nKV >= faSplitMinKV:
				w.split(qh, out, pos, nKV, scale, cache)
			default:
				for d, v := range qh {
					w.q16[d] = quant.F32ToF16(v)
				}
				_, s := w.oneChunk(0, pos+1, scale, cache)
				// V /= S, as a multiplication by 1/S.
				sInv := float32(0)
				if s != 0 {
					sInv = 1 / s
				}
				for d := range out {
					out[d] = quant.F16ToF32(w.acc16[d]) * sInv
				}
			}
		}
	})
}

// faWork is one worker's scratch.
type faWork struct {
	q16   []uint16  // the query in F16
	acc16 []uint16  // one_chunk's F16 accumulator (VKQ16)
	acc   []float32 // F32 accumulator (tiled, and the split path's reduction)
	part  []float32 // a split chunk's partial result
	kq    [faTileKV]float32
}

// oneChunk is the online-softmax loop of ggml's one_chunk kernel over keys
// [lo, hi), with w.q16 as the query. It leaves the unnormalized output in
// w.acc16 and returns the running maximum M and sum S. A range with no keys
// returns M = -Inf, S = 0 and a zero accumulator.
func (w *faWork) oneChunk(lo, hi int, scale float32, cache func(which, t int) []uint16) (m, s float32) {
	clear(w.acc16)
	m = float32(math.Inf(-1))
	for t := lo; t < hi; t++ {
		sc := dotF16(cache(0, t), w.q16) * scale
		ms, vs := float32(1), float32(1)
		if sc > m {
			// new maximum: rescale the accumulator by expf(Mold - M), vs = 1
			ms = expf(m - sc)
			m = sc
			for d, v := range w.acc16 {
				w.acc16[d] = quant.F32ToF16(quant.F16ToF32(v) * ms)
			}
		} else {
			vs = expf(sc - m)
		}
		// ggml_vec_mad_f16: y = F16(y + x*v), fused (the SIMD lanes use
		// _mm512_fmadd_ps; the scalar tail compiles to the same FMA).
		for d, v := range cache(1, t) {
			w.acc16[d] = quant.F32ToF16(fma32(quant.F16ToF32(v), vs, quant.F16ToF32(w.acc16[d])))
		}
		s = fma32(s, ms, vs)
	}
	return m, s
}

// split is ggml's split-KV path for one query row over nKV cached keys:
// faSplitChunks key ranges each run through oneChunk, then are merged as
// ggml_flash_attn_ext_reduce_partials does, in F32.
func (w *faWork) split(q, out []float32, pos, nKV int, scale float32, cache func(which, t int) []uint16) {
	for d, v := range q {
		w.q16[d] = quant.F32ToF16(v)
	}
	chunk := (nKV + faSplitChunks - 1) / faSplitChunks
	mf, sf := float32(math.Inf(-1)), float32(0)
	clear(w.acc)
	for c := 0; c < faSplitChunks; c++ {
		lo := c * chunk
		hi := min(lo+chunk, nKV, pos+1) // keys past pos are masked out
		if lo >= hi {
			continue // an all-masked chunk has S = 0 and is skipped
		}
		mc, sc := w.oneChunk(lo, hi, scale, cache)
		if sc == 0 {
			continue
		}
		for d, v := range w.acc16 {
			w.part[d] = quant.F16ToF32(v)
		}
		mNew := max(mf, mc)
		scaleOld, scaleNew := expf(mf-mNew), expf(mc-mNew)
		for d := range w.acc {
			w.acc[d] = w.acc[d]*scaleOld + w.part[d]*scaleNew
		}
		sf = sf*scaleOld + sc*scaleNew
		mf = mNew
	}
	sInv := float32(1)
	if sf != 0 {
		sInv = 1 / sf
	}
	for d := range out {
		out[d] = w.acc[d] * sInv
	}
}

// tiled is ggml's tiled kernel for one query row: F32 query and keys, the
// keys in tiles of faTileKV starting at 0. Per tile, scores are FMA chains
// over the head dimension, scaled; the tile's maximum updates M (rescaling
// the accumulator and S by expf(Mold - M)); the probabilities are
// ggml_v_expf(score - M) summed in float64 in groups of 16; and the
// accumulator takes p·V as an FMA chain over the tile's keys. Masked keys
// (past pos) score -Inf and weigh 0; tiles wholly past pos are skipped.
func (w *faWork) tiled(q, out []float32, pos int, scale float32, cache func(which, t int) []uint16) {
	m, s := float32(math.Inf(-1)), float32(0)
	clear(w.acc)
	for t0 := 0; t0 <= pos; t0 += faTileKV {
		kq := &w.kq
		tileMax := float32(math.Inf(-1))
		for tk := range kq {
			t := t0 + tk
			if t > pos {
				kq[tk] = float32(math.Inf(-1))
				continue
			}
			var dot float32
			for d, kx := range cache(0, t) {
				dot = fma32(q[d], quant.F16ToF32(kx), dot)
			}
			kq[tk] = dot * scale
			tileMax = max(tileMax, kq[tk])
		}
		if tileMax > m {
			ms := expf(m - tileMax)
			for d := range w.acc {
				w.acc[d] *= ms
			}
			s *= ms
			m = tileMax
		}
		// ggml_vec_soft_max_f32: p = ggml_v_expf(x - M), summed per 16
		// lanes (_mm512_reduce_add_ps) into a float64 total.
		var sum float64
		for g := 0; g < faTileKV; g += 16 {
			var lanes [16]float32
			for l := range lanes {
				lanes[l] = vExpf(kq[g+l] - m)
				kq[g+l] = lanes[l]
			}
			sum += float64(reduceAdd16(&lanes))
		}
		s = float32(float64(s) + sum)
		for tk, p := range kq {
			if t0+tk > pos {
				break // p = 0: the FMA leaves the accumulator unchanged
			}
			for d, v := range cache(1, t0+tk) {
				w.acc[d] = fma32(quant.F16ToF32(v), p, w.acc[d])
			}
		}
	}
	sInv := float32(0)
	if s != 0 {
		sInv = 1 / s
	}
	for d := range out {
		out[d] = w.acc[d] * sInv
	}
}

// dotF16 is ggml_vec_dot_f16 on AVX-512: whole groups of 64 go through four
// 16-lane F32 FMA accumulators, folded as GGML_F32Cx16_REDUCE does; the tail
// is summed in float64; the total is rounded to float32. (Products of two
// F16 values are exact in float32, so the FMAs are plain adds.)
func dotF16(x, y []uint16) float32 {
	n := len(x)
	np := n &^ (faF16Step - 1)
	var sum float64
	if np > 0 {
		var acc [4][16]float32
		for i := 0; i < np; i += faF16Step {
			for j := range acc {
				for l := range acc[j] {
					k := i + 16*j + l
					acc[j][l] += quant.F16ToF32(x[k]) * quant.F16ToF32(y[k])
				}
			}
		}
		for l := range 16 {
			acc[0][l] += acc[2][l]
			acc[1][l] += acc[3][l]
		}
		for l := range 16 {
			acc[0][l] += acc[1][l]
		}
		sum = float64(reduceAdd16(&acc[0]))
	}
	for i := np; i < n; i++ {
		sum += float64(quant.F16ToF32(x[i]) * quant.F16ToF32(y[i]))
	}
	return float32(sum)
}

// reduceAdd16 is GCC's _mm512_reduce_add_ps: halves are added pairwise
// (256, 128, 64 bits), then the last two lanes.
func reduceAdd16(a *[16]float32) float32 {
	var t3 [8]float32
	for i := range t3 {
		t3[i] = a[i+8] + a[i]
	}
	var t6 [4]float32
	for i := range t6 {
		t6[i] = t3[i+4] + t3[i]
	}
	return (t6[0] + t6[2]) + (t6[1] + t6[3])
}

// sqrtf is a float32 square root (exact rounding: the float64 square root
// of a float32 rounds to the same float32).
func sqrtf(x float32) float32 { return float32(math.Sqrt(float64(x))) }

// expf is libm's expf, correctly rounded in practice.
func expf(x float32) float32 { return float32(math.Exp(float64(x))) }

// fma32 is a float32 fused multiply-add, a*b+c with one rounding.
func fma32(a, b, c float32) float32 {
	return float32(math.FMA(float64(a), float64(b), float64(c)))
}

// vExpf is ggml_v_expf for AVX-512 (vec.h), lane by lane: a polynomial
// after range reduction by ln 2, scaled with _mm512_scalef_ps; |n| > 192
// saturates to 0 or +Inf.
func vExpf(x float32) float32 {
	const r = 0x1.8p23
	z := fma32(x, 0x1.715476p+0, r)
	n := z - r
	b := fma32(-n, 0x1.7f7d1cp-20, fma32(-n, 0x1.62e4p-1, x))
	if abs := math.Abs(float64(n)); abs > 192 {
		if n <= 0 {
			return 0
		}
		return float32(math.Inf(1))
	}
	u := b * b
	j := fma32(fma32(fma32(0x1.0e4020p-7, b, 0x1.573e2ep-5), u, fma32(0x1.555e66p-3, b, 0x1.fffdb6p-2)), u,
		fma32(0x1.ffffecp-1, b, 1))
	return float32(float64(j) * math.Ldexp(1, int(n)))
}
