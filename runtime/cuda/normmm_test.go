package cuda_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/format/lebin"
	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/kernels/quant"
)

// TestKernelNormMatmul holds rms_norm_matmul (the fuse pass's norm with
// one or two projections of one type, where a layer's Q, K and V do not
// share a type) to T-CPU within the matrix kernels' 1e-3, and to the
// kernels it stands for: with two outputs of f features each it is
// rms_norm_gate_up's body on the same concatenated weight, so its outputs
// must be that kernel's bits; with one (n2 = 0, y2 null) it is checked
// against T-CPU, and against the unfused rms_norm then matmul on the GPU
// within the same tolerance (the fused kernels take the norm's scale
// while quantizing the row, as rms_norm_qkv does). Decode steps of 1 and
// 2 rows (the matrix-vector kernel and its _rows entry), 16 rows (the
// tiles) and a 64-row prefill; k of one Q8_K block, of 768 and of the 7B's
// 4096; the weight types of Q4_K_M (Q4_K, Q6_K), Q8_0 and F16.
func TestKernelNormMatmul(t *testing.T) {
	g := newKGPU(t)
	rng := rand.New(rand.NewSource(41))
	const f = 150 // features of each output; 300 in all
	for _, tk := range []struct {
		typ ggml.Type
		k   int
	}{{ggml.Q4_K, 4096}, {ggml.Q6_K, 4096}, {ggml.Q4_K, 768}, {ggml.Q6_K, 256}, {ggml.Q8_0, 4096}, {ggml.F16, 768}} {
		typ, k := tk.typ, tk.k
		w := kweights(t, rng, typ, 2*f, k)
		wn := lebin.Float32Bytes(randF32(rng, k, 0.5, 1.5))
		eps := math.Float32bits(1e-5)
		for _, c := range []struct {
			rows    int
			prefill bool
		}{{1, false}, {2, false}, {16, false}, {64, true}} {
			rows := make([]krow, c.rows)
			for i := range rows {
				rows[i] = krow{pos: uint32(i), slot: uint32(i)}
			}
			io := ioTable(rows, c.rows, 1, nil)
			x := lebin.Float32Bytes(randF32(rng, c.rows*k, -2, 2))
			out := func() []byte { return make([]byte, c.rows*f*4) }
			what := fmt.Sprintf("%s k=%d, %d rows, prefill %v", typ, k, c.rows, c.prefill)

			// Two outputs: rms_norm_gate_up's bits, and T-CPU.
			nm := kernels.InstanceName(mustLookup(t, "rms_norm_matmul"), typ)
			bufs := [][]byte{x, wn, w, io, out(), out()}
			spec := []uint32{uint32(k), f, f, eps}
			got, want := g.runAs(nm, bufs, nil, spec, c.rows, c.prefill), cpuRun(t, nm, bufs, nil, spec)
			for o := 4; o < 6; o++ {
				compareF32(t, fmt.Sprintf("%s %s, output %d", nm, what, o-4), got[o], want[o], 1e-3)
			}
			gu := kernels.InstanceName(mustLookup(t, "rms_norm_gate_up"), typ)
			ref := g.runAs(gu, [][]byte{x, wn, w, io, out(), out()}, nil, []uint32{uint32(k), f, eps}, c.rows, c.prefill)
			for o := 4; o < 6; o++ {
				if !bytes.Equal(got[o], ref[o]) {
					t.Errorf("%s %s, output %d: not %s's bits", nm, what, o-4, gu)
				}
			}

			// One output: the first f rows of w, y2 null.
			w1 := w[:len(w)/2]
			bufs = [][]byte{x, wn, w1, io, out(), nil}
			spec = []uint32{uint32(k), f, 0, eps}
			got, want = g.runAs(nm, bufs, nil, spec, c.rows, c.prefill), cpuRun(t, nm, bufs, nil, spec)
			compareF32(t, fmt.Sprintf("%s %s, one output", nm, what), got[4], want[4], 1e-3)
			// The unfused pair on the GPU: rms_norm into n, then matmul.
			norm := g.runAs("rms_norm", [][]byte{x, wn, io, make([]byte, len(x))}, []uint32{uint32(k), uint32(k)}, []uint32{eps},
				c.rows, c.prefill)
			mm := kernels.InstanceName(mustLookup(t, "matmul"), typ)
			unf := g.runAs(mm, [][]byte{norm[3], w1, nil, io, out()}, []uint32{uint32(k), f}, nil, c.rows, c.prefill)
			compareF32(t, fmt.Sprintf("%s %s, one output against rms_norm + %s", nm, what, mm), got[4], unf[4], 1e-3)
		}
	}
}

