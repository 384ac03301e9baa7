package cpu

import (
	"math"
	"sort"
	"unsafe"

	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/kernels/quant"
)

// route is one (expert, weight) pair of a row's MoE routing.
type route struct {
	Expert uint32
	Weight float32
}

func routes(b []byte) []route {
	if len(b) < 8 {
		return nil
	}
	return unsafe.Slice((*route)(unsafe.Pointer(&b[0])), len(b)/8)
}

// moeGateTopK scores every expert, softmaxes the scores, keeps the n_used
// best (ties to the lower id) and, with norm, rescales their weights to sum
// to one.
func moeGateTopK(t ggml.Type, a *Args) error {
	x, w, r, out := f32s(a.Bufs[0]), a.Bufs[1], req(a.Bufs[2]), routes(a.Bufs[3])
	k, nExp, nUsed, norm := int(a.Push[0]), int(a.Push[1]), int(a.Push[2]), a.Push[3] != 0
	rows := r.rows()
	logits := make([]float32, rows*nExp)
	if err := gemm(a, t, x, w, rows, k, nExp, func(i, j int) []float32 { return logits[i*nExp+j : (i+1)*nExp] }, nil, nil); err != nil {
		return err
	}
	idx := make([]int, nExp)
	for i := 0; i < rows; i++ {
		l := logits[i*nExp : (i+1)*nExp]
		mx := l[0]
		for _, v := range l {
			mx = max(mx, v)
		}
		sum := 0.0
		for j, v := range l {
			l[j] = float32(math.Exp(float64(v - mx)))
			sum += float64(l[j])
		}
		inv := float32(1 / sum)
		for j := range l {
			l[j] *= inv
			idx[j] = j
		}
		sort.SliceStable(idx, func(p, q int) bool { return l[idx[p]] > l[idx[q]] })
		sel := out[i*nUsed : (i+1)*nUsed]
		total := float32(0)
		for u := range sel {
			sel[u] = route{uint32(idx[u]), l[idx[u]]}
			total += sel[u].Weight
		}
		if norm {
			for u := range sel {
				sel[u].Weight /= total
			}
		}
	}
	return nil
}

// moeGateUp computes the gate and up projections of each row's selected
// experts. Expert e of a [k, f, n_expert] tensor is rows e·f … (e+1)·f.
func moeGateUp(t ggml.Type, a *Args) error {
	x, wg, wu, rt, r := f32s(a.Bufs[0]), a.Bufs[1], a.Bufs[2], routes(a.Bufs[3]), req(a.Bufs[4])
	gate, up := f32s(a.Bufs[5]), f32s(a.Bufs[6])
	k, f, nUsed := int(a.Spec[0]), int(a.Spec[1]), int(a.Spec[2])
	vt := quant.VecDotType(t)
	xb, wb := rowBytes(vt, k), rowBytes(t, k)
	rows := r.rows()
	xq := a.work(rows * xb)
	for i := 0; i < rows; i++ {
		if err := quant.QuantizeRow(vt, x[i*k:(i+1)*k], xq[i*xb:(i+1)*xb]); err != nil {
			return err
		}
	}
	return a.Pool.For(rows*nUsed*f, 64, func(_, lo, hi int) {
		for item := lo; item < hi; item++ {
			i, u, j := item/(nUsed*f), item/f%nUsed, item%f
			e := int(rt[i*nUsed+u].Expert)
			row := (e*f + j) * wb
			xr := xq[i*xb : (i+1)*xb]
			gate[item] = quant.VecDot(t, k, wg[row:row+wb], xr)
			up[item] = quant.VecDot(t, k, wu[row:row+wb], xr)
		}
	})
}

// moeDownAcc projects each selected expert's activation back to the model
// width, weights it, sums over experts in routing order, and adds the sum
// to the residual, matching ggml's mul-then-add chain.
func moeDownAcc(t ggml.Type, a *Args) error {
	h, w, rt, r, y := f32s(a.Bufs[0]), a.Bufs[1], routes(a.Bufs[2]), req(a.Bufs[3]), f32s(a.Bufs[4])
	f, n, nUsed := int(a.Push[0]), int(a.Push[1]), int(a.Push[2])
	vt := quant.VecDotType(t)
	hb, wb := rowBytes(vt, f), rowBytes(t, f)
	rows := r.rows()
	hq := a.work(rows * nUsed * hb)
	for i := 0; i < rows*nUsed; i++ {
		if err := quant.QuantizeRow(vt, h[i*f:(i+1)*f], hq[i*hb:(i+1)*hb]); err != nil {
			return err
		}
	}
	return a.Pool.For(rows*n, 64, func(_, lo, hi int) {
		for item := lo; item < hi; item++ {
			i, j := item/n, item%n
			sum := float32(0)
			for u := 0; u < nUsed; u++ {
				rr := rt[i*nUsed+u]
				row := (int(rr.Expert)*n + j) * wb
				sum += rr.Weight * quant.VecDot(t, f, w[row:row+wb], hq[(i*nUsed+u)*hb:(i*nUsed+u+1)*hb])
			}
			y[item] += sum
		}
	})
}
