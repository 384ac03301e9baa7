package cuda

import (
	"fmt"
	"strings"
	"testing"
)

func TestShapeMatmul(t *testing.T) {
	for _, c := range []struct {
		inst        string
		k, n        uint32
		rows        int
		grid, block [3]uint32
		tile        bool
		fused       bool
	}{
		// Decode: the matrix-vector kernel, warps per row while the matrix fits one pass.
		{"matmul.q8_0", 768, 768, 1, [3]uint32{96, 1, 1}, [3]uint32{64, 8, 1}, false, false},
		{"matmul.q8_0", 2048, 768, 1, [3]uint32{192, 1, 1}, [3]uint32{128, 4, 1}, false, false},
		{"matmul.q4_k", 4096, 1024, 1, [3]uint32{256, 1, 1}, [3]uint32{128, 4, 1}, false, false},
		{"matmul.q4_k", 4096, 14336, 1, [3]uint32{224, 1, 1}, [3]uint32{32, 16, 1}, false, false},
		{"lm_head.q6_k", 4096, 32000, 1, [3]uint32{250, 1, 1}, [3]uint32{32, 16, 1}, false, false},
		// Past 8 rows: the tensor-core tile kernel for K-quants and Q8_0,
		// 16 rows (up to 32, or 64 for k < 4096), 32 (up to 64) or 64 ×
		// MT_N features a block (grid x: the row tiles), its grids of few
		// tiles splitting k (grid z) to fill the multiprocessors
		// (mmtPerSM); the dp4a tile kernel, MM_MR rows a block, its grid
		// bounded to mmqMaxBlocks, otherwise.
		{"matmul.q4_k", 4096, 4096, 128, [3]uint32{2, 32, 4}, [3]uint32{256, 1, 1}, true, false},
		{"matmul.q4_k", 4096, 4096, 4, [3]uint32{1, 32, 8}, [3]uint32{256, 1, 1}, true, false},   // decode past 2 rows: the tile
		{"matmul.q4_k", 4096, 4096, 2, [3]uint32{256, 1, 1}, [3]uint32{32, 16, 1}, false, false}, // 2 rows: matrix-vector, both in a block
		{"matmul.q4_k", 2048, 4096, 2, [3]uint32{256, 2, 1}, [3]uint32{32, 16, 1}, false, false}, // a block a row below k = 4096
		{"matmul.q4_0", 4096, 4096, 4, [3]uint32{256, 4, 1}, [3]uint32{32, 16, 1}, false, false}, // no tensor-core tile: up to 8
		{"matmul.q4_k", 1024, 1024, 64, [3]uint32{4, 8, 4}, [3]uint32{256, 1, 1}, true, false},
		{"matmul.q4_k", 1024, 1024, 16, [3]uint32{1, 8, 4}, [3]uint32{256, 1, 1}, true, false},
		{"matmul.q4_k", 4096, 14336, 64, [3]uint32{2, 112, 1}, [3]uint32{256, 1, 1}, true, false}, // k = 4096: 32-row tiles
		{"matmul.q4_k", 4096, 14336, 32, [3]uint32{2, 112, 1}, [3]uint32{256, 1, 1}, true, false}, // 16-row tiles up to 32 rows
		{"matmul.q4_k", 4096, 14336, 16, [3]uint32{1, 112, 3}, [3]uint32{256, 1, 1}, true, false}, // three narrow blocks a multiprocessor
		{"matmul.q6_k", 4096, 14336, 16, [3]uint32{1, 112, 2}, [3]uint32{256, 1, 1}, true, false}, // two: shared memory
		{"matmul.q4_k", 4096, 4096, 12, [3]uint32{1, 32, 8}, [3]uint32{256, 1, 1}, true, false},   // 8 parts of 2 super-blocks, as long as 12
		{"matmul.q4_k", 512, 1024, 512, [3]uint32{8, 8, 2}, [3]uint32{256, 1, 1}, true, false},    // no more parts than super-blocks
		{"rms_norm_gate_up.q6_k", 4096, 28672, 100, [3]uint32{2, 224, 1}, [3]uint32{256, 1, 1}, true, true},
		{"matmul.q8_0", 4096, 4096, 128, [3]uint32{2, 32, 4}, [3]uint32{256, 1, 1}, true, false},
		{"matmul.q4_0", 4096, 4096, 128, [3]uint32{16, 16, 1}, [3]uint32{256, 1, 1}, true, false},
		{"matmul.q8_0", 4096 + 128, 4096, 128, [3]uint32{16, 16, 1}, [3]uint32{256, 1, 1}, true, false}, // k not a multiple of 256: dp4a
		// Fused norm + gate/up: n = 2f features.
		{"rms_norm_gate_up.q8_0", 768, 4096, 1, [3]uint32{256, 1, 1}, [3]uint32{32, 16, 1}, false, true},
		{"rms_norm_gate_up.q8_0", 768, 4096, 128, [3]uint32{2, 32, 3}, [3]uint32{256, 1, 1}, true, true},
		{"rms_norm_gate_up.q5_k", 768, 4096, 1, [3]uint32{512, 1, 1}, [3]uint32{256, 1, 1}, false, true},
		// The float path.
		{"matmul.f16", 64, 128, 4, [3]uint32{16, 4, 1}, [3]uint32{256, 1, 1}, false, false},
	} {
		push, spec := []uint32{c.k, c.n}, []uint32(nil)
		if c.fused {
			push, spec = nil, []uint32{c.k, c.n / 2, 0} // rms_norm_gate_up: k, f, eps
		}
		l, err := Shape(c.inst, push, spec, c.rows, false)
		if err != nil {
			t.Fatal(err)
		}
		if l.Grid != c.grid || l.Block != c.block || (l.Entry != EntryMain && l.Entry != EntryRows) != c.tile {
			t.Errorf("%s k=%d n=%d rows=%d: grid %v block %v entry %v, want %v %v tile=%v", c.inst, c.k, c.n, c.rows, l.Grid, l.Block, l.Entry, c.grid, c.block, c.tile)
		}
		// The matrix-vector kernel runs MMV_WARPS warps a block, the others 256 threads.
		threads := uint32(256)
		if _, fast := mmqTypes[c.inst[strings.IndexByte(c.inst, '.')+1:]]; fast && !c.tile {
			threads = 32 * mmvWarps
		}
		if got := l.Block[0] * l.Block[1] * l.Block[2]; got != threads {
			t.Errorf("%s: %d threads a block, want %d", c.inst, got, threads)
		}
	}
}

