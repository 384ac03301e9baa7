package cpu

import (
	"fmt"
	"math"
	"sync"
	"unsafe"

	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/kernels/quant"
)

// Flash attention over a cache whose K or V rows are quantized (Q8_0), as
// ggml's CPU kernel computes it with llama.cpp -ctk q8_0 -ctv q8_0
// (ggml-cpu/ops.cpp, ggml_compute_forward_flash_attn_ext_f16). ggml takes
// its tiled and split-KV paths only for F32 or F16 caches whose K and V
// types agree, so every row of every batch runs the scalar
// ggml_compute_forward_flash_attn_ext_f16_one_chunk over the whole cache
// view, whatever the batch size; zrt does the same, so the batch-invariance
// argument of fattn.go holds trivially here. one_chunk with a quantized
// cache:
//
//   - the query is converted to K's vec_dot_type (quantize_row_q8_0 for a
//     Q8_0 K, F16 for an F16 K), and each score is K's vec_dot of the key
//     row with it (ggml_vec_dot_q8_0_q8_0: an exact integer sum per block,
//     scaled by the two blocks' f16 scales), then scaled and soft-capped;
//   - with a Q8_0 V the accumulator is F32 (VKQ32): on a new maximum it is
//     scaled by expf(Mold - M) (ggml_vec_scale_f32), then each value row is
//     dequantized to F32 (dequantize_row_q8_0) and added as an FMA times
//     expf(s - M) (ggml_vec_mad_f32); with an F16 V it is F16 (VKQ16) as
//     on the F16 path;
//   - S = S*ms + vs; sinks join after the keys; the output is the
//     accumulator times 1/S.
//
// Masked keys (past the row's position, before its window) are skipped as
// ggml skips keys whose mask is -Inf.
//
// Where the cache is rotated (kernels.KVTypes.RotK, RotV), llama.cpp's
// graph multiplies Q and K by a Walsh-Hadamard matrix before the cache
// (ggml_mul_mat_aux in llm_graph_context::build_attn), V too, and the
// attention output by the V matrix after it; the kernels here do the
// same inside: kv_write rotates K and V rows before quantizing them,
// attention rotates the query before converting it and its output after.

// kvCache is a KV-typed kernel's binding: the cache's types and the
// rotation matrices they call for.
type kvCache struct {
	t      kernels.KVTypes
	hk, hv []float32 // Walsh-Hadamard matrices of RotK and RotV (nil: none)
}

// newKVCache binds the cache types t.
func newKVCache(t kernels.KVTypes) *kvCache {
	c := &kvCache{t: t}
	if t.RotK > 0 {
		c.hk = hadamard(t.RotK)
	}
	if t.RotV > 0 {
		c.hv = hadamard(t.RotV)
	}
	return c
}

// hadamard is llama.cpp's orthonormal Walsh-Hadamard matrix of order n (a
// power of two), ggml_gen_hadamard: entries ±1/sqrtf(n), its own inverse.
func hadamard(n int) []float32 {
	h := make([]float32, n*n)
	h[0] = float32(1 / float64(sqrtf(float32(n))))
	for s := 1; s < n; s *= 2 {
		for i := range s {
			for j := range s {
				v := h[i*n+j]
				h[(i+s)*n+j], h[i*n+j+s], h[(i+s)*n+j+s] = v, v, -v
			}
		}
	}
	return h
}

// rotate replaces each run of n values of x by the matrix h (n×n) times
// it, as llama.cpp's ggml_mul_mat(h, x) computes it in F32 on an AVX-512
// CPU (llamafile's tinyBLAS): per output, 16 lanes of FMAs over the run in
// order, then _mm512_reduce_add_ps (faRotate where the CPU has AVX-512).
// tmp holds n values.
func rotate(h []float32, n int, x, tmp []float32) {
	_ = h[n*n-1]
	for o := 0; o+n <= len(x); o += n {
		run := x[o : o+n]
		copy(tmp[:n], run)
		if faUseSIMD && n%16 == 0 {
			faRotate(&h[0], n, &tmp[0], &run[0])
			continue
		}
		for i := range n {
			row := h[i*n : (i+1)*n]
			var acc [16]float32
			for k := 0; k < n; k += 16 {
				for l := range acc {
					acc[l] = fma32(row[k+l], tmp[k+l], acc[l])
				}
			}
			run[i] = reduceAdd16(&acc)
		}
	}
}

