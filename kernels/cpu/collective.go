package cpu

import (
	"fmt"

	"github.com/zrtdev/zrt/kernels"
)

// Comm is what a collective kernel needs of the tensor-parallel set its
// tier is one rank of: the rank's place, and an exchange at which every
// rank meets. T-CPU's ranks are goroutines of one process (runtime/tp).
type Comm interface {
	// Rank is this rank's index, 0..Ranks()-1.
	Rank() int
	// Ranks is the set's size.
	Ranks() int
	// Exchange publishes x, then calls read with every rank's published
	// slice, in rank order, once all ranks have published; it returns
	// after every rank's read has returned, so a rank may overwrite x
	// then. It fails (on every rank) when the set's step was abandoned.
	Exchange(x []float32, read func(all [][]float32)) error
}

// comm returns the dispatch's set, or an error for a collective
// dispatched outside of one.
func (a *Args) comm(kernel string) (Comm, error) {
	if a.Comm == nil {
		return nil, fmt.Errorf("%s: a collective kernel outside a tensor-parallel set (load every rank of the set)", kernel)
	}
	return a.Comm, nil
}

// allReduceSum sums cols columns of each active row of x over the ranks.
// Every rank adds the ranks' values in rank order, in float32, so every
// rank ends with the same bits whatever the threads' timing; the order
// differs from one rank's matmul over the whole inner dimension, which
// is the tolerance a set is held to against its unsplit bundle.
func allReduceSum(a *Args) error {
	c, err := a.comm("all_reduce_sum")
	if err != nil {
		return err
	}
	x, r := f32s(a.Bufs[0]), req(a.Bufs[1])
	n := r.rows() * int(a.Push[0])
	if n > len(x) {
		return fmt.Errorf("all_reduce_sum: %d values past a register of %d", n, len(x))
	}
	x = x[:n]
	sum := f32s(a.work(4 * n))
	if err := c.Exchange(x, func(all [][]float32) {
		copy(sum, all[0])
		for _, y := range all[1:] {
			for j, v := range y[:n] {
				sum[j] += v
			}
		}
	}); err != nil {
		return err
	}
	copy(x, sum)
	return nil
}

// allGather assembles each row's cols columns from the ranks' parts.
func allGather(a *Args) error {
	c, err := a.comm("all_gather")
	if err != nil {
		return err
	}
	x, r, y := f32s(a.Bufs[0]), req(a.Bufs[1]), f32s(a.Bufs[2])
	cols, bySlot := int(a.Push[0]), a.Push[1] != 0
	ranks := c.Ranks()
	lo, hi := kernels.Part(cols, c.Rank(), ranks)
	// rows lists the row of y (and of the packed parts) each active row
	// gathers into.
	var rows []int
	for i := range r.rows() {
		switch {
		case !bySlot:
			rows = append(rows, i)
		case r.row(i, kernels.IORowFlags)&kernels.RowWantsLogits != 0:
			rows = append(rows, int(r.row(i, kernels.IORowSlot)))
		}
	}
	// The largest row any rank's part reaches bounds what is published:
	// ranks agree on rows (one request table), and x's rows are packed at
	// this rank's width.
	last := 0
	for _, row := range rows {
		last = max(last, row+1)
	}
	if n := last * (hi - lo); n > len(x) || last*cols > len(y) {
		return fmt.Errorf("all_gather: rows up to %d of %d columns past the buffers", last, cols)
	}
	out := f32s(a.work(4 * len(rows) * cols))
	// A rank's x may be its y (the logits): assemble first, write after
	// the exchange, when no rank reads x any more.
	if err := c.Exchange(x[:last*(hi-lo)], func(all [][]float32) {
		for k := range ranks {
			plo, phi := kernels.Part(cols, k, ranks)
			w := phi - plo
			for i, row := range rows {
				copy(out[i*cols+plo:i*cols+phi], all[k][row*w:(row+1)*w])
			}
		}
	}); err != nil {
		return err
	}
	for i, row := range rows {
		copy(y[row*cols:(row+1)*cols], out[i*cols:(i+1)*cols])
	}
	return nil
}
