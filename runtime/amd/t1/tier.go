// Package t1 is T1: PM4 over /dev/kfd. It allocates the memory plan's
// regions through a kfd.Device (weights copied in), lays the bundle's
// kernel blobs out in executable memory, patches each variant's packet
// stream with the regions' and kernels' GPU addresses once at load, and
// replays a variant by copying its stream into a PM4 compute queue's ring,
// ringing the doorbell and waiting for the signal event its closing
// RELEASE_MEM raises. The device is the real KFD (runtime/amd/kfd) or the
// simulated one (runtime/amd/kfdsim).
//
// A bundle built for an AMD target (amd:gfx1201, amd:gfx1100) holds HSA
// code objects: T1 loads each by its PT_LOAD segments, and rewrites every
// dispatch of the stream into the hardware's form (gfx.go): the program
// address of the descriptor's code entry, PGM_RSRC1/2/3 and the workgroup
// size from the descriptor, and the arguments — the user data the stream
// sets, then the blob's slot values — in a kernarg segment whose address
// goes in user data 0/1. A bundle of T-CPU code (cpu) runs on the
// simulated device with the stream's user data as it is.
package t1

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"time"

	"github.com/zrtdev/zrt/asm/pm4"
	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/format/zrt"
	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/runtime/amd/kfd"
	"github.com/zrtdev/zrt/runtime/replay"
)

// Options configure the tier.
type Options struct {
	// Timeout bounds one replay (default 60s).
	Timeout time.Duration
	// RingBytes is the ring size (default: a power of two that holds the
	// largest variant twice, at least 64 KiB).
	RingBytes uint64
	// CloseDevice makes Close close the device too.
	CloseDevice bool
	// Name is the tier's name (default "t1"; T2 drives the same code over
	// amdgpu user queues and says "t2").
	Name string
}

// Tier is a bundle loaded on a KFD device.
type Tier struct {
	dev      kfd.Device
	opt      Options
	mems     []*kfd.Mem
	regions  []*kfd.Mem
	sizes    []int64
	code     *kfd.Mem
	kernelVA []uint64
	gfx      []*gfxKernel // per blob; nil for a blob of T-CPU code
	isGfx    bool
	kernarg  *kfd.Mem
	variants []variant
	fence    int
	ring     *Ring
	queue    *kfd.Queue
	event    kfd.Event
	hasEvent bool
}

type variant struct {
	words      []uint32
	fenceValue uint32
}

// Probe says whether T1 can run here on the real device, and exactly why
// not: it opens /dev/kfd (no device node, permission), checks the KFD
// interface version, finds a GPU node whose gfx version has kernels here
// (the AMD compile targets), acquires the VM through its render node, and
// creates and destroys a PM4 compute queue (no compute queue slots).
func Probe() (kfd.Info, error) {
	gfx := GfxTargets()
	d, err := kfd.Open(kfd.OpenOptions{Gfx: gfx})
	if err != nil {
		return kfd.Info{}, err
	}
	defer d.Close()
	if err := CheckQueue(d); err != nil {
		return kfd.Info{}, err
	}
	return d.Info(), nil
}

// GfxTargets are the gfx names the AMD compile targets have kernels for
// ("gfx1201", "gfx1100").
func GfxTargets() []string {
	var gfx []string
	for _, t := range kernels.Targets() {
		if t.Tier == kernels.TierAMD {
			gfx = append(gfx, strings.TrimPrefix(t.Name, "amd:"))
		}
	}
	return gfx
}

// CheckQueue creates on dev what a loaded tier runs on — ring, pointers,
// EOP buffer, compute queue, signal event — and frees it again: the
// probe's last step, which finds a device without queue slots or (T2) a
// kernel without user queues.
func CheckQueue(dev kfd.Device) error {
	t := &Tier{dev: dev}
	defer t.Close()
	if err := t.startQueue(0); err != nil {
		return fmt.Errorf("%s: %w", dev.Info().Name, err)
	}
	return nil
}

