package passes

import (
	"context"
	"fmt"

	"github.com/zrtdev/zrt/compiler/ir"
	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/format/support"
	"github.com/zrtdev/zrt/kernels"
)

// TP is the tensor-parallel split a unit is compiled for: rank Rank of
// Ranks. Ranks ≤ 1 is the whole model, and the shard pass leaves it be.
type TP struct {
	Rank, Ranks int
	// KV and KVWindow are the shares of the model's KV pages and of its
	// sliding-window ring (heads) one rank holds, set by the shard pass:
	// 1/Ranks where the KV heads divide, more where ranks replicate a KV
	// head (gemma4's global layers, of fewer KV heads than its window
	// layers, may hold more of theirs).
	KV, KVWindow Share
}

// Share is the fraction Num/Den of a whole; the zero Share is unset.
type Share struct{ Num, Den int }

// Of is b·Num/Den, or b where s is unset.
func (s Share) Of(b int64) int64 {
	if s.Den == 0 {
		return b
	}
	return b * int64(s.Num) / int64(s.Den)
}

// Split reports whether the unit is one rank of several.
func (t TP) Split() bool { return t.Ranks > 1 }

// The shard pass splits each graph for one rank of a tensor-parallel set
// (Megatron-LM's layout, as vLLM runs it):
//
//   - attention: the Q, K and V projections column-parallel by heads (a
//     rank holds n_head/R query heads and the KV heads they read: n_head_kv/R,
//     or one replicated KV head where there are fewer KV heads than ranks),
//     RoPE, norms, the KV write and attention over the rank's heads only,
//     so the KV pages of a rank hold its heads; the output projection
//     row-parallel (the rank's input columns) and ALL_REDUCE_SUM after it;
//   - FFN (dense, and each routed expert's, and a shared expert's): gate
//     and up column-parallel, the down projection row-parallel and
//     ALL_REDUCE_SUM after it. The split of the hidden width follows the
//     down projection's quantization blocks, so no block is cut: ranks
//     get whole blocks, as evenly as they divide (the 7B's 11 008 columns
//     of Q4_K, 43 blocks, split 22 + 21 over two ranks). An FFN with fewer
//     blocks than ranks is replicated;
//   - the LM head vocabulary-parallel (rank r computes the logits
//     [r·V/R, (r+1)·V/R)), then ALL_GATHER of the logits rows that the
//     step returns; the embedding is replicated.
//
// A Q|K|V or gate|up projection that is one tensor in the file (phi3's)
// is split like the separate ones: the rank's rows of each part, taken
// from the one tensor. A gated Q projection (Qwen3.5's: each head's Q,
// then its gate) is split by heads, which is one run of its columns; the
// halves' split and the gate's product follow the heads.
//
// Where the attention output's split would cut a block, the rank gathers
// the heads' output (ALL_GATHER) and computes the whole output projection
// instead. Everything else (norms, residuals, the router, recurrent
// layers) runs replicated on every rank. What is split is decided by
// operand roles and op kinds: a projection writing a register that an
// attention op reads as q (or a KV write as k, v), or that a gated
// activation reads, is column-parallel; the projection reading that
// activation (or the attention's output) is row-parallel. An op the pass
// does not know reading a split value is refused as unsupported, never
// run on a part as if it were the whole.
func shard(_ context.Context, u *Unit) error {
	if !u.TP.Split() {
		return nil
	}
	n := u.TP.Ranks
	if u.TP.Rank < 0 || u.TP.Rank >= n {
		return fmt.Errorf("rank %d of a set of %d", u.TP.Rank, n)
	}
	t, ok := kernels.LookupTarget(u.Target)
	if !ok || !t.Fuses("all_reduce_sum") || !t.Fuses("all_gather") {
		return &support.Error{What: "tensor parallelism on target", Value: u.Target, Detail: "its kernels have no collectives (all_reduce_sum, all_gather) yet"}
	}
	shares := map[ir.BufClass]Share{} // of each KV buffer class, over every variant
	for _, g := range u.Graphs {
		s := &sharder{g: g, rank: u.TP.Rank, n: n, split: map[int]split{}, planned: map[int]split{}, kv: map[ir.BufClass]Share{}}
		if err := s.run(); err != nil {
			return fmt.Errorf("variant %s: %w", g.Key, err)
		}
		for c, sh := range s.kv {
			if was, ok := shares[c]; ok && was.Num*sh.Den != sh.Num*was.Den {
				return fmt.Errorf("variant %s: ranks hold %d/%d of the KV cache, other variants %d/%d", g.Key, sh.Num, sh.Den, was.Num, was.Den)
			}
			shares[c] = sh
		}
	}
	st := &u.State
	scale := func(b int64, sh Share, what string) (int64, error) {
		if sh.Den > 0 && b*int64(sh.Num)%int64(sh.Den) != 0 {
			return 0, &support.Error{What: "tensor-parallel KV split", Value: fmt.Sprintf("%d/%d of %s", sh.Num, sh.Den, what),
				Detail: fmt.Sprintf("%d bytes do not divide into whole rank shares", b)}
		}
		return sh.Of(b), nil
	}
	if st.KVPageBytes > 0 {
		pages := st.KV / st.KVPageBytes
		page, err := scale(st.KVPageBytes, shares[ir.KV], "a KV page")
		if err != nil {
			return err
		}
		st.KVPageBytes, st.KV = page, pages*page
	}
	if st.KVWindow > 0 {
		w, err := scale(st.KVWindow, shares[ir.KVWindow], "the window ring")
		if err != nil {
			return err
		}
		st.KVWindow = w
	}
	u.TP.KV, u.TP.KVWindow = shares[ir.KV], shares[ir.KVWindow]
	return nil
}

