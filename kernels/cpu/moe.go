package cpu

import (
	"math"
	"slices"
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

// moeGateTopK scores every expert (adding the router bias, when bound)
// and routes each row by its gating: 0 softmaxes the scores, keeps the
// n_used best (ties to the lower id) and, with norm, rescales their
// weights to sum to one; 1 keeps the n_used best scores and weights them
// by their own softmax.
func moeGateTopK(t ggml.Type, a *Args) error {
	x, w, bias, r, out := f32s(a.Bufs[0]), a.Bufs[1], a.Bufs[2], req(a.Bufs[3]), routes(a.Bufs[4])
	k, nExp, nUsed, norm, gating := int(a.Push[0]), int(a.Push[1]), int(a.Push[2]), a.Push[3] != 0, a.Push[4]
	rows := r.rows()
	logits := make([]float32, rows*nExp)
	if err := gemm(a, t, x, w, rows, k, nExp, func(i, j int) []float32 { return logits[i*nExp+j : (i+1)*nExp] }, nil, nil); err != nil {
		return err
	}
	idx := make([]int, nExp)
	ws := make([]float32, nUsed)
	for i := 0; i < rows; i++ {
		l := logits[i*nExp : (i+1)*nExp]
		if bias != nil {
			// ggml_add after the router's product
			for j, b := range f32s(bias)[:nExp] {
				l[j] += b
			}
		}
		if gating == 0 {
			softmax(l)
		}
		for j := range idx {
			idx[j] = j
		}
		sort.SliceStable(idx, func(p, q int) bool { return l[idx[p]] > l[idx[q]] })
		sel := out[i*nUsed : (i+1)*nUsed]
		for u := range sel {
			ws[u] = l[idx[u]]
		}
		switch {
		case gating != 0:
			softmax(ws)
		case norm:
			total := float32(0)
			for _, v := range ws {
				total += v
			}
			for u := range ws {
				ws[u] /= total
			}
		}
		for u := range sel {
			sel[u] = route{uint32(idx[u]), ws[u]}
		}
	}
	return nil
}

// softmax replaces l by its softmax: exponentials of l - max(l) summed in
// float64, then scaled by the sum's reciprocal.
func softmax(l []float32) {
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
	}
}

// moeAddBias adds each routed expert's bias row to its columns of x
// (ggml_add_id).
func moeAddBias(a *Args) error {
	x, b, rt, r := f32s(a.Bufs[0]), f32s(a.Bufs[1]), routes(a.Bufs[2]), req(a.Bufs[3])
	f, nUsed := int(a.Push[0]), int(a.Push[1])
	for i := range r.rows() * nUsed {
		e := int(rt[i].Expert)
		row, bias := x[i*f:(i+1)*f], b[e*f:(e+1)*f]
		for j := range row {
			row[j] += bias[j]
		}
	}
	return nil
}

// swigluOAI is gpt-oss's clamped SwiGLU as ggml computes it:
// x = min(gate, limit), y = clamp(up, ±limit),
// out = x/(1 + expf(alpha·(-x)))·(y + 1).
func swigluOAI(a *Args) error {
	g, u, r, y := f32s(a.Bufs[0]), f32s(a.Bufs[1]), req(a.Bufs[2]), f32s(a.Bufs[3])
	n := r.rows() * int(a.Push[0])
	alpha, limit := math.Float32frombits(a.Spec[0]), math.Float32frombits(a.Spec[1])
	return a.Pool.For(n, 1024, func(_, lo, hi int) {
		for i := lo; i < hi; i++ {
			x := min(g[i], limit)
			v := min(max(u[i], -limit), limit)
			y[i] = x / (1 + expf(alpha*(0-x))) * (v + 1)
		}
	})
}

// moeGroups orders a step's (row, slot) pairs p = i·nUsed+u by expert,
// each expert's pairs in their own order: order[start[e]:start[e+1]] are
// expert e's. The MoE kernels then take each expert's weight rows once
// for all the pairs routed to it, as the dense kernels take a weight row
// once for all rows.
func moeGroups(rt []route, pairs, nExpert int) (order, start []int32) {
	start = make([]int32, nExpert+1)
	for _, r := range rt[:pairs] {
		start[r.Expert+1]++
	}
	for e := range nExpert {
		start[e+1] += start[e]
	}
	order = make([]int32, pairs)
	next := slices.Clone(start[:nExpert])
	for p, r := range rt[:pairs] {
		order[next[r.Expert]] = int32(p)
		next[r.Expert]++
	}
	return order, start
}

// moeTileRows bounds the pairs one multi-row dot takes at once.
const moeTileRows = 64

// moeGather copies the quantized activation row of each pair, in order's
// order, into dst: row src(p) of xq, rows of xb bytes.
func moeGather(dst, xq []byte, xb int, order []int32, src func(p int) int) {
	for c, p := range order {
		copy(dst[c*xb:(c+1)*xb], xq[src(int(p))*xb:])
	}
}

// moeProjection is one expert matrix of a MoE kernel and where its
// results go: put(p, j, v) for pair p and feature j.
type moeProjection struct {
	w   []byte
	put func(p, j int, v float32)
}