// faQuantRun is how many keys (whole pages) faQuantWork.attend scores
// before it takes their softmax coefficients together: faCoefs costs less
// a key over several blocks of 16 than over one page's.
const faQuantRun = 8 * kernels.KVPageTokens

// faQuantWork is one worker's scratch on the quantized-cache path.
type faQuantWork struct {
	hd     int
	kt     kernels.KVTypes
	qr     []float32 // the item's queries, rotated
	tmp    []float32 // a run being rotated
	view   quantView // the keys and values being attended
	sc     [faQuantRun]float32
	coef   [2 * faQuantRun]float32 // a run's (ms, vs) pairs
	newMax [faQuantRun]bool
	heads  []faQuantHead // the item's query heads
	v32    []float32     // one value row in F32
	k32    []float32     // one FP8 key row in F32
}

// faQuantHead is one query head's state in faQuantWork.attend.
type faQuantHead struct {
	q     []float32 // the query (rotated)
	qq    []byte    // the query in K's vec_dot_type
	q16   []uint16  // the query in F16 (an F16 K): qq's bytes
	acc   []float32 // VKQ32
	acc16 []uint16  // VKQ16 (an F16 V)
	m, s  float32   // the running maximum and sum
}

var faQuantPool sync.Pool

// getFaQuantWork returns a worker's scratch for items of heads query
// heads of size hd, over a cache of types kt.
func getFaQuantWork(hd, heads int, kt kernels.KVTypes) *faQuantWork {
	w, _ := faQuantPool.Get().(*faQuantWork)
	if w == nil || w.hd != hd || w.kt != kt {
		w = &faQuantWork{hd: hd, kt: kt, tmp: make([]float32, hd), v32: make([]float32, hd), k32: make([]float32, hd)}
	}
	if len(w.heads) < heads {
		w.qr = make([]float32, heads*hd)
		for range heads - len(w.heads) {
			qq := make([]byte, max(kernels.KVRowBytes(kt.K, hd), 2*hd))
			w.heads = append(w.heads, faQuantHead{qq: qq, q16: unsafe.Slice((*uint16)(unsafe.Pointer(&qq[0])), hd),
				acc: make([]float32, hd), acc16: make([]uint16, hd)})
		}
	}
	return w
}

// faQuantHeads is how many query heads of a KV head group each work item
// of attendQuant takes: the whole group, which then reads each key and
// value once for all its heads (the rest find them in the core's caches),
// unless that leaves fewer than faQuantItems items a thread; then halves
// of it, as long as it splits evenly.
func faQuantHeads(rows, nHead, group, threads int) int {
	g := group
	for g%2 == 0 && rows*nHead/g < faQuantItems*threads {
		g /= 2
	}
	return g
}

// faQuantItems is the work items a thread should have at least, so that
// the threads finish together.
const faQuantItems = 2

