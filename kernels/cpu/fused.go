package cpu

import (
	"math"

	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/kernels/quant"
)

// The fused kernels do what their unfused sequences do, in the same
// arithmetic, minus the intermediate writes and repeated activation
// quantization: the parity tests hold them to the same tolerance.

// normRows normalizes the active rows of x into dst (one group per row).
func normRows(a *Args, x, w, dst []float32, rows, cols int, eps float32) error {
	return a.Pool.For(rows, 1, func(_, lo, hi int) {
		for i := lo; i < hi; i++ {
			normRow(x[i*cols:(i+1)*cols], dst[i*cols:(i+1)*cols], w, eps)
		}
	})
}

// normScratch returns rows×cols floats of executor scratch that follow the
// bytes gemm will take for quantized activations, so the two never overlap.
func normScratch(a *Args, t ggml.Type, rows, cols int) []float32 {
	q := gemmWorkBytes(t, rows, cols)
	buf := a.work(q + 4*rows*cols)
	return f32s(buf[q:])[:rows*cols]
}

// rmsNormQKV is RMS_NORM then the Q, K and V projections, over one
// concatenated weight whose rows are Q's, then K's, then V's.
func rmsNormQKV(t ggml.Type, a *Args) error {
	x, wn, w, b, r := f32s(a.Bufs[0]), f32s(a.Bufs[1]), a.Bufs[2], a.Bufs[3], req(a.Bufs[4])
	q, k, v := f32s(a.Bufs[5]), f32s(a.Bufs[6]), f32s(a.Bufs[7])
	K, nq, nkv := int(a.Spec[0]), int(a.Spec[1]), int(a.Spec[2])
	eps := math.Float32frombits(a.Spec[3])
	rows := r.rows()
	n := normScratch(a, t, rows, K)
	if err := normRows(a, x, wn, n, rows, K, eps); err != nil {
		return err
	}
	var bias []float32
	if b != nil {
		bias = f32s(b)[:nq+2*nkv]
	}
	return gemmPrompt(a, t, n, w, r, K, nq+2*nkv, quant.Repacked(t, nq) && (nkv == 0 || quant.Repacked(t, nkv)), func(i, j int) []float32 {
		switch {
		case j < nq:
			return q[i*nq+j : (i+1)*nq]
		case j < nq+nkv:
			return k[i*nkv+j-nq : (i+1)*nkv]
		default:
			return v[i*nkv+j-nq-nkv : (i+1)*nkv]
		}
	}, bias)
}

// rmsNormGateUp is RMS_NORM then the gate and up projections, over one
// concatenated weight: f gate rows, then f up rows.
func rmsNormGateUp(t ggml.Type, a *Args) error {
	x, wn, w, r := f32s(a.Bufs[0]), f32s(a.Bufs[1]), a.Bufs[2], req(a.Bufs[3])
	gate, up := f32s(a.Bufs[4]), f32s(a.Bufs[5])
	K, f := int(a.Spec[0]), int(a.Spec[1])
	eps := math.Float32frombits(a.Spec[2])
	rows := r.rows()
	n := normScratch(a, t, rows, K)
	if err := normRows(a, x, wn, n, rows, K, eps); err != nil {
		return err
	}
	return gemmPrompt(a, t, n, w, r, K, 2*f, quant.Repacked(t, f), func(i, j int) []float32 {
		if j < f {
			return gate[i*f+j : (i+1)*f]
		}
		return up[i*f+j-f : (i+1)*f]
	}, nil)
}

// rmsNormMatmul is RMS_NORM then one or two projections of the normalized
// row over one concatenated weight: n rows into y, then n2 into y2.
func rmsNormMatmul(t ggml.Type, a *Args) error {
	x, wn, w, r := f32s(a.Bufs[0]), f32s(a.Bufs[1]), a.Bufs[2], req(a.Bufs[3])
	y, y2 := f32s(a.Bufs[4]), f32s(a.Bufs[5])
	K, n, n2 := int(a.Spec[0]), int(a.Spec[1]), int(a.Spec[2])
	eps := math.Float32frombits(a.Spec[3])
	rows := r.rows()
	xn := normScratch(a, t, rows, K)
	if err := normRows(a, x, wn, xn, rows, K, eps); err != nil {
		return err
	}
	return gemmPrompt(a, t, xn, w, r, K, n+n2, quant.Repacked(t, n) && (n2 == 0 || quant.Repacked(t, n2)), func(i, j int) []float32 {
		if j < n {
			return y[i*n+j : (i+1)*n]
		}
		return y2[i*n2+j-n : (i+1)*n2]
	}, nil)
}