// split is a rank's part of a register: columns [lo, hi) of each of
// groups runs of width columns (groups > 1 for the routed experts' rows:
// n_used experts of f columns each). heads is the part's heads, where
// the value is an attention's.
type split struct {
	lo, hi, width, groups int
	heads                 int
}

func (s split) cols() int { return s.groups * (s.hi - s.lo) }

// sharder rewrites one graph.
type sharder struct {
	g       *ir.Graph
	rank, n int
	// split holds the registers already split; planned those the
	// prescan decided to split, which their producer must split.
	split, planned map[int]split
	// kv is the share of each KV buffer class that the rank's heads hold.
	kv  map[ir.BufClass]Share
	out []ir.Inst
}

func unsupported(in *ir.Inst, detail string) error {
	return &support.Error{What: "tensor-parallel split of", Value: in.Op.String(), Detail: detail}
}

// headPart is rank r's heads [lo, hi) of n over ranks ranks, with q
// heads of a KV head group: query heads split evenly (they must
// divide); KV heads too where they divide, else (fewer KV heads than
// ranks, ranks a multiple of them) each rank holds the one KV head its
// query heads read, replicated on the ranks that share it.
func headPart(heads, rank, ranks int) (lo, hi int, ok bool) {
	switch {
	case heads%ranks == 0:
		return rank * heads / ranks, (rank + 1) * heads / ranks, true
	case ranks%heads == 0:
		j := rank * heads / ranks
		return j, j + 1, true
	}
	return 0, 0, false
}

// blockOf is the columns of one quantization block of t.
func blockOf(t ggml.Type) int {
	if info, ok := t.Info(); ok && info.BlockSize > 0 {
		return info.BlockSize
	}
	return 1
}