// TestShapeLMHead checks lm_head's multi-row launches: the tensor-core
// tiles, in prefill variants as in decode ones (a prefill's row tiles
// without a row that wants logits leave at once); a matrix of k not a
// multiple of 256 on the dp4a tile kernel, its grid bound per row of
// blocks.
func TestShapeLMHead(t *testing.T) {
	for _, c := range []struct {
		rows    int
		prefill bool
		grid    [3]uint32
		entry   EntryPoint
	}{
		{128, true, [3]uint32{2, 250, 1}, EntryTile},
		{16, false, [3]uint32{1, 250, 1}, EntryTile16},
		{9, false, [3]uint32{1, 250, 1}, EntryTile16},
		{64, false, [3]uint32{2, 250, 1}, EntryTile32},
		{40, false, [3]uint32{2, 250, 1}, EntryTile32},
		{32, false, [3]uint32{2, 250, 1}, EntryTile16},
		{128, false, [3]uint32{2, 250, 1}, EntryTile},
	} {
		l, err := Shape("lm_head.q6_k", []uint32{4096, 32000}, nil, c.rows, c.prefill)
		if err != nil {
			t.Fatal(err)
		}
		if l.Grid != c.grid || l.Entry != c.entry {
			t.Errorf("rows %d prefill %v: grid %v entry %v, want %v %v", c.rows, c.prefill, l.Grid, l.Entry, c.grid, c.entry)
		}
	}
	if l, err := Shape("lm_head.q8_0", []uint32{4000, 32000}, nil, 128, true); err != nil || l.Entry != EntryDP4A || l.Grid != [3]uint32{250, 16, 1} {
		t.Errorf("lm_head.q8_0 of k 4000 at 128 prefill rows: %+v %v", l, err)
	}
	// A type without tensor-core tiles keeps the dp4a kernel, its _tile entry.
	if l, err := Shape("lm_head.q4_0", []uint32{4096, 32000}, nil, 64, false); err != nil || l.Entry != EntryTile || l.Grid[1] != 8 {
		t.Errorf("lm_head.q4_0 at 64 rows: %+v %v", l, err)
	}
}