// Load prepares b on dev.
func Load(b *bundle.Bundle, dev kfd.Device, opt Options) (*Tier, error) {
	if opt.Timeout <= 0 {
		opt.Timeout = 60 * time.Second
	}
	// The AMD kernels address F16 KV pages only.
	if err := kernels.RequireF16KV(&b.Graph.Hparams, "the AMD tiers"); err != nil {
		return nil, fmt.Errorf("t1: %w", err)
	}
	t := &Tier{dev: dev, opt: opt, fence: -1}
	fail := func(err error) (*Tier, error) { t.Close(); return nil, fmt.Errorf("t1: %w", err) }
	g := b.Graph
	mem := &replay.Memory{}
	for i, r := range g.Regions {
		w, isWeights := b.Weights[r.Name]
		size := uint64(r.Bytes)
		if isWeights && uint64(len(w)) > size {
			size = uint64(len(w))
		}
		kind := kfd.MemVRAM
		if isWeights {
			kind = kfd.MemWeights
		}
		if r.Name == kernels.RegionFence {
			t.fence, kind = i, kfd.MemHost
		}
		m, err := t.alloc(size, kind)
		if err != nil {
			return fail(fmt.Errorf("region %s: %w", r.Name, err))
		}
		if isWeights {
			copy(m.Host, w)
		}
		t.regions, t.sizes = append(t.regions, m), append(t.sizes, int64(size))
		mem.Base, mem.Size = append(mem.Base, m.VA), append(mem.Size, size)
	}
	if t.fence < 0 {
		return fail(fmt.Errorf("memory plan has no fence region"))
	}
	if err := t.loadCode(b.Blobs); err != nil {
		return fail(err)
	}
	type walked struct {
		s     *replay.Stream
		words []uint32
	}
	var ws []walked
	kernargBytes := uint64(0)
	for vi := range g.Variants {
		v := &g.Variants[vi]
		// The same checks T-CPU makes (program before each dispatch, user
		// data covering the ABI, pointers inside regions, barrier and fence
		// at the end) on the regions' real addresses.
		s, err := replay.Walk(v, b.Blobs, mem, t.fence)
		if err != nil {
			return fail(fmt.Errorf("variant %d: %w", vi, err))
		}
		words, err := t.patch(v)
		if err != nil {
			return fail(fmt.Errorf("variant %d: %w", vi, err))
		}
		ws = append(ws, walked{s, words})
		for _, d := range s.Dispatches {
			kernargBytes += t.kernargSize(d)
		}
	}
	if t.isGfx {
		var err error
		if t.kernarg, err = t.alloc(kernargBytes, kfd.MemHost); err != nil {
			return fail(fmt.Errorf("kernarg segments: %w", err))
		}
	}
	maxWords, off := 0, uint64(0)
	for vi, w := range ws {
		words := w.words
		if t.isGfx {
			var addrs []uint64
			for _, d := range w.s.Dispatches {
				for i, x := range kernargWords(d) {
					binary.LittleEndian.PutUint32(t.kernarg.Host[off+4*uint64(i):], x)
				}
				addrs = append(addrs, t.kernarg.VA+off)
				off += t.kernargSize(d)
			}
			var err error
			if words, err = t.toHardware(words, w.s, func(i int) uint64 { return addrs[i] }); err != nil {
				return fail(fmt.Errorf("variant %d: %w", vi, err))
			}
		}
		t.variants = append(t.variants, variant{words: words, fenceValue: w.s.FenceValue})
		maxWords = max(maxWords, len(prologue())+len(words)+eventPacketWords)
	}
	if err := t.startQueue(maxWords); err != nil {
		return fail(err)
	}
	for i := range t.variants {
		w := append(prologue(), t.variants[i].words...)
		t.variants[i].words = append(w, t.signalPacket()...)
	}
	return t, nil
}

func (t *Tier) alloc(size uint64, kind kfd.MemKind) (*kfd.Mem, error) {
	m, err := t.dev.Alloc(size, kind)
	if err != nil {
		return nil, err
	}
	t.mems = append(t.mems, m)
	return m, nil
}