// prescan decides which registers are split: attention's q, k and v
// (from the attention and KV-write ops that read them) and the gated
// FFNs' gate, up and activation (split along the down projection's
// blocks, or left whole where they are fewer than the ranks).
func (s *sharder) prescan() error {
	g := s.g
	type attn struct{ heads, kvHeads, headDim int }
	byLayer := map[[2]int]attn{} // (kv buffer, layer) → its attention's heads
	for i := range g.Insts {
		in := &g.Insts[i]
		switch in.Op {
		case ir.FLASH_ATTN, ir.FLASH_ATTN_BATCHED, ir.FLASH_ATTN_EXT:
			a := attn{int(in.Attrs["n_head"]), int(in.Attrs["n_head_kv"]), int(in.Attrs["head_dim"])}
			if a.heads%s.n != 0 {
				return &support.Error{What: "tensor-parallel split of", Value: fmt.Sprintf("%d attention heads", a.heads),
					Detail: fmt.Sprintf("the query heads must divide over the %d ranks", s.n)}
			}
			klo, khi, ok := headPart(a.kvHeads, s.rank, s.n)
			if !ok {
				return &support.Error{What: "tensor-parallel split of", Value: fmt.Sprintf("%d KV heads", a.kvHeads),
					Detail: fmt.Sprintf("the KV heads must divide over the %d ranks, or the ranks over them", s.n)}
			}
			if a.kvHeads%s.n != 0 && (a.heads/a.kvHeads)%(a.heads/s.n) != 0 {
				return &support.Error{What: "tensor-parallel split of", Value: fmt.Sprintf("%d heads over %d KV heads", a.heads, a.kvHeads),
					Detail: fmt.Sprintf("a rank's query heads must share one KV head at %d ranks", s.n)}
			}
			byLayer[[2]int{buf(in, "kv"), int(in.Attrs["layer"])}] = a
			q := reg(in, "q")
			s.planned[q] = split{lo: s.rank * a.heads / s.n * a.headDim, hi: (s.rank + 1) * a.heads / s.n * a.headDim,
				width: a.heads * a.headDim, groups: 1, heads: a.heads / s.n}
			sh, c := Share{khi - klo, a.kvHeads}, g.Buffers[buf(in, "kv")].Class
			if was, ok := s.kv[c]; !ok {
				s.kv[c] = sh
			} else if sh.Num*was.Den != was.Num*sh.Den {
				return &support.Error{What: "tensor-parallel split of", Value: "attention layers of different KV head counts",
					Detail: "every layer of one KV cache must hold the same share of it on a rank"}
			}
		}
	}
	for i := range g.Insts {
		in := &g.Insts[i]
		switch in.Op {
		case ir.KV_WRITE, ir.KV_WRITE_BATCHED:
			a, ok := byLayer[[2]int{buf(in, "kv"), int(in.Attrs["layer"])}]
			if !ok {
				return unsupported(in, "a KV write of a layer no attention op reads")
			}
			klo, khi, _ := headPart(a.kvHeads, s.rank, s.n)
			for _, role := range []string{"k", "v"} {
				s.planned[reg(in, role)] = split{lo: klo * a.headDim, hi: khi * a.headDim, width: a.kvHeads * a.headDim, groups: 1, heads: khi - klo}
			}
		case ir.SWIGLU, ir.GEGLU, ir.MOE_SWIGLU, ir.MOE_SWIGLU_OAI:
			if err := s.planFFN(i); err != nil {
				return err
			}
		case ir.SPLIT_HALVES:
			// A gated Q projection (Qwen3.5's): each head's Q then its
			// gate, so the rank's heads of both are one run of columns.
			p, ok := s.planned[reg(in, "a")]
			if !ok {
				break // not attention's Q (a recurrent layer's, replicated)
			}
			s.planned[reg(in, "b")] = p
			s.planned[reg(in, "x")] = split{lo: 2 * p.lo, hi: 2 * p.hi, width: 2 * p.width, groups: 1, heads: p.heads}
		}
	}
	return nil
}

