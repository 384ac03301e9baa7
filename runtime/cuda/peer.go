package cuda

import (
	"bytes"
	"encoding/binary"
	"fmt"
	goruntime "runtime"
	"slices"
	"strings"

	kcuda "github.com/zrtdev/zrt/kernels/cuda"
	"github.com/zrtdev/zrt/runtime/cuda/driver"
)

// A rank of a tensor-parallel set runs the small collectives of a step —
// a decode step's all-reduces of a few KB, and the logits' gather of the
// rows that want logits — as one-shot kernels of its own over NVLink peer
// access (kernels/cuda/peer.cuh), as vLLM's and TensorRT-LLM's custom
// all-reduce do: each rank pushes its values straight into every rank's
// exchange buffer and each rank reads its own buffer. A gather's blocks
// meet at flags in device memory between the two; an all-reduce's values
// travel with their epoch in one 8-byte store (NCCL's LL protocol), so
// each sum waits only for its own elements. NCCL takes the rest (a prompt's
// all-reduces of megabytes), and everything where the bundle's blob has
// no kernel or the GPUs cannot reach each other. Both are recorded in the
// captured graphs alike.

// Options.Collectives values.
const (
	// CollectivesAuto (or ""): the one-shot kernels for messages up to
	// peerAutoBytes (an all-reduce) or peerGatherBytes (a gather's rows of
	// one rank's part), where the bundle has them and every GPU of the
	// set can reach every other; NCCL for the rest.
	CollectivesAuto = "auto"
	// CollectivesNCCL runs every collective through NCCL.
	CollectivesNCCL = "nccl"
	// CollectivesPeer runs every collective up to peerMaxBytes as a
	// one-shot kernel, and fails Load where it cannot.
	CollectivesPeer = "peer"
)

const (
	// peerAutoBytes bounds an all-reduce the one-shot kernel takes in
	// auto mode: a decode step's rows of a model's width (64 slots of a
	// 4096 wide 7B are 1 MiB). Measured on 2 H200s (TestPeerLatency, a
	// graph of 64): with the flag barrier 6.35–6.46 µs at 4–16 KB against
	// NCCL's 6.12–6.49, a tie; with the values as pairs (value, epoch)
	// and no barrier 2.52–2.83 µs against NCCL's 6.03–6.53 (the kernel
	// alone on one GPU: 1.85–1.91), 3.52 at 64 KB and 5.13 at 256 KB
	// against 6.82 and 8.12. In a decode step the kernel also wins by what
	// it takes in (the residual add, the logits' rows): the 7B shape's 8
	// layers at TP=2 decoded at 1585 tok/s with it, 1242 with NCCL alone.
	// Past 256 KB its blocks spread over the GPU (kcuda.PeerReduceLaunch):
	// 11.37 µs at 1 MiB on 64 blocks (17.61 on 16; NCCL 13.63), 16.97 at
	// 2 MiB on 128 (33.63; NCCL 27.18).
	peerAutoBytes = 1 << 20
	// peerGatherBytes bounds a gather's rows of one rank's part in auto
	// mode: the logits of a decode step's rows. NCCL's gather in a graph
	// moves every slot's row, which the kernel does not.
	peerGatherBytes = 16 << 20
	// peerMaxBytes bounds any one-shot message (the exchange buffers are
	// two halves of a slot this size for every rank, and the all-reduce's
	// two halves of pairs, twice that).
	peerMaxBytes = 64 << 20
	// peerMaxRanks is peer.cuh's PEER_MAX_RANKS.
	peerMaxRanks = 8
	// peerFlagWords is a rank's flags, [from rank][block], then its
	// blocks' epochs, then the blocks of a matmul's _peer entry that have
	// finished (the last counts the epoch for all).
	peerFlagWords = peerMaxRanks*kcuda.PeerBlocks + kcuda.PeerBlocks + 1
	// peerDescBytes is peer.cuh's struct peer_comm: slot_bytes, rank and
	// ranks, bufs[8], flags[8], epoch.
	peerDescBytes = 8 + 4 + 4 + 8*peerMaxRanks + 8*peerMaxRanks + 8
)

// peer is a rank's exchange: its buffer, flags and descriptor in device
// memory, and the other ranks' contexts it holds peer access to.
type peer struct {
	rank, ranks int
	slotBytes   int
	buf, flags  driver.DevPtr
	desc        driver.DevPtr
	devs        []driver.Device // the other ranks' devices, whose primary contexts it retained
	connected   bool
}

