package cuda

import (
	"fmt"

	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/runtime/cuda/driver"
	"github.com/zrtdev/zrt/runtime/cuda/nccl"
)

// A rank of a tensor-parallel set runs its collectives (ALL_REDUCE_SUM,
// ALL_GATHER) through NCCL on its own stream, so capture records them in
// the variant's graph between the kernels around them and a step stays
// one graph replay per GPU; each rank's goroutine launches its own
// replay, and the ranks' NCCL kernels meet on the GPUs.
//
// An all-reduce sums the register in place over the variant's rows.
// A gather receives every rank's packed part into t.gather, then one 2D
// copy per rank places that part's columns in each row of the output
// (the parts' rows are narrower than the output's). Where the parts are
// of one width, ncclAllGather fetches them; where the columns do not
// divide evenly (a vocabulary of odd size), a broadcast from each rank,
// grouped into one launch, does. A one-row gather of even parts into
// another buffer goes straight to its output: ncclAllGather's layout is
// then the row's.

// checkCollective holds collective c to what this rank can run: a
// communicator, and (for a gather) its part within x's region.
func (t *Tier) checkCollective(c *Collective, mem *Memory) error {
	if t.comm == nil {
		return fmt.Errorf("a collective outside a tensor-parallel set: open the set (its set.json directory or rank 0's bundle), which loads every rank")
	}
	if !c.Gather {
		return nil
	}
	lo, hi := kernels.Part(c.Cols, t.comm.Rank(), t.comm.Ranks())
	xr := mem.Region(c.X)
	if xr < 0 || c.X+uint64(4*c.ncclRows()*(hi-lo)) > mem.Base[xr]+mem.Size[xr] {
		return fmt.Errorf("rank %d's part of %d rows × columns [%d, %d) runs past x's region", t.comm.Rank(), c.ncclRows(), lo, hi)
	}
	return nil
}

// partWidths returns the widest rank part of cols over n ranks, and
// whether every part has that width.
func partWidths(cols, n int) (widest int, even bool) {
	even = true
	for k := range n {
		lo, hi := kernels.Part(cols, k, n)
		if k > 0 && hi-lo != widest {
			even = false
		}
		widest = max(widest, hi-lo)
	}
	return widest, even
}

// allocGather allocates t.gather for the largest gather of any variant.
func (t *Tier) allocGather() error {
	n := 0
	for _, ls := range t.variants {
		for _, l := range ls {
			if c := l.Collective; c != nil && c.Gather && !c.Peer {
				w, _ := partWidths(c.Cols, t.comm.Ranks())
				n = max(n, 4*t.comm.Ranks()*c.ncclRows()*w)
			}
		}
	}
	if n == 0 {
		return nil
	}
	var err error
	if t.gather, err = driver.MemAlloc(n); err != nil {
		return fmt.Errorf("cuda: the gathers' buffer of %d bytes: %w", n, err)
	}
	return nil
}

// collective enqueues c on the tier's stream.
func (t *Tier) collective(c *Collective) error {
	x, y := driver.DevPtr(c.X), driver.DevPtr(c.Y)
	if !c.Gather {
		return t.comm.AllReduceSum(x, x, c.Rows*c.Cols, nccl.Float32, t.stream)
	}
	rows := c.ncclRows()
	n, r := t.comm.Ranks(), t.comm.Rank()
	lo, hi := kernels.Part(c.Cols, r, n)
	w := hi - lo
	widest, even := partWidths(c.Cols, n)
	if even && rows == 1 && (x+driver.DevPtr(4*w) <= y || y+driver.DevPtr(4*c.Cols) <= x) {
		return t.comm.AllGather(x, y, w, nccl.Float32, t.stream)
	}
	stride := driver.DevPtr(4 * rows * widest)
	if even {
		if err := t.comm.AllGather(x, t.gather, rows*w, nccl.Float32, t.stream); err != nil {
			return err
		}
	} else if err := t.comm.Library().Group(func() error {
		for k := range n {
			klo, khi := kernels.Part(c.Cols, k, n)
			if err := t.comm.Broadcast(x, t.gather+driver.DevPtr(k)*stride, rows*(khi-klo), nccl.Float32, k, t.stream); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return err
	}
	for k := range n {
		klo, khi := kernels.Part(c.Cols, k, n)
		kw := khi - klo
		if err := driver.Memcpy2DAsync(y+driver.DevPtr(4*klo), 4*c.Cols, t.gather+driver.DevPtr(k)*stride, 4*kw, 4*kw, rows, t.stream); err != nil {
			return fmt.Errorf("placing rank %d's part: %w", k, err)
		}
	}
	return nil
}