// planFFN plans the split of the gated activation at instruction i: its
// gate, up and output, along the blocks of the projection that reads it.
func (s *sharder) planFFN(i int) error {
	g, in := s.g, &s.g.Insts[i]
	act := reg(in, "y")
	var down *ir.Inst
	for j := i + 1; j < len(g.Insts) && down == nil; j++ {
		d := &g.Insts[j]
		if (d.Op == ir.MATMUL && reg(d, "x") == act) || (d.Op == ir.MOE_DOWN_ACC && reg(d, "h") == act) {
			down = d
		}
	}
	if down == nil {
		return nil // not an FFN's activation: replicated
	}
	width, groups := int(down.Attrs["k"]), 1
	if down.Op == ir.MOE_DOWN_ACC {
		width, groups = int(down.Attrs["f"]), int(in.Attrs["cols"])/int(down.Attrs["f"])
	}
	blk := blockOf(g.Buffers[buf(down, "w")].Type)
	if width%blk != 0 {
		return nil
	}
	units := width / blk
	if units < s.n {
		return nil // fewer blocks than ranks: the FFN runs whole on every rank
	}
	lo, hi := s.rank*units/s.n*blk, (s.rank+1)*units/s.n*blk
	p := split{lo: lo, hi: hi, width: width, groups: groups}
	for _, role := range []string{"gate", "up", "y"} {
		if r := reg(in, role); r >= 0 {
			s.planned[r] = p
		}
	}
	return nil
}

// slice adds (or finds) the rank's slice of weight buffer b: rows lo..hi
// of every block of period rows (cols false), or columns lo..hi of its
// rows of period columns, with dims its shape.
func (s *sharder) slice(in *ir.Inst, b int, lo, hi, period int, cols bool, dims []int64) (int, error) {
	return s.slices(in, b, []rowSpan{{lo, hi}}, period, cols, dims)
}

// rowSpan is the rows (or columns) [lo, hi) of a weight.
type rowSpan struct{ lo, hi int }

// slices is slice for several spans of each period, their parts one
// after another (a fused projection's Q, K and V parts, which differ in
// width where the KV heads are fewer).
func (s *sharder) slices(in *ir.Inst, b int, parts []rowSpan, period int, cols bool, dims []int64) (int, error) {
	w := s.g.Buffers[b]
	if w.Tensor == "" || len(w.Sources) > 0 {
		return 0, unsupported(in, fmt.Sprintf("weight %s is derived from several tensors", w.Name))
	}
	var srcs []string
	for _, p := range parts {
		srcs = append(srcs, ir.Source{Tensor: w.Tensor, Lo: int64(p.lo), Hi: int64(p.hi), Period: int64(period), Cols: cols}.String())
	}
	rows := int64(1)
	for _, d := range dims[1:] {
		rows *= d
	}
	rb, err := w.Type.RowBytes(dims[0])
	if err != nil {
		return 0, unsupported(in, fmt.Sprintf("weight %s: %v", w.Name, err))
	}
	return s.g.Buffer(ir.Buffer{Name: fmt.Sprintf("%s/tp%dof%d", w.Name, s.rank, s.n), Class: ir.Weight, Sources: srcs,
		Type: w.Type, Dims: dims, LayerClass: w.LayerClass, Bytes: rb * rows}), nil
}

// setBuf points role of in at buffer b; drop removes the operand.
func setBuf(in *ir.Inst, role string, b int, drop bool) {
	var reads []ir.Operand
	for _, o := range in.Reads {
		if o.Role == role && o.Kind == ir.BufOperand {
			if drop {
				continue
			}
			o.ID = b
		}
		reads = append(reads, o)
	}
	in.Reads = reads
}

// setReg points role of in (reads and writes) at register r.
func setReg(in *ir.Inst, role string, r int) {
	for _, l := range [][]ir.Operand{in.Reads, in.Writes} {
		for k := range l {
			if l[k].Role == role && l[k].Kind == ir.RegOperand {
				l[k].ID = r
			}
		}
	}
}

// cloneInst copies in with its own operand slices and attributes.
func cloneInst(in *ir.Inst) ir.Inst {
	c := *in
	c.Reads = append([]ir.Operand(nil), in.Reads...)
	c.Writes = append([]ir.Operand(nil), in.Writes...)
	c.Attrs = ir.Attrs{}
	for k, v := range in.Attrs {
		c.Attrs[k] = v
	}
	return c
}

func (s *sharder) emit(in ir.Inst) { s.out = append(s.out, in) }

// allReduce emits the sum over the ranks of register r.
func (s *sharder) allReduce(r, io int) {
	s.emit(ir.Inst{Op: ir.ALL_REDUCE_SUM, Reads: []ir.Operand{ir.R("x", r), ir.B("io", io)}, Writes: []ir.Operand{ir.R("x", r)},
		Attrs: ir.Attrs{"cols": float64(s.g.Regs[r].Cols)}})
}