// TestFlashAttnEntry checks which flash_attn entry a variant gets: the
// tensor-core tiles for prefill variants of at least fatRows rows and head
// widths 64 or 128, the flash-decoding kernel otherwise (decode variants,
// whose rows are one a slot, above all).
func TestFlashAttnEntry(t *testing.T) {
	for _, c := range []struct {
		rows    int
		prefill bool
		hd      uint32
		tile    bool
	}{
		{512, true, 128, true}, {64, true, 64, true}, {32, true, 128, false},
		{64, false, 128, false}, {512, true, 80, false}, {512, true, 256, false},
	} {
		l, err := Shape("flash_attn", []uint32{0}, []uint32{2, 16, 8, c.hd, 0}, c.rows, c.prefill)
		if err != nil {
			t.Fatal(err)
		}
		if tile := l.Entry == EntryTile; tile != c.tile {
			t.Errorf("rows %d prefill %v head_dim %d: entry %q, want tile %v", c.rows, c.prefill, c.hd, l.Entry.Suffix(), c.tile)
		}
		// 16 heads × rows/64 blocks: few enough (≤ 132) for two warps a 16 rows.
		if want := ceilDiv(uint32(c.rows), fatRows); c.tile && (l.Grid != [3]uint32{16, want, 1} || l.Block != [3]uint32{256, 1, 1}) {
			t.Errorf("rows %d: grid %v block %v", c.rows, l.Grid, l.Block)
		}
		// fat_smem: two buffers of a K and a V tile of 64 rows of hd+8 halves.
		if want := map[uint32]int{128: 69632, 64: 36864}[c.hd]; c.tile && l.Shared != want {
			t.Errorf("rows %d head_dim %d: tile shared memory %d, want %d", c.rows, c.hd, l.Shared, want)
		}
		if !c.tile && l.Grid != [3]uint32{8, uint32(c.rows), 1} { // 16 heads on 8 KV heads: blocks of 2
			t.Errorf("rows %d: decode grid %v, want a block per pair of heads and row", c.rows, l.Grid)
		}
	}
}

// TestFlashAttnLean: decode launches of one head a block, heads of at
// most 128 and blocks of faLeanWarps warps (many blocks) take the _lean
// entry; grouped or wider heads, and few blocks (more warps each), the
// main one, or its _split form where the blocks are few enough to split
// (TestFlashAttnSplit).
func TestFlashAttnLean(t *testing.T) {
	for _, c := range []struct {
		heads, kv, hd uint32
		rows          int
		want          EntryPoint
	}{
		{32, 32, 128, 16, EntryLean}, {32, 32, 128, 64, EntryLean}, {16, 16, 64, 40, EntryLean},
		{32, 32, 128, 1, EntrySplit}, {32, 32, 128, 4, EntryMain}, // few blocks: 16 warps each
		{16, 8, 128, 64, EntryMain}, {32, 32, 256, 64, EntryMain}, // grouped; wide
	} {
		l, err := Shape("flash_attn", []uint32{0}, []uint32{2, c.heads, c.kv, c.hd, 0}, c.rows, false)
		if err != nil {
			t.Fatal(err)
		}
		if l.Entry != c.want {
			t.Errorf("%d heads of %d on %d KV heads, %d rows: entry %q, want %q", c.heads, c.hd, c.kv, c.rows, l.Entry.Suffix(), c.want.Suffix())
		}
		if l.Entry == EntryLean && l.Block[0] > 32*faLeanWarps {
			t.Errorf("%d rows: lean block of %d threads", c.rows, l.Block[0])
		}
	}
}