// attendQuant is flash attention over the buffers q, kv, io and y of a
// cache c (not all F16).
func attendQuant(a *Args, c *kvCache, qb, kv, io, yb []byte, o faOpts) error {
	kt := c.t
	q, r, y := f32s(qb), req(io), f32s(yb)
	layer := int(a.Push[0])
	nLayer, nHead, nHeadKV, hd := int(a.Spec[0]), int(a.Spec[1]), int(a.Spec[2]), int(a.Spec[3])
	if nHeadKV < 1 || nHead%nHeadKV != 0 {
		return fmt.Errorf("cpu: flash attention: %d query heads over %d KV heads", nHead, nHeadKV)
	}
	if err := checkKVWidth(kt, hd); err != nil {
		return err
	}
	if hd%max(1, kt.RotK) != 0 || hd%max(1, kt.RotV) != 0 {
		return fmt.Errorf("cpu: flash attention: heads of %d are no whole runs of the cache's rotations (%d, %d)", hd, kt.RotK, kt.RotV)
	}
	kvDim, group := nHeadKV*hd, nHead/nHeadKV
	lay := kernels.KVLayout{Slots: nLayer, Width: kvDim, Types: kt}
	views := make([]quantView, nHeadKV)
	for kvh := range views {
		views[kvh] = newQuantView(kv, r, lay, layer, kvh, hd)
	}
	// An item is heads query heads of one row, which share a KV head.
	heads := faQuantHeads(r.rows(), nHead, group, a.Pool.Threads())
	perRow := nHead / heads
	return a.Pool.For(r.rows()*perRow, 1, func(_, lo, hi int) {
		w := getFaQuantWork(hd, heads, kt)
		defer faQuantPool.Put(w)
		for item := lo; item < hi; item++ {
			i, h := item/perRow, item%perRow*heads
			slot, pos := int(r.row(i, kernels.IORowSlot)), int(r.row(i, kernels.IORowPos))
			w.view = views[h/group]
			w.view.slot = slot
			qs := q[(i*nHead+h)*hd : (i*nHead+h+heads)*hd]
			if c.hk != nil {
				qs = w.qr[:heads*hd]
				copy(qs, q[(i*nHead+h)*hd:])
				for g := range heads {
					rotate(c.hk, kt.RotK, qs[g*hd:(g+1)*hd], w.tmp)
				}
			}
			out := y[(i*nHead+h)*hd : (i*nHead+h+heads)*hd]
			w.attend(qs, out, h, heads, o.first(pos), pos+1, &o)
			if c.hv != nil {
				for g := range heads {
					rotate(c.hv, kt.RotV, out[g*hd:(g+1)*hd], w.tmp)
				}
			}
		}
	})
}

// quantView locates one slot's cached rows of one KV head in one layer,
// with kernels.KVLayout's offsets worked out once (they are per page
// otherwise, twice a page of every query head).
type quantView struct {
	kv           []byte
	r            request
	slot         int
	pageBytes    int    // a page's bytes
	base         [2]int // K's (0) and V's (1) rows of the layer and head, from a page's start
	stride, head [2]int // one row's bytes, and the head's bytes in it
}

// newQuantView is the view of KV head kvh of layer in a cache laid out
// as lay, for heads of hd elements; its slot is set per query.
func newQuantView(kv []byte, r request, lay kernels.KVLayout, layer, kvh, hd int) quantView {
	v := quantView{kv: kv, r: r, pageBytes: lay.PageBytes()}
	for which, typ := range [2]ggml.Type{lay.Types.K, lay.Types.V} {
		v.head[which] = kernels.KVRowBytes(typ, hd)
		v.stride[which] = kernels.KVRowBytes(typ, lay.Width)
		v.base[which] = lay.Offset(0, layer, which, 0) + kvh*v.head[which]
	}
	return v
}

// run returns the bytes from the head's K (which = 0) or V (1) row at
// position t on, through the row of position t+n-1 (all in t's page), and
// the stride from one row to the next.
func (v *quantView) run(which, t, n int) ([]byte, int) {
	off := v.r.page(v.slot, t)*v.pageBytes + v.base[which] + t%kernels.KVPageTokens*v.stride[which]
	return v.kv[off : off+(n-1)*v.stride[which]+v.head[which]], v.stride[which]
}