func (s *sharder) run() error {
	if err := s.prescan(); err != nil {
		return err
	}
	g := s.g
	for i := range g.Insts {
		in := cloneInst(&g.Insts[i])
		if err := s.rewrite(&in); err != nil {
			return fmt.Errorf("inst %d (%s): %w", i, in.Op, err)
		}
	}
	for r, p := range s.split {
		g.Regs[r].Cols = p.cols()
	}
	g.Insts = s.out
	return nil
}

// rewrite emits in as the rank runs it.
func (s *sharder) rewrite(in *ir.Inst) error {
	g := s.g
	io := buf(in, "io")
	reads := func(role string) (split, bool) {
		p, ok := s.split[reg(in, role)]
		return p, ok
	}
	// keep marks in's outputs of roles as split like p.
	keep := func(p split, roles ...string) {
		for _, role := range roles {
			if r := reg(in, role); r >= 0 {
				s.split[r] = p
			}
		}
	}
	switch in.Op {
	case ir.MATMUL:
		y, x := reg(in, "y"), reg(in, "x")
		if p, ok := s.planned[y]; ok {
			return s.columnParallel(in, y, p)
		}
		if p, ok := s.split[x]; ok {
			return s.rowParallel(in, x, y, io, p)
		}
	case ir.RMS_NORM:
		if p, ok := reads("x"); ok {
			group := int(in.Attrs["group"])
			if group < 1 || p.lo%group != 0 || (p.hi-p.lo)%group != 0 {
				return unsupported(in, "a norm across the heads of a value split over ranks")
			}
			in.Attrs["cols"] = float64(p.cols())
			keep(p, "y")
		}
	case ir.ROPE, ir.ROPE_EXT:
		if p, ok := reads("x"); ok {
			in.Attrs["n_head"] = float64(p.heads)
		}
	case ir.SCALE, ir.ATTN_TEMP:
		if p, ok := reads("x"); ok {
			in.Attrs["cols"] = float64(p.cols())
		}
	case ir.KV_WRITE, ir.KV_WRITE_BATCHED:
		p, ok := reads("k")
		if pv, okv := reads("v"); !ok || !okv || pv != p {
			return unsupported(in, "K or V not split by the projections (a fused or shared K/V projection)")
		}
		in.Attrs["kv_dim"] = float64(p.cols())
	case ir.FLASH_ATTN, ir.FLASH_ATTN_BATCHED, ir.FLASH_ATTN_EXT:
		p, ok := reads("q")
		if !ok {
			return unsupported(in, "Q not split by its projection (a fused or gated Q projection)")
		}
		heads, kvHeads := int(in.Attrs["n_head"]), int(in.Attrs["n_head_kv"])
		klo, khi, _ := headPart(kvHeads, s.rank, s.n)
		in.Attrs["n_head"], in.Attrs["n_head_kv"] = float64(p.heads), float64(khi-klo)
		if b := buf(in, "sinks"); b >= 0 {
			lo := s.rank * heads / s.n
			w, err := s.slice(in, b, lo, lo+p.heads, heads, true, []int64{int64(p.heads)})
			if err != nil {
				return err
			}
			setBuf(in, "sinks", w, false)
		}
		keep(p, "y")
	case ir.SWIGLU, ir.GEGLU, ir.MOE_SWIGLU, ir.MOE_SWIGLU_OAI:
		p, ok := reads("gate")
		if pu, oku := reads("up"); ok != oku || ok && pu != p {
			return unsupported(in, "gate and up split differently")
		}
		if ok {
			in.Attrs["cols"] = float64(p.cols())
			keep(p, "y")
		}
	case ir.MOE_GATE_UP:
		gate := reg(in, "gate")
		p, ok := s.planned[gate]
		if !ok {
			break
		}
		if pu := s.planned[reg(in, "up")]; pu != p {
			return unsupported(in, "gate and up split differently")
		}
		for _, role := range []string{"w_gate", "w_up"} {
			b := buf(in, role)
			d := g.Buffers[b].Dims
			w, err := s.slice(in, b, p.lo, p.hi, p.width, false, []int64{d[0], int64(p.hi - p.lo), d[2]})
			if err != nil {
				return err
			}
			setBuf(in, role, w, false)
		}
		in.Attrs["f"] = float64(p.hi - p.lo)
		keep(p, "gate", "up")
	case ir.MOE_ADD_BIAS:
		if p, ok := reads("x"); ok {
			b := buf(in, "b")
			d := g.Buffers[b].Dims
			w, err := s.slice(in, b, p.lo, p.hi, p.width, true, []int64{int64(p.hi - p.lo), d[1]})
			if err != nil {
				return err
			}
			setBuf(in, "b", w, false)
			in.Attrs["f"] = float64(p.hi - p.lo)
		}
	case ir.MOE_DOWN_ACC:
		if p, ok := reads("h"); ok {
			return s.expertsDown(in, io, p)
		}
	case ir.SPLIT_HALVES:
		if p, ok := reads("x"); ok {
			q := s.planned[reg(in, "a")]
			if q.lo*2 != p.lo || q.hi*2 != p.hi {
				return unsupported(in, "halves of a value split otherwise than by heads")
			}
			in.Attrs["heads"] = float64(p.heads)
			keep(q, "a", "b")
		}
	case ir.MUL_SIGMOID:
		p, ok := reads("x")
		if pg, okg := reads("g"); ok != okg || ok && pg != p {
			return unsupported(in, "a value and its gate split differently")
		}
		if ok {
			in.Attrs["cols"] = float64(p.cols())
		}
	case ir.LM_HEAD:
		return s.vocabParallel(in, io)
	case ir.RMS_NORM_FUSED_QKV:
		return s.fusedQKV(in)
	case ir.RMS_NORM_FUSED_MLP_GATE_UP:
		return s.fusedGateUp(in)
	}
	for _, o := range in.Reads {
		if _, ok := s.split[o.ID]; ok && o.Kind == ir.RegOperand && !s.handles(in.Op) {
			return unsupported(in, fmt.Sprintf("it reads %s, which is split over the ranks", g.OperandName(o)))
		}
	}
	for _, o := range in.Writes {
		if _, ok := s.planned[o.ID]; ok && o.Kind == ir.RegOperand {
			if _, done := s.split[o.ID]; !done {
				return unsupported(in, fmt.Sprintf("it writes %s, which the ranks split, and cannot split its output", g.OperandName(o)))
			}
		}
	}
	s.emit(*in)
	return nil
}

