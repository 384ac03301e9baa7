package cpu

import (
	"math"
	"sync"
	"unsafe"

	"github.com/zrtdev/zrt/format/ggml"
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
//     The ranges are separate work items (flash-decoding: one long cache
//     on several threads) merged afterwards in range order; ggml's count
//     of ranges is its thread count, zrt's is fixed at the references'
//     (faSplitChunks), so the bits depend on no thread count.
//
// The cache view ggml attends over (n_kv) is the used length rounded up to
// a multiple of 256 (llama_kv_cache::get_n_kv); keys past a row's position
// are masked and contribute nothing, but n_kv decides the split and its
// chunk boundaries.
//
// ggml decides by the rows of the whole batch; zrt decides by the row's
// request, as the runtime marks it (kernels.RowPrompt, RowLongPrompt): a
// prompt of faTileQ tokens or more is tiled whichever chunks the
// scheduler cut it into, a shorter one runs one_chunk, and a decode row
// runs split or one_chunk by its cache view. So a request's bits depend
// neither on what it was batched with nor on how its prompt was chunked
// (batch invariance, seed 000 §18.3), and a prompt evaluated in one batch,
// as llama.cpp evaluates it, takes ggml's path.
const (
	faTileQ       = kernels.LongPromptRows // GGML_FA_TILE_Q
	faTileKV      = 64                     // GGML_FA_TILE_KV
	faF32Lanes    = 16                     // GGML_F32_EPR with AVX-512: the tiled path needs DV % 16 == 0
	faF16Step     = 64                     // GGML_F16_STEP with AVX-512 (F16 via F32 lanes)
	faKVPad       = 256                    // n_kv padding of llama_kv_cache::get_n_kv
	faSplitMinKV  = 512                    // the split-KV path needs n_kv >= 512
	faSplitChunks = 2                      // ggml splits by its thread count; the references ran with 2
)

// faUseSIMD selects the AVX-512 kernels (fattn_amd64.s) where the CPU has
// them; they give the same bits as the pure-Go code, which stays as the
// fallback and the tests' oracle. They need the head size to be a
// multiple of 16.
var faUseSIMD = faSIMDOK

// faOpts are the extensions of ggml_flash_attn_ext beyond the plain
// scaled softmax: soft-capping (0: none), a sliding window (0: none) and
// per-head sink logits (nil: none). flash_attn runs with none of them.
type faOpts struct {
	// scale multiplies each dot product; with softcap it is already
	// divided by softcap, as ggml_flash_attn_ext divides it.
	scale, softcap float32
	window         int
	sinks          []float32
}

// capMask finishes a tile's scaled scores as score does (soft-capping
// them) and masks its keys before the window's first, the first masked
// ones: they score -Inf and, weighing 0 in the accumulation, leave it as
// the Go path's skipping does. It returns the tile's maximum.
func (o *faOpts) capMask(kq []float32, masked int) float32 {
	tileMax := float32(math.Inf(-1))
	for tk := range kq {
		switch {
		case tk < masked:
			kq[tk] = float32(math.Inf(-1))
		case o.softcap != 0:
			kq[tk] = o.softcap * tanhf(kq[tk])
		}
		tileMax = max(tileMax, kq[tk])
	}
	return tileMax
}

// score is ggml's score of a raw dot product: scaled, then soft-capped.
func (o *faOpts) score(dot float32) float32 {
	s := dot * o.scale
	if o.softcap != 0 {
		s = o.softcap * tanhf(s)
	}
	return s
}

// first is the first key a query at pos sees: ggml's mask hides key p0
// from query p1 when p1 - p0 >= window (LLAMA_SWA_TYPE_STANDARD).
func (o *faOpts) first(pos int) int {
	if o.window > 0 {
		return max(0, pos-o.window+1)
	}
	return 0
}

// sink adds head h's sink, when there is one, to a softmax state (M, S)
// whose F32 accumulator is acc, as ggml does after the keys: a key with
// logit sinks[h] and no value.
func (o *faOpts) sink(h int, m, s float32, acc []float32) (float32, float32) {
	if o.sinks == nil {
		return m, s
	}
	x := o.sinks[h]
	ms, vs := float32(1), float32(1)
	if x > m {
		ms = expf(m - x)
		m = x
		for d := range acc {
			acc[d] *= ms
		}
	} else {
		vs = expf(x - m)
	}
	return m, s*ms + vs
}

// finish ends head h's softmax (M, S) over the F32 accumulator acc: it
// adds the head's sink, then writes V /= S to out, as a multiplication by
// 1/S (0 when S is 0).
func (o *faOpts) finish(h int, m, s float32, acc, out []float32) {
	_, s = o.sink(h, m, s, acc)
	sInv := float32(0)
	if s != 0 {
		sInv = 1 / s
	}
	for d := range out {
		out[d] = acc[d] * sInv
	}
}

// flashAttn attends each row's query heads over its slot's keys at
// positions 0..pos, by whichever of ggml's paths llama.cpp would take for
// the rows of the row's request (see above).
func flashAttn(c *kvCache, a *Args) error {
	o := faOpts{scale: math.Float32frombits(a.Spec[4])}
	if !c.t.IsF16() {
		return attendQuant(a, c, a.Bufs[0], a.Bufs[1], a.Bufs[2], a.Bufs[3], o)
	}
	return attend(a, a.Bufs[0], a.Bufs[1], a.Bufs[2], a.Bufs[3], o)
}

// flashAttnExt is flashAttn with soft-capping, a sliding window and
// sinks, as ggml_flash_attn_ext applies them on each of its paths.
func flashAttnExt(c *kvCache, a *Args) error {
	o := faOpts{scale: math.Float32frombits(a.Spec[4]), softcap: math.Float32frombits(a.Spec[5]), window: int(a.Spec[6])}
	if o.softcap != 0 {
		o.scale /= o.softcap
	}
	if a.Bufs[2] != nil {
		o.sinks = f32s(a.Bufs[2])[:a.Spec[1]]
	}
	if !c.t.IsF16() {
		return attendQuant(a, c, a.Bufs[0], a.Bufs[1], a.Bufs[3], a.Bufs[4], o)
	}
	return attend(a, a.Bufs[0], a.Bufs[1], a.Bufs[3], a.Bufs[4], o)
}

// attend is flash attention over the buffers q, kv, io and y.
func attend(a *Args, qb, kv, io, yb []byte, o faOpts) error {
	q, r, y := f32s(qb), req(io), f32s(yb)
	layer := int(a.Push[0])
	nLayer, nHead, nHeadKV, hd := int(a.Spec[0]), int(a.Spec[1]), int(a.Spec[2]), int(a.Spec[3])
	kvDim, group := nHeadKV*hd, nHead/nHeadKV
	// The path is the row's request's (its flags), never the step's: see
	// above.
	flag := func(i int, f uint32) bool { return r.row(i, kernels.IORowFlags)&f != 0 }
	tiled := func(i int) bool { return flag(i, kernels.RowLongPrompt) && hd%faF32Lanes == 0 }
	simd := faUseSIMD && hd%16 == 0
	pl := attendPlans.Get().(*attendPlan)
	rest, tiledRows, items, merges := pl.rest[:0], pl.tiled[:0], pl.items[:0], pl.merges[:0]
	defer func() {
		pl.rest, pl.tiled, pl.items, pl.merges = rest, tiledRows, items, merges
		attendPlans.Put(pl)
	}()
	// The SIMD tiled rows go through flashAttnTiled, the others below.
	if simd {
		for i := range r.rows() {
			if tiled(i) {
				tiledRows = append(tiledRows, i)
			} else {
				rest = append(rest, i)
			}
		}
		if len(tiledRows) > 0 {
			if err := flashAttnTiled(a, q, kv, r, y, tiledRows, layer, nLayer, nHead, nHeadKV, hd, &o); err != nil {
				return err
			}
		}
	} else {
		for i := range r.rows() {
			rest = append(rest, i)
		}
	}
	// Work items: one per (row, head), and faSplitChunks per (row, head)
	// of a split decode row (flash-decoding: a long cache's chunks run on
	// different threads). A split row's chunks leave their partial
	// softmax states in parts; a second loop merges each row's chunks in
	// chunk order, so the bits depend on neither the thread count nor
	// which thread ran which chunk.
	//
	// On the SIMD path a split row's query heads that share a KV head
	// (grouped-query attention) are one work item per chunk: they go
	// through the chunk's keys together, a tile at a time, so each key
	// and value is read from memory once for the group rather than once
	// a head (a long cache does not fit in the caches). Each head's
	// arithmetic, and so its bits, is the per-head item's. merges has an
	// item per split (row, head): where its chunks' parts start.
	nSplit := 0
	for _, i := range rest {
		pos := int(r.row(i, kernels.IORowPos))
		split := !tiled(i) && !flag(i, kernels.RowPrompt) && faNKV(pos) >= faSplitMinKV
		grouped := split && simd && group > 1
		for h := range nHead {
			if !split {
				items = append(items, faItem{row: int32(i), head: int32(h), chunk: -1})
				continue
			}
			merges = append(merges, faItem{row: int32(i), head: int32(h), part: int32(nSplit * faSplitChunks)})
			if !grouped || h%group == 0 {
				heads := int8(1)
				if grouped {
					heads = int8(min(group, 127))
				}
				for c := range faSplitChunks {
					items = append(items, faItem{row: int32(i), head: int32(h), chunk: int8(c), heads: heads, part: int32(nSplit*faSplitChunks + c)})
				}
			}
			nSplit++
		}
	}
	partLen := hd + 2   // M, S, then the chunk's F32 accumulator
	var parts []float32 // every part is written whole before merge reads it
	if nSplit > 0 {
		parts = f32s(a.work(4 * nSplit * faSplitChunks * partLen))
	}
	err := a.Pool.For(len(items), 1, func(_, lo, hi int) {
		w := getFaWork(hd)
		defer faWorkPool.Put(w)
		for _, it := range items[lo:hi] {
			i, h := int(it.row), int(it.head)
			slot, pos := int(r.row(i, kernels.IORowSlot)), int(r.row(i, kernels.IORowPos))
			kvh := h / group
			cache := func(which, t int) []uint16 {
				page, tok := r.page(slot, t), t%kernels.KVPageTokens
				return u16s(kv[kvOffset(page, layer, nLayer, kvDim, which, tok)+kvh*hd*2:])[:hd]
			}
			w.view = kvView{kv: kv, r: r, slot: slot, layer: layer, nLayer: nLayer, kvDim: kvDim, off: kvh * hd * 2, hd: hd}
			w.simd = simd
			qh := q[(i*nHead+h)*hd : (i*nHead+h+1)*hd]
			out := y[(i*nHead+h)*hd : (i*nHead+h+1)*hd]
			switch {
			case it.chunk >= 0 && it.heads > 1:
				heads := int(it.heads)
				w.groupChunk(q[(i*nHead+h)*hd:(i*nHead+h+heads)*hd], h, heads, pos, faNKV(pos), int(it.chunk), &o,
					func(g int) []float32 {
						at := int(it.part) + g*faSplitChunks // head h+g's part of this chunk
						return parts[at*partLen : (at+1)*partLen]
					})
			case it.chunk >= 0:
				p := parts[int(it.part)*partLen : int(it.part+1)*partLen]
				p[0], p[1] = w.splitChunk(qh, p[2:], h, pos, faNKV(pos), int(it.chunk), &o, cache)
			case tiled(i):
				w.tiled(qh, out, h, pos, &o, cache)
			default:
				toF16(w.q16, qh)
				m, s := w.oneChunk(o.first(pos), pos+1, &o, cache)
				for d, v := range w.acc16 {
					w.acc[d] = quant.F16ToF32(v)
				}
				o.finish(h, m, s, w.acc, out)
			}
		}
	})
	if err != nil || nSplit == 0 {
		return err
	}
	return a.Pool.For(nSplit, 1, func(_, lo, hi int) {
		w := getFaWork(hd)
		defer faWorkPool.Put(w)
		for _, it := range merges[lo:hi] {
			i, h := int(it.row), int(it.head)
			p := parts[int(it.part)*partLen : int(it.part+faSplitChunks)*partLen]
			w.merge(p, partLen, y[(i*nHead+h)*hd:(i*nHead+h+1)*hd])
		}
	})
}

// attendPlan holds attend's lists between calls (attendPlans): a serving
// step attends in every layer, and lists made anew each time were most of
// what a T-CPU server allocated (its collections then came every few
// steps, each slowing the step it fell in).
type attendPlan struct {
	rest, tiled   []int
	items, merges []faItem
}

var attendPlans = sync.Pool{New: func() any { return new(attendPlan) }}

// faItem is one work item of attend: query head head of row row, and
// for a split decode row one chunk of its cache and where its partial
// state goes (chunk -1: the whole row). heads > 1: the item is that
// chunk for heads query heads from head on, which share a KV head; head
// head+g's partial state goes g*faSplitChunks parts after part.
type faItem struct {
	row, head int32
	part      int32
	chunk     int8
	heads     int8
}

// faNKV is the cache view ggml attends over for a query at pos: the used
// length rounded up to faKVPad.
func faNKV(pos int) int { return max(faKVPad, (pos+1+faKVPad-1)/faKVPad*faKVPad) }

// kvView locates one slot's cached keys and values of one KV head in one
// layer.
type kvView struct {
	kv                         []byte
	r                          request
	slot, layer, nLayer, kvDim int
	off, hd                    int // the head's byte offset in a row, its size
}

// run returns the keys (which = 0) or values (1) of positions t..t+n-1,
// which must lie in one page, as the halves from key t's head on: row j
// starts at element j*kvDim. Slicing checks that they are all there.
func (v *kvView) run(which, t, n int) []uint16 {
	page, tok := v.r.page(v.slot, t), t%kernels.KVPageTokens
	off := kvOffset(page, v.layer, v.nLayer, v.kvDim, which, tok) + v.off
	return u16s(v.kv[off : off+((n-1)*v.kvDim+v.hd)*2])
}

// pageRun is how many positions from t on, up to hi, share t's page.
func pageRun(t, hi int) int {
	return min(hi, (t/kernels.KVPageTokens+1)*kernels.KVPageTokens) - t
}

var faWorkPool sync.Pool

// getFaWork returns a worker's scratch for head size hd.
func getFaWork(hd int) *faWork {
	w, _ := faWorkPool.Get().(*faWork)
	if w == nil || len(w.acc) != hd {
		w = &faWork{
			q16: make([]uint16, hd), qf: make([]float32, hd), acc16: make([]uint16, hd),
			acc: make([]float32, hd),
		}
	}
	return w
}

// faWork is one worker's scratch.
type faWork struct {
	q16   []uint16  // the query in F16
	qf    []float32 // q16 widened (the SIMD path)
	acc16 []uint16  // one_chunk's F16 accumulator (VKQ16)
	acc   []float32 // F32 accumulator (tiled, and the split path's reduction)
	kq    [faTileKV]float32

	// The SIMD path's state: whether it is on, the keys and values, and
	// the scores and (ms, vs) coefficients of a oneChunk range, and which
	// keys raised the running maximum.
	simd   bool
	view   kvView
	sc     []float32
	coef   []float32
	newMax []bool

	// groupChunk's state of each head of the group: the widened F16
	// queries, the F16 accumulators, the running maxima and sums.
	gq     []float32
	gacc   []uint16
	gm, gs []float32
	gcoef  []float32 // each head's (ms, vs) of a tile, faMadCoefStride bytes apart
	gsc    []float32 // each head's scores of a tile, faGroupTile apart
	gqp    []float32 // the queries packed for faDotF16KeysH
	// dotScratch is faDotF16KeysH's: 16 vectors of 16 floats a head.
	dotScratch [faDotMaxHeads * 16 * 16]float32
	pages      []int // byte offsets of a chunk's pages' keys
}

// oneChunk is the online-softmax loop of ggml's one_chunk kernel over keys
// [lo, hi), with w.q16 as the query. It leaves the unnormalized output in
// w.acc16 and returns the running maximum M and sum S. A range with no keys
// returns M = -Inf, S = 0 and a zero accumulator.
func (w *faWork) oneChunk(lo, hi int, o *faOpts, cache func(which, t int) []uint16) (m, s float32) {
	if w.simd {
		return w.oneChunkSIMD(lo, hi, o)
	}
	clear(w.acc16)
	m = float32(math.Inf(-1))
	for t := lo; t < hi; t++ {
		sc := o.score(dotF16(cache(0, t), w.q16))
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

// oneChunkSIMD is oneChunk with the AVX-512 kernels: all the range's
// scores first (they do not depend on the accumulator), then the running
// maximum and sum in Go (expf is libm's), then the F16 accumulator
// updates, page by page.
func (w *faWork) oneChunkSIMD(lo, hi int, o *faOpts) (m, s float32) {
	n := hi - lo
	if n <= 0 {
		clear(w.acc16)
		return float32(math.Inf(-1)), 0
	}
	w.scratch(n)
	sc, coef := w.sc[:n], w.coef[:2*n]
	faCvtRows(&w.qf[0], &w.q16[0], 0, w.view.hd, 1) // the F16 query, widened once
	w.scores(w.qf, w.q16, lo, hi, hi, sc)
	m, s = onlineCoefs(sc, coef, w.newMax[:n], float32(math.Inf(-1)), 0, o, true)
	clear(w.acc16)
	w.mad(w.acc16, lo, hi, coef)
	return m, s
}

// scratch makes room in w.sc, w.coef and w.newMax for n keys.
func (w *faWork) scratch(n int) {
	if cap(w.sc) < n {
		w.sc = make([]float32, n+n/2)
		w.coef = make([]float32, 2*len(w.sc))
		w.newMax = make([]bool, len(w.sc))
	}
}

// scores writes to sc the raw dot products (ggml_vec_dot_f16) of the
// query (q16 in F16, qf widened) with the view's keys lo..hi-1, page by
// page; the keys up to prefetchHi are prefetched a page ahead.
func (w *faWork) scores(qf []float32, q16 []uint16, lo, hi, prefetchHi int, sc []float32) {
	v := &w.view
	hd := v.hd
	np := hd &^ (faF16Step - 1)
	stride := v.kvDim * 2
	k := v.run(0, lo, pageRun(lo, hi))
	for t := lo; t < hi; {
		run := pageRun(t, hi)
		next := k // where the next page's keys are, to prefetch
		if t+run < prefetchHi {
			next = v.run(0, t+run, pageRun(t+run, prefetchHi))
		}
		out := sc[t-lo : t-lo+run]
		if np > 0 {
			faDotF16Keys(&k[0], stride, &qf[0], np, run, &out[0], kernels.KVPageTokens*stride, &next[0])
		}
		if np < hd {
			scoreTail(out, k, q16, np, v.kvDim)
		}
		t = t + run
		if t < hi {
			k = v.run(0, t, pageRun(t, hi))
		}
	}
}

// scoreTail finishes the dot products out of the keys at k (rows kvDim
// apart) with the F16 query q16 past their first np elements: ggml's
// scalar tail, summed in float64 after the groups.
func scoreTail(out []float32, k, q16 []uint16, np, kvDim int) {
	hd := len(q16)
	for j := range out {
		var sum float64
		if np > 0 {
			sum = float64(out[j])
		}
		kr := k[j*kvDim : j*kvDim+hd]
		for d := np; d < hd; d++ {
			sum += float64(quant.F16ToF32(kr[d]) * quant.F16ToF32(q16[d]))
		}
		out[j] = float32(sum)
	}
}

// mad adds the view's values lo..hi-1 to the F16 accumulator acc16 with
// their (ms, vs) coefficients coef (ggml_vec_scale_f16, ggml_vec_mad_f16),
// page by page.
func (w *faWork) mad(acc16 []uint16, lo, hi int, coef []float32) {
	v := &w.view
	for t := lo; t < hi; {
		run := pageRun(t, hi)
		vr := v.run(1, t, run)
		faMadF16(&acc16[0], &vr[0], v.kvDim*2, &coef[2*(t-lo)], run, v.hd)
		t += run
	}
}

// faGroupTile is how many keys groupChunk takes at a time: a tile's keys
// and values (32 KiB each at head size 64) stay in the core's cache
// while the query heads of the group go through them (the keys once for
// up to faDotMaxHeads heads, the values once for up to three). A multiple of
// 8 and of the page size, so that onlineCoefs takes the same keys
// through expfs as on the whole range (the same bits either way).
const faGroupTile = 256

// faMadCoefStride is the bytes from one head's coefficients to the next
// head's that faMadF16x2 and faMadF16x3 take (w.gcoef's layout: 2 floats
// a key of a tile); kernels/cpu/gen writes it into them.
const faMadCoefStride = 2 * faGroupTile * 4

// faDotMaxHeads is the most query heads one faDotF16KeysH call takes,
// and faDotMaxKeys the most keys (a butterfly's 16 lanes).
const (
	faDotMaxHeads = 6
	faDotMaxKeys  = 16
)

// groupChunk is splitChunk (SIMD) for heads query heads h0.. of one row
// that share the view's KV head, with q their queries (heads × hd): chunk
// c of the split keys, tile by tile, every head's online softmax and F16
// accumulator carried from tile to tile, which gives each head the bits
// of its own splitChunk. Head h0+g's M, S and F32 accumulator go to
// part(g). The chunk's pages are located once, not once a head.
func (w *faWork) groupChunk(q []float32, h0, heads, pos, nKV, c int, o *faOpts, part func(g int) []float32) {
	v := &w.view
	hd, stride := v.hd, v.kvDim*2
	chunk := (nKV + faSplitChunks - 1) / faSplitChunks
	lo := max(c*chunk, o.first(pos))
	hi := min(c*chunk+chunk, nKV, pos+1) // keys past pos are masked out
	if len(w.gq) < heads*hd {
		w.gq, w.gacc = make([]float32, heads*hd), make([]uint16, heads*hd)
		w.gm, w.gs = make([]float32, heads), make([]float32, heads)
	}
	gq, gacc := w.gq[:heads*hd], w.gacc[:heads*hd]
	clear(gacc)
	for g := range heads {
		toF16(w.q16, q[g*hd:(g+1)*hd])
		faCvtRows(&gq[g*hd], &w.q16[0], 0, hd, 1)
		w.gm[g], w.gs[g] = float32(math.Inf(-1)), 0
	}
	// Where each page's keys of this layer and KV head start (its values
	// follow the page's keys of the layer).
	p0 := lo / kernels.KVPageTokens
	w.pages = w.pages[:0]
	for t := p0 * kernels.KVPageTokens; t < hi; t += kernels.KVPageTokens {
		w.pages = append(w.pages, kvOffset(v.r.page(v.slot, t), v.layer, v.nLayer, v.kvDim, 0, 0)+v.off)
	}
	vRun := kernels.KVPageTokens * stride // keys to values, in bytes
	rows := func(t, n, which int) []uint16 {
		off := w.pages[t/kernels.KVPageTokens-p0] + which*vRun + t%kernels.KVPageTokens*stride
		return u16s(v.kv[off : off+((n-1)*v.kvDim+hd)*2])
	}
	np := hd &^ (faF16Step - 1)
	w.scratch(faGroupTile)
	if len(w.gcoef) < heads*2*faGroupTile {
		w.gcoef = make([]float32, heads*2*faGroupTile)
	}
	if len(w.gsc) < heads*faGroupTile {
		w.gsc = make([]float32, heads*faGroupTile)
	}
	// The queries packed for faDotF16KeysH: per batch of up to
	// faDotMaxHeads heads from g0 on (at g0*np), group by group, each
	// head's 64 floats of the group in turn.
	if len(w.gqp) < heads*np {
		w.gqp = make([]float32, heads*np)
	}
	for g0 := 0; g0 < heads; g0 += faDotMaxHeads {
		hn := min(faDotMaxHeads, heads-g0)
		for gi := range np / faF16Step {
			for hh := range hn {
				dst := w.gqp[g0*np+(gi*hn+hh)*faF16Step:]
				copy(dst[:faF16Step], gq[(g0+hh)*hd+gi*faF16Step:])
			}
		}
	}
	for t0 := lo; t0 < hi; t0 += faGroupTile {
		t1 := min(hi, t0+faGroupTile)
		n := t1 - t0
		// Every head's scores of the tile, each key row widened once for
		// up to faDotMaxHeads heads; head g's at w.gsc[g*faGroupTile:].
		for t := t0; t < t1 && np > 0; {
			run := min(pageRun(t, t1), faDotMaxKeys)
			k := rows(t, run, 0)
			next := k // the next page's keys, to prefetch
			if nt := (t/kernels.KVPageTokens + 1) * kernels.KVPageTokens; nt < hi {
				next = rows(nt, 1, 0)
			}
			for g0 := 0; g0 < heads; g0 += faDotMaxHeads {
				hn := min(faDotMaxHeads, heads-g0)
				faDotKeysH[hn-1](&k[0], stride, &w.gqp[g0*np], np, run, &w.gsc[g0*faGroupTile+t-t0], faGroupTile*4,
					vRun, &next[0], &w.dotScratch[0])
			}
			t += run
		}
		for g := range heads {
			sc := w.gsc[g*faGroupTile : g*faGroupTile+n]
			if np < hd {
				toF16(w.q16, gq[g*hd:(g+1)*hd]) // the scalar tail reads the F16 query (gq holds its exact values)
				for t := t0; t < t1; {
					run := pageRun(t, t1)
					scoreTail(sc[t-t0:t-t0+run], rows(t, run, 0), w.q16[:hd], np, v.kvDim)
					t += run
				}
			}
			coef := w.gcoef[g*2*faGroupTile : g*2*faGroupTile+2*n]
			w.gm[g], w.gs[g] = onlineCoefs(sc, coef, w.newMax[:n], w.gm[g], w.gs[g], o, true)
		}
		// The values, each page's rows widened once for up to three
		// heads at a time (faMadF16x3, x2; faMadF16 for one).
		for t := t0; t < t1; {
			run := pageRun(t, t1)
			vr := rows(t, run, 1)
			for g := 0; g < heads; {
				k := min(3, heads-g)
				if heads-g == 4 {
					k = 2 // 2+2 rather than 3+1
				}
				acc, coef := &gacc[g*hd], &w.gcoef[g*faMadCoefStride/4+2*(t-t0)]
				switch k {
				case 3:
					faMadF16x3(acc, hd*2, &vr[0], stride, coef, run, hd)
				case 2:
					faMadF16x2(acc, hd*2, &vr[0], stride, coef, run, hd)
				default:
					faMadF16(acc, &vr[0], stride, coef, run, hd)
				}
				g += k
			}
			t += run
		}
	}
	for g := range heads {
		p := part(g)
		for d, x := range gacc[g*hd : (g+1)*hd] {
			p[2+d] = quant.F16ToF32(x)
		}
		p[0], p[1] = w.gm[g], w.gs[g]
		if c == 0 {
			p[0], p[1] = o.sink(h0+g, p[0], p[1], p[2:])
		}
	}
}

// splitChunk is chunk c of ggml's split-KV path for one query row over
// nKV cached keys: the keys of one of faSplitChunks equal ranges (past
// pos masked) run through oneChunk, the first chunk with head h's sink.
// It leaves the chunk's F32 accumulator in part and returns its M and S
// (S = 0: no key of the chunk is seen).
func (w *faWork) splitChunk(q, part []float32, h, pos, nKV, c int, o *faOpts, cache func(which, t int) []uint16) (float32, float32) {
	toF16(w.q16, q)
	chunk := (nKV + faSplitChunks - 1) / faSplitChunks
	lo := c * chunk
	hi := min(lo+chunk, nKV, pos+1) // keys past pos are masked out
	mc, sc := float32(math.Inf(-1)), float32(0)
	if first := o.first(pos); max(lo, first) < hi {
		mc, sc = w.oneChunk(max(lo, first), hi, o, cache)
	} else {
		clear(w.acc16) // an all-masked chunk: S = 0
	}
	for d, v := range w.acc16 {
		part[d] = quant.F16ToF32(v)
	}
	if c == 0 {
		mc, sc = o.sink(h, mc, sc, part)
	}
	return mc, sc
}

// merge combines the faSplitChunks partial states of one split row,
// each partLen floats of parts (M, S, accumulator), in chunk order as
// ggml_flash_attn_ext_reduce_partials does, in F32, and writes the
// normalized output to out.
func (w *faWork) merge(parts []float32, partLen int, out []float32) {
	mf, sf := float32(math.Inf(-1)), float32(0)
	clear(w.acc)
	for c := range faSplitChunks {
		p := parts[c*partLen : (c+1)*partLen]
		mc, sc, part := p[0], p[1], p[2:]
		if sc == 0 {
			continue
		}
		mNew := max(mf, mc)
		scaleOld, scaleNew := expf(mf-mNew), expf(mc-mNew)
		for d := range w.acc {
			w.acc[d] = w.acc[d]*scaleOld + part[d]*scaleNew
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
func (w *faWork) tiled(q, out []float32, h, pos int, o *faOpts, cache func(which, t int) []uint16) {
	m, s := float32(math.Inf(-1)), float32(0)
	clear(w.acc)
	first := o.first(pos)
	for t0 := first / faTileKV * faTileKV; t0 <= pos; t0 += faTileKV {
		kq := &w.kq
		tileMax := float32(math.Inf(-1))
		for tk := range kq {
			t := t0 + tk
			if t > pos || t < first {
				kq[tk] = float32(math.Inf(-1))
				continue
			}
			var dot float32
			for d, kx := range cache(0, t) {
				dot = fma32(q[d], quant.F16ToF32(kx), dot)
			}
			kq[tk] = o.score(dot)
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
			if t0+tk < first {
				continue
			}
			for d, v := range cache(1, t0+tk) {
				w.acc[d] = fma32(quant.F16ToF32(v), p, w.acc[d])
			}
		}
	}
	o.finish(h, m, s, w.acc, out)
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

// faTileRows is how many query rows (times the KV head's group of query
// heads) share one conversion of a key/value tile on the SIMD tiled path.
const faTileRows = 32

// faTile is a worker's scratch on the SIMD tiled path.
type faTile struct {
	hd, group int
	kr, kt    []float32 // a tile's keys as float32 rows, and transposed (kt[d*64+k])
	vt        []float32 // a tile's values as float32 rows
	kq, kq2   [faTileKV]float32
	m, s      []float32 // per query vector of the block: running max and sum
	acc       []float32 // per query vector: the F32 accumulator
	pend      []faQuery // the query vectors of the tile's current slot, not yet taken
}

// faQuery is one query vector of a tile step: j its index in the block's
// m, s and acc, q the vector, and the keys it sees of the tile (nvalid,
// from its window's first key).
type faQuery struct {
	j, nvalid, first int
	q                []float32
}

var faTilePool sync.Pool

func getFaTile(hd, group int) *faTile {
	w, _ := faTilePool.Get().(*faTile)
	if w == nil || w.hd != hd || w.group != group {
		nq := faTileRows * group
		w = &faTile{hd: hd, group: group,
			kr: make([]float32, faTileKV*hd), kt: make([]float32, faTileKV*hd), vt: make([]float32, faTileKV*hd),
			m: make([]float32, nq), s: make([]float32, nq), acc: make([]float32, nq*hd)}
	}
	return w
}

// flashAttnTiled is the tiled path with the AVX-512 kernels. Work items
// are (block of faTileRows rows, KV head): per tile of faTileKV keys the
// item converts keys (transposed) and values to float32 once, and every
// query head of the block that maps to the KV head then takes ggml's tile
// step exactly as faWork.tiled does, row by row. Later blocks see more
// keys, so the loop's chunks are strides of items, not contiguous ranges.
func flashAttnTiled(a *Args, q []float32, kv []byte, r request, y []float32, rowIdx []int, layer, nLayer, nHead, nHeadKV, hd int, o *faOpts) error {
	rows := len(rowIdx)
	group := nHead / nHeadKV
	nBlocks := (rows + faTileRows - 1) / faTileRows
	items := nBlocks * nHeadKV
	threads := min(a.Pool.Threads(), items)
	return a.Pool.For(threads, 1, func(_, lo, hi int) {
		w := getFaTile(hd, group)
		defer faTilePool.Put(w)
		view := kvView{kv: kv, r: r, layer: layer, nLayer: nLayer, kvDim: nHeadKV * hd, hd: hd}
		for stride := lo; stride < hi; stride++ {
			for item := stride; item < items; item += threads {
				blk, kvh := item/nHeadKV, item%nHeadKV
				view.off = kvh * hd * 2
				w.block(q, y, r, &view, rowIdx[blk*faTileRows:min(rows, (blk+1)*faTileRows)], kvh, nHead, o)
			}
		}
	})
}

// block runs the query heads of KV head kvh of rows idx (at most
// faTileRows of them, each row's arithmetic its own).
func (w *faTile) block(q, y []float32, r request, view *kvView, idx []int, kvh, nHead int, o *faOpts) {
	hd, group := w.hd, w.group
	nq := len(idx) * group
	m, s, acc := w.m[:nq], w.s[:nq], w.acc[:nq*hd]
	for j := range m {
		m[j], s[j] = float32(math.Inf(-1)), 0
	}
	clear(acc)
	pos := func(i int) int { return int(r.row(i, kernels.IORowPos)) }
	slot := func(i int) int { return int(r.row(i, kernels.IORowSlot)) }
	maxPos, minFirst := 0, math.MaxInt
	for _, i := range idx {
		maxPos, minFirst = max(maxPos, pos(i)), min(minFirst, o.first(pos(i)))
	}
	// A row's tiles run from the one holding its first key (the Go path's
	// order): the tiles before its window it never visits.
	for t0 := minFirst / faTileKV * faTileKV; t0 <= maxPos; t0 += faTileKV {
		cur := -1
		for b, i := range idx {
			p := pos(i)
			first := o.first(p)
			if t0 > p || t0+faTileKV <= first {
				continue
			}
			if sl := slot(i); sl != cur {
				w.take(t0, o) // the previous slot's queries, before its tile is replaced
				// Convert the keys this slot's rows of the block need.
				hiPos := p
				for _, i2 := range idx {
					if slot(i2) == sl {
						hiPos = max(hiPos, pos(i2))
					}
				}
				view.slot, cur = sl, sl
				w.load(view, t0, min(faTileKV, hiPos+1-t0))
			}
			nvalid := min(faTileKV, p+1-t0)
			for g := range group {
				h := kvh*group + g
				w.pend = append(w.pend, faQuery{j: b*group + g, nvalid: nvalid, first: first, q: q[(i*nHead+h)*hd : (i*nHead+h+1)*hd]})
			}
		}
		w.take(t0, o)
	}
	for b, i := range idx {
		for g := range group {
			h := kvh*group + g
			j := b*group + g
			o.finish(h, m[j], s[j], acc[j*hd:(j+1)*hd], y[(i*nHead+h)*hd:(i*nHead+h+1)*hd])
		}
	}
}

// take runs ggml's tile step for the pending query vectors against the
// loaded tile (keys t0…), each with its own state, so in any order: two
// at a time where they see the same keys (faTileScores2 and faTileAcc2
// load each key and value once for both), else one. Each vector's
// arithmetic is the one-at-a-time kernels', so are its bits.
func (w *faTile) take(t0 int, o *faOpts) {
	hd, pend := w.hd, w.pend
	for len(pend) > 0 {
		a := pend[0]
		if len(pend) > 1 && pend[1].nvalid == a.nvalid {
			b := pend[1]
			ma, mb := faTileScores2(&a.q[0], &b.q[0], &w.kt[0], hd, o.scale, a.nvalid, &w.kq[0], &w.kq2[0])
			ma, msa := w.rescale(&a, ma, w.kq[:a.nvalid], t0, o)
			mb, msb := w.rescale(&b, mb, w.kq2[:b.nvalid], t0, o)
			sa, sb := faTileAcc2(&w.kq[0], &w.kq2[0], ma, mb, msa, msb, &w.acc[a.j*hd], &w.acc[b.j*hd], &w.vt[0], hd, a.nvalid)
			w.s[a.j] = float32(float64(w.s[a.j]) + sa)
			w.s[b.j] = float32(float64(w.s[b.j]) + sb)
			pend = pend[2:]
			continue
		}
		m := faTileScores(&a.q[0], &w.kt[0], hd, o.scale, a.nvalid, &w.kq[0])
		m, ms := w.rescale(&a, m, w.kq[:a.nvalid], t0, o)
		sum := faTileAcc(&w.kq[0], m, ms, &w.acc[a.j*hd], &w.vt[0], hd, a.nvalid)
		w.s[a.j] = float32(float64(w.s[a.j]) + sum)
		pend = pend[1:]
	}
	w.pend = w.pend[:0]
}

// rescale takes query vector a's scores kq of the tile at t0, whose
// maximum the kernel found to be tileMax, through the soft cap and its
// window's mask, and raises its running maximum to theirs: it returns the
// maximum and the factor its sum and accumulator take (1 if unchanged).
func (w *faTile) rescale(a *faQuery, tileMax float32, kq []float32, t0 int, o *faOpts) (m, ms float32) {
	if o.softcap != 0 || a.first > t0 {
		tileMax = o.capMask(kq, a.first-t0)
	}
	ms = 1
	if tileMax > w.m[a.j] {
		ms = expf(w.m[a.j] - tileMax)
		w.s[a.j] *= ms
		w.m[a.j] = tileMax
	}
	return w.m[a.j], ms
}

// load converts keys and values t0..t0+nv-1 of the view into the tile
// buffers; the transpose covers the whole tile (rows past nv are stale and
// masked out by the kernels).
func (w *faTile) load(view *kvView, t0, nv int) {
	hd, stride := w.hd, view.kvDim*2
	for t := t0; t < t0+nv; {
		run := pageRun(t, t0+nv)
		k, v := view.run(0, t, run), view.run(1, t, run)
		faCvtRows(&w.kr[(t-t0)*hd], &k[0], stride, hd, run)
		faCvtRows(&w.vt[(t-t0)*hd], &v[0], stride, hd, run)
		t += run
	}
	faTransposeTile(&w.kt[0], &w.kr[0], hd)
}

// toF16 rounds src to F16 into dst through the quantizer table: SIMD where
// the CPU has it, the same rounding as quant.F32ToF16 everywhere.
func toF16(dst []uint16, src []float32) {
	if len(src) == 0 {
		return
	}
	_ = dst[len(src)-1]
	b := unsafe.Slice((*byte)(unsafe.Pointer(&dst[0])), 2*len(src))
	if err := quant.QuantizeRow(ggml.F16, src, b); err != nil {
		panic(err) // sizes are the caller's own
	}
}
