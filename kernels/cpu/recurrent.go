package cpu

import (
	"math"

	"github.com/zrtdev/zrt/kernels"
)

// Recurrent layers (the gated DeltaNet of Qwen3.5 and Qwen3-Next) keep a
// fixed-size state per slot instead of KV pages. A slot's rows must run in
// position order, so the kernels below group a step's rows by slot and
// split the work over slots and channels or heads, never over one slot's
// rows. A row at position 0 starts its slot's state from zero. The
// arithmetic follows ggml's CPU ops (ssm_conv, gated_delta_net, l2_norm,
// the unary ops) on the x86 AVX-512 build the references come from, with
// GCC's contraction of a*b+c into an FMA.

// slotRows is one slot's rows of a step, in order.
type slotRows struct {
	slot int
	rows []int
}

// rowsBySlot groups the step's rows by slot, in row order.
func rowsBySlot(r request) []slotRows {
	var out []slotRows
	at := map[int]int{}
	for i := range r.rows() {
		s := int(r.row(i, kernels.IORowSlot))
		j, ok := at[s]
		if !ok {
			j = len(out)
			at[s] = j
			out = append(out, slotRows{slot: s})
		}
		out[j].rows = append(out[j].rows, i)
	}
	return out
}

// slotState is slot s's n floats of state at byte offset off.
func slotState(region []byte, s, slotBytes, off, n int) []float32 {
	return f32s(region[s*slotBytes+off:])[:n]
}

// ssmConv is the short causal convolution with SiLU (kernels.ABI
// ssm_conv): per channel the sum over the window (state, oldest first,
// then the row's input) of input·weight, accumulated as ggml's
// ssm_conv does, then the window slides.
func ssmConv(a *Args) error {
	x, w, st, r, y := f32s(a.Bufs[0]), f32s(a.Bufs[1]), a.Bufs[2], req(a.Bufs[3]), f32s(a.Bufs[4])
	c, off := int(a.Push[0]), int(a.Push[1])
	k, slotBytes := int(a.Spec[0]), int(a.Spec[1])
	groups := rowsBySlot(r)
	const chunk = 64
	nch := (c + chunk - 1) / chunk
	return a.Pool.For(len(groups)*nch, 1, func(_, lo, hi int) {
		for it := lo; it < hi; it++ {
			g := groups[it/nch]
			c0, c1 := it%nch*chunk, min(c, it%nch*chunk+chunk)
			state := slotState(st, g.slot, slotBytes, off, (k-1)*c)
			for _, i := range g.rows {
				if r.row(i, kernels.IORowPos) == 0 {
					clear(state[c0*(k-1) : c1*(k-1)])
				}
				for ch := c0; ch < c1; ch++ {
					win, wc := state[ch*(k-1):(ch+1)*(k-1)], w[ch*k:(ch+1)*k]
					var sum float32
					for j, v := range win {
						sum = fma32(v, wc[j], sum)
					}
					xv := x[i*c+ch]
					y[i*c+ch] = fma32(xv, wc[k-1], sum)
					copy(win, win[1:])
					win[k-2] = xv
				}
				// The chunk starts on a 16-lane group of the row, so its
				// groups and tail are the row's.
				siluInPlace(y[i*c+c0 : i*c+c1])
			}
		}
	})
}

// gdnGates computes a gated DeltaNet's gates in place (kernels.ABI
// gdn_gates) with ggml's unary ops: softplus(x) = x above 20, else
// logf(1 + expf(x)); sigmoid(x) = 1/(1 + expf(-x)).
func gdnGates(a *Args) error {
	alpha, beta, dt, av, r := f32s(a.Bufs[0]), f32s(a.Bufs[1]), f32s(a.Bufs[2]), f32s(a.Bufs[3]), req(a.Bufs[4])
	h := int(a.Push[0])
	for i := range r.rows() * h {
		x := alpha[i] + dt[i%h]
		if x <= 20 {
			x = float32(math.Log(float64(1 + expf(x))))
		}
		alpha[i] = x * av[i%h]
		beta[i] = sigmoid(beta[i])
	}
	return nil
}

// sigmoid is ggml's op_sigmoid.
func sigmoid(x float32) float32 { return 1 / (1 + expf(0-x)) }

// gatedDeltaNet runs the gated delta rule (kernels.ABI gated_delta_net)
// as ggml_compute_forward_gated_delta_net does: the state stored
// transposed (row j is column j of S), decayed by expf(alpha), the delta
// from ggml_vec_dot_f32 of each row with k, the rank-one update by
// ggml_vec_mad_f32, the output from ggml_vec_dot_f32 with q, scaled.
// q and k are L2-normalized first, as ggml_l2_norm does.
func gatedDeltaNet(a *Args) error {
	qkv, alpha, beta, st, r, y := f32s(a.Bufs[0]), f32s(a.Bufs[1]), f32s(a.Bufs[2]), a.Bufs[3], req(a.Bufs[4]), f32s(a.Bufs[5])
	off := int(a.Push[0])
	hk, hv, s := int(a.Spec[0]), int(a.Spec[1]), int(a.Spec[2])
	eps, slotBytes := math.Float32frombits(a.Spec[3]), int(a.Spec[4])
	// kh is the key head of value head h
	kh := func(h int) int { return h % hk }
	if a.Spec[5] != 0 {
		kh = func(h int) int { return h / (hv / hk) }
	}
	c := (2*hk + hv) * s
	scale := 1 / sqrtf(float32(s))
	groups := rowsBySlot(r)
	return a.Pool.For(len(groups)*hv, 1, func(_, lo, hi int) {
		q, k, delta := make([]float32, s), make([]float32, s), make([]float32, s)
		for it := lo; it < hi; it++ {
			g, h := groups[it/hv], it%hv
			m := slotState(st, g.slot, slotBytes, off+h*s*s*4, s*s)
			for _, i := range g.rows {
				if r.row(i, kernels.IORowPos) == 0 {
					clear(m)
				}
				row := qkv[i*c : (i+1)*c]
				l2Norm(q, row[kh(h)*s:][:s], eps)
				l2Norm(k, row[(hk+kh(h))*s:][:s], eps)
				v := row[(2*hk+h)*s:][:s]
				decay, b := expf(alpha[i*hv+h]), beta[i*hv+h]
				scaleF32(m, decay)
				for j := range s {
					delta[j] = (v[j] - dotF32(m[j*s:(j+1)*s], k)) * b
				}
				for j := range s {
					madF32(m[j*s:(j+1)*s], k, delta[j])
				}
				out := y[(i*hv+h)*s:][:s]
				for j := range s {
					out[j] = dotF32(m[j*s:(j+1)*s], q) * scale
				}
			}
		}
	})
}