// loadCode writes the kernel blobs into one executable allocation: the
// code directory (kfd.CodeDirMagic) first, then each blob's whole image
// placed so that its code entry is kfd.CodeAlign-aligned.
func (t *Tier) loadCode(blobs []*zrt.Blob) error {
	images := make([][]byte, len(blobs))
	offs := make([]uint64, len(blobs))
	entries := make([]uint64, len(blobs))
	loaded := make([]uint64, len(blobs))
	t.gfx = make([]*gfxKernel, len(blobs))
	at := uint64(kfd.CodeDirHeader + kfd.CodeDirEntry*len(blobs))
	for i, blob := range blobs {
		if err := blob.CheckPatched(); err != nil {
			return err
		}
		if isGfx(blob) != isGfx(blobs[0]) {
			return fmt.Errorf("kernel %s: blobs of gfx and other targets mixed", blob.Name)
		}
		images[i] = blob.Encode()
		if isGfx(blob) {
			g, err := loadGfx(blob)
			if err != nil {
				return err
			}
			t.gfx[i], t.isGfx = g, true
			loaded[i] = (at + 4095) &^ 4095 // code objects load at a page boundary
			entries[i] = loaded[i] + g.entry
			at = loaded[i] + uint64(len(g.image))
			offs[i] = at
			at += uint64(len(images[i]))
			continue
		}
		lead := uint64(zrt.HeaderSize) + uint64(blob.Header.EntryOffset)
		entry := (at + lead + kfd.CodeAlign - 1) &^ (kfd.CodeAlign - 1)
		offs[i], entries[i] = entry-lead, entry
		at = entry - lead + uint64(len(images[i]))
	}
	m, err := t.alloc(at, kfd.MemCode)
	if err != nil {
		return fmt.Errorf("kernel code: %w", err)
	}
	le := binary.LittleEndian
	le.PutUint32(m.Host, kfd.CodeDirMagic)
	le.PutUint32(m.Host[4:], uint32(len(blobs)))
	for i := range blobs {
		e := m.Host[kfd.CodeDirHeader+kfd.CodeDirEntry*i:]
		le.PutUint64(e, entries[i])
		le.PutUint32(e[8:], uint32(offs[i]))
		le.PutUint32(e[12:], uint32(len(images[i])))
		copy(m.Host[offs[i]:], images[i])
		if g := t.gfx[i]; g != nil {
			copy(m.Host[loaded[i]:], g.image)
		}
		t.kernelVA = append(t.kernelVA, m.VA+entries[i])
	}
	t.code = m
	return nil
}

// kernargSize is the kernarg space a dispatch takes (0 for T-CPU code).
func (t *Tier) kernargSize(d replay.Dispatch) uint64 {
	g := t.gfx[d.Kernel]
	if g == nil {
		return 0
	}
	n := max(uint64(4*len(kernargWords(d))), uint64(g.kernargMin))
	return (n + 63) &^ 63
}

// patch applies a variant's relocations with the GPU addresses and
// encodes program addresses as the PGM registers hold them (bits 39:8 in
// PGM_LO, 47:40 in PGM_HI).
func (t *Tier) patch(v *bundle.Variant) ([]uint32, error) {
	words := append([]uint32(nil), v.Words...)
	err := pm4.Patch(words, v.Relocs, func(s pm4.Symbol) (uint64, error) {
		switch s.Space {
		case pm4.SpaceRegion:
			if int(s.Index) >= len(t.regions) {
				return 0, fmt.Errorf("region %d does not exist (the plan has %d)", s.Index, len(t.regions))
			}
			if s.Addend > uint64(t.sizes[s.Index]) {
				return 0, fmt.Errorf("region %d+%#x lies outside its %d bytes", s.Index, s.Addend, t.sizes[s.Index])
			}
			return t.regions[s.Index].VA + s.Addend, nil
		case pm4.SpaceKernel:
			if int(s.Index) >= len(t.kernelVA) || s.Addend != 0 {
				return 0, fmt.Errorf("kernel %d+%d does not exist", s.Index, s.Addend)
			}
			return t.kernelVA[s.Index], nil
		}
		return 0, fmt.Errorf("symbol space %d", s.Space)
	})
	if err != nil {
		return nil, err
	}
	if t.isGfx {
		return words, nil // toHardware writes the program registers
	}
	pkts, err := pm4.Decode(words)
	if err != nil {
		return nil, err
	}
	for _, p := range pkts {
		if p.Op != pm4.SET_SH_REG {
			continue
		}
		reg, vals := p.Body[0], p.Body[1:]
		lo, hi := int(pm4.COMPUTE_PGM_LO)-int(reg), int(pm4.COMPUTE_PGM_HI)-int(reg)
		if lo < 0 || hi >= len(vals) {
			if (lo >= 0 && lo < len(vals)) || (hi >= 0 && hi < len(vals)) {
				return nil, fmt.Errorf("dword %#x: SET_SH_REG sets one half of the program address", p.Offset)
			}
			continue
		}
		a := uint64(vals[lo]) | uint64(vals[hi])<<32
		if a%kfd.CodeAlign != 0 || a>>48 != 0 {
			return nil, fmt.Errorf("dword %#x: program address %#x is not a 256-byte aligned 48-bit address", p.Offset, a)
		}
		vals[lo], vals[hi] = uint32(a>>8), uint32(a>>40)
	}
	return words, nil
}

