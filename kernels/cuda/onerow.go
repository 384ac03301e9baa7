package cuda

import "strings"

// mmvRowsWide is MMV_MR4 in mmq.cuh: the rows a block of the
// matrix-vector kernel's _rows4 entry takes. oneRowShared bounds the
// shared memory of OneRowShape's matrix-vector blocks (their activation
// rows, quantized): within what every GPU the PTX runs on allows a block
// (an sm_86 or sm_89 card 99 KiB), so that a bundle that loads loads with
// them; a matrix of rows too long for four (or two) a block takes fewer.
const (
	mmvRowsWide  = 4
	oneRowShared = 96 << 10
)

// OneRowShape is the launch of one dispatch of a decode variant of rows
// rows for a step whose every row must come out bit for bit as it does
// in a one-row decode step: a speculative verify step, whose K+1 rows of
// one sequence stand for K+1 one-row steps, so that greedy output does
// not change with speculation (issue 42). Shape's launches for several
// rows sum in other orders than the one-row launch: the integer matrix
// products of 3 rows and more (2 below mmvRowsK) take the tensor-core or
// dp4a tiles, and the decode attention takes other warps a block (its
// keys split between warps otherwise), the lean entry, or no split over
// blocks, from the blocks of the launch. Here:
//
//   - the integer matrix products that Shape gives the tiles take the
//     matrix-vector kernel's _rows4 entry, mmvRowsWide rows a block, for
//     variants of 3 rows and more where wide (the instance's PTX has
//     that entry: a bundle built before it lacks it), else its _rows
//     entry, mmvRows rows a block (as MegakernelShape's do), ⌈rows/R⌉
//     blocks down the grid's y (those Shape gives the matrix-vector
//     kernel keep it):
//     each weight block is loaded and unpacked once for a block's R rows,
//     and every row's sum is the one-row kernel's (mmv in mmq.cuh;
//     TestKernelMatrixRows). A block of R rows reads the matrix once for
//     them, so a verify step of 5 rows reads it twice with _rows4, three
//     times with _rows;
//   - the attention families take the one-row launch (its entry, warps
//     and shared memory, and its split over blocks along z) with a block
//     per row down y. A split launch counts each (row, head group)'s
//     blocks in one of faCounters counters, which bounds the active rows
//     it may have (SplitRows); past them a step takes the main entry
//     (Unsplit), whose bits are the split one's on rows of at most
//     faSplitMin keys only;
//   - every other family's rows are its blocks' own (a block or thread
//     per row or element, the float matrix path's block per row), so its
//     launch is Shape's.
//
// A one-row variant's launches are Shape's.
func OneRowShape(instance string, push, spec []uint32, rows int, wide bool) (Launch, error) {
	l, err := Shape(instance, push, spec, rows, false)
	if err != nil || rows <= 1 {
		return l, err
	}
	family, typ, _ := strings.Cut(instance, ".")
	switch {
	case MatrixFamily(family) || family == "rms_norm_matmul":
		// rms_norm_matmul has the matrix-vector entries too; the
		// megakernel has no task for it (a megakernel build does not
		// form it), so it is no MatrixFamily.
		if _, ok := mmqTypes[typ]; !ok || l.Entry == EntryMain || l.Entry == EntryRows {
			// The float path (a block per features and row), or the
			// matrix-vector kernel already (a block per row, or the
			// _rows entry Shape gives two rows over large matrices).
			return l, nil
		}
		k, n, err := matrixKN(family, typ, push, spec, rows)
		if err != nil {
			return l, err
		}
		grid, block := mmvShape(typ, k, n)
		r, entry := uint32(1), EntryMain
		switch {
		case wide && rows > mmvRows && mmvRowsWide*mmqStride(k) <= oneRowShared:
			r, entry = mmvRowsWide, EntryRows4
		case mmvRows*mmqStride(k) <= oneRowShared:
			r, entry = mmvRows, EntryRows
		}
		grid[1] = ceilDiv(uint32(rows), r)
		return Launch{Grid: grid, Block: block, Shared: int(r) * mmqStride(k), Entry: entry}, nil
	case family == "flash_attn" || family == "flash_attn_ext":
		one, err := Shape(instance, push, spec, 1, false)
		if err != nil {
			return one, err
		}
		one.Grid[1] = uint32(rows)
		if one.Entry == EntrySplit {
			// Partial states for the rows it may have (SplitRows), not
			// the variant's: a step of more takes it unsplit.
			one.Staged = faStaged(uint32(SplitRows(one, rows)), spec[1], spec[3], one.Grid[2])
		}
		return one, nil
	}
	return l, nil
}

// SplitRows is the most active rows a launch of OneRowShape's may have:
// a split decode attention counts each (row, head group)'s blocks in one
// of faCounters counters, so its rows past faCounters / head groups must
// not be (an active row of at most faSplitMin keys uses none, but a step
// may hold longer ones). For every other launch it is rows, the
// variant's.
func SplitRows(l Launch, rows int) int {
	if l.Entry != EntrySplit || l.Grid[0] == 0 {
		return rows
	}
	return min(rows, int(faCounters/l.Grid[0]))
}

// Unsplit is OneRowShape's launch l for a step of more active rows than
// SplitRows allows: a split decode attention's main entry, a block per
// (head group, row), whose bits are the split one's on rows of at most
// faSplitMin keys; any other launch as it is.
func Unsplit(l Launch) Launch {
	if l.Entry == EntrySplit {
		l.Grid[2], l.Entry, l.Staged = 1, EntryMain, 0
	}
	return l
}