// rmsNormGateUpSwiGLU is rmsNormGateUp into executor scratch, then swiglu
// of the two into y: the unfused pair's arithmetic.
func rmsNormGateUpSwiGLU(t ggml.Type, a *Args) error {
	x, wn, w, io, y := f32s(a.Bufs[0]), f32s(a.Bufs[1]), a.Bufs[2], a.Bufs[3], a.Bufs[4]
	K, f := int(a.Spec[0]), int(a.Spec[1])
	eps := math.Float32frombits(a.Spec[2])
	r := req(io)
	rows := r.rows()
	q := gemmWorkBytes(t, rows, K)
	buf := a.work(q + 4*rows*K + 8*rows*f) // gemm's, the normalized rows, gate and up
	xn := f32s(buf[q:])[:rows*K]
	gate, up := buf[q+4*rows*K:q+4*rows*K+4*rows*f], buf[q+4*rows*K+4*rows*f:]
	if err := normRows(a, x, wn, xn, rows, K, eps); err != nil {
		return err
	}
	g, u := f32s(gate), f32s(up)
	err := gemmPrompt(a, t, xn, w, r, K, 2*f, quant.Repacked(t, f), func(i, j int) []float32 {
		if j < f {
			return g[i*f+j : (i+1)*f]
		}
		return u[i*f+j-f : (i+1)*f]
	}, nil)
	if err != nil {
		return err
	}
	return swiglu(&Args{Bufs: [][]byte{gate, up, io, y}, Push: []uint32{uint32(f)}, Pool: a.Pool})
}

// rmsNormQKVRopeKVWrite is rmsNormQKV with K and V into scratch of their
// own, then ropeKVWrite of the three into the cache (c: F16): the unfused
// pair's arithmetic.
func rmsNormQKVRopeKVWrite(t ggml.Type, c *kvCache, a *Args) error {
	x, wn, w, io, q, kv := a.Bufs[0], a.Bufs[1], a.Bufs[2], a.Bufs[3], a.Bufs[4], a.Bufs[5]
	rows, nkv := req(io).rows(), int(a.Spec[2])
	k, v := make([]byte, 4*rows*nkv), make([]byte, 4*rows*nkv)
	if err := rmsNormQKV(t, &Args{Bufs: [][]byte{x, wn, w, nil, io, q, k, v}, Spec: a.Spec[:4], Pool: a.Pool, Work: a.Work, Packs: a.Packs}); err != nil {
		return err
	}
	return ropeKVWrite(c, &Args{Bufs: [][]byte{q, k, v, io, kv}, Push: a.Push, Spec: a.Spec[4:], Pool: a.Pool, Work: a.Work})
}

// residualRMSNorm adds y into the residual x, then normalizes x into out.
func residualRMSNorm(a *Args) error {
	x, y, w, r, out := f32s(a.Bufs[0]), f32s(a.Bufs[1]), f32s(a.Bufs[2]), req(a.Bufs[3]), f32s(a.Bufs[4])
	cols := int(a.Push[0])
	eps := math.Float32frombits(a.Spec[0])
	return a.Pool.For(r.rows(), 1, func(_, lo, hi int) {
		for i := lo; i < hi; i++ {
			xs, ys := x[i*cols:(i+1)*cols], y[i*cols:(i+1)*cols]
			for j := range xs {
				xs[j] += ys[j]
			}
			normRow(xs, out[i*cols:(i+1)*cols], w, eps)
		}
	})
}