// handles reports whether rewrite takes op's split reads into account.
func (s *sharder) handles(op ir.Op) bool {
	switch op {
	case ir.RMS_NORM, ir.ROPE, ir.ROPE_EXT, ir.SCALE, ir.ATTN_TEMP, ir.KV_WRITE, ir.KV_WRITE_BATCHED,
		ir.FLASH_ATTN, ir.FLASH_ATTN_BATCHED, ir.FLASH_ATTN_EXT, ir.SWIGLU, ir.GEGLU, ir.MOE_SWIGLU, ir.MOE_SWIGLU_OAI,
		ir.MOE_GATE_UP, ir.MOE_ADD_BIAS, ir.SPLIT_HALVES, ir.MUL_SIGMOID:
		return true
	}
	return false
}

// columnParallel emits a projection to the rank's output columns p of y.
func (s *sharder) columnParallel(in *ir.Inst, y int, p split) error {
	if _, ok := s.split[reg(in, "x")]; ok {
		return unsupported(in, "a projection of a split value to a split value")
	}
	b := buf(in, "w")
	d := s.g.Buffers[b].Dims
	w, err := s.slice(in, b, p.lo, p.hi, p.width, false, []int64{d[0], int64(p.hi - p.lo)})
	if err != nil {
		return err
	}
	setBuf(in, "w", w, false)
	if bias := buf(in, "bias"); bias >= 0 {
		bw, err := s.slice(in, bias, p.lo, p.hi, p.width, true, []int64{int64(p.hi - p.lo)})
		if err != nil {
			return err
		}
		setBuf(in, "bias", bw, false)
	}
	in.Attrs["n"] = float64(p.hi - p.lo)
	s.split[y] = p
	s.emit(*in)
	return nil
}