// TestKernelGateUpSwiGLU holds rms_norm_gate_up_swiglu (one-row decode
// steps) to the pair it replaces on the GPU, rms_norm_gate_up then
// swiglu, bit for bit, and to T-CPU within the matrix kernels' 1e-3 on
// gate and up carried through silu(g)*u (compareSwiGLU): the 7B's FFN (k 4096, f
// 11 008: one warp a feature), a narrow one (f 150: the features split
// over 2 or 8 warps, whose sums meet in shared memory), Q4_K, Q6_K and
// Q8_0 on the matrix-vector kernel and F16 on the float path.
func TestKernelGateUpSwiGLU(t *testing.T) {
	g := newKGPU(t)
	rng := rand.New(rand.NewSource(43))
	eps := math.Float32bits(1e-5)
	io := ioTable([]krow{{pos: 5, slot: 0}}, 1, 1, nil)
	for _, c := range []struct {
		typ  ggml.Type
		k, f int
	}{{ggml.Q4_K, 4096, 11008}, {ggml.Q4_K, 4096, 150}, {ggml.Q6_K, 4096, 11008}, {ggml.Q8_0, 4096, 150}, {ggml.Q8_0, 768, 11008},
		{ggml.F16, 768, 150}} {
		w := kweights(t, rng, c.typ, 2*c.f, c.k)
		wn := lebin.Float32Bytes(randF32(rng, c.k, 0.5, 1.5))
		x := lebin.Float32Bytes(randF32(rng, c.k, -2, 2))
		out := func() []byte { return make([]byte, 4*c.f) }
		inst := kernels.InstanceName(mustLookup(t, "rms_norm_gate_up_swiglu"), c.typ)
		what := fmt.Sprintf("%s k=%d f=%d", inst, c.k, c.f)
		bufs := [][]byte{x, wn, w, io, out()}
		spec := []uint32{uint32(c.k), uint32(c.f), eps}
		got, want := g.runAs(inst, bufs, nil, spec, 1, false), cpuRun(t, inst, bufs, nil, spec)
		gu := kernels.InstanceName(mustLookup(t, "rms_norm_gate_up"), c.typ)
		cpair := cpuRun(t, gu, [][]byte{x, wn, w, io, out(), out()}, nil, spec)
		compareSwiGLU(t, what, got[4], want[4], cpair[4], cpair[5], 1e-3)
		pair := g.runAs(gu, [][]byte{x, wn, w, io, out(), out()}, nil, spec, 1, false)
		ref := g.runAs("swiglu", [][]byte{pair[4], pair[5], io, out()}, []uint32{uint32(c.f)}, nil, 1, false)
		if !bytes.Equal(got[4], ref[3]) {
			compareF32(t, what+" against rms_norm_gate_up then swiglu", got[4], ref[3], 0)
			t.Errorf("%s: not the bits of %s then swiglu", what, gu)
		}
	}
}

// compareSwiGLU holds got, silu(g)*u on the GPU, to want, T-CPU's, within
// the matrix kernels' tolerance tol carried through the product: g and u
// (T-CPU's gate and up) may each be off by tol*max(1, |x|), so an output
// may be off by |silu'(g)|*tol*max(1, |g|)*|u| + |silu(g)|*tol*max(1, |u|)
// (first order), plus tol*max(1, |want|) for the product's own rounding.
// A plain relative tolerance would not do: where g is near 0 and u is
// large (g 0.028, u 992 in the Q6_K case) the gate's allowed error alone
// moves the output by several percent.
func compareSwiGLU(t *testing.T, what string, got, want, gate, up []byte, tol float64) {
	t.Helper()
	gt, w, gs, us := lebin.Float32s(got), lebin.Float32s(want), lebin.Float32s(gate), lebin.Float32s(up)
	worst, at := 0.0, -1
	for i := range w {
		gv, uv := float64(gs[i]), float64(us[i])
		sig := 1 / (1 + math.Exp(-gv))
		dsilu := sig * (1 + gv*(1-sig))
		bound := tol*(math.Abs(dsilu)*math.Max(1, math.Abs(gv))*math.Abs(uv)+math.Abs(gv*sig)*math.Max(1, math.Abs(uv))) +
			tol*math.Max(1, math.Abs(float64(w[i])))
		d := math.Abs(float64(gt[i]) - float64(w[i]))
		if !(d <= bound) {
			t.Errorf("%s: element %d: got %v, want %v (gate %v, up %v: difference %.3g, bound %.3g)", what, i, gt[i], w[i], gs[i], us[i], d, bound)
			return
		}
		if d/bound > worst {
			worst, at = d/bound, i
		}
	}
	t.Logf("%s: worst difference %.3g of its bound (element %d)", what, worst, at)
}