// rmsNormRopeKVWrite normalizes and rotates each Q head in place and each
// K head, then stores K and V in the cache. K is updated in place too, as
// the unfused sequence leaves it (nothing reads it after).
func rmsNormRopeKVWrite(c *kvCache, a *Args) error {
	q, k, v, wq, wk, r, kv := f32s(a.Bufs[0]), f32s(a.Bufs[1]), f32s(a.Bufs[2]), f32s(a.Bufs[3]), f32s(a.Bufs[4]), req(a.Bufs[5]), a.Bufs[6]
	layer := int(a.Push[0])
	nLayer, nHead, nHeadKV, hd := int(a.Spec[0]), int(a.Spec[1]), int(a.Spec[2]), int(a.Spec[3])
	rp := ropeParams(a.Spec[4:8])
	eps := math.Float32frombits(a.Spec[8])
	kvDim := nHeadKV * hd
	if err := checkKVWidth(c.t, hd); err != nil {
		return err
	}
	return a.Pool.For(r.rows(), 1, func(_, lo, hi int) {
		cs := make([]float32, rp.nRot)
		for i := lo; i < hi; i++ {
			rp.table(cs, int(r.row(i, kernels.IORowPos)))
			qi, ki := q[i*nHead*hd:(i+1)*nHead*hd], k[i*kvDim:(i+1)*kvDim]
			for h := 0; h < nHead; h++ {
				head := qi[h*hd : (h+1)*hd]
				normRow(head, head, wq, eps)
				rp.rotate(head, cs)
			}
			for h := 0; h < nHeadKV; h++ {
				head := ki[h*hd : (h+1)*hd]
				normRow(head, head, wk, eps)
				rp.rotate(head, cs)
			}
			storeKV(c, r, kv, i, layer, nLayer, kvDim, ki, v[i*kvDim:(i+1)*kvDim])
		}
	})
}

// ropeKVWrite rotates each Q head in place and each K head (in a copy: K
// is left as it was) and stores K and V in the cache, as ROPE(q), ROPE(k)
// and KV_WRITE do.
func ropeKVWrite(c *kvCache, a *Args) error {
	q, k, v, r, kv := f32s(a.Bufs[0]), f32s(a.Bufs[1]), f32s(a.Bufs[2]), req(a.Bufs[3]), a.Bufs[4]
	layer := int(a.Push[0])
	nLayer, nHead, nHeadKV, hd := int(a.Spec[0]), int(a.Spec[1]), int(a.Spec[2]), int(a.Spec[3])
	rp := ropeParams(a.Spec[4:8])
	kvDim := nHeadKV * hd
	if err := checkKVWidth(c.t, hd); err != nil {
		return err
	}
	// Each thread's rotation table and rotated keys, in scratch.
	per := rp.nRot + kvDim
	scratch := f32s(a.work(4 * a.Pool.Threads() * per))
	return a.Pool.For(r.rows(), 1, func(worker, lo, hi int) {
		cs := scratch[worker*per : worker*per+rp.nRot]
		kr := scratch[worker*per+rp.nRot : (worker+1)*per]
		for i := lo; i < hi; i++ {
			rp.table(cs, int(r.row(i, kernels.IORowPos)))
			for h := 0; h < nHead; h++ {
				rp.rotate(q[(i*nHead+h)*hd:(i*nHead+h+1)*hd], cs)
			}
			copy(kr, k[i*kvDim:(i+1)*kvDim])
			for h := 0; h < nHeadKV; h++ {
				rp.rotate(kr[h*hd:(h+1)*hd], cs)
			}
			storeKV(c, r, kv, i, layer, nLayer, kvDim, kr, v[i*kvDim:(i+1)*kvDim])
		}
	})
}

// matmulResidual is matmul then add: y[r] += W·x[r] (+ bias). The products
// go to scratch (after gemm's quantized activations) and are added in
// float32, so the result is the unfused pair's to the bit.
func matmulResidual(t ggml.Type, a *Args) error {
	x, w, b, r, y, k, n := matmulArgs(a)
	rows := r.rows()
	q := gemmWorkBytes(t, rows, k)
	p := f32s(a.work(q + 4*rows*n)[q:])[:rows*n]
	if err := gemmPrompt(a, t, x, w, r, k, n, quant.Repacked(t, n), func(i, j int) []float32 { return p[i*n+j : (i+1)*n] }, b); err != nil {
		return err
	}
	if rows == 1 {
		for j, v := range p[:n] {
			y[j] += v
		}
		return nil
	}
	return a.Pool.For(rows, 1, func(_, lo, hi int) {
		ys, ps := y[lo*n:hi*n], p[lo*n:hi*n]
		for j, v := range ps {
			ys[j] += v
		}
	})
}