// fusedQKV emits a norm and Q|K|V projection of one tensor (the
// architecture's, as phi3 stores it) to the rank's heads of each: the
// weight's rows of the rank's Q part, then of its K and V parts, one
// buffer; its bias alike.
func (s *sharder) fusedQKV(in *ir.Inst) error {
	q, k, v := reg(in, "q"), reg(in, "k"), reg(in, "v")
	pq, okq := s.planned[q]
	pk, okk := s.planned[k]
	pv, okv := s.planned[v]
	if !okq || !okk || !okv || pk != pv {
		return unsupported(in, "Q, K or V not split by the attention that reads them")
	}
	if _, ok := s.split[reg(in, "x")]; ok {
		return unsupported(in, "a projection of a split value to a split value")
	}
	nq, nkv := int(in.Attrs["n_q"]), int(in.Attrs["n_kv"])
	parts := []rowSpan{{pq.lo, pq.hi}, {nq + pk.lo, nq + pk.hi}, {nq + nkv + pv.lo, nq + nkv + pv.hi}}
	cols := pq.hi - pq.lo + 2*(pk.hi-pk.lo)
	b := buf(in, "w_qkv")
	w, err := s.slices(in, b, parts, nq+2*nkv, false, []int64{s.g.Buffers[b].Dims[0], int64(cols)})
	if err != nil {
		return err
	}
	setBuf(in, "w_qkv", w, false)
	if bias := buf(in, "b_qkv"); bias >= 0 {
		bw, err := s.slices(in, bias, parts, nq+2*nkv, true, []int64{int64(cols)})
		if err != nil {
			return err
		}
		setBuf(in, "b_qkv", bw, false)
	}
	in.Attrs["n_q"], in.Attrs["n_kv"] = float64(pq.hi-pq.lo), float64(pk.hi-pk.lo)
	s.split[q], s.split[k], s.split[v] = pq, pk, pv
	s.emit(*in)
	return nil
}

// fusedGateUp emits a norm and gate|up projection of one tensor (the
// gate's rows, then the up's) to the rank's columns of each, where the
// FFN is split: rows lo..hi of both halves, one periodic slice.
func (s *sharder) fusedGateUp(in *ir.Inst) error {
	gate, up := reg(in, "gate"), reg(in, "up")
	p, ok := s.planned[gate]
	if !ok { // an FFN of fewer blocks than ranks runs whole on every rank
		s.emit(*in)
		return nil
	}
	if s.planned[up] != p || p.groups != 1 {
		return unsupported(in, "gate and up split differently")
	}
	if _, ok := s.split[reg(in, "x")]; ok {
		return unsupported(in, "a projection of a split value to a split value")
	}
	b := buf(in, "w_gate_up")
	w, err := s.slice(in, b, p.lo, p.hi, p.width, false, []int64{s.g.Buffers[b].Dims[0], int64(2 * (p.hi - p.lo))})
	if err != nil {
		return err
	}
	setBuf(in, "w_gate_up", w, false)
	in.Attrs["f"] = float64(p.hi - p.lo)
	s.split[gate], s.split[up] = p, p
	s.emit(*in)
	return nil
}