// TestFlashAttnSplit: decode launches of few blocks take the _split
// entry with as many blocks per (head group, row) along z as fill the
// multiprocessors once (at most faMaxSplit), the unsplit launch's warps
// and shared memory, and a staging buffer of a partial state per block;
// prefill launches, launches of many blocks and the lean entry's are
// never split.
func TestFlashAttnSplit(t *testing.T) {
	for _, c := range []struct {
		inst             string
		heads, kv, hd    uint32
		rows             int
		prefill          bool
		splits           uint32 // 1: not split
		gridX, warps     uint32
		quant, extension bool
	}{
		{"flash_attn", 16, 8, 128, 1, false, 16, 8, 16, false, false},  // the qwen3 0.6B shape, one row
		{"flash_attn", 16, 8, 128, 2, false, 8, 8, 16, false, false},   // two rows: 16 blocks
		{"flash_attn", 16, 8, 128, 8, false, 2, 8, 16, false, false},   // 64 blocks
		{"flash_attn", 16, 8, 128, 16, false, 1, 8, 16, false, false},  // 128 blocks fill them already
		{"flash_attn", 16, 8, 128, 1, true, 1, 8, 16, false, false},    // prefill variants keep the main entry
		{"flash_attn", 32, 32, 128, 1, false, 4, 32, 16, false, false}, // the llama 7B shape
		{"flash_attn", 4, 1, 64, 1, false, 32, 1, 16, false, false},    // one block: faMaxSplit
		{"flash_attn", 32, 32, 128, 64, false, 1, 32, 8, false, false}, // many blocks: the lean entry
		{"flash_attn.kv-q8_0-q8_0-rk128-rv64", 16, 8, 128, 1, false, 16, 8, 16, true, false},
		{"flash_attn_ext", 16, 8, 256, 1, false, 16, 8, 16, false, true},
		{"flash_attn_ext.kv-q8_0-q8_0-rk256-rv64", 8, 4, 256, 3, false, 11, 4, 16, true, true},
	} {
		spec := []uint32{2, c.heads, c.kv, c.hd, 0}
		if c.extension {
			spec = append(spec, 0, 0)
		}
		l, err := Shape(c.inst, []uint32{0}, spec, c.rows, c.prefill)
		if err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("%s %d/%d heads of %d, %d rows (prefill %v)", c.inst, c.heads, c.kv, c.hd, c.rows, c.prefill)
		k := attnKey(c.inst, spec, uint32(c.rows))
		geo, row := attnTable[k] // a measured geometry replaces the rule's warps and blocks (TestAttnTable)
		if row && c.splits > 1 {
			c.warps, c.splits = geo.Warps, geo.Splits
		}
		if l.Grid[2] != c.splits || l.Grid[0] != c.gridX || l.Grid[1] != uint32(c.rows) || l.Block[0] != 32*c.warps {
			t.Errorf("%s: grid %v block %v, want (%d, %d, %d) and %d warps", name, l.Grid, l.Block, c.gridX, c.rows, c.splits, c.warps)
		}
		if c.splits > 1 {
			shared := faStagedShared(c.heads/c.gridX, c.warps, c.hd)
			if c.quant {
				shared = faqStaged(c.heads/c.gridX, c.warps, c.hd)
			}
			if row {
				shared = attnShared(k, geo)
			}
			if l.Entry != EntrySplit || l.Stage != nil || l.Shared != shared ||
				l.Staged != 4*mmtCounters+4*c.rows*int(c.heads*c.splits*(c.hd+2)) {
				t.Errorf("%s: %+v, want the _split entry, %d bytes of shared memory and a staging buffer of its partial states", name, l, shared)
			}
			// fa_split_merge's shared weights lie in the warps' accumulators.
			if g := c.heads / c.gridX; g*(faMaxSplit+1) > g*c.warps*c.hd {
				t.Errorf("%s: the merge's weights overflow the accumulators' shared memory", name)
			}
		} else if l.Entry == EntrySplit || l.Staged != 0 {
			t.Errorf("%s: %+v, want no split", name, l)
		}
	}
	for blocks := uint32(1); blocks <= 2*mmtSMs; blocks++ {
		z := faSplits(blocks)
		if z < 1 || z > faMaxSplit || z > 1 && (blocks*z > mmtSMs || blocks > faCounters) {
			t.Errorf("faSplits(%d) = %d", blocks, z)
		}
	}
}

// TestFaGroup: the query heads a decode attention block serves share one
// KV head, as many as divide the group, at most 4, and at most 2 of heads
// wider than 128.
func TestFaGroup(t *testing.T) {
	for _, c := range []struct{ heads, kv, hd, want uint32 }{
		{32, 32, 128, 1}, {16, 8, 128, 2}, {12, 4, 64, 3}, {32, 8, 128, 4}, {32, 4, 128, 4}, {14, 2, 64, 1},
		{24, 2, 128, 4}, {10, 1, 64, 2}, {4, 1, 256, 2}, {12, 4, 256, 1}, {8, 8, 256, 1},
	} {
		if g := faGroup(c.heads, c.kv, c.hd); g != c.want {
			t.Errorf("%d heads of %d on %d KV heads: groups of %d, want %d", c.heads, c.hd, c.kv, g, c.want)
		}
	}
	if _, err := Shape("flash_attn", []uint32{0}, []uint32{2, 12, 5, 64, 0}, 4, false); err == nil {
		t.Error("12 heads on 5 KV heads: no error")
	}
}

