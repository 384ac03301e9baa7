package cuda

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/format/bundle"
	kcuda "github.com/zrtdev/zrt/kernels/cuda"
)

// TestMkImage reads the persistent kernel's tables back from their image
// as megakernel.cuh's structs lay them out: MkTask of 13 words (the
// prefetch's address in two), MkWait
// of two, the queues' offsets and task indices, MkOp of eight words, the
// parameters in 8-byte slots, the counters zero; every table 16-byte
// aligned.
func TestMkImage(t *testing.T) {
	m := &mkTables{
		ops:    []mkOp{{code: 4, paramOff: 0, grid: [3]uint32{2, 1, 1}, block: [3]uint32{32, 16, 1}}, {code: 26, paramOff: 3, grid: [3]uint32{1, 1, 1}, block: [3]uint32{512, 1, 1}}},
		params: []uint64{0x7f0000001000, 0x7f0000002000, 4096, 0x7f0000003000},
		tasks: []mkTask{
			{op: 0, box: [6]uint32{0, 1, 0, 1, 0, 1}, waitOff: 0, waitLen: 0, sig: 0},
			{op: 0, box: [6]uint32{1, 2, 0, 1, 0, 1}, waitOff: 0, waitLen: 0, sig: 0},
			{op: 1, box: [6]uint32{0, 1, 0, 1, 0, 1}, waitOff: 0, waitLen: 1, sig: 1, pf: 0x7f0000002240, pfBytes: 4608},
		},
		waits:    []bundle.Wait{{Counter: 0, Count: 2}},
		counters: 2,
		queues:   [][]uint32{{0, 2}, {1}},
	}
	l := m.layout()
	b := m.image(l)
	u32 := func(at int) uint32 { return binary.LittleEndian.Uint32(b[at:]) }
	for _, off := range []int{l.tasks, l.waits, l.queueOff, l.queue, l.ops, l.params, l.counters} {
		if off%16 != 0 {
			t.Fatalf("a table at %d, not 16-byte aligned: %+v", off, l)
		}
	}
	for i, tk := range m.tasks {
		at := l.tasks + 4*mkTaskWords*i
		var got []uint32
		for j := range mkTaskWords {
			got = append(got, u32(at+4*j))
		}
		want := []uint32{tk.op, tk.box[0], tk.box[1], tk.box[2], tk.box[3], tk.box[4], tk.box[5], tk.waitOff, tk.waitLen, tk.sig,
			uint32(tk.pf), uint32(tk.pf >> 32), tk.pfBytes}
		for j := range want {
			if got[j] != want[j] {
				t.Fatalf("task %d word %d: %d, want %d", i, j, got[j], want[j])
			}
		}
	}
	if u32(l.waits) != 0 || u32(l.waits+4) != 2 {
		t.Fatal("the wait")
	}
	if u32(l.queueOff) != 0 || u32(l.queueOff+4) != 2 || u32(l.queueOff+8) != 3 {
		t.Fatal("queue offsets")
	}
	if u32(l.queue) != 0 || u32(l.queue+4) != 2 || u32(l.queue+8) != 1 {
		t.Fatal("queues")
	}
	if at := l.ops + 4*mkOpWords; u32(at) != 26 || u32(at+4) != 3 || u32(at+20) != 512 || u32(at+24) != 1 {
		t.Fatal("the second op")
	}
	if binary.LittleEndian.Uint64(b[l.params+8*3:]) != 0x7f0000003000 || binary.LittleEndian.Uint64(b[l.params+16:]) != 4096 {
		t.Fatal("parameters")
	}
	if u32(l.counters) != 0 || u32(l.counters+4) != 0 || l.size < l.counters+8 {
		t.Fatal("counters")
	}
}

