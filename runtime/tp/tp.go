// Package tp runs a tensor-parallel set in one process: the rank
// bundles (zrtc build --tp), each loaded on a tier of its own, replay
// their variants side by side as goroutines and meet at the collectives
// (ALL_REDUCE_SUM, ALL_GATHER) through a Group. To the program above it
// the set is one tier: one request table, one set of outputs (rank 0's,
// which every rank holds alike after the gather), one Run.
package tp

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Group is the meeting point of a set's ranks: an exchange in which
// every rank publishes a slice and reads everyone's. It is reusable step
// after step; Abort ends the current step's exchanges with an error.
type Group struct {
	n    int
	mu   sync.Mutex
	cond *sync.Cond
	bufs [][]float32
	// arrived counts the ranks waiting at the current barrier, phase
	// numbers the barriers passed; done counts the ranks whose replay has
	// ended this step (a rank still waiting for one of them would wait
	// forever: the ranks disagree on their collectives).
	arrived, done int
	phase         uint64
	err           error
}

// ErrMismatch is the failure of a step whose ranks did not meet at the
// same collectives (rank bundles of different builds).
var ErrMismatch = errors.New("tensor-parallel ranks disagree on their collectives (rank bundles of different builds?)")

// NewGroup returns a group of n ranks.
func NewGroup(n int) *Group {
	g := &Group{n: n, bufs: make([][]float32, n)}
	g.cond = sync.NewCond(&g.mu)
	return g
}

// Ranks is the group's size.
func (g *Group) Ranks() int { return g.n }

// Member is rank r's view of the group, which its collective kernels
// take (kernels/cpu.Comm).
func (g *Group) Member(r int) *Member { return &Member{g: g, rank: r} }

// Reset readies the group for a step: no rank is inside an exchange.
func (g *Group) Reset() {
	g.mu.Lock()
	g.err, g.arrived, g.done = nil, 0, 0
	clear(g.bufs)
	g.mu.Unlock()
}

// Abort fails every exchange of the step, present and to come, with err
// (the first given).
func (g *Group) Abort(err error) {
	g.mu.Lock()
	if g.err == nil {
		g.err = err
	}
	g.cond.Broadcast()
	g.mu.Unlock()
}

// finish records that a rank's replay ended.
func (g *Group) finish() {
	g.mu.Lock()
	g.done++
	g.cond.Broadcast()
	g.mu.Unlock()
}

// barrier returns once all n ranks have called it, or fails when the
// step is aborted or a rank has ended its replay without coming.
func (g *Group) barrier() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err != nil {
		return g.err
	}
	gen := g.phase
	g.arrived++
	if g.arrived == g.n {
		g.arrived = 0
		g.phase++
		g.cond.Broadcast()
		return nil
	}
	for gen == g.phase {
		if g.err != nil {
			return g.err
		}
		if g.done > 0 {
			return ErrMismatch
		}
		g.cond.Wait()
	}
	return nil
}

// Member is one rank of a group.
type Member struct {
	g    *Group
	rank int
}

// Rank is the member's rank.
func (m *Member) Rank() int { return m.rank }

// Ranks is the group's size.
func (m *Member) Ranks() int { return m.g.n }

// Exchange publishes x, calls read with every rank's slice in rank order
// once all have published, and returns when every rank's read is done.
func (m *Member) Exchange(x []float32, read func(all [][]float32)) error {
	g := m.g
	g.mu.Lock()
	g.bufs[m.rank] = x
	g.mu.Unlock()
	if err := g.barrier(); err != nil {
		return err
	}
	read(g.bufs)
	return g.barrier()
}

// Rank is what a Tier needs of a rank's own tier: runtime/tiers.Tier.
type Rank interface {
	Name() string
	Region(i int) []byte
	Run(ctx context.Context, i int) error
	Close() error
}

// Tier runs a set's ranks as one tier.
type Tier struct {
	g     *Group
	ranks []Rank
	// mirror lists, per rank above 0, the pairs (rank 0's region, the
	// rank's region) that the host writes (the request tables) and Run
	// copies from rank 0 before every step.
	mirror [][][2]int
}

// NewTier joins the ranks (ranks[r] loaded with g.Member(r)); inputs
// lists rank 0's regions the host writes, and inputOf(r, i) the region
// of rank r that mirrors rank 0's region i.
func NewTier(g *Group, ranks []Rank, inputs []int, inputOf func(r, i int) (int, error)) (*Tier, error) {
	if len(ranks) != g.n {
		return nil, fmt.Errorf("tp: %d ranks for a group of %d", len(ranks), g.n)
	}
	t := &Tier{g: g, ranks: ranks, mirror: make([][][2]int, len(ranks))}
	for r := 1; r < len(ranks); r++ {
		for _, i := range inputs {
			j, err := inputOf(r, i)
			if err != nil {
				return nil, err
			}
			if len(ranks[r].Region(j)) != len(ranks[0].Region(i)) {
				return nil, fmt.Errorf("tp: rank %d's region %d has %d bytes, rank 0's %d", r, j, len(ranks[r].Region(j)), len(ranks[0].Region(i)))
			}
			t.mirror[r] = append(t.mirror[r], [2]int{i, j})
		}
	}
	return t, nil
}