// TestMmtSplits: split-k fills the multiprocessors, then takes as few
// parts as keep the longest one as short, and never splits past the
// super-blocks or the counters.
func TestMmtSplits(t *testing.T) {
	for _, c := range []struct{ tiles, kbs, perSM, want uint32 }{
		{32, 16, 3, 8},  // 4096 wide at 16 rows: 12 would fill, 8 parts of 2 do as well
		{32, 43, 3, 11}, // 11008 wide: parts of 4
		{8, 12, 3, 12},  // parts of 1
		{96, 16, 3, 4},  // 396 / 96 = 4 parts of 4
		{172, 16, 3, 2}, // two parts of 8
		{300, 16, 3, 1}, // more tiles than fill the GPU
		{8, 1, 3, 1},    // one super-block
		{257, 64, 3, 1}, // past the counters
	} {
		if got := mmtSplits(c.tiles, c.kbs, c.perSM); got != c.want {
			t.Errorf("%d tiles of %d super-blocks, %d a multiprocessor: %d parts, want %d", c.tiles, c.kbs, c.perSM, got, c.want)
		}
	}
}

// TestFaWarps: a decode attention launch of few blocks gets more warps a
// block, up to faMaxWarps, within 48 KiB of shared memory (the stages
// come on top: faStagedShared); one of many keeps 8.
func TestFaWarps(t *testing.T) {
	for _, c := range []struct{ heads, kv, hd, rows, want uint32 }{
		{16, 8, 128, 16, 16}, {16, 8, 128, 32, 16}, {16, 8, 128, 64, 8}, // qwen3 0.6B: 128 blocks at 16 rows
		{32, 32, 128, 1, 16}, {32, 32, 128, 16, 8}, {32, 32, 128, 64, 8}, // llama 7B
		{4, 1, 256, 1, 16}, {8, 1, 256, 1, 16}, // heads of 256
	} {
		l, err := Shape("flash_attn", []uint32{0}, []uint32{2, c.heads, c.kv, c.hd, 0}, int(c.rows), false)
		if err != nil {
			t.Fatal(err)
		}
		g := faGroup(c.heads, c.kv, c.hd)
		shared := faStagedShared(g, c.want, c.hd)
		if l.Entry == EntryLean {
			shared = faShared(g, c.want, c.hd)
		}
		if k := attnKey("flash_attn", []uint32{2, c.heads, c.kv, c.hd}, c.rows); l.Entry == EntrySplit {
			if geo, ok := attnTable[k]; ok { // a measured split geometry's warps (TestAttnTable); the rule keeps these
				if w := faWarps(k.Blocks, g, c.hd, faShared); w != c.want {
					t.Errorf("%d heads of %d on %d KV heads, %d rows: faWarps %d, want %d", c.heads, c.hd, c.kv, c.rows, w, c.want)
				}
				c.want, shared = geo.Warps, attnShared(k, geo)
			}
		}
		if l.Block[0] != 32*c.want || l.Shared != shared || faShared(g, c.want, c.hd) > 48<<10 {
			t.Errorf("%d heads of %d on %d KV heads, %d rows: block %d, %d bytes shared; want %d warps, %d bytes",
				c.heads, c.hd, c.kv, c.rows, l.Block[0], l.Shared, c.want, shared)
		}
	}
}

// TestFaStagedShared: an F16 cache's decode attention blocks (but the
// lean entry's, compiled for 64 registers) get a stage a warp (fa.cuh's
// FA_STAGE) for heads of 128 and 256 where the block stays within
// faqMaxShared, past faShared's memory rounded to 16 bytes; heads of
// other widths and blocks that would pass the bound get none.
func TestFaStagedShared(t *testing.T) {
	for _, c := range []struct{ g, w, d, stages uint32 }{
		{2, 16, 128, 1}, {1, 16, 128, 1}, {4, 8, 128, 1}, {2, 8, 256, 1}, {1, 16, 256, 1},
		{4, 16, 128, 0}, {2, 16, 256, 0}, {2, 16, 64, 0}, {2, 8, 96, 0},
	} {
		at := (faShared(c.g, c.w, c.d) + 15) &^ 15
		if got := faStagedShared(c.g, c.w, c.d); got != at+int(c.w*c.stages)*faStage || got > faqMaxShared {
			t.Errorf("faStagedShared(%d, %d, %d) = %d, want %d stages a warp past %d, within %d", c.g, c.w, c.d, got, c.stages, at, faqMaxShared)
		}
		if got := AttnShared(false, 8*c.g, 8, c.d, c.w, c.stages); c.stages > 0 && got != faStagedShared(c.g, c.w, c.d) {
			t.Errorf("AttnShared(F16, groups of %d, %d warps, heads of %d, %d stages) = %d, want %d", c.g, c.w, c.d, c.stages, got, faStagedShared(c.g, c.w, c.d))
		}
	}
	// The qwen3 0.6B shape's one-row decode step: the _split entry with
	// a stage a warp; a many-row step of one head a block: the lean entry
	// without.
	k06 := attnKey("flash_attn", []uint32{2, 16, 8, 128}, 1)
	want06 := faStagedShared(2, 16, 128)
	if geo, ok := attnTable[k06]; ok { // a measured geometry (TestAttnTable)
		want06 = attnShared(k06, geo)
	}
	if l, err := Shape("flash_attn", []uint32{0}, []uint32{2, 16, 8, 128, 0}, 1, false); err != nil || l.Entry != EntrySplit ||
		l.Shared != want06 || l.Shared <= faShared(2, l.Block[0]/32, 128) {
		t.Errorf("qwen3 0.6B one-row decode: %+v, %v: want the _split entry with stages", l, err)
	}
	if l, err := Shape("flash_attn", []uint32{0}, []uint32{2, 32, 32, 128, 0}, 64, false); err != nil || l.Entry != EntryLean ||
		l.Shared != faShared(1, l.Block[0]/32, 128) {
		t.Errorf("llama 7B 64-row decode: %+v, %v: want the lean entry without stages", l, err)
	}
	if l, err := Shape("flash_attn_ext", []uint32{0}, []uint32{2, 32, 8, 128, 0, 0, 0}, 16, false); err != nil ||
		l.Shared != faStagedShared(4, l.Block[0]/32, 128) {
		t.Errorf("flash_attn_ext four heads a block: %+v, %v: want faStagedShared's memory", l, err)
	}
}