// PeerExchange is where a rank's peers push the values and flags of its
// one-shot collectives (ConnectPeers).
type PeerExchange struct {
	Buf, Flags driver.DevPtr
}

// newPeer allocates a rank's exchange for slots of slotBytes and enables
// peer access from the current context to every other rank's device
// (devs by rank); the descriptor is written by connect.
func newPeer(devs []int, rank, slotBytes int) (*peer, error) {
	p := &peer{rank: rank, ranks: len(devs), slotBytes: (slotBytes + 255) &^ 255}
	for k, d := range devs {
		if k == rank {
			continue
		}
		dev, err := driver.GetDevice(d)
		if err != nil {
			return p, err
		}
		ctx, err := dev.PrimaryContext()
		if err != nil {
			return p, err
		}
		p.devs = append(p.devs, dev)
		if err := driver.EnablePeerAccess(ctx); err != nil {
			return p, fmt.Errorf("peer access to device %d: %w", d, err)
		}
	}
	var err error
	// Two halves of a slot per rank, then the all-reduce's pairs (value,
	// epoch: peer.cuh's peer_ll), two words a float of a slot, zeroed so
	// that no pair carries an epoch before one writes it.
	n := 2*p.ranks*p.slotBytes + 2*p.ranks*2*p.slotBytes
	if p.buf, err = driver.MemAlloc(n); err != nil {
		return p, fmt.Errorf("exchange buffer of %d bytes: %w", n, err)
	}
	if err := driver.MemsetD8(p.buf, 0, n); err != nil {
		return p, err
	}
	if p.flags, err = driver.MemAlloc(4 * peerFlagWords); err != nil {
		return p, err
	}
	if err := driver.MemsetD8(p.flags, 0, 4*peerFlagWords); err != nil {
		return p, err
	}
	if p.desc, err = driver.MemAlloc(peerDescBytes); err != nil {
		return p, err
	}
	return p, driver.MemsetD8(p.desc, 0, peerDescBytes)
}

// connect writes the descriptor the kernels read: every rank's exchange
// (all, by rank), this rank's place and its epochs.
func (p *peer) connect(all []PeerExchange) error {
	if len(all) != p.ranks {
		return fmt.Errorf("cuda: %d exchanges for a set of %d ranks", len(all), p.ranks)
	}
	d := make([]byte, peerDescBytes)
	binary.LittleEndian.PutUint64(d[0:], uint64(p.slotBytes))
	binary.LittleEndian.PutUint32(d[8:], uint32(p.rank))
	binary.LittleEndian.PutUint32(d[12:], uint32(p.ranks))
	for k, e := range all {
		if e.Buf == 0 || e.Flags == 0 {
			return fmt.Errorf("cuda: rank %d has no exchange", k)
		}
		binary.LittleEndian.PutUint64(d[16+8*k:], uint64(e.Buf))
		binary.LittleEndian.PutUint64(d[16+8*peerMaxRanks+8*k:], uint64(e.Flags))
	}
	binary.LittleEndian.PutUint64(d[16+16*peerMaxRanks:], uint64(p.flags)+4*peerMaxRanks*kcuda.PeerBlocks)
	if err := driver.MemcpyHtoD(p.desc, d); err != nil {
		return err
	}
	p.connected = true
	return nil
}

// free releases the exchange and the peers' contexts.
func (p *peer) free() {
	for _, a := range []driver.DevPtr{p.buf, p.flags, p.desc} {
		if a != 0 {
			driver.MemFree(a)
		}
	}
	for _, d := range p.devs {
		d.ReleasePrimaryContext()
	}
	*p = peer{}
}

// peerBytes is the slot a one-shot collective needs: an all-reduce's
// rows, or a gather's rows of the widest rank part.
func peerBytes(c *Collective, ranks int) int {
	if !c.Gather {
		return 4 * c.Rows * c.Cols
	}
	w, _ := partWidths(c.Cols, ranks)
	return 4 * c.Rows * w
}