// Name names the ranks' tier and the set's size.
func (t *Tier) Name() string { return fmt.Sprintf("%s×%d", t.ranks[0].Name(), len(t.ranks)) }

// Region is rank 0's region i: the request table the host writes (Run
// hands it to the other ranks) and the outputs, which the gather leaves
// alike on every rank.
func (t *Tier) Region(i int) []byte { return t.ranks[0].Region(i) }

// Run replays variant vi on every rank at once and returns when all are
// done; the first rank's failure (or ctx's end) aborts the others at
// their next collective.
func (t *Tier) Run(ctx context.Context, vi int) error { return t.run(ctx, vi, nil) }

// inspector is a rank's tier that can stop after each dispatch
// (runtime.Inspector).
type inspector interface {
	RunEach(ctx context.Context, vi int, after func(dispatch int) error) error
	ReadRegion(i int, off, n int64) ([]byte, error)
}

// RunEach is Run calling after once each of rank 0's dispatches is done
// (the others run on meanwhile, kernel by kernel as well, meeting it at
// the collectives), so a layer-by-layer comparison reads rank 0's values:
// the residual stream and the logits, which every rank holds whole.
func (t *Tier) RunEach(ctx context.Context, vi int, after func(dispatch int) error) error {
	if _, ok := t.ranks[0].(inspector); !ok {
		return fmt.Errorf("tier %s cannot stop between dispatches", t.ranks[0].Name())
	}
	return t.run(ctx, vi, after)
}

// ReadRegion copies n bytes at off of rank 0's region i.
func (t *Tier) ReadRegion(i int, off, n int64) ([]byte, error) {
	in, ok := t.ranks[0].(inspector)
	if !ok {
		return nil, fmt.Errorf("tier %s cannot read a region", t.ranks[0].Name())
	}
	return in.ReadRegion(i, off, n)
}

func (t *Tier) run(ctx context.Context, vi int, after func(dispatch int) error) error {
	for r, pairs := range t.mirror {
		for _, p := range pairs {
			copy(t.ranks[r].Region(p[1]), t.ranks[0].Region(p[0]))
		}
	}
	t.g.Reset()
	errs := make([]error, len(t.ranks))
	var wg sync.WaitGroup
	stop := context.AfterFunc(ctx, func() { t.g.Abort(ctx.Err()) })
	defer stop()
	for r, rk := range t.ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			switch in, ok := rk.(inspector); {
			case r == 0 && after != nil:
				errs[r] = in.RunEach(ctx, vi, after)
			case after != nil && ok:
				// Kernel by kernel too: NCCL holds whether a collective
				// is run from a captured graph to be the same on every
				// rank.
				errs[r] = in.RunEach(ctx, vi, nil)
			default:
				errs[r] = rk.Run(ctx, vi)
			}
			if errs[r] != nil {
				t.g.Abort(fmt.Errorf("rank %d: %w", r, errs[r]))
				return
			}
			t.g.finish()
		}()
	}
	wg.Wait()
	// The rank that failed first says why; the others' failures are its
	// echo (the aborted exchange).
	t.g.mu.Lock()
	err := t.g.err
	t.g.mu.Unlock()
	if err != nil {
		return err
	}
	for r, e := range errs {
		if e != nil {
			return fmt.Errorf("rank %d: %w", r, e)
		}
	}
	return nil
}

// fetcher is a rank's tier that leaves some host views stale until
// read (runtime.Fetcher).
type fetcher interface {
	Fetch(i int, off, n int64) error
}

// Fetch brings bytes [off, off+n) of rank 0's region i's host view up
// to date, where its tier leaves some on the device until read (T-CUDA's
// logits: runtime.Fetcher); a tier whose host views are always current
// has nothing to do.
func (t *Tier) Fetch(i int, off, n int64) error {
	if f, ok := t.ranks[0].(fetcher); ok {
		return f.Fetch(i, off, n)
	}
	return nil
}

// masker is a rank's tier that takes masked greedy choices on its device
// (runtime.Masker).
type masker interface {
	Masks() bool
	MaskGreedy(slots []int, allowed [][]uint64, ready func()) error
}

// Masks reports whether rank 0's tier takes masked greedy choices
// (runtime.Masker): every rank holds the whole logits after their
// gather, and the host reads rank 0's tokens, so rank 0's choice is the
// set's.
func (t *Tier) Masks() bool {
	m, ok := t.ranks[0].(masker)
	return ok && m.Masks()
}

// MaskGreedy hands the masks of the next Run to rank 0's tier, which
// waits for ready (when not nil) once its step is under way.
func (t *Tier) MaskGreedy(slots []int, allowed [][]uint64, ready func()) error {
	m, ok := t.ranks[0].(masker)
	if !ok {
		return fmt.Errorf("tier %s takes no token masks", t.ranks[0].Name())
	}
	return m.MaskGreedy(slots, allowed, ready)
}

// Close closes every rank's tier.
func (t *Tier) Close() error {
	var first error
	for _, r := range t.ranks {
		if err := r.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