// TestShapeRows: the _rows entry takes 2-row steps over matrices of k ≥
// 4096, in decode and prefill variants alike, with shared memory for both
// rows; other row counts and smaller k keep a block a row.
func TestShapeRows(t *testing.T) {
	for _, c := range []struct {
		inst    string
		k, rows uint32
		prefill bool
		want    EntryPoint
	}{
		{"matmul.q4_k", 4096, 2, false, EntryRows}, {"matmul.q6_k", 11008, 2, true, EntryRows}, {"lm_head.q8_0", 4096, 2, false, EntryRows},
		{"matmul.q4_k", 4096, 1, false, EntryMain}, {"matmul.q4_0", 4096, 3, false, EntryMain}, {"matmul.q4_k", 1024, 2, false, EntryMain},
	} {
		l, err := Shape(c.inst, []uint32{c.k, 4096}, nil, int(c.rows), c.prefill)
		if err != nil {
			t.Fatal(err)
		}
		if l.Entry != c.want || c.want == EntryRows && (l.Grid[1] != 1 || l.Shared != 2*mmqStride(c.k)) {
			t.Errorf("%s k=%d rows=%d: entry %v grid %v shared %d, want entry %v", c.inst, c.k, c.rows, l.Entry, l.Grid, l.Shared, c.want)
		}
	}
}