// planCollectives decides, for every collective launch, NCCL or the
// one-shot kernel (Options.Collectives), and sets up the exchange the
// kernels need. The decision depends only on the bundle, the options and
// the GPUs, which a set's ranks share, so every rank decides alike.
func (t *Tier) planCollectives(mode string) error {
	switch mode {
	case "", CollectivesAuto, CollectivesNCCL, CollectivesPeer:
	default:
		return fmt.Errorf("cuda: collectives %q: want auto, nccl or peer", mode)
	}
	if t.comm == nil || mode == CollectivesNCCL {
		return nil
	}
	ranks, rank := t.comm.Ranks(), t.comm.Rank()
	refuse := func(format string, args ...any) error {
		if mode == CollectivesPeer {
			return fmt.Errorf("cuda: one-shot collectives: "+format, args...)
		}
		return nil
	}
	if ranks > peerMaxRanks {
		return refuse("a set of %d ranks, more than %d", ranks, peerMaxRanks)
	}
	var ls []*Launch
	slot := 0
	for vi := range t.variants {
		for i := range t.variants[vi] {
			l := &t.variants[vi][i]
			c := l.Collective
			if c == nil {
				continue
			}
			if t.entries[kcuda.EntryMain][l.Kernel] == 0 {
				return refuse("the bundle's %s holds no kernel (a zrtc whose PTX lacked it built it): rebuild the set", l.Name)
			}
			n, limit := peerBytes(c, ranks), peerMaxBytes
			if mode != CollectivesPeer {
				limit = peerAutoBytes
				if c.Gather {
					limit = peerGatherBytes
				}
			}
			if n > limit {
				if mode == CollectivesPeer {
					return refuse("%s of %d bytes a rank, more than %d", l.Name, n, limit)
				}
				continue
			}
			ls, slot = append(ls, l), max(slot, n)
		}
	}
	if len(ls) == 0 {
		return nil
	}
	devs := t.comm.Devices()
	for k, d := range devs {
		if k == rank {
			continue
		}
		pd, err := driver.GetDevice(d)
		if err != nil {
			return err
		}
		ok, err := t.dev.CanAccessPeer(pd)
		if err != nil {
			return err
		}
		if !ok {
			return refuse("device %d cannot reach device %d's memory (no NVLink or PCIe peer access)", devs[rank], d)
		}
	}
	p, err := newPeer(devs, rank, slot)
	if err != nil {
		p.free()
		return fmt.Errorf("cuda: one-shot collectives: %w", err)
	}
	t.peer = p
	sms, err := t.dev.Attribute(driver.AttrMultiprocessorCount)
	if err != nil {
		return err
	}
	for _, l := range ls {
		l.Collective.Peer = true
		l.Shape = kcuda.Launch{Grid: [3]uint32{kcuda.PeerBlocks, 1, 1}, Block: [3]uint32{kcuda.PeerThreads, 1, 1}}
		if !l.Collective.Gather && t.reduceSpreads {
			l.Shape = kcuda.PeerReduceLaunch(l.Collective.Rows, l.Collective.Cols, sms)
		}
		l.Params, l.Sizes = append(l.Params, uint64(p.desc)), append(l.Sizes, 8)
		if !l.Collective.Gather {
			// residual, norm_w, norm_y, eps: none yet.
			l.Params, l.Sizes = append(l.Params, 0, 0, 0, 0), append(l.Sizes, 8, 8, 8, 4)
		}
	}
	// RunEach stops after every dispatch: it keeps the adds and norms
	// apart.
	t.unfused = make([][]Launch, len(t.variants))
	resident, err := t.residentBlocks()
	if err != nil {
		return err
	}
	if !t.fuseReduces {
		resident = func(*Launch) bool { return false }
	}
	for vi, ls := range t.variants {
		t.unfused[vi] = ls
		t.variants[vi] = fuseProducts(fuseResiduals(ls, t.reduceNorms), resident)
	}
	return nil
}

// residentBlocks returns a function that reports whether every block of
// matmul launch l's _peer entry is resident on the GPU at once (its
// blocks wait for the other ranks' blocks, which wait for theirs), or
// false where the kernel has no such entry.
func (t *Tier) residentBlocks() (func(l *Launch) bool, error) {
	sms, err := t.dev.Attribute(driver.AttrMultiprocessorCount)
	if err != nil {
		return nil, err
	}
	return func(l *Launch) bool {
		f := t.entries[kcuda.EntryPeer][l.Kernel]
		if f == 0 || l.Shape.Shared > 48<<10 {
			return false // no entry, or one that would need the opt-in to more shared memory
		}
		g, b := l.Shape.Grid, l.Shape.Block
		n, err := f.MaxActiveBlocks(int(b[0]*b[1]*b[2]), l.Shape.Shared)
		return err == nil && int(g[0]*g[1]*g[2]) <= n*sms
	}, nil
}

