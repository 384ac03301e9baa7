package cuda

import "testing"

// TestBlockFeatures holds the megakernel's tiles to its launches'
// blocks: 16 features a matrix-vector block of a 4096-square Q4_K matrix
// (256 blocks of RPB 16), also in steps of four and eight rows, which the
// persistent kernel runs on the _rows entry where the graph path takes
// the tensor-core tiles (MT_N features a block, as at nine rows), and the
// fused projections' outputs counted together.
func TestBlockFeatures(t *testing.T) {
	for _, c := range []struct {
		instance   string
		push, spec []uint32
		rows       int
		n, per     uint32
	}{
		{"matmul.q4_k", []uint32{4096, 4096}, nil, 1, 4096, 16},
		{"matmul.q4_k", []uint32{4096, 4096}, nil, 4, 4096, 16},
		{"matmul.q4_k", []uint32{4096, 4096}, nil, 8, 4096, 16},
		{"matmul.q4_k", []uint32{4096, 4096}, nil, 9, 4096, 128},
		{"matmul.q5_k", []uint32{4096, 4096}, nil, 1, 4096, 8},
		{"lm_head.q6_k", []uint32{1024, 32000}, nil, 1, 32000, 0},
		{"lm_head.q6_k", []uint32{1024, 151669}, nil, 1, 151669, 576}, // 264 blocks of 575: whole passes of RPB 16
		{"rms_norm_qkv.q8_0", nil, []uint32{1024, 2048, 512, 0}, 1, 3072, 0},
	} {
		n, per, err := BlockFeatures(c.instance, c.push, c.spec, c.rows)
		if err != nil {
			t.Errorf("%s: %v", c.instance, err)
			continue
		}
		l, _ := MegakernelShape(c.instance, c.push, c.spec, c.rows)
		blocks := (n + per - 1) / per
		if n != c.n || (c.per != 0 && per != c.per) || ((l.Entry == EntryMain || l.Entry == EntryRows) && blocks != l.Grid[0]) {
			t.Errorf("%s at %d rows: %d features, %d a block (%d blocks, the launch's %d); want %d, %d", c.instance, c.rows, n, per, blocks, l.Grid[0], c.n, c.per)
		}
	}
	for _, rows := range []int{3, 4, 8} {
		l, err := MegakernelShape("rms_norm_gate_up.q6_k", nil, []uint32{1024, 3072, 0}, rows)
		g, _ := Shape("rms_norm_gate_up.q6_k", nil, []uint32{1024, 3072, 0}, rows, false)
		if err != nil || l.Entry != EntryRows || l.Grid[1] != uint32(rows+1)/2 || l.Stage != nil || l.Staged != 0 || g.Entry == EntryRows {
			t.Errorf("rms_norm_gate_up.q6_k at %d rows: %+v, %v (the graph path's %s)", rows, l, err, g.Entry.Suffix())
		}
	}
	// The split decode attention runs unsplit in the kernel, over an F16
	// cache without the stages (the same bits).
	for _, rows := range []int{1, 2, 8} {
		spec := []uint32{2, 16, 8, 128, 0}
		g, _ := Shape("flash_attn", []uint32{0}, spec, rows, false)
		l, err := MegakernelShape("flash_attn", []uint32{0}, spec, rows)
		if err != nil || g.Entry != EntrySplit || l.Entry != EntryMain || l.Grid[2] != 1 || l.Staged != 0 || l.Grid[0] != g.Grid[0] ||
			l.Block != g.Block || rows > 1 && g.Shared != faStagedShared(2, 16, 128) || g.Shared <= l.Shared || l.Shared != faShared(2, g.Block[0]/32, 128) {
			t.Errorf("flash_attn at %d rows: %+v, %v (the graph path's %+v)", rows, l, err, g)
		}
	}
	if _, _, err := BlockFeatures("rms_norm", []uint32{64, 64}, nil, 1); err == nil {
		t.Error("rms_norm has block features")
	}
	if Multiprocessors("cuda:sm_90") != 132 || Multiprocessors("cpu") != 0 {
		t.Error("multiprocessors of cuda:sm_90 and cpu")
	}
}