// l2Norm is ggml_l2_norm of one head: x / max(‖x‖, eps), the sum of
// squares in float64 and the square root in float32.
func l2Norm(dst, x []float32, eps float32) {
	sum := 0.0
	for _, v := range x {
		sum += float64(v * v)
	}
	sc := 1 / max(sqrtf(float32(sum)), eps)
	for i, v := range x {
		dst[i] = v * sc
	}
}

// dotF32 is ggml_vec_dot_f32 on AVX-512: whole groups of 64 through four
// 16-lane FMA accumulators, folded pairwise and reduced as
// GGML_F32x16_REDUCE does; the tail accumulates into that float32 sum.
func dotF32(x, y []float32) float32 {
	n := len(x)
	y = y[:n]
	np := n &^ 63
	var sum float32
	if np > 0 && vecUseSIMD {
		var acc [16]float32
		dotF32AVX512(&x[0], &y[0], np, &acc)
		sum = reduceAdd16(&acc)
	} else if np > 0 {
		var acc [4][16]float32
		for i := 0; i < np; i += 64 {
			for j := range acc {
				for l := range acc[j] {
					acc[j][l] = fma32(x[i+16*j+l], y[i+16*j+l], acc[j][l])
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
		sum = reduceAdd16(&acc[0])
	}
	for i := np; i < n; i++ {
		sum = fma32(x[i], y[i], sum)
	}
	return sum
}

// vecUseSIMD selects the AVX-512 forms of dotF32, madF32 and scaleF32
// where the CPU has them; the tests compare them with the Go code.
var vecUseSIMD = vecSIMDOK

// madF32 is ggml_vec_mad_f32: y[i] = fma(x[i], v, y[i]).
func madF32(y, x []float32, v float32) {
	x = x[:len(y)]
	n16 := len(y) &^ 15
	if n16 > 0 && vecUseSIMD {
		madF32AVX512(&y[0], &x[0], v, n16)
	} else {
		n16 = 0
	}
	for i := n16; i < len(y); i++ {
		y[i] = fma32(x[i], v, y[i])
	}
}

// scaleF32 is ggml_vec_scale_f32: y[i] *= v.
func scaleF32(y []float32, v float32) {
	n16 := len(y) &^ 15
	if n16 > 0 && vecUseSIMD {
		scaleF32AVX512(&y[0], v, n16)
	} else {
		n16 = 0
	}
	for i := n16; i < len(y); i++ {
		y[i] *= v
	}
}

// rmsNormGated is rms_norm(x)·w·silu(z) per group of columns, as the
// three ggml ops compute it (the SiLU's 16-lane split is per group: ggml
// runs it over rows of the group's width).
func rmsNormGated(a *Args) error {
	x, w, z, r, y := f32s(a.Bufs[0]), f32s(a.Bufs[1]), f32s(a.Bufs[2]), req(a.Bufs[3]), f32s(a.Bufs[4])
	cols, group := int(a.Push[0]), int(a.Push[1])
	eps := math.Float32frombits(a.Spec[0])
	return a.Pool.For(r.rows()*cols/group, 16, func(_, lo, hi int) {
		for gi := lo; gi < hi; gi++ {
			o := gi * group
			normRow(x[o:o+group], y[o:o+group], w, eps)
			// y·silu(z) is silu(z)·y: commuted, the same bits.
			swigluRow(y[o:o+group], z[o:o+group], y[o:o+group])
		}
	})
}

// splitHalves de-interleaves each head's two halves into a and b.
func splitHalves(a *Args) error {
	x, r, ya, yb := f32s(a.Bufs[0]), req(a.Bufs[1]), f32s(a.Bufs[2]), f32s(a.Bufs[3])
	heads, width := int(a.Push[0]), int(a.Push[1])
	for i := range r.rows() * heads {
		copy(ya[i*width:(i+1)*width], x[2*i*width:])
		copy(yb[i*width:(i+1)*width], x[(2*i+1)*width:])
	}
	return nil
}

// mulSigmoid gates x in place by sigmoid(g).
func mulSigmoid(a *Args) error {
	x, g, r := f32s(a.Bufs[0]), f32s(a.Bufs[1]), req(a.Bufs[2])
	n := r.rows() * int(a.Push[0])
	for i := range n {
		x[i] *= sigmoid(g[i])
	}
	return nil
}