// moeExpertDots computes, for every expert e with pairs routed to it,
// every feature j of its f and each projection, VecDot(W_e row j, x_p)
// for each of e's pairs p, whose quantized activations (xb bytes each)
// gathered holds in order's order. Each result is VecDot's bits
// (VecDotRows is batch-invariant), whatever the grouping — in the
// repacked GEMV's order where ggml repacks the experts (moeOrder).
func moeExpertDots(a *Args, t ggml.Type, k, f int, gathered []byte, xb int, order, start []int32, projs ...moeProjection) error {
	wb := rowBytes(t, k)
	o := moeOrder(t, f)
	// Work items are (expert, block of moeFeatures features) pairs.
	const moeFeatures = 16
	var items [][2]int
	for e := range len(start) - 1 {
		if start[e+1] > start[e] {
			for j0 := 0; j0 < f; j0 += moeFeatures {
				items = append(items, [2]int{e, j0})
			}
		}
	}
	return a.Pool.For(len(items), 1, func(_, lo, hi int) {
		var tile [moeTileRows]float32
		for _, it := range items[lo:hi] {
			e, j0 := it[0], it[1]
			ps := order[start[e]:start[e+1]]
			xs := gathered[int(start[e])*xb:]
			for j := j0; j < min(f, j0+moeFeatures); j++ {
				for _, pr := range projs {
					wr := pr.w[(e*f+j)*wb : (e*f+j+1)*wb]
					for c0 := 0; c0 < len(ps); c0 += moeTileRows {
						n := min(moeTileRows, len(ps)-c0)
						quant.VecDotRowsOrder(t, o, k, wr, xs[c0*xb:], xb, n, tile[:n])
						for c, v := range tile[:n] {
							pr.put(int(ps[c0+c]), j, v)
						}
					}
				}
			}
		}
	})
}

// moeOrder is the order of an expert product with f rows an expert:
// ggml's repacked MUL_MAT_ID takes every row through its GEMV.
func moeOrder(t ggml.Type, f int) quant.Order {
	if quant.Repacked(t, f) {
		return quant.OrderGEMV
	}
	return quant.OrderDot
}

// moeGateUp computes the gate and up projections of each row's selected
// experts. Expert e of a [k, f, n_expert] tensor is rows e·f … (e+1)·f.
func moeGateUp(t ggml.Type, a *Args) error {
	x, wg, wu, rt, r := f32s(a.Bufs[0]), a.Bufs[1], a.Bufs[2], routes(a.Bufs[3]), req(a.Bufs[4])
	gate, up := f32s(a.Bufs[5]), f32s(a.Bufs[6])
	k, f, nUsed := int(a.Spec[0]), int(a.Spec[1]), int(a.Spec[2])
	vt := quant.VecDotType(t)
	xb, wb := rowBytes(vt, k), rowBytes(t, k)
	rows, pairs := r.rows(), r.rows()*nUsed
	buf := a.work((rows + pairs) * xb)
	xq, gathered := buf[:rows*xb], buf[rows*xb:]
	for i := 0; i < rows; i++ {
		if err := quant.QuantizeRow(vt, x[i*k:(i+1)*k], xq[i*xb:(i+1)*xb]); err != nil {
			return err
		}
	}
	order, start := moeGroups(rt, pairs, len(wg)/(f*wb))
	moeGather(gathered, xq, xb, order, func(p int) int { return p / nUsed })
	return moeExpertDots(a, t, k, f, gathered, xb, order, start,
		moeProjection{wg, func(p, j int, v float32) { gate[p*f+j] = v }},
		moeProjection{wu, func(p, j int, v float32) { up[p*f+j] = v }})
}

// moeDownAcc projects each selected expert's activation back to the model
// width (adding the expert's bias, when bound), weights it, sums over
// experts in routing order, and adds the sum to the residual, matching
// ggml's mul-then-add chain. The projections are computed expert by
// expert into scratch, then summed in each row's routing order.
func moeDownAcc(t ggml.Type, a *Args) error {
	h, w, bb, rt, r, y := f32s(a.Bufs[0]), a.Bufs[1], a.Bufs[2], routes(a.Bufs[3]), req(a.Bufs[4]), f32s(a.Bufs[5])
	var bias []float32
	if bb != nil {
		bias = f32s(bb)
	}
	f, n, nUsed := int(a.Push[0]), int(a.Push[1]), int(a.Push[2])
	vt := quant.VecDotType(t)
	hb, wb := rowBytes(vt, f), rowBytes(t, f)
	rows, pairs := r.rows(), r.rows()*nUsed
	buf := a.work(2*pairs*hb + 4*pairs*n)
	hq, gathered := buf[:pairs*hb], buf[pairs*hb:2*pairs*hb]
	d := f32s(buf[2*pairs*hb:])[:pairs*n]
	for i := 0; i < pairs; i++ {
		if err := quant.QuantizeRow(vt, h[i*f:(i+1)*f], hq[i*hb:(i+1)*hb]); err != nil {
			return err
		}
	}
	order, start := moeGroups(rt, pairs, len(w)/(n*wb))
	moeGather(gathered, hq, hb, order, func(p int) int { return p })
	if err := moeExpertDots(a, t, f, n, gathered, hb, order, start, moeProjection{w, func(p, j int, v float32) { d[p*n+j] = v }}); err != nil {
		return err
	}
	return a.Pool.For(rows*n, 256, func(_, lo, hi int) {
		for item := lo; item < hi; item++ {
			i, j := item/n, item%n
			sum := float32(0)
			for u := 0; u < nUsed; u++ {
				rr := rt[i*nUsed+u]
				v := d[(i*nUsed+u)*n+j]
				if bias != nil {
					v += bias[int(rr.Expert)*n+j] // ggml_add_id, before the weight
				}
				sum += rr.Weight * v
			}
			y[item] += sum
		}
	})
}

// moeRouteScale multiplies each routed expert's weight by its scale.
func moeRouteScale(a *Args) error {
	rt, s, r := routes(a.Bufs[0]), f32s(a.Bufs[1]), req(a.Bufs[2])
	for i := range r.rows() * int(a.Push[0]) {
		rt[i].Weight *= s[rt[i].Expert]
	}
	return nil
}
