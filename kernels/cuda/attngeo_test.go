package cuda

import (
	"strings"
	"testing"
)

// TestAttnTable: every measured geometry can run its shape (attnGeometry's
// check: warps that load and merge the heads, splits the merge takes,
// stages of a staged walk, shared memory within faqMaxShared), and Shape
// gives it to the launch of that shape: its warps, blocks a head group,
// shared memory and staging buffer.
func TestAttnTable(t *testing.T) {
	for k, g := range attnTable {
		if err := g.check(k); err != nil {
			t.Errorf("%+v: %v", k, err)
		}
		if k.SMs != mmtSMs {
			t.Errorf("%+v: a row for %d multiprocessors; launches are shaped for %d", k, k.SMs, mmtSMs)
		}
	}
	for _, c := range []struct {
		inst          string
		heads, kv, hd uint32
		rows          int
	}{
		{"flash_attn", 16, 8, 128, 1}, {"flash_attn", 32, 32, 128, 1}, {"flash_attn", 16, 8, 128, 2},
		{"flash_attn.kv-q8_0-q8_0", 16, 8, 128, 1}, {"flash_attn.kv-q8_0-q8_0", 32, 32, 128, 1},
		{"flash_attn_ext", 16, 8, 128, 1}, {"flash_attn_ext", 8, 4, 256, 1}, {"flash_attn", 16, 8, 64, 1},
	} {
		spec := []uint32{2, c.heads, c.kv, c.hd, 0}
		if strings.HasPrefix(c.inst, "flash_attn_ext") {
			spec = append(spec, 0, 0)
		}
		l, err := Shape(c.inst, []uint32{0}, spec, c.rows, false)
		if err != nil || l.Entry != EntrySplit {
			t.Fatalf("%s %v at %d rows: %+v, %v: want the _split entry", c.inst, spec, c.rows, l, err)
		}
		k := attnKey(c.inst, spec, uint32(c.rows))
		unsplit := faWarps(k.Blocks, k.Group, c.hd, faShared)
		if k.Quant {
			unsplit = faWarps(k.Blocks, k.Group, c.hd, faqShared)
		}
		want, row := attnTable[k]
		if !row {
			want = attnRule(k, unsplit)
		}
		got, isRow, err := AttnChosen(c.inst, spec, c.rows)
		if err != nil || got != want || isRow != row {
			t.Errorf("%s %v at %d rows: AttnChosen %+v (row %v), %v; want %+v (row %v)", c.inst, spec, c.rows, got, isRow, err, want, row)
		}
		if l.Block[0] != 32*want.Warps || l.Grid[2] != want.Splits || l.Shared != attnShared(k, want) ||
			l.Staged != faStaged(uint32(c.rows), c.heads, c.hd, want.Splits) {
			t.Errorf("%s %v at %d rows: %+v, want geometry %+v", c.inst, spec, c.rows, l, want)
		}
		// The sweep's launch of the chosen geometry is Shape's.
		if s, err := AttnSplitLaunch(c.inst, spec, c.rows, want); err != nil || s.Block != l.Block || s.Grid != l.Grid ||
			s.Shared != l.Shared || s.Staged != l.Staged || s.Entry != l.Entry {
			t.Errorf("%s %v at %d rows: AttnSplitLaunch %+v, %v; Shape %+v", c.inst, spec, c.rows, s, err, l)
		}
	}
}

// TestAttnRule: without a table row a split launch keeps the unsplit
// launch's warps, faSplits' blocks a head group for the multiprocessors
// and a stage a warp where faqStaged and faStagedShared give one — the
// launches before the table existed.
func TestAttnRule(t *testing.T) {
	for _, c := range []struct {
		k    AttnKey
		w    uint32
		want AttnGeometry
	}{
		{AttnKey{false, 128, 2, 8, 132}, 16, AttnGeometry{16, 16, 1}},
		{AttnKey{false, 128, 1, 32, 132}, 16, AttnGeometry{16, 4, 1}},
		{AttnKey{true, 128, 2, 8, 132}, 16, AttnGeometry{16, 16, 1}},
		{AttnKey{false, 128, 4, 8, 132}, 16, AttnGeometry{16, 16, 0}}, // four heads a block at 16 warps: past faqMaxShared
		{AttnKey{false, 64, 2, 8, 132}, 16, AttnGeometry{16, 16, 0}},  // no staged walk
		{AttnKey{false, 128, 2, 8, 108}, 16, AttnGeometry{16, 13, 1}}, // an A100
		{AttnKey{false, 128, 2, 1, 132}, 16, AttnGeometry{16, 32, 1}}, // one block: faMaxSplit
	} {
		if got := attnRule(c.k, c.w); got != c.want {
			t.Errorf("attnRule(%+v, %d) = %+v, want %+v", c.k, c.w, got, c.want)
		}
		if c.k.SMs == mmtSMs && c.k.Quant == false && attnShared(c.k, c.want) != faStagedShared(c.k.Group, c.w, c.k.HeadDim) {
			t.Errorf("%+v: %d bytes of shared memory, faStagedShared %d", c.k, attnShared(c.k, c.want), faStagedShared(c.k.Group, c.w, c.k.HeadDim))
		}
		if c.k.Quant && attnShared(c.k, c.want) != faqStaged(c.k.Group, c.w, c.k.HeadDim) {
			t.Errorf("%+v: %d bytes of shared memory, faqStaged %d", c.k, attnShared(c.k, c.want), faqStaged(c.k.Group, c.w, c.k.HeadDim))
		}
	}
}

