package cpu

import (
	"math"

	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/kernels/quant"
)

// rowBytes is the size of an n-element row of t; n is known to be whole blocks.
func rowBytes(t ggml.Type, n int) int {
	b, err := t.RowBytes(int64(n))
	if err != nil {
		panic(err)
	}
	return int(b)
}

// embed copies (dequantizing) each row's token embedding into y.
func embed(t ggml.Type, a *Args) error {
	table, r, y := a.Bufs[0], req(a.Bufs[1]), f32s(a.Bufs[2])
	cols := int(a.Push[0])
	rb := rowBytes(t, cols)
	return a.Pool.For(r.rows(), 1, func(_, lo, hi int) {
		for i := lo; i < hi; i++ {
			tok := int(r.row(i, kernels.IORowToken))
			if err := quant.Dequantize(t, table[tok*rb:(tok+1)*rb], y[i*cols:(i+1)*cols]); err != nil {
				panic(err)
			}
		}
	})
}

// rmsNorm normalizes each group of cols: like ggml, the sum of squares is
// accumulated in float64, the scale is 1/sqrtf(mean+eps) in float32, and
// the weight is applied after scaling.
func rmsNorm(a *Args) error {
	x, w, r, y := f32s(a.Bufs[0]), f32s(a.Bufs[1]), req(a.Bufs[2]), f32s(a.Bufs[3])
	cols, group := int(a.Push[0]), int(a.Push[1])
	eps := math.Float32frombits(a.Spec[0])
	w = w[:group]
	return a.Pool.For(r.rows(), 1, func(_, lo, hi int) {
		for i := lo; i < hi; i++ {
			for g := i * cols; g < (i+1)*cols; g += group {
				xs, ys := x[g:g+group], y[g:g+group]
				sum := 0.0
				for _, v := range xs {
					sum += float64(v * v)
				}
				scale := float32(1 / math.Sqrt(float64(float32(sum/float64(group))+eps)))
				for j, v := range xs {
					ys[j] = (v * scale) * w[j]
				}
			}
		}
	})
}

// matmul computes y[r] = W·x[r] (+ bias) for the active rows. Activations
// are first quantized to the weight type's dot-product partner type, as
// ggml does, then each output feature is one VecDot per row; workers split
// the output features so each weight row is read once for all rows.
func matmul(t ggml.Type, a *Args) error {
	x, w, bias, r, y := f32s(a.Bufs[0]), a.Bufs[1], a.Bufs[2], req(a.Bufs[3]), f32s(a.Bufs[4])
	k, n := int(a.Push[0]), int(a.Push[1])
	return gemm(a, t, x, w, r.rows(), k, n, func(i, j int, v float32) {
		if bias != nil {
			v += f32s(bias)[j]
		}
		y[i*n+j] = v
	}, nil)
}

// gemm quantizes rows of x (k wide) and calls out(row, j, W_j·x_row) for
// every active row and output feature j < n. keep, when set, filters rows.
func gemm(a *Args, t ggml.Type, x []float32, w []byte, rows, k, n int, out func(i, j int, v float32), keep func(i int) bool) error {
	vt := quant.VecDotType(t)
	xb, wb := rowBytes(vt, k), rowBytes(t, k)
	xq := a.work(rows * xb)
	active := make([]int, 0, rows)
	for i := 0; i < rows; i++ {
		if keep == nil || keep(i) {
			active = append(active, i)
		}
	}
	if err := a.Pool.For(len(active), 4, func(_, lo, hi int) {
		for _, i := range active[lo:hi] {
			if err := quant.QuantizeRow(vt, x[i*k:(i+1)*k], xq[i*xb:(i+1)*xb]); err != nil {
				panic(err)
			}
		}
	}); err != nil {
		return err
	}
	return a.Pool.For(n, 16, func(_, lo, hi int) {
		for j := lo; j < hi; j++ {
			wr := w[j*wb : (j+1)*wb]
			for _, i := range active {
				out(i, j, quant.VecDot(t, k, wr, xq[i*xb:(i+1)*xb]))
			}
		}
	})
}