// TestFlashAttnQ8KV: the attention instances of a q8_0 cache take faq.cuh's
// decode kernel (never the lean entry) with faqStaged's memory (a stage
// a warp for heads of 128 and 256, none for other widths), and in
// prefill variants of heads of 64 or 128 the tile with _rest beside it;
// heads that are no whole Q8_0 blocks are refused, naming the width.
func TestFlashAttnQ8KV(t *testing.T) {
	const inst = "flash_attn.kv-q8_0-q8_0-rk128-rv64"
	// Decode, one head a block: the F16 instance would take the lean entry.
	l, err := Shape(inst, []uint32{0}, []uint32{2, 32, 32, 128}, 64, false)
	if err != nil || l.Entry != EntryMain || l.Rest != nil {
		t.Fatalf("q8_0 decode: %+v, %v: want the main entry alone", l, err)
	}
	if w := l.Block[0] / 32; l.Shared != faqStaged(1, w, 128) || l.Shared <= faShared(1, w, 128) {
		t.Errorf("q8_0 decode: %d bytes of shared memory for %d warps, want faqStaged's %d", l.Shared, w, faqStaged(1, w, 128))
	}
	for _, c := range []struct{ g, w, d, stages uint32 }{
		{1, 16, 128, 1}, {2, 16, 128, 1}, {4, 16, 128, 1}, {4, 8, 128, 1}, {2, 16, 256, 1}, {2, 8, 256, 1}, {1, 16, 64, 0}, {2, 8, 96, 0}, {2, 16, 160, 0},
	} {
		at := (faqShared(c.g, c.w, c.d) + 15) &^ 15
		if got := faqStaged(c.g, c.w, c.d); got != at+int(c.w*c.stages)*faqStage || got > faqMaxShared {
			t.Errorf("faqStaged(%d, %d, %d) = %d, want %d stages a warp past %d, within %d", c.g, c.w, c.d, got, c.stages, at, faqMaxShared)
		}
	}
	for _, w := range []uint32{8, 16} {
		if faqShared(4, w, 128) > 48<<10 {
			t.Errorf("faqShared(4, %d, 128) = %d: past the default 48 KiB", w, faqShared(4, w, 128))
		}
	}
	l, err = Shape(inst, []uint32{0}, []uint32{2, 8, 2, 128}, 128, true)
	if err != nil || l.Entry != EntryTile || l.Rest == nil || l.Rest.Entry != EntryRest || l.Rest.Shared != faqStaged(4, l.Rest.Block[0]/32, 128) {
		t.Errorf("q8_0 prefill: %+v, %v: want the tile with the q8_0 decode kernel's _rest", l, err)
	}
	// A 2048-row step of the 32-head 7B shape: 1024 blocks, four warps each.
	if l, err := Shape("flash_attn", []uint32{0}, []uint32{2, 32, 32, 128, 0}, 2048, true); err != nil || l.Entry != EntryTile ||
		l.Grid != [3]uint32{32, 32, 1} || l.Block != [3]uint32{128, 1, 1} {
		t.Errorf("7B prefill of 2048 rows: %+v, %v: want 32×32 blocks of 4 warps", l, err)
	}
	// fat_smem: one F16 K and V tile (64 rows of 136 halves), one buffer
	// of 64 raw K and V rows (4 blocks of 34 bytes).
	if l.Shared != 2*64*136*2+2*64*136 {
		t.Errorf("q8_0 prefill: tile shared memory %d, want %d", l.Shared, 2*64*136*2+2*64*136)
	}
	l, err = Shape("flash_attn_ext.kv-q8_0-q8_0", []uint32{0}, []uint32{2, 8, 2, 96, 0, 0, 0}, 128, true)
	if err != nil || l.Entry != EntryMain || l.Shared != faqShared(4, l.Block[0]/32, 96) {
		t.Errorf("q8_0 flash_attn_ext, heads of 96: %+v, %v: want the main entry", l, err)
	}
	if _, err := Shape("flash_attn.kv-q8_0-q8_0", []uint32{0}, []uint32{2, 8, 2, 80}, 4, false); err == nil || !strings.Contains(err.Error(), "80") {
		t.Errorf("q8_0 heads of 80: %v, want an error naming the width", err)
	}
}