// TestKernelQKVRopeKVWrite holds rms_norm_qkv_rope_kv_write (one-row
// decode steps, F16 cache, adjacent rotation pairs) to the pair it
// replaces on the GPU, rms_norm_qkv then rope_kv_write: the rotated Q and
// the whole cache, bit for bit; and to T-CPU within 1e-3 (Q, and the
// cache read as floats). The 7B's attention (32 heads of 128, k 4096,
// Q4_K), grouped heads with a partial rotation (Q8_0, Q6_K) and the float
// path (F16).
func TestKernelQKVRopeKVWrite(t *testing.T) {
	g := newKGPU(t)
	rng := rand.New(rand.NewSource(47))
	const nLayer, layer, slots, maxPages = 2, 1, 4, 8
	eps := math.Float32bits(1e-5)
	for _, c := range []struct {
		typ                    ggml.Type
		k, nHead, nKV, hd, rot int
	}{{ggml.Q4_K, 4096, 32, 32, 128, 128}, {ggml.Q8_0, 768, 8, 2, 64, 32}, {ggml.Q6_K, 512, 4, 4, 128, 128}, {ggml.F16, 256, 4, 2, 64, 64}} {
		nq, nkv := c.nHead*c.hd, c.nKV*c.hd
		w := kweights(t, rng, c.typ, nq+2*nkv, c.k)
		wn := lebin.Float32Bytes(randF32(rng, c.k, 0.5, 1.5))
		x := lebin.Float32Bytes(randF32(rng, c.k, -2, 2))
		io := ioTable([]krow{{pos: 37, slot: 1}}, slots, maxPages, rng.Perm(slots*maxPages))
		lay := kernels.KVLayout{Slots: nLayer, Width: nkv}
		kv := make([]byte, slots*maxPages*lay.PageBytes())
		for i := range kv {
			kv[i] = 0x3a // F16 0x3a3a: 0.78; every element the step does not write keeps it
		}
		rope := []uint32{nLayer, uint32(c.nHead), uint32(c.nKV), uint32(c.hd), uint32(c.rot), 0, fbits(10000), fbits(1)}
		inst := kernels.InstanceName(mustLookup(t, "rms_norm_qkv_rope_kv_write"), c.typ)
		what := fmt.Sprintf("%s k=%d %d/%d heads of %d", inst, c.k, c.nHead, c.nKV, c.hd)
		bufs := [][]byte{x, wn, w, io, make([]byte, 4*nq), kv}
		spec := append([]uint32{uint32(c.k), uint32(nq), uint32(nkv), eps}, rope...)
		got, want := g.runAs(inst, bufs, []uint32{layer}, spec, 1, false), cpuRun(t, inst, bufs, []uint32{layer}, spec)
		compareF32(t, what+" q", got[4], want[4], 1e-3)
		compareF32(t, what+" cache", halvesToF32(got[5]), halvesToF32(want[5]), 1e-3)

		qkv := kernels.InstanceName(mustLookup(t, "rms_norm_qkv"), c.typ)
		p := g.runAs(qkv, [][]byte{x, wn, w, nil, io, make([]byte, 4*nq), make([]byte, 4*nkv), make([]byte, 4*nkv)}, nil,
			[]uint32{uint32(c.k), uint32(nq), uint32(nkv), eps}, 1, false)
		ref := g.runAs("rope_kv_write", [][]byte{p[5], p[6], p[7], io, kv}, []uint32{layer}, rope, 1, false)
		if !bytes.Equal(got[4], ref[0]) {
			compareF32(t, what+" q against rms_norm_qkv then rope_kv_write", got[4], ref[0], 0)
			t.Errorf("%s: q is not the bits of %s then rope_kv_write", what, qkv)
		}
		if !bytes.Equal(got[5], ref[4]) {
			compareF32(t, what+" cache against rms_norm_qkv then rope_kv_write", halvesToF32(got[5]), halvesToF32(ref[4]), 0)
			t.Errorf("%s: the cache is not the bits of %s then rope_kv_write", what, qkv)
		}
	}
}

// halvesToF32 is b's F16 values as float32 bytes.
func halvesToF32(b []byte) []byte {
	out := make([]float32, len(b)/2)
	for i := range out {
		out[i] = quant.F16ToF32(binary.LittleEndian.Uint16(b[2*i:]))
	}
	return lebin.Float32Bytes(out)
}