// Parameters of matmul (x, w, bias, io, y, k, n) that fuseProducts reads.
const (
	matmulIO, matmulY, matmulN = 3, 4, 6
)

// fuseProducts folds into a matmul's _peer entry the one-shot all-reduce
// right after it that sums the matmul's output (a row-parallel
// projection: the attention output's and the FFN's down projection), with
// the residual add and RMS norm the all-reduce took in (fuseResiduals):
// the kernel's blocks push their products straight to every rank and sum
// each one's pairs in rank order, as the all-reduce does, and the last
// block to finish normalizes the rows, so a layer's two collectives cost
// no launch of their own. It runs with Options.FuseReduces only: on 2
// H200s the 7B shape's tg128 at TP=2 was 460.0 and 441.2 tok/s with it,
// 466.2 and 467.8 without (round 24c, same run; why is not yet
// measured). An all-reduce after a matmul whose blocks are not all
// resident at once (fits: the _peer entry's grid fits the GPU; a
// step of more rows), or whose launch is not its matrix-vector entry,
// stays.
func fuseProducts(ls []Launch, fits func(l *Launch) bool) []Launch {
	var out []Launch
	for i := 0; i < len(ls); i++ {
		l := ls[i]
		if i+1 < len(ls) && fusesProduct(&l, &ls[i+1]) && fits(&l) {
			r := &ls[i+1]
			l.Shape.Entry = kcuda.EntryPeer
			l.Params = append(slices.Clone(l.Params), r.Params[reduceDesc], r.Params[reduceResidual],
				r.Params[reduceNormW], r.Params[reduceNormY], r.Params[reduceEps])
			l.Sizes = append(slices.Clone(l.Sizes), 8, 8, 8, 8, 4)
			i++
		}
		out = append(out, l)
	}
	return out
}

// fusesProduct reports whether launch l, a matmul's matrix-vector
// kernel, and the one-shot all-reduce r after it are a pair fuseProducts
// joins: r sums l's whole output (its columns are l's features, its io
// is l's).
func fusesProduct(l, r *Launch) bool {
	family, _, _ := strings.Cut(l.Name, ".")
	c := r.Collective
	return family == "matmul" && l.Collective == nil && l.Shape.Entry == kcuda.EntryMain && len(l.Params) == matmulN+1 &&
		c != nil && c.Peer && !c.Gather && len(r.Params) > reduceEps &&
		r.Params[reduceX] == l.Params[matmulY] && r.Params[reduceIO] == l.Params[matmulIO] &&
		r.Params[reduceCols] == l.Params[matmulN] && c.Rows == int(l.Shape.Grid[1])
}

// ReduceTakesNorm reports whether the PTX of the one-shot all-reduce
// instance (all_reduce_sum) has the RMS norm's parameters after the
// residual (norm_w, norm_y, eps: its eighth), which zrtc's kernels have
// had since the norm was taken in; a bundle built before keeps the norm's
// launch.
func ReduceTakesNorm(instance string, ptx []byte) bool {
	return bytes.Contains(ptx, []byte(".param .u32 "+kcuda.Entry(instance)+"_param_7"))
}

// ReduceSpreads reports whether the PTX of the one-shot all-reduce can
// run more blocks than kcuda.PeerBlocks: its blocks then count the epoch
// as a grid, through peer.cuh's peer_grid_last (whose name its block's
// shared flag carries into the PTX), which a bundle built before lacks.
func ReduceSpreads(ptx []byte) bool {
	return bytes.Contains(ptx, []byte("peer_grid_last"))
}

// Parameters of the launches fuseResiduals joins: the one-shot
// all-reduce's x, io, cols, then (after the descriptor) residual, norm_w,
// norm_y and eps; add's x, y, io and cols; rms_norm's x, w, io, y, cols,
// group and eps.
const (
	reduceX, reduceIO, reduceCols, reduceDesc = 0, 1, 2, 3
	reduceResidual                            = 4
	reduceNormW, reduceNormY, reduceEps       = 5, 6, 7
	addX, addY, addIO, addCols                = 0, 1, 2, 3
	normX, normW, normIO, normY, normCols     = 0, 1, 2, 3, 4
	normGroup, normEps                        = 5, 6
)