// lmHead writes logits for the rows that ask for them, into their slot's
// row of the output.
func lmHead(t ggml.Type, a *Args) error {
	x, w, r, logits := f32s(a.Bufs[0]), a.Bufs[1], req(a.Bufs[2]), f32s(a.Bufs[3])
	k, nv := int(a.Push[0]), int(a.Push[1])
	return gemm(a, t, x, w, r.rows(), k, nv, func(i, j int, v float32) {
		logits[int(r.row(i, kernels.IORowSlot))*nv+j] = v
	}, func(i int) bool { return r.row(i, kernels.IORowFlags)&kernels.RowWantsLogits != 0 })
}

// argmax picks each logits row's largest entry (the first on ties).
func argmax(a *Args) error {
	logits, r, toks := f32s(a.Bufs[0]), req(a.Bufs[1]), u32s(a.Bufs[2])
	nv := int(a.Push[0])
	for i := 0; i < r.rows(); i++ {
		if r.row(i, kernels.IORowFlags)&kernels.RowWantsLogits == 0 {
			continue
		}
		s := int(r.row(i, kernels.IORowSlot))
		l := logits[s*nv : (s+1)*nv]
		best := 0
		for j, v := range l {
			if v > l[best] {
				best = j
			}
		}
		toks[s] = uint32(best)
	}
	return nil
}

// add accumulates y into x.
func add(a *Args) error {
	x, y, r := f32s(a.Bufs[0]), f32s(a.Bufs[1]), req(a.Bufs[2])
	n := r.rows() * int(a.Push[0])
	x, y = x[:n], y[:n]
	for i := range x {
		x[i] += y[i]
	}
	return nil
}

// swiglu is silu(gate)·up, with silu(x) = x/(1+e^-x) in float32.
func swiglu(a *Args) error {
	g, u, r, y := f32s(a.Bufs[0]), f32s(a.Bufs[1]), req(a.Bufs[2]), f32s(a.Bufs[3])
	n := r.rows() * int(a.Push[0])
	return a.Pool.For(n, 1024, func(_, lo, hi int) {
		for i := lo; i < hi; i++ {
			v := g[i]
			y[i] = v / (1 + float32(math.Exp(float64(-v)))) * u[i]
		}
	})
}

// rope rotates the first n_rot dims of each head by position·θ_i, θ_i =
// freq_scale·base^(-2i/n_rot). As in ggml, θ is built by repeated float32
// multiplication, so the rounding matches its cache. neox pairs dim i with
// i+n_rot/2; otherwise pairs are adjacent.
func rope(a *Args) error {
	x, r := f32s(a.Bufs[0]), req(a.Bufs[1])
	nHead, hd := int(a.Push[0]), int(a.Push[1])
	nRot, neox := int(a.Spec[0]), a.Spec[1] != 0
	base, scale := math.Float32frombits(a.Spec[2]), math.Float32frombits(a.Spec[3])
	thetaScale := float32(math.Pow(float64(base), -2/float64(nRot)))
	return a.Pool.For(r.rows(), 1, func(_, lo, hi int) {
		cs := make([]float32, nRot) // cos, sin pairs
		for i := lo; i < hi; i++ {
			theta := float32(r.row(i, kernels.IORowPos))
			for d := 0; d < nRot; d += 2 {
				t := theta * scale
				cs[d], cs[d+1] = float32(math.Cos(float64(t))), float32(math.Sin(float64(t)))
				theta *= thetaScale
			}
			for h := 0; h < nHead; h++ {
				v := x[(i*nHead+h)*hd : (i*nHead+h+1)*hd]
				for d := 0; d < nRot; d += 2 {
					c, s := cs[d], cs[d+1]
					i0, i1 := d, d+1
					if neox {
						i0, i1 = d/2, d/2+nRot/2
					}
					x0, x1 := v[i0], v[i1]
					v[i0] = x0*c - x1*s
					v[i1] = x0*s + x1*c
				}
			}
		}
	})
}