// TestFitShared: a decode attention launch past a device's shared memory
// a block keeps the stages that fit (an sm_89 card's 99 KiB holds none of
// the qwen3 0.6B shape's F16 one-row step, two of a q8_0 step's three at
// 8 warps; the prefill's _rest), within the limit keeps them all, and
// other launches (the prefill tile, a matrix product) come back as they
// are.
func TestFitShared(t *testing.T) {
	const sm89, sm90 = 99 << 10, 227 << 10
	spec := []uint32{2, 16, 8, 128, 0}
	l, err := Shape("flash_attn", []uint32{0}, spec, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	// At 16 warps (the rule's) no stage fits; a measured geometry of
	// fewer warps keeps what does.
	w1 := l.Block[0] / 32
	got := FitShared("flash_attn", spec, l, sm89)
	if w1 == 16 && got.Shared != (faShared(2, 16, 128)+15)&^15 || got.Shared > sm89 || got.Shared < (faShared(2, w1, 128)+15)&^15 ||
		got.Grid != l.Grid || got.Entry != l.Entry {
		t.Errorf("F16 one-row step of %d warps on 99 KiB: %+v, want the stages that fit (none at 16 warps: %d bytes)", w1, got, (faShared(2, 16, 128)+15)&^15)
	}
	if got := FitShared("flash_attn", spec, l, sm90); got.Shared != l.Shared {
		t.Errorf("F16 one-row step on 227 KiB: %d bytes, want the launch's %d", got.Shared, l.Shared)
	}
	q := l
	q.Block[0] = 32 * 8
	q.Shared = AttnShared(true, 16, 8, 128, 8, 3)
	limit := AttnShared(true, 16, 8, 128, 8, 2) + 100
	if got := FitShared("flash_attn.kv-q8_0-q8_0", spec, q, limit); got.Shared != AttnShared(true, 16, 8, 128, 8, 2) {
		t.Errorf("q8_0, 3 stages of 8 warps within %d bytes: %d, want 2 stages' %d", limit, got.Shared, AttnShared(true, 16, 8, 128, 8, 2))
	}
	tile, err := Shape("flash_attn", []uint32{0}, spec, 128, true)
	if err != nil || tile.Entry != EntryTile {
		t.Fatalf("prefill: %+v, %v", tile, err)
	}
	if got := FitShared("flash_attn", spec, tile, 1024); got.Shared != tile.Shared {
		t.Errorf("the prefill tile: %d bytes, want its own %d", got.Shared, tile.Shared)
	}
	w := tile.Rest.Block[0] / 32
	if got := FitShared("flash_attn", spec, *tile.Rest, 40<<10); tile.Rest.Shared <= 40<<10 || got.Shared != (faShared(2, w, 128)+15)&^15 {
		t.Errorf("the prefill's _rest (%d bytes) within 40 KiB: %d, want no stages", tile.Rest.Shared, got.Shared)
	}
	mm, err := Shape("matmul.q4_k", []uint32{4096, 4096}, nil, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := FitShared("matmul.q4_k", nil, mm, 0); got.Shared != mm.Shared {
		t.Errorf("matmul: %d bytes, want its own %d", got.Shared, mm.Shared)
	}
}

// rms_norm_gate_up_swiglu has only the matrix-vector (and float) entry of
// one-row decode steps: a launch of more rows, or a prefill, is refused
// rather than given an entry its instance lacks.
func TestGateUpSwiGLUOneRow(t *testing.T) {
	spec := []uint32{4096, 11008, 0}
	l, err := Shape("rms_norm_gate_up_swiglu.q4_k", nil, spec, 1, false)
	if err != nil || l.Entry != EntryMain || l.Block[1]%2 != 0 {
		t.Fatalf("one row: %+v, %v (want the main entry, an even number of features a block)", l, err)
	}
	for _, c := range []struct {
		rows    int
		prefill bool
	}{{2, false}, {16, false}, {1, true}} {
		if _, err := Shape("rms_norm_gate_up_swiglu.q4_k", nil, spec, c.rows, c.prefill); err == nil {
			t.Errorf("%d rows, prefill %v: no error", c.rows, c.prefill)
		}
	}
}

// rms_norm_qkv_rope_kv_write rotates adjacent feature pairs only: a NeoX
// rotation (spec neox, the tenth) is refused, as are more rows.
func TestQKVRopeOneRowAdjacent(t *testing.T) {
	spec := []uint32{4096, 4096, 4096, 0, 32, 32, 32, 128, 128, 0, 0, 0}
	if l, err := Shape("rms_norm_qkv_rope_kv_write.q4_k", []uint32{3}, spec, 1, false); err != nil || l.Entry != EntryMain || l.Block[1]%2 != 0 {
		t.Fatalf("one row: %+v, %v", l, err)
	}
	neox := append([]uint32(nil), spec...)
	neox[9] = 1
	if _, err := Shape("rms_norm_qkv_rope_kv_write.q4_k", []uint32{3}, neox, 1, false); err == nil {
		t.Error("NeoX pairs: no error")
	}
	if _, err := Shape("rms_norm_qkv_rope_kv_write.q4_k", []uint32{3}, spec, 2, false); err == nil {
		t.Error("2 rows: no error")
	}
}

// TestFP8AttentionHeads: the decode attention over an FP8 cache takes
// heads of whole 64-value blocks (Q8_0's of 32), and Shape refuses
// others, naming the cache, where its kernels would write nothing.
func TestFP8AttentionHeads(t *testing.T) {
	for _, c := range []struct {
		inst string
		hd   uint32
		ok   bool
	}{
		{"flash_attn.kv-fp8_e4m3-fp8_e4m3", 128, true},
		{"flash_attn_ext.kv-fp8_e4m3-fp8_e4m3", 192, true},
		{"flash_attn.kv-fp8_e4m3-fp8_e4m3", 96, false},
		{"flash_attn_ext.kv-fp8_e4m3-fp8_e4m3", 32, false},
		{"flash_attn.kv-q8_0-q8_0", 96, true},
	} {
		spec := []uint32{2, 8, 4, c.hd, 0x3e000000}
		if strings.HasPrefix(c.inst, "flash_attn_ext") {
			spec = append(spec, 0, 0)
		}
		_, err := Shape(c.inst, []uint32{1}, spec, 1, false)
		if (err == nil) != c.ok || (err != nil && !strings.Contains(err.Error(), "FP8")) {
			t.Errorf("%s, heads of %d: %v, want ok %v", c.inst, c.hd, err, c.ok)
		}
	}
}