// TestAttnSplitLaunch: the sweep's launches take any geometry the kernels
// can run and refuse, with an error naming it, those they cannot.
func TestAttnSplitLaunch(t *testing.T) {
	q06 := []uint32{1, 16, 8, 128, 0}
	l, err := AttnSplitLaunch("flash_attn", q06, 1, AttnGeometry{8, 32, 2})
	if err != nil || l.Entry != EntrySplit || l.Block[0] != 256 || l.Grid != [3]uint32{8, 1, 32} ||
		l.Shared != (faShared(2, 8, 128)+15)&^15+2*8*faStage || l.Staged != faStaged(1, 16, 128, 32) {
		t.Errorf("8 warps, 32 blocks, 2 stages: %+v, %v", l, err)
	}
	if got := attnStages("flash_attn", q06, l); got != 2 {
		t.Errorf("attnStages of %+v = %d, want 2", l, got)
	}
	ql, err := AttnSplitLaunch("flash_attn.kv-q8_0-q8_0", q06, 1, AttnGeometry{4, 8, 4})
	if err != nil || ql.Shared != (faqShared(2, 4, 128)+15)&^15+4*4*faqStage || attnStages("flash_attn.kv-q8_0-q8_0", q06, ql) != 4 {
		t.Errorf("q8_0, 4 warps, 8 blocks, 4 stages: %+v, %v", ql, err)
	}
	for _, c := range []struct {
		spec []uint32
		rows int
		g    AttnGeometry
		want string
	}{
		{q06, 1, AttnGeometry{2, 16, 0}, "2 warps"}, // a head of 128 needs 4 warps to load it
		{[]uint32{1, 8, 4, 256, 0}, 1, AttnGeometry{4, 16, 0}, "4 warps"},
		{q06, 1, AttnGeometry{17, 16, 0}, "17 warps"},
		{q06, 1, AttnGeometry{16, 33, 0}, "33 blocks"},
		{q06, 1, AttnGeometry{16, 1, 0}, "1 blocks"},
		{q06, 1, AttnGeometry{16, 16, 2}, "shared memory"}, // 16 warps of two 8 KiB stages
		{q06, 1, AttnGeometry{4, 16, 5}, "5 stages"},
		{[]uint32{1, 16, 8, 64, 0}, 1, AttnGeometry{8, 16, 1}, "heads of 64"},
		{q06, 64, AttnGeometry{8, 4, 0}, "not split"},                         // 512 blocks: past the counters
		{[]uint32{1, 32, 32, 128, 0}, 64, AttnGeometry{8, 4, 0}, "not split"}, // the lean entry's launch
	} {
		_, err := AttnSplitLaunch("flash_attn", c.spec, c.rows, c.g)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v at %d rows, %+v: error %v, want one naming %q", c.spec, c.rows, c.g, err, c.want)
		}
	}
}

// TestAttnResplit: a verify step's attention (OneRowShape: the one-row
// split down the rows, which Shape at 16 rows would not split) takes
// another geometry with its rows and its staging buffer's rows
// (SplitRows) kept; a launch that is not split is refused.
func TestAttnResplit(t *testing.T) {
	q06 := []uint32{1, 16, 8, 128, 0}
	one, err := OneRowShape("flash_attn", []uint32{0}, q06, 16, false)
	if err != nil || one.Entry != EntrySplit {
		t.Fatalf("OneRowShape at 16 rows: %+v, %v: want a split launch", one, err)
	}
	g := AttnGeometry{Warps: 8, Splits: 8, Stages: 1}
	l, err := AttnResplit(one, "flash_attn", q06, g)
	rows := uint32(SplitRows(one, 16))
	if err != nil || l.Grid != [3]uint32{8, 16, 8} || l.Block[0] != 256 || l.Staged != faStaged(rows, 16, 128, 8) ||
		l.Shared != attnShared(attnKey("flash_attn", q06, 16), g) {
		t.Errorf("resplit %+v as %v: %+v, %v", one, g, l, err)
	}
	if _, err := AttnResplit(Unsplit(one), "flash_attn", q06, g); err == nil || !strings.Contains(err.Error(), "not a split launch") {
		t.Errorf("the main entry resplit: error %v", err)
	}
}

// TestParseAttnGeometry: String's form reads back; anything else is an
// error naming the text.
func TestParseAttnGeometry(t *testing.T) {
	for _, g := range []AttnGeometry{{8, 16, 1}, {16, 4, 0}, {12, 32, 2}} {
		if got, err := ParseAttnGeometry(g.String()); err != nil || got != g {
			t.Errorf("ParseAttnGeometry(%q) = %+v, %v", g.String(), got, err)
		}
	}
	for _, s := range []string{"", "w8z16", "w8 z16 st1", "8/16/1", "w8z16st1x", "w-1z16st1", "w08z16st1"} {
		if _, err := ParseAttnGeometry(s); err == nil || !strings.Contains(err.Error(), "geometry") {
			t.Errorf("ParseAttnGeometry(%q): error %v", s, err)
		}
	}
}