// TestMkTraceReport reads a made-up trace of two blocks and two steps as
// megakernel.cuh writes it: the block's time and its shares, the last
// step's spread, and the functions by their time.
func TestMkTraceReport(t *testing.T) {
	tr := make([]uint64, 2*mkTraceWords)
	for b, h := range [][]uint64{{2, 4000, 0, 1000, 3000}, {2, 2000, 0, 1500, 2500}} {
		copy(tr[b*mkTraceWords:], h)
	}
	put := func(b, code int, tasks, wait, run uint64) {
		at := b*mkTraceWords + mkTraceHead + 3*code
		tr[at], tr[at+1], tr[at+2] = tasks, wait, run
	}
	put(0, 4, 6, 1200, 1800) // mk_matmul_q4_k
	put(1, 4, 2, 200, 600)
	put(1, 42, 2, 100, 900) // mk_argmax
	var out strings.Builder
	mkTraceReport(&out, "decode.s4.r1", tr, 2, 1000000) // 1 GHz: a cycle a ns
	got := out.String()
	t.Log("\n" + got)
	for _, want := range []string{
		"megakernel decode.s4.r1: 2 steps, 2 blocks; a block's step 1.50 µs: 25.0% waiting on counters, 55.0% in tasks, 20.0% between",
		"last step: 2.00 µs from the first block's start to the last one's end; starts over 0.50 µs, ends over 0.50 µs",
		"mk_matmul_q4_k",
		"mk_argmax",
	} {
		if !strings.Contains(got, want) {
			t.Fatalf("report lacks %q:\n%s", want, got)
		}
	}
	if strings.Index(got, "mk_matmul_q4_k") > strings.Index(got, "mk_argmax") {
		t.Fatalf("the function of the most time not first:\n%s", got)
	}
	if ops := kcuda.MegakernelOps(); len(ops) >= mkTraceCodes || ops[3].Func() != "mk_matmul_q4_k" || ops[41].Func() != "mk_argmax" {
		t.Fatalf("the trace's codes: %d ops (at most %d), code 4 %s, code 42 %s", len(ops), mkTraceCodes-1, ops[3].Func(), ops[41].Func())
	}
	out.Reset()
	mkTraceReport(&out, "decode.s4.r1", make([]uint64, mkTraceWords), 1, 0)
	if !strings.Contains(out.String(), "no step traced") {
		t.Fatalf("an empty trace: %s", out.String())
	}
}

// TestMkStride: the tiles of a matrix op with the same waits and rows
// become one block each of a grid of as many blocks, each prefetching its
// tile's rows still; tiles whose waits differ keep their boxes.
func TestMkStride(t *testing.T) {
	s := &bundle.Schedule{
		Tasks: []bundle.Task{
			{Op: 0, Kind: bundle.TaskTile, RowLo: 0, RowHi: 1, Lo: 0, Hi: 80, WaitOff: 0, WaitLen: 1},
			{Op: 0, Kind: bundle.TaskTile, RowLo: 0, RowHi: 1, Lo: 80, Hi: 160, WaitOff: 1, WaitLen: 1},
		},
		Waits: []bundle.Wait{{Counter: 0, Count: 1}, {Counter: 0, Count: 1}},
	}
	tables := func() *mkTables {
		return &mkTables{
			ops: []mkOp{{matrix: true, features: 160, grid: [3]uint32{10, 1, 1}, block: [3]uint32{32, 16, 1}}},
			tasks: []mkTask{{op: 0, box: [6]uint32{0, 5, 0, 1, 0, 1}, pf: 1 << 36, pfBytes: 4096},
				{op: 0, box: [6]uint32{5, 10, 0, 1, 0, 1}, pf: 1<<36 + 4096, pfBytes: 4096}},
		}
	}
	m := tables()
	m.stride(s, 0)
	if m.ops[0].grid[0] != 2 || m.tasks[0].box != [6]uint32{0, 1, 0, 1, 0, 1} || m.tasks[1].box != [6]uint32{1, 2, 0, 1, 0, 1} ||
		m.tasks[0].pfBytes != 4096 || m.tasks[1].pf != 1<<36+4096 {
		t.Fatalf("strided: grid %v, tasks %+v", m.ops[0].grid, m.tasks)
	}
	s.Waits[1].Counter = 1
	m = tables()
	m.stride(s, 0)
	if m.ops[0].grid[0] != 10 || m.tasks[1].box != [6]uint32{5, 10, 0, 1, 0, 1} || m.tasks[1].pfBytes != 4096 {
		t.Fatalf("tiles of other waits: grid %v, tasks %+v", m.ops[0].grid, m.tasks)
	}
}
