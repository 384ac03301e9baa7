package cuda

import (
	"fmt"
	"strings"
	"testing"
)

// TestOneRowShape: a step of one-row bits keeps every dispatch on the
// kernels (and, for attention, the warps a block and the split over
// blocks) that a one-row step runs, with a block per row or pair of rows
// down the grid's y, where Shape gives a step of those rows the tiles,
// other warps, the lean entry or no split; rows of the float path and of
// the per-row families keep Shape's launch.
func TestOneRowShape(t *testing.T) {
	for _, c := range []struct {
		inst string
		k, n uint32
	}{
		{"matmul.q8_0", 4096, 4096}, // the llama 7B shape's Q8_0
		{"matmul_residual.q8_0", 11008, 4096},
		{"lm_head.q8_0", 4096, 32000},
		{"matmul.q4_k", 4096, 11008}, // its Q4_K_M
		{"lm_head.q6_k", 4096, 32000},
		{"matmul.q4_0", 1024, 1024},        // small k, no tensor-core tile
		{"matmul.q8_0", 4096 + 128, 4096},  // k not a multiple of 256: dp4a
		{"rms_norm_qkv.q8_0", 4096, 12288}, // fused: k, n_q, n_kv
		{"rms_norm_gate_up.q4_k", 4096, 22016},
		{"matmul.q4_k", 28672, 4096}, // rows too long for four a block in 96 KiB: two
		{"matmul.q8_0", 65536, 512},  // and for two: one (a block per row)
	} {
		push, spec := []uint32{c.k, c.n}, []uint32(nil)
		switch {
		case strings.HasPrefix(c.inst, "rms_norm_qkv."):
			push, spec = nil, []uint32{c.k, c.n / 3, c.n / 3, 0}
		case strings.HasPrefix(c.inst, "rms_norm_gate_up."):
			push, spec = nil, []uint32{c.k, c.n / 2, 0}
		}
		one, err := Shape(c.inst, push, spec, 1, false)
		if err != nil {
			t.Fatal(err)
		}
		for _, rows := range []int{2, 3, 4, 5, 8, 16, 33, 64} {
			for _, wide := range []bool{false, true} {
				l, err := OneRowShape(c.inst, push, spec, rows, wide)
				name := fmt.Sprintf("%s k=%d n=%d, %d rows (wide %v)", c.inst, c.k, c.n, rows, wide)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				// Shape's matrix-vector launches stay; for its tiles,
				// pairs of rows a block (_rows), or where the PTX has it
				// and a step has more than two, four (_rows4).
				r, entry := 2, EntryRows
				if wide && rows > 2 {
					r, entry = 4, EntryRows4
				}
				for r > 1 && r*one.Shared > 96<<10 {
					r, entry = r/2, EntryRows
				}
				if r == 1 {
					entry = EntryMain
				}
				want := Launch{Grid: [3]uint32{one.Grid[0], uint32((rows + r - 1) / r), 1}, Block: one.Block, Shared: r * one.Shared, Entry: entry}
				if s, _ := Shape(c.inst, push, spec, rows, false); s.Entry == EntryMain || s.Entry == EntryRows {
					want = s
				}
				if want.Entry == EntryMain && want.Grid != [3]uint32{one.Grid[0], uint32(rows), 1} || want.Block != one.Block {
					t.Errorf("%s: Shape's matrix-vector launch %+v is not the one-row launch's a block per row", name, want)
				}
				if l.Grid != want.Grid || l.Block != want.Block || l.Shared != want.Shared || l.Entry != want.Entry || l.Stage != nil || l.Staged != 0 {
					t.Errorf("%s: %+v, want the one-row kernel's %s entry %+v", name, l, entry.Suffix(), want)
				}
			}
		}
		if l, err := OneRowShape(c.inst, push, spec, 1, true); err != nil || l.Grid != one.Grid || l.Entry != one.Entry || l.Shared != one.Shared {
			t.Errorf("%s: one row: %+v (%v), want Shape's %+v", c.inst, l, err, one)
		}
	}
	// The float path and the per-row families: Shape's launch.
	for _, c := range []struct {
		inst       string
		push, spec []uint32
	}{
		{"matmul.f16", []uint32{4096, 4096}, nil},
		{"lm_head.q5_k", []uint32{4096, 32000}, nil},
		{"rms_norm", []uint32{4096}, nil},
		{"argmax", []uint32{32000}, nil},
		{"rope_kv_write", []uint32{0}, []uint32{32, 32, 32, 128, 0}},
	} {
		for _, rows := range []int{1, 5, 16} {
			l, err := OneRowShape(c.inst, c.push, c.spec, rows, true)
			want, err2 := Shape(c.inst, c.push, c.spec, rows, false)
			if err != nil || err2 != nil || l.Grid != want.Grid || l.Block != want.Block || l.Entry != want.Entry || l.Shared != want.Shared {
				t.Errorf("%s, %d rows: %+v (%v), want Shape's %+v (%v)", c.inst, rows, l, err, want, err2)
			}
		}
	}
	// Attention: the one-row launch, a block per row.
	for _, c := range []struct {
		inst          string
		heads, kv, hd uint32
		rows          int
		split         bool // every row of the variant may be active with the split
	}{
		{"flash_attn", 32, 32, 128, 5, true},   // the llama 7B shape: Shape gives 16 warps, no split
		{"flash_attn", 32, 32, 128, 8, true},   // 256 (row, head group) counters
		{"flash_attn", 32, 32, 128, 16, false}, // past them: 8 of them (Shape: the lean entry, 8 warps)
		{"flash_attn", 16, 8, 128, 16, true},   // the qwen3 0.6B shape
		{"flash_attn", 16, 8, 128, 64, false},
		{"flash_attn.kv-q8_0-q8_0-rk128-rv64", 16, 8, 128, 4, true},
		{"flash_attn_ext", 16, 8, 256, 3, true},
	} {
		spec := []uint32{2, c.heads, c.kv, c.hd, 0, 0, 0}
		one, err := Shape(c.inst, []uint32{0}, spec, 1, false)
		if err != nil {
			t.Fatal(err)
		}
		if one.Entry != EntrySplit {
			t.Fatalf("%s: the one-row launch %+v is not split", c.inst, one)
		}
		l, err := OneRowShape(c.inst, []uint32{0}, spec, c.rows, true)
		name := fmt.Sprintf("%s %d/%d heads of %d, %d rows", c.inst, c.heads, c.kv, c.hd, c.rows)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if l.Grid[0] != one.Grid[0] || l.Grid[1] != uint32(c.rows) || l.Block != one.Block || l.Shared != one.Shared {
			t.Errorf("%s: %+v, want the one-row launch %+v a block per row", name, l, one)
		}
		// The active rows whose (row, head group) counters the kernel
		// has, and partial states for them; past them, the main entry.
		most := SplitRows(l, c.rows)
		if l.Entry != EntrySplit || l.Grid[2] != one.Grid[2] || l.Staged != faStaged(uint32(most), c.heads, c.hd, one.Grid[2]) {
			t.Errorf("%s: %+v, want the one-row launch's split over %d blocks", name, l, one.Grid[2])
		}
		if most*int(l.Grid[0]) > faCounters || c.split != (most == c.rows) || most < 1 {
			t.Errorf("%s: SplitRows %d for %d head groups, %d counters", name, most, l.Grid[0], faCounters)
		}
		if u := Unsplit(l); u.Entry != EntryMain || u.Grid != [3]uint32{l.Grid[0], l.Grid[1], 1} || u.Staged != 0 || u.Block != l.Block || u.Shared != l.Shared {
			t.Errorf("%s: unsplit %+v, want the main entry of the same blocks", name, u)
		}
	}
}