// attend is one_chunk for the query heads h… h+heads-1 (queries q, one
// after another; outputs out, likewise), which share w.view's KV head,
// over keys [lo, hi), faQuantRun keys at a time: for each head in turn
// the run's scores a page at a time (one multi-row dot product a page;
// q8_0 × q8_0 is symmetric, so the query may stand as the "weight" row),
// then their softmax coefficients (onlineCoefs, in ggml's key order),
// then the value updates a page at a time in one kernel call each
// (madQ8Rows, or faMadF16 for an F16 V). Each key meets the operations of
// one_chunk's loop in its order for every head, as if the head were
// alone; the run's keys and values come from memory once for all of them.
func (w *faQuantWork) attend(q, out []float32, h, heads, lo, hi int, o *faOpts) {
	hd, kt, v := w.hd, w.kt, &w.view
	f32V := kt.V != ggml.F16
	simd := faUseSIMD && hd%16 == 0
	hs := w.heads[:heads]
	for g := range hs {
		st := &hs[g]
		st.q = q[g*hd : (g+1)*hd]
		switch kt.K {
		case ggml.Q8_0:
			if err := quant.QuantizeRow(ggml.Q8_0, st.q, st.qq); err != nil {
				panic(err) // hd is a whole number of blocks (checked)
			}
		case ggml.F16:
			toF16(st.q16, st.q)
		}
		clear(st.acc)
		clear(st.acc16)
		st.m, st.s = float32(math.Inf(-1)), 0
	}
	for t := lo; t < hi; {
		end := min(hi, t+faQuantRun)
		n := end - t
		for g := range hs {
			st := &hs[g]
			for u := t; u < end; { // the run's scores, a page at a time
				k := pageRun(u, end)
				kb, ks := v.run(0, u, k)
				sc := w.sc[u-t : u-t+k]
				switch kt.K {
				case ggml.Q8_0:
					quant.VecDotRows(ggml.Q8_0, hd, st.qq, kb, ks, k, sc)
				case kernels.FP8E4M3:
					dotFP8Rows(sc, st.q, kb, ks, w.k32)
				default:
					for j := range sc {
						sc[j] = dotF16(u16s(kb[j*ks:])[:hd], st.q16)
					}
				}
				u += k
			}
			st.m, st.s = onlineCoefs(w.sc[:n], w.coef[:2*n], w.newMax[:n], st.m, st.s, o, simd)
			for u := t; u < end; { // then its values, a page at a time
				k := pageRun(u, end)
				vb, vs0 := v.run(1, u, k)
				coef := w.coef[2*(u-t) : 2*(u-t+k)]
				switch {
				case kt.V == kernels.FP8E4M3:
					madFP8Rows(st.acc, vb, vs0, coef, w.v32)
				case f32V && simd:
					faMadQ8(&st.acc[0], &vb[0], vs0, &coef[0], k, hd)
				case f32V:
					madQ8Rows(st.acc, vb, vs0, coef, w.v32)
				case simd:
					faMadF16(&st.acc16[0], (*uint16)(unsafe.Pointer(&vb[0])), vs0, &coef[0], k, hd)
				default:
					madF16Rows(st.acc16, vb, vs0, coef)
				}
				u += k
			}
		}
		t = end
	}
	for g := range hs {
		st := &hs[g]
		if !f32V {
			for d, x := range st.acc16 {
				st.acc[d] = quant.F16ToF32(x)
			}
		}
		o.finish(h+g, st.m, st.s, st.acc, out[g*hd:(g+1)*hd])
	}
}

// onlineCoefs is one_chunk's online softmax over the raw dot products sc
// of a run of keys, from the running maximum m and sum s: it writes each
// key's (ms, vs) to coef (ms rescales the accumulator before the key's
// value joins it times vs) and returns the new m and s. The running
// maximum is sequential but the exponentials are not: the first pass
// leaves each key's argument in sc (clobbering it), the exponentials are
// taken together (expfs, libm's expf in AVX-512 lanes, when simd), and
// the second pass forms (ms, vs) and S in ggml's order. With simd and no
// soft-capping whole blocks of 16 keys go through faCoefs instead, which
// does all three for a block at once with the same operations (sc is
// then left as it was, or clobbered past the blocks). newMax is scratch
// of len(sc).
func onlineCoefs(sc, coef []float32, newMax []bool, m, s float32, o *faOpts, simd bool) (float32, float32) {
	if simd && o.softcap == 0 && len(sc) >= 16 {
		// faCoefs takes whole blocks of 16 keys; the rest continue here
		// from its M and S, which is the same sequence of operations.
		n16 := len(sc) &^ 15
		st := [3]float32{m, s, o.scale}
		faCoefs(&sc[0], &coef[0], n16/16, &st)
		m, s = st[0], st[1]
		sc, coef, newMax = sc[n16:], coef[2*n16:], newMax[n16:]
	}
	n := len(sc)
	for j, x := range sc {
		x = o.score(x)
		if newMax[j] = x > m; newMax[j] {
			sc[j], m = m-x, x
		} else {
			sc[j] = x - m
		}
	}
	n8 := 0
	if simd {
		n8 = n &^ 7
	}
	if n8 > 0 {
		expfs(&sc[0], n8)
	}
	for j := n8; j < n; j++ {
		sc[j] = expf(sc[j])
	}
	for j, e := range sc {
		ms, vs := float32(1), e
		if newMax[j] {
			ms, vs = e, 1
		}
		coef[2*j], coef[2*j+1] = ms, vs
		s = fma32(s, ms, vs)
	}
	return m, s
}