// kvOffset is the byte offset of (page, layer, k|v, token) in the KV cache.
func kvOffset(page, layer, nLayer, kvDim, which, tok int) int {
	return page*kernels.KVPageBytes(nLayer, kvDim) + ((layer*2+which)*kernels.KVPageTokens+tok)*kvDim*2
}

// kvWrite stores each row's K and V as F16 at its slot's position.
func kvWrite(a *Args) error {
	k, v, r, kv := f32s(a.Bufs[0]), f32s(a.Bufs[1]), req(a.Bufs[2]), a.Bufs[3]
	layer, kvDim, nLayer := int(a.Push[0]), int(a.Push[1]), int(a.Spec[0])
	for i := 0; i < r.rows(); i++ {
		slot, pos := int(r.row(i, kernels.IORowSlot)), int(r.row(i, kernels.IORowPos))
		page := r.page(slot, pos)
		for which, src := range [2][]float32{k[i*kvDim : (i+1)*kvDim], v[i*kvDim : (i+1)*kvDim]} {
			dst := u16s(kv[kvOffset(page, layer, nLayer, kvDim, which, pos%kernels.KVPageTokens):])[:kvDim]
			for j, x := range src {
				dst[j] = quant.F32ToF16(x)
			}
		}
	}
	return nil
}

// flashAttn attends each row's query heads over its slot's keys at
// positions 0..pos with an online softmax, as ggml's CPU flash attention
// does: the query is rounded to F16 like the cache, scores and the running
// sums are float32.
func flashAttn(a *Args) error {
	q, kv, r, y := f32s(a.Bufs[0]), a.Bufs[1], req(a.Bufs[2]), f32s(a.Bufs[3])
	layer := int(a.Push[0])
	nLayer, nHead, nHeadKV, hd := int(a.Spec[0]), int(a.Spec[1]), int(a.Spec[2]), int(a.Spec[3])
	scale := math.Float32frombits(a.Spec[4])
	kvDim, group := nHeadKV*hd, nHead/nHeadKV
	rows := r.rows()
	return a.Pool.For(rows*nHead, 1, func(_, lo, hi int) {
		qh := make([]float32, hd)
		acc := make([]float32, hd)
		for item := lo; item < hi; item++ {
			i, h := item/nHead, item%nHead
			slot, pos := int(r.row(i, kernels.IORowSlot)), int(r.row(i, kernels.IORowPos))
			for d, v := range q[(i*nHead+h)*hd : (i*nHead+h+1)*hd] {
				qh[d] = quant.F16ToF32(quant.F32ToF16(v))
			}
			clear(acc)
			m, s := float32(math.Inf(-1)), float32(0)
			kvh := h / group
			for t := 0; t <= pos; t++ {
				page, tok := r.page(slot, t), t%kernels.KVPageTokens
				ks := u16s(kv[kvOffset(page, layer, nLayer, kvDim, 0, tok)+kvh*hd*2:])[:hd]
				dot := float32(0)
				for d, kx := range ks {
					dot += qh[d] * quant.F16ToF32(kx)
				}
				dot *= scale
				ms, vs := float32(1), float32(1)
				if dot > m {
					ms = float32(math.Exp(float64(m - dot)))
					m = dot
					for d := range acc {
						acc[d] *= ms
					}
				} else {
					vs = float32(math.Exp(float64(dot - m)))
				}
				vx := u16s(kv[kvOffset(page, layer, nLayer, kvDim, 1, tok)+kvh*hd*2:])[:hd]
				for d, v := range vx {
					acc[d] += quant.F16ToF32(v) * vs
				}
				s = s*ms + vs
			}
			out := y[(i*nHead+h)*hd : (i*nHead+h+1)*hd]
			for d := range out {
				out[d] = acc[d] / s
			}
		}
	})
}
