package t1

import (
	"context"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/asm/pm4"
	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/internal/testmodel"
	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/runtime/amd/kfd"
	"github.com/zrtdev/zrt/runtime/amd/kfdsim"
)

// BuildTiny compiles the tiny synthetic llama for target and opens it
// (cpu until the AMD targets exist: the simulated device runs T-CPU
// kernels either way).
func BuildTiny(t testing.TB, target string) *bundle.Bundle {
	t.Helper()
	_, out := testmodel.Bundle(t, "", compiler.Options{Target: target})
	b, err := bundle.Open(out, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// loadSim loads the tiny bundle on a simulated device, with a request
// table of one prompt row so that the kernels do real work.
func loadSim(t *testing.T) *Tier { t.Helper(); return loadSimFor(t, "cpu") }

func loadSimFor(t *testing.T, target string) *Tier {
	t.Helper()
	if _, ok := kernels.LookupTarget(target); !ok {
		t.Skipf("this zrtc has no target %s", target)
	}
	b := BuildTiny(t, target)
	tt, err := Load(b, kfdsim.New(1), Options{CloseDevice: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tt.Close() })
	h := b.Graph.Hparams
	table := kernels.NewRequestTable(h.PrefillChunk, h.MaxSlots, h.MaxPages)
	for i, r := range b.Graph.Regions {
		if r.Name != kernels.RegionIO {
			continue
		}
		io := tt.Region(i)
		put := func(w int, v uint32) { binary.LittleEndian.PutUint32(io[4*w:], v) }
		put(kernels.IOWordMaxPages, uint32(table.MaxPages))
		put(kernels.IOWordPageTable, uint32(table.PageTable()))
		put(kernels.IOWordRows, 1)
		put(kernels.IOWordRowBase+kernels.IORowToken, 300)
		put(kernels.IOWordRowBase+kernels.IORowFlags, kernels.RowWantsLogits)
	}
	return tt
}

// mustFault runs variant 0 and wants an error naming want; a second run
// must fail too (the queue stays faulted, as a hung GPU queue would).
func mustFault(t *testing.T, tt *Tier, want string) {
	t.Helper()
	err := tt.Run(context.Background(), 0)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("want an error about %q, got %v", want, err)
	}
	if err2 := tt.Run(context.Background(), 0); err2 == nil {
		t.Fatal("a faulted queue ran the next submission")
	}
	t.Log(err)
}

// packets decodes variant vi's patched stream.
func packets(t *testing.T, tt *Tier, vi int) []pm4.Packet {
	p, err := pm4.Decode(tt.variants[vi].words)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSimRunsOK(t *testing.T) {
	tt := loadSim(t)
	for i := 0; i < 3; i++ {
		if err := tt.Run(context.Background(), 0); err != nil {
			t.Fatal(err)
		}
	}
	if w := tt.ring.WritePointer(); w != 3*uint64(len(tt.variants[0].words)) {
		t.Fatalf("write pointer %d after three submissions of %d dwords", w, len(tt.variants[0].words))
	}
}

// The ring wraps: many submissions through a small ring.
func TestSimRingWraps(t *testing.T) {
	b := BuildTiny(t, "cpu")
	tt, err := Load(b, kfdsim.New(1), Options{CloseDevice: true, RingBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer tt.Close()
	vi := len(tt.variants) - 1 // a decode variant: smaller than the ring
	if len(tt.variants[vi].words) > 1024 {
		t.Skip("variant larger than the test ring")
	}
	for i := 0; i < 10; i++ {
		if err := tt.Run(context.Background(), vi); err != nil {
			t.Fatalf("submission %d: %v", i, err)
		}
	}
	if tt.ring.WritePointer() <= tt.ring.Dwords() {
		t.Fatal("the ring never wrapped")
	}
}

// A dispatch whose barrier after the previous dispatch became NOPs: the
// stream still passes the load checks (they cannot see data dependences),
// the simulated CP refuses it.
func TestSimCatchesMissingBarrier(t *testing.T) {
	tt := loadSim(t)
	w := tt.variants[0].words
	nopFirstBarrier(t, tt, w)
	mustFault(t, tt, "lacks the barrier it needs")
}

// A user-data pointer moved past its region's allocation (into the guard
// page) is caught at the dispatch.
func TestSimCatchesPointerOutsideRegion(t *testing.T) {
	tt := loadSim(t)
	w := tt.variants[0].words
	done := false
	for _, p := range packets(t, tt, 0) {
		if p.Op == pm4.SET_SH_REG && p.Body[0] == pm4.COMPUTE_USER_DATA_0 {
			cur, m := uint64(p.Body[1])|uint64(p.Body[2])<<32, tt.regions[0]
			for _, r := range tt.regions {
				if cur >= r.VA && cur <= r.VA+r.Size {
					m = r
				}
			}
			a := m.VA + m.Size + 64
			w[p.Offset+2], w[p.Offset+3] = uint32(a), uint32(a>>32)
			done = true
			break
		}
	}
	if !done {
		t.Fatal("no user data to damage")
	}
	mustFault(t, tt, "not inside any allocation")
}

// A program address pointing into a data region is refused.
func TestSimCatchesProgramInDataMemory(t *testing.T) {
	tt := loadSim(t)
	w := tt.variants[0].words
	for _, p := range packets(t, tt, 0) {
		if p.Op == pm4.SET_SH_REG && p.Body[0] == pm4.COMPUTE_PGM_LO {
			a := tt.regions[0].VA
			w[p.Offset+2], w[p.Offset+3] = uint32(a>>8), uint32(a>>40)
			break
		}
	}
	mustFault(t, tt, "not executable memory")
}

// A ring writer that stores a packet's header before its body.
func TestSimCatchesHeaderBeforeBody(t *testing.T) {
	tt := loadSim(t)
	r := tt.ring
	words := tt.variants[0].words
	mask := r.n - 1
	for i, x := range words { // in stream order: every header before its body
		r.buf.Store32(4*((r.w+uint64(i))&mask), x)
	}
	r.w += uint64(len(words))
	r.ptrs.Store64(kfd.WritePtrOff, r.w)
	err := r.db.Ring(r.w)
	if err == nil || !strings.Contains(err.Error(), "header written before its body") {
		t.Fatalf("want the header-order error, got %v", err)
	}
	t.Log(err)
}

// A doorbell rung with a write pointer past what was written.
func TestSimCatchesDoorbellPastData(t *testing.T) {
	tt := loadSim(t)
	r := tt.ring
	if err := tt.Run(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	nop := []uint32{pm4.Header(pm4.NOP, 3), 0, 0, 0}
	mask := r.n - 1
	for i := len(nop) - 1; i >= 0; i-- {
		r.buf.Store32(4*((r.w+uint64(i))&mask), nop[i])
	}
	w := r.w + 8 // four dwords more than written
	r.ptrs.Store64(kfd.WritePtrOff, w)
	err := r.db.Ring(w)
	if err == nil || !strings.Contains(err.Error(), "past the written data") {
		t.Fatalf("want the doorbell error, got %v", err)
	}
	t.Log(err)
}

// A doorbell whose value differs from the write pointer in memory.
func TestSimCatchesDoorbellMismatch(t *testing.T) {
	tt := loadSim(t)
	r := tt.ring
	err := r.db.Ring(r.w + 4)
	if err == nil || !strings.Contains(err.Error(), "write pointer in memory") {
		t.Fatalf("want the write-pointer error, got %v", err)
	}
}

// The hardware form of a gfx bundle: the simulated device holds each
// dispatch's registers to the code object and reads its arguments from
// the kernarg segment.
func TestSimGfxHardwareForm(t *testing.T) {
	tt := loadSimFor(t, "amd:gfx1201")
	if !tt.isGfx {
		t.Fatal("an amd:gfx1201 bundle did not load as gfx code objects")
	}
	if err := tt.Run(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	for _, p := range packets(t, tt, 0) {
		if p.Op == pm4.SET_SH_REG && p.Body[0] == pm4.COMPUTE_USER_DATA_0 && len(p.Body) != 3 {
			t.Fatalf("dword %#x: user data of %d dwords, want the kernarg address only", p.Offset, len(p.Body)-1)
		}
	}
}

func damageFirst(t *testing.T, tt *Tier, reg uint32, f func(body []uint32)) {
	t.Helper()
	w := tt.variants[0].words
	for _, p := range packets(t, tt, 0) {
		if p.Op == pm4.SET_SH_REG && p.Body[0] == reg {
			f(w[p.Offset+1 : p.Offset+1+len(p.Body)])
			return
		}
	}
	t.Fatalf("no SET_SH_REG of %#x", reg)
}

func TestSimGfxCatchesWrongRsrc(t *testing.T) {
	tt := loadSimFor(t, "amd:gfx1201")
	damageFirst(t, tt, kfd.RegPgmRsrc1, func(b []uint32) { b[1] ^= 0x3f })
	mustFault(t, tt, "COMPUTE_PGM_RSRC1")
}

func TestSimGfxCatchesKernargOutside(t *testing.T) {
	tt := loadSimFor(t, "amd:gfx1201")
	a := tt.kernarg.VA + tt.kernarg.Size + 64
	damageFirst(t, tt, pm4.COMPUTE_USER_DATA_0, func(b []uint32) { b[1], b[2] = uint32(a), uint32(a>>32) })
	mustFault(t, tt, "kernarg address")
}

func TestSimGfxCatchesMissingBarrier(t *testing.T) {
	tt := loadSimFor(t, "amd:gfx1201")
	w := tt.variants[0].words
	nopFirstBarrier(t, tt, w)
	mustFault(t, tt, "lacks the barrier it needs")
}

// nopFirstBarrier turns the first barrier of variant 0 (the CS partial
// flush and the ACQUIRE_MEM after it) into NOPs of the same length.
func nopFirstBarrier(t *testing.T, tt *Tier, w []uint32) {
	t.Helper()
	flushed := false
	for _, p := range packets(t, tt, 0) {
		if p.Op == pm4.EVENT_WRITE || flushed && p.Op == pm4.ACQUIRE_MEM {
			w[p.Offset] = pm4.Header(pm4.NOP, len(p.Body))
			if flushed {
				return
			}
			flushed = true
		}
	}
	t.Fatal("no barrier")
}