// prologue starts every submission with an ACQUIRE_MEM that invalidates
// every cache, the instruction cache included (GCR_CNTL 0xC3E1: GLI, GLM,
// GLK, GLV, GL1 and GL2 invalidate, GL2 write-back): the host wrote the
// request table — and at load the code and weights — through the BAR
// since the GPU last looked.
func prologue() []uint32 {
	return []uint32{pm4.Header(pm4.ACQUIRE_MEM, 7), 0, 0xFFFFFFFF, 0x00FFFFFF, 0, 0, 0x0A, 0xC3E1}
}

// eventPacketWords is the size of the RELEASE_MEM that signals the event.
const eventPacketWords = 8

// RELEASE_MEM fields (dword 1 of the body): 32-bit data, and an interrupt
// after the write is confirmed, whose context id KFD maps to the event.
const (
	releaseDataSel32 = 1 << 29
	releaseIntSelAck = 2 << 24
)

// signalPacket is the RELEASE_MEM that follows every variant: once all
// prior work (the variant's own fence write included) retires, it writes
// the event id to the event's mailbox and raises the interrupt that
// signals the event.
func (t *Tier) signalPacket() []uint32 {
	a := t.event.Mailbox
	return []uint32{pm4.Header(pm4.RELEASE_MEM, 7), pm4.EventCacheFlushInvTS | 5<<8, releaseDataSel32 | releaseIntSelAck,
		uint32(a), uint32(a >> 32), t.event.ID, 0, t.event.ID}
}

// startQueue creates the ring, its pointers, the EOP buffer, the PM4
// compute queue and the signal event.
func (t *Tier) startQueue(maxWords int) error {
	size := t.opt.RingBytes
	if size == 0 {
		size = 64 << 10
		for size < uint64(8*maxWords) {
			size <<= 1
		}
	}
	if size&(size-1) != 0 || size < uint64(4*maxWords) {
		return fmt.Errorf("ring of %d bytes: want a power of two holding the largest variant (%d dwords)", size, maxWords)
	}
	ring, err := t.alloc(size, kfd.MemHost)
	if err != nil {
		return fmt.Errorf("ring: %w", err)
	}
	ptrs, err := t.alloc(4096, kfd.MemHost)
	if err != nil {
		return fmt.Errorf("ring pointers: %w", err)
	}
	eop, err := t.alloc(max(t.dev.Info().EOPBytes, 4096), kfd.MemVRAM)
	if err != nil {
		return fmt.Errorf("EOP buffer: %w", err)
	}
	q, err := t.dev.CreateQueue(kfd.QueueSpec{Ring: ring, Pointers: ptrs, EOP: eop})
	if err != nil {
		return err
	}
	t.queue = q
	t.ring = NewRing(ring, ptrs, q.Doorbell)
	if t.event, err = t.dev.CreateEvent(); err != nil {
		return err
	}
	t.hasEvent = true
	return nil
}

// Name is the tier's name.
func (t *Tier) Name() string {
	if t.opt.Name != "" {
		return t.opt.Name
	}
	return "t1"
}

// Device describes the device.
func (t *Tier) Device() kfd.Info { return t.dev.Info() }

// Region returns the host view of a region.
func (t *Tier) Region(i int) []byte { return t.regions[i].Host[:t.sizes[i]] }

// Run submits variant vi, waits for its event and checks its fence.
func (t *Tier) Run(ctx context.Context, vi int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if vi < 0 || vi >= len(t.variants) {
		return fmt.Errorf("t1: no variant %d", vi)
	}
	v := &t.variants[vi]
	fence := t.regions[t.fence]
	fence.Store32(0, 0)
	if err := t.ring.Submit(v.words); err != nil {
		return fmt.Errorf("t1: variant %d: %w", vi, err)
	}
	if err := t.dev.WaitEvent(t.event, t.opt.Timeout); err != nil {
		return fmt.Errorf("t1: variant %d: %w", vi, err)
	}
	if got := fence.Load32(0); got != v.fenceValue {
		return fmt.Errorf("t1: variant %d: fence holds %#x after the event, want %#x", vi, got, v.fenceValue)
	}
	return nil
}

// Close destroys the queue and event and frees the memory.
func (t *Tier) Close() error {
	if t.hasEvent {
		t.dev.DestroyEvent(t.event)
		t.hasEvent = false
	}
	if t.queue != nil {
		t.dev.DestroyQueue(t.queue)
		t.queue = nil
	}
	for _, m := range t.mems {
		t.dev.Free(m)
	}
	t.mems = nil
	if t.opt.CloseDevice {
		t.opt.CloseDevice = false
		return t.dev.Close()
	}
	return nil
}