// fuseResiduals folds into a one-shot all-reduce the residual add that
// follows it in the stream and adds its result to the residual stream
// (RESIDUAL after a row-parallel projection's ALL_REDUCE_SUM, which the
// shard pass leaves where the unsplit graph has one MATMUL_RESIDUAL):
// the kernel adds each sum to the residual with the same float addition
// add does, after storing it, so every byte ends as the two launches
// leave it, and a layer's two collectives cost no extra launch for their
// adds. With norms (the kernel has them: ReduceTakesNorm), an rms_norm of
// the residual's whole rows right after the add is taken in as well (a
// layer whose Q, K and V the fuse pass could not join normalizes on its
// own, and so does the output norm before the LM head): the kernel
// normalizes with rms_norm's scale and products, into the norm's output,
// which must not be the residual.
func fuseResiduals(ls []Launch, norms bool) []Launch {
	var out []Launch
	for i := 0; i < len(ls); i++ {
		l := ls[i]
		if c := l.Collective; c != nil && c.Peer && !c.Gather && i+1 < len(ls) {
			n := &ls[i+1]
			if family, _, _ := strings.Cut(n.Name, "."); family == "add" && n.Collective == nil && len(n.Params) > addCols &&
				n.Params[addY] == c.X && n.Params[addIO] == l.Params[reduceIO] && n.Params[addCols] == l.Params[reduceCols] &&
				n.Params[addX] != c.X {
				l.Params = slices.Clone(l.Params)
				l.Params[reduceResidual] = n.Params[addX]
				i++
				if norms && i+1 < len(ls) && takesNorm(&l, &ls[i+1]) {
					m := &ls[i+1]
					l.Params[reduceNormW], l.Params[reduceNormY], l.Params[reduceEps] = m.Params[normW], m.Params[normY], m.Params[normEps]
					i++
				}
			}
		}
		out = append(out, l)
	}
	return out
}

// takesNorm reports whether the one-shot all-reduce l, its residual add
// taken in, can take in the launch m after it: an rms_norm of l's
// residual over whole rows (one group of the reduce's columns) of the
// same request table, into another buffer.
func takesNorm(l, m *Launch) bool {
	family, _, _ := strings.Cut(m.Name, ".")
	if family != "rms_norm" || m.Collective != nil || len(m.Params) <= normEps || len(l.Params) <= reduceEps {
		return false
	}
	res := l.Params[reduceResidual]
	return res != 0 && m.Params[normX] == res && m.Params[normIO] == l.Params[reduceIO] &&
		m.Params[normCols] == l.Params[reduceCols] && m.Params[normGroup] == l.Params[reduceCols] &&
		m.Params[normY] != res && m.Params[normY] != 0
}

// PeerExchange returns where the rank's peers push its one-shot
// collectives' values, or false where it runs none.
func (t *Tier) PeerExchange() (PeerExchange, bool) {
	if t.peer == nil {
		return PeerExchange{}, false
	}
	return PeerExchange{Buf: t.peer.buf, Flags: t.peer.flags}, true
}

// ConnectPeers gives the rank every rank's exchange (by rank), which its
// one-shot collectives push to; a set's loader calls it on every rank
// once all are loaded, before any runs. A rank whose collectives all run
// through NCCL has nothing to connect.
func (t *Tier) ConnectPeers(all []PeerExchange) error {
	if t.peer == nil {
		return nil
	}
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	if err := t.ctx.SetCurrent(); err != nil {
		return err
	}
	return t.peer.connect(all)
}

// Collectives describes how the rank runs its collectives, for logs:
// "nccl", "peer" or "peer+nccl"; "" outside a set.
func (t *Tier) Collectives() string {
	var peer, nccl bool
	for _, ls := range t.variants {
		for _, l := range ls {
			if c := l.Collective; c != nil {
				peer, nccl = peer || c.Peer, nccl || !c.Peer
			}
		}
	}
	var s []string
	if peer {
		s = append(s, "peer")
	}
	if nccl {
		s = append(s, "nccl")
	}
	return strings.Join(s, "+")
}
