package tp

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
)

// TestExchangeSumsInRankOrder runs many exchanges on four goroutines and
// checks that every rank reads every rank's slice each time, so a sum in
// rank order gives every rank the same bits.
func TestExchangeSumsInRankOrder(t *testing.T) {
	const n, rounds = 4, 200
	g := NewGroup(n)
	sums := make([][]float32, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := g.Member(r)
			for i := range rounds {
				x := []float32{float32(r+1) * 0.1, float32(i)}
				var s float32
				if err := m.Exchange(x, func(all [][]float32) {
					for _, y := range all {
						s += y[0] + y[1]
					}
				}); err != nil {
					t.Error(err)
					return
				}
				sums[r] = append(sums[r], s)
			}
		}()
	}
	wg.Wait()
	for r := 1; r < n; r++ {
		for i := range rounds {
			if sums[r][i] != sums[0][i] {
				t.Fatalf("round %d: rank %d sums %v, rank 0 %v", i, r, sums[r][i], sums[0][i])
			}
		}
	}
	if want := float32(0.1+0.2+0.3+0.4) + 4*float32(rounds-1); sums[0][rounds-1] != want {
		t.Errorf("last sum %v, want %v", sums[0][rounds-1], want)
	}
}

// fake is a rank that runs a fixed number of exchanges, or fails.
type fake struct {
	m         *Member
	exchanges int
	fail      error
	region    []byte
}

func (f *fake) Name() string      { return "fake" }
func (f *fake) Region(int) []byte { return f.region }
func (f *fake) Close() error      { return nil }
func (f *fake) Run(ctx context.Context, _ int) error {
	for range f.exchanges {
		if err := f.m.Exchange([]float32{1}, func([][]float32) {}); err != nil {
			return err
		}
	}
	return f.fail
}

func TestRunFailsWithoutHanging(t *testing.T) {
	cases := []struct {
		name      string
		exchanges []int
		fail      error
		want      error
	}{
		{"agree", []int{3, 3}, nil, nil},
		{"mismatch", []int{3, 2}, nil, ErrMismatch},
		{"a rank fails", []int{0, 3}, errors.New("boom"), nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := NewGroup(len(c.exchanges))
			var ranks []Rank
			for r, e := range c.exchanges {
				f := &fake{m: g.Member(r), exchanges: e, region: make([]byte, 8)}
				if r == 0 {
					f.fail = c.fail
				}
				ranks = append(ranks, f)
			}
			tier, err := NewTier(g, ranks, []int{0}, func(r, i int) (int, error) { return i, nil })
			if err != nil {
				t.Fatal(err)
			}
			copy(tier.Region(0), "request!")
			for range 2 { // the group is reusable after a failure
				err = tier.Run(context.Background(), 0)
				switch {
				case c.want != nil && !errors.Is(err, c.want):
					t.Fatalf("got %v, want %v", err, c.want)
				case c.fail != nil && (err == nil || !errors.Is(err, c.fail)):
					t.Fatalf("got %v, want rank 0's %v", err, c.fail)
				case c.want == nil && c.fail == nil && err != nil:
					t.Fatal(err)
				}
			}
			if got := string(ranks[1].Region(0)); got != "request!" {
				t.Errorf("rank 1's request table %q, want rank 0's", got)
			}
		})
	}
}

func TestRunStopsOnCancel(t *testing.T) {
	g := NewGroup(2)
	ctx, cancel := context.WithCancel(context.Background())
	blocked := &fake{m: g.Member(0), exchanges: 1, region: make([]byte, 4)}
	// Rank 1 never reaches the exchange: it waits for the cancel.
	waiter := waitRank{ctx: ctx}
	tier, err := NewTier(g, []Rank{blocked, waiter}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() { done <- tier.Run(ctx, 0) }()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want the cancel", err)
	}
}

type waitRank struct{ ctx context.Context }

func (w waitRank) Name() string      { return "wait" }
func (w waitRank) Region(int) []byte { return nil }
func (w waitRank) Close() error      { return nil }
func (w waitRank) Run(ctx context.Context, _ int) error {
	<-ctx.Done()
	return fmt.Errorf("waited: %w", ctx.Err())
}

// deviceRank is a rank whose logits stay on its device until fetched and
// which takes masked greedy choices (as a T-CUDA rank).
type deviceRank struct {
	fake
	fetched [][3]int64
	masked  []int
}

func (d *deviceRank) Fetch(i int, off, n int64) error {
	d.fetched = append(d.fetched, [3]int64{int64(i), off, n})
	return nil
}
func (d *deviceRank) Masks() bool { return true }
func (d *deviceRank) MaskGreedy(slots []int, _ [][]uint64, _ func()) error {
	d.masked = append(d.masked, slots...)
	return nil
}

// TestDeviceRanks: a set of ranks that keep their logits on the device
// fetches rank 0's (which every rank holds whole after the gather) and
// hands the masks to rank 0, whose tokens the host reads; a set of ranks
// without either has nothing to fetch and takes no masks.
func TestDeviceRanks(t *testing.T) {
	g := NewGroup(2)
	r0, r1 := &deviceRank{fake: fake{m: g.Member(0)}}, &deviceRank{fake: fake{m: g.Member(1)}}
	tier, err := NewTier(g, []Rank{r0, r1}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := tier.Fetch(3, 8, 16); err != nil || len(r0.fetched) != 1 || r0.fetched[0] != [3]int64{3, 8, 16} || len(r1.fetched) != 0 {
		t.Errorf("fetch: %v; rank 0 fetched %v, rank 1 %v", err, r0.fetched, r1.fetched)
	}
	if !tier.Masks() {
		t.Error("a set of masking ranks takes no masks")
	}
	if err := tier.MaskGreedy([]int{2, 5}, make([][]uint64, 2), nil); err != nil || len(r0.masked) != 2 || len(r1.masked) != 0 {
		t.Errorf("masks: %v; rank 0 got %v, rank 1 %v", err, r0.masked, r1.masked)
	}
	h := NewGroup(2)
	host, err := NewTier(h, []Rank{&fake{m: h.Member(0)}, &fake{m: h.Member(1)}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := host.Fetch(0, 0, 4); err != nil {
		t.Errorf("fetch from host-memory ranks: %v", err)
	}
	if host.Masks() || host.MaskGreedy([]int{0}, make([][]uint64, 1), nil) == nil {
		t.Error("ranks without masks take them")
	}
}