// dotFP8Rows is the scores of the query q (F32) with a run of FP8 key
// rows at kb (stride bytes apart): each row decoded to F32 (k32, scratch
// of len(q)) and the products summed in F32 in order. FP8 is zrt's own
// cache (llama.cpp has none), so this is the reference the T-CUDA
// kernels are held to, not a copy of ggml's arithmetic.
func dotFP8Rows(sc, q []float32, kb []byte, stride int, k32 []float32) {
	for j := range sc {
		if err := quant.DequantizeFP8Row(kb[j*stride:], k32); err != nil {
			panic(err) // hd is a whole number of blocks (checked)
		}
		var s float32
		for d, x := range k32 {
			s = fma32(q[d], x, s)
		}
		sc[j] = s
	}
}

// madFP8Rows is madQ8Rows for FP8 value rows: acc *= ms when ms != 1,
// then the row decoded to F32 joins acc times vs.
func madFP8Rows(acc []float32, vb []byte, stride int, coef, v32 []float32) {
	for j := 0; 2*j < len(coef); j++ {
		ms, vs := coef[2*j], coef[2*j+1]
		if ms != 1 {
			for d := range acc {
				acc[d] *= ms
			}
		}
		if err := quant.DequantizeFP8Row(vb[j*stride:], v32); err != nil {
			panic(err) // hd is a whole number of blocks (checked)
		}
		for d, x := range v32 {
			acc[d] = fma32(x, vs, acc[d])
		}
	}
}

// madQ8Rows is faMadQ8 in Go (the fallback and the tests' oracle): for
// each key j of the run of Q8_0 value rows at vb (stride bytes apart),
// acc *= ms when ms != 1 (ggml_vec_scale_f32), then the row dequantized
// (dequantize_row_q8_0) joins acc times vs (ggml_vec_mad_f32). v32 is
// scratch of len(acc).
func madQ8Rows(acc []float32, vb []byte, stride int, coef, v32 []float32) {
	for j := 0; 2*j < len(coef); j++ {
		ms, vs := coef[2*j], coef[2*j+1]
		if ms != 1 {
			for d := range acc {
				acc[d] *= ms
			}
		}
		dequantQ8Row(vb[j*stride:], v32)
		for d, x := range v32 {
			acc[d] = fma32(x, vs, acc[d])
		}
	}
}

// madF16Rows is faMadF16 in Go over a run of F16 value rows at vb (stride
// bytes apart): the F16 accumulator (VKQ16) rescaled by ms when ms != 1,
// then each value times vs added with one FMA, rounded to F16 at every
// step (ggml_vec_scale_f16, ggml_vec_mad_f16).
func madF16Rows(acc16 []uint16, vb []byte, stride int, coef []float32) {
	for j := 0; 2*j < len(coef); j++ {
		ms, vs := coef[2*j], coef[2*j+1]
		if ms != 1 {
			for d, x := range acc16 {
				acc16[d] = quant.F32ToF16(quant.F16ToF32(x) * ms)
			}
		}
		for d, x := range u16s(vb[j*stride:])[:len(acc16)] {
			acc16[d] = quant.F32ToF16(fma32(quant.F16ToF32(x), vs, quant.F16ToF32(acc16[d])))
		}
	}
}

// dequantQ8Row is dequantize_row_q8_0 of len(dst) values at b: each
// block's int8s times its f16 scale.
func dequantQ8Row(b []byte, dst []float32) {
	for blk := 0; blk < len(dst)/32; blk++ {
		p := b[blk*34 : blk*34+34]
		d := quant.F16ToF32(uint16(p[0]) | uint16(p[1])<<8)
		y := dst[blk*32 : blk*32+32]
		for j := range y {
			y[j] = float32(int8(p[2+j])) * d
		}
	}
}