// rowParallel emits a projection of the rank's input columns p of x to
// a partial y, summed over the ranks; where p would cut a block of the
// weight's type, it gathers x whole and projects it whole instead.
func (s *sharder) rowParallel(in *ir.Inst, x, y, io int, p split) error {
	g := s.g
	b := buf(in, "w")
	d := g.Buffers[b].Dims
	blk := blockOf(g.Buffers[b].Type)
	if p.groups != 1 || p.lo%blk != 0 || p.hi%blk != 0 {
		if lo, hi := kernels.Part(p.width, s.rank, s.n); lo != p.lo || hi != p.hi || p.groups != 1 {
			return unsupported(in, "a gather of parts that are not an even split")
		}
		full := g.NewReg(g.Regs[x].Name+".gathered", g.Key.Rows, p.width, 4)
		s.emit(ir.Inst{Op: ir.ALL_GATHER, Reads: []ir.Operand{ir.R("x", x), ir.B("io", io)}, Writes: []ir.Operand{ir.R("y", full)},
			Attrs: ir.Attrs{"cols": float64(p.width), "by_slot": 0}})
		setReg(in, "x", full)
		s.emit(*in)
		return nil
	}
	w, err := s.slice(in, b, p.lo, p.hi, p.width, true, []int64{int64(p.hi - p.lo), d[1]})
	if err != nil {
		return err
	}
	setBuf(in, "w", w, false)
	if bias := buf(in, "bias"); bias >= 0 && s.rank != 0 {
		setBuf(in, "bias", -1, true) // the bias is added once, by rank 0
	}
	in.Attrs["k"] = float64(p.hi - p.lo)
	s.emit(*in)
	s.allReduce(y, io)
	return nil
}

// expertsDown emits the routed experts' down projection of the rank's
// part p of their activations: accumulated into a register of its own
// (each rank's is a partial sum), summed over the ranks, then added to
// the residual the unsplit op accumulates into.
func (s *sharder) expertsDown(in *ir.Inst, io int, p split) error {
	g := s.g
	b := buf(in, "w")
	d := g.Buffers[b].Dims
	w, err := s.slice(in, b, p.lo, p.hi, p.width, true, []int64{int64(p.hi - p.lo), d[1], d[2]})
	if err != nil {
		return err
	}
	setBuf(in, "w", w, false)
	if bias := buf(in, "bias"); bias >= 0 && s.rank != 0 {
		setBuf(in, "bias", -1, true)
	}
	in.Attrs["f"] = float64(p.hi - p.lo)
	x := reg(in, "y")
	cols := int(in.Attrs["n"])
	// Named after the activation (l3.moe_act → l3.moe_act.down), unique
	// per layer as the dumps need.
	part := g.NewReg(g.Regs[reg(in, "h")].Name+".down", g.Key.Rows, cols, 4)
	setReg(in, "y", part)
	s.emit(ir.Inst{Op: ir.ZERO, Reads: []ir.Operand{ir.B("io", io)}, Writes: []ir.Operand{ir.R("y", part)}, Attrs: ir.Attrs{"cols": float64(cols)}})
	s.emit(*in)
	s.allReduce(part, io)
	s.emit(ir.Inst{Op: ir.RESIDUAL, Reads: []ir.Operand{ir.R("x", x), ir.R("y", part), ir.B("io", io)}, Writes: []ir.Operand{ir.R("x", x)},
		Attrs: ir.Attrs{"cols": float64(cols)}})
	return nil
}

// vocabParallel emits the LM head over the rank's part of the
// vocabulary, then the gather of the logits rows the step returns.
func (s *sharder) vocabParallel(in *ir.Inst, io int) error {
	if _, ok := s.split[reg(in, "x")]; ok {
		return unsupported(in, "the LM head of a split value")
	}
	b := buf(in, "w")
	d := s.g.Buffers[b].Dims
	nv := int(in.Attrs["n_vocab"])
	lo, hi := kernels.Part(nv, s.rank, s.n)
	if hi == lo {
		return unsupported(in, fmt.Sprintf("a vocabulary of %d tokens over %d ranks", nv, s.n))
	}
	w, err := s.slice(in, b, lo, hi, nv, false, []int64{d[0], int64(hi - lo)})
	if err != nil {
		return err
	}
	setBuf(in, "w", w, false)
	in.Attrs["n_vocab"] = float64(hi - lo)
	s.emit(*in)
	logits := buf(in, "logits")
	s.emit(ir.Inst{Op: ir.ALL_GATHER, Reads: []ir.Operand{ir.B("x", logits), ir.B("io", io)}, Writes: []ir.Operand{ir.B("y", logits)},
		Attrs: ir.Attrs{"cols": float64(nv), "by_slot": 1}})
	return nil
}
