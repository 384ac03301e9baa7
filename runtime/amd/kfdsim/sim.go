// Package kfdsim is a simulated KFD device for tests: memory lives in the
// process, and the doorbell makes a software command processor read the
// ring the tier wrote, decode the PM4 packets and run each DISPATCH with
// the T-CPU kernel of the same instance name (kernels/cpu.Bind). Which
// kernel a program address is comes from the code directory T1 writes
// (kfd.CodeDirMagic). A kernel of T-CPU code takes its arguments from the
// COMPUTE_USER_DATA registers as the kernel ABI lays them out and its
// specialization values from its blob; a kernel whose code is an AMDGPU
// code object must be dispatched as the hardware needs it — PGM_RSRC1/2/3,
// workgroup size and wave32 as its descriptor says, its arguments (user
// data, then slot values) in the kernarg segment user data 0/1 point at —
// and the simulator checks all of it before running the T-CPU kernel.
//
// It proves the T1 path — allocation, ring, doorbell, packets, relocations,
// fences, events — not the gfx code. It is strict where a GPU would hang
// or corrupt memory silently: a doorbell rung past the written data or
// with a value other than the write pointer, a packet header written
// before its body, an unknown packet, a dispatch without a program, its
// user data or its registers, a pointer, kernarg or fence address outside
// every allocation, a fence without a barrier after the last dispatch, and
// dispatches that lack a barrier between them (found by running each
// barrier-free window in stream order and in reverse order from the same
// memory: a GPU may run them in any order, so their results must not
// depend on it) all fail the submission with an error, and every later
// submission and wait on the queue reports it.
package kfdsim

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/zrtdev/zrt/asm/pm4"
	"github.com/zrtdev/zrt/format/zrt"
	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/kernels/amd"
	kcpu "github.com/zrtdev/zrt/kernels/cpu"
	"github.com/zrtdev/zrt/runtime/amd/kfd"
)

// GfxVersion is the gfx_target_version the simulated device reports
// (gfx1201, RDNA4).
const GfxVersion = 120001

// PGM registers hold the program address shifted right by 8 (bits 39:8
// in PGM_LO, 47:40 in PGM_HI), as on AMD hardware.
func pgmAddr(lo, hi uint32) uint64 { return uint64(lo)<<8 | uint64(hi&0xFF)<<40 }

// Device is the simulated device.
type Device struct {
	mu     sync.Mutex
	next   uint64
	mems   []*kfd.Mem // sorted by VA
	pool   *kcpu.Pool
	work   []byte
	events map[uint32]*event
	nextEv uint32
	evPage *kfd.Mem
	queues []*queue
	kern   map[uint64]*kernel // by program address
	// Dispatches counts DISPATCH packets run, for tests.
	Dispatches int
}

type event struct {
	slot     uint32
	signaled bool
}

type kernel struct {
	name string
	fn   kcpu.Func
	abi  *kernels.ABI
	spec []uint32
	// gfx is set for a kernel whose code is an AMDGPU code object: its
	// dispatch must look as the hardware needs it (registers from the
	// descriptor, arguments in a kernarg segment).
	gfx *amd.Kernel
}

// New makes a simulated device whose kernels run on threads workers.
func New(threads int) *Device {
	return &Device{next: 1 << 32, pool: kcpu.NewPool(threads), events: map[uint32]*event{}, nextEv: 1, kern: map[uint64]*kernel{}}
}

// Info describes the simulated device.
func (d *Device) Info() kfd.Info {
	return kfd.Info{Name: "kfdsim (simulated gfx1201, T-CPU kernels)", GPUID: 0x5151, GfxVersion: GfxVersion,
		Major: kfd.MajorVersion, Minor: 11, GPUVMBase: 1 << 32, GPUVMLimit: 1 << 47}
}

const page = 4096

// Alloc allocates in-process memory at a fresh GPU address; allocations
// are separated by an unmapped guard page so a pointer past one never
// lands in the next.
func (d *Device) Alloc(size uint64, kind kfd.MemKind) (*kfd.Mem, error) {
	if kind < kfd.MemVRAM || kind > kfd.MemWeights {
		return nil, fmt.Errorf("kfdsim: memory kind %d", kind)
	}
	size = (size + page - 1) &^ (page - 1)
	if size == 0 {
		size = page
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	m := &kfd.Mem{VA: d.next, Size: size, Kind: kind, Host: make([]byte, size), Handle: d.next}
	d.next += size + page
	d.mems = append(d.mems, m)
	return m, nil
}

// Free forgets an allocation.
func (d *Device) Free(m *kfd.Mem) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, x := range d.mems {
		if x == m {
			d.mems = append(d.mems[:i], d.mems[i+1:]...)
			for a := range d.kern {
				if a >= m.VA && a < m.VA+m.Size {
					delete(d.kern, a)
				}
			}
			return nil
		}
	}
	return fmt.Errorf("kfdsim: free of unknown allocation at %#x", m.VA)
}

// find returns the allocation holding addr (its end included: a pointer
// may sit at the end of an empty tail), or nil.
func (d *Device) find(addr uint64) *kfd.Mem {
	i := sort.Search(len(d.mems), func(i int) bool { return d.mems[i].VA+d.mems[i].Size >= addr })
	if i < len(d.mems) && addr >= d.mems[i].VA {
		return d.mems[i]
	}
	return nil
}

type queue struct {
	d       *Device
	id      uint32
	ring    *kfd.Mem
	ptrs    *kfd.Mem
	dwords  uint64
	fresh   []bool   // written since the CP last consumed it
	order   []uint64 // write sequence number of each ring dword
	seq     uint64
	rptr    uint64
	fault   error
	flushed bool      // CS partial flush seen, ACQUIRE_MEM pending
	pending []pending // dispatches since the last barrier, not yet run
	sh      [pm4.COMPUTE_USER_DATA_0 + pm4.NumUserData]uint32
	set     [pm4.COMPUTE_USER_DATA_0 + pm4.NumUserData]bool
}

// CreateQueue checks the spec as KFD would and starts watching the ring.
func (d *Device) CreateQueue(s kfd.QueueSpec) (*kfd.Queue, error) {
	if s.Ring == nil || s.Pointers == nil || s.EOP == nil {
		return nil, fmt.Errorf("kfdsim: queue needs a ring, pointers and an EOP buffer")
	}
	if s.Ring.Size&(s.Ring.Size-1) != 0 || s.Ring.Size < 1024 {
		return nil, fmt.Errorf("kfdsim: ring of %d bytes is not a power of two of at least 1 KiB", s.Ring.Size)
	}
	if s.Ring.Kind != kfd.MemHost || s.Pointers.Kind != kfd.MemHost {
		return nil, fmt.Errorf("kfdsim: ring and pointers must be GTT memory")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	n := s.Ring.Size / 4
	q := &queue{d: d, id: uint32(len(d.queues) + 1), ring: s.Ring, ptrs: s.Pointers, dwords: n, fresh: make([]bool, n), order: make([]uint64, n)}
	q.rptr = s.Pointers.Load64(kfd.ReadPtrOff)
	s.Ring.Watch = func(off uint64) {
		q.seq++
		q.fresh[off/4], q.order[off/4] = true, q.seq
	}
	d.queues = append(d.queues, q)
	return &kfd.Queue{ID: q.id, Doorbell: q}, nil
}

// DestroyQueue stops watching the ring.
func (d *Device) DestroyQueue(kq *kfd.Queue) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, q := range d.queues {
		if q.id == kq.ID {
			q.ring.Watch = nil
			d.queues = append(d.queues[:i], d.queues[i+1:]...)
			return nil
		}
	}
	return fmt.Errorf("kfdsim: no queue %d", kq.ID)
}

// CreateEvent creates an auto-reset signal event with a mailbox slot.
func (d *Device) CreateEvent() (kfd.Event, error) {
	if d.evPage == nil {
		p, err := d.Alloc(kfd.SignalEventLimit*8, kfd.MemHost)
		if err != nil {
			return kfd.Event{}, err
		}
		d.evPage = p
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	id := d.nextEv
	d.nextEv++
	d.events[id] = &event{slot: id}
	return kfd.Event{ID: id, Mailbox: d.evPage.VA + uint64(id)*8}, nil
}

// WaitEvent returns at once: the simulated CP ran the submission inside
// the doorbell, so an event not yet signalled never will be.
func (d *Device) WaitEvent(e kfd.Event, timeout time.Duration) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, q := range d.queues {
		if q.fault != nil {
			return fmt.Errorf("kfdsim: queue %d faulted: %w", q.id, q.fault)
		}
	}
	ev, ok := d.events[e.ID]
	if !ok {
		return fmt.Errorf("kfdsim: no event %d", e.ID)
	}
	if !ev.signaled {
		return fmt.Errorf("kfdsim: event %d not signalled within %v: no RELEASE_MEM with its interrupt ran", e.ID, timeout)
	}
	ev.signaled = false
	return nil
}

// DestroyEvent forgets an event.
func (d *Device) DestroyEvent(e kfd.Event) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.events, e.ID)
	return nil
}

// Close stops the kernel workers.
func (d *Device) Close() error {
	d.pool.Close()
	return nil
}

// Ring is the doorbell: the CP reads the write pointer and processes the
// ring from its read pointer up to it.
func (q *queue) Ring(w uint64) error {
	d := q.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if q.fault != nil {
		return q.fault
	}
	if err := q.consume(w); err != nil {
		q.fault = err
		return err
	}
	return nil
}

func (q *queue) consume(w uint64) error {
	if wp := q.ptrs.Load64(kfd.WritePtrOff); wp != w {
		return fmt.Errorf("doorbell rung with %#x but the write pointer in memory is %#x", w, wp)
	}
	if w < q.rptr || w-q.rptr > q.dwords {
		return fmt.Errorf("doorbell write pointer %#x: read pointer is %#x, ring holds %d dwords", w, q.rptr, q.dwords)
	}
	mask := q.dwords - 1
	words := make([]uint32, w-q.rptr)
	for i := range words {
		at := (q.rptr + uint64(i)) & mask
		if !q.fresh[at] {
			return fmt.Errorf("doorbell rung past the written data: ring dword %#x (write pointer %#x) was not written since the CP last read it", q.rptr+uint64(i), w)
		}
		words[i] = binary.LittleEndian.Uint32(q.ring.Host[4*at:])
	}
	pkts, err := pm4.Decode(words)
	if err != nil {
		return err
	}
	for _, p := range pkts {
		h := (q.rptr + uint64(p.Offset)) & mask
		for i := range p.Body {
			if b := (q.rptr + uint64(p.Offset+1+i)) & mask; q.order[b] > q.order[h] {
				return fmt.Errorf("ring dword %#x: %s header written before its body (body dword %d written after it)", q.rptr+uint64(p.Offset), p.Op, i)
			}
		}
	}
	for i := range words {
		q.fresh[(q.rptr+uint64(i))&mask] = false
	}
	for _, p := range pkts {
		if err := q.exec(p); err != nil {
			return fmt.Errorf("ring dword %#x: %s: %w", q.rptr+uint64(p.Offset), p.Op, err)
		}
	}
	if err := q.drain(); err != nil { // work the CP started without a barrier behind it
		return err
	}
	q.rptr = w
	q.ptrs.Store64(kfd.ReadPtrOff, w)
	return nil
}

func (q *queue) exec(p pm4.Packet) error {
	switch p.Op {
	case pm4.NOP:
	case pm4.SET_SH_REG:
		reg := int(p.Body[0])
		if reg < 0 || reg+len(p.Body)-1 > len(q.sh) {
			return fmt.Errorf("%d registers at %#x are outside the compute registers", len(p.Body)-1, reg)
		}
		for i, x := range p.Body[1:] {
			q.sh[reg+i], q.set[reg+i] = x, true
		}
	case pm4.EVENT_WRITE:
		if p.Body[0]&0xFF == pm4.EventCSPartialFlush {
			q.flushed = true
		}
	case pm4.ACQUIRE_MEM:
		if q.flushed {
			q.flushed = false
			return q.drain()
		}
	case pm4.DISPATCH_DIRECT:
		d, err := q.resolve(p.Body)
		if err != nil {
			return err
		}
		d.at = q.rptr + uint64(p.Offset)
		q.pending = append(q.pending, d)
		q.set = [len(q.sh)]bool{}
	case pm4.RELEASE_MEM:
		if len(q.pending) > 0 {
			return fmt.Errorf("fence without a barrier after the last dispatch")
		}
		return q.release(p.Body)
	default:
		return fmt.Errorf("not a packet the simulated compute queue runs")
	}
	return nil
}

// release writes the fence value and raises the interrupt that signals an
// event: dw1 DATA_SEL (31:29: 1 = 32 bits, 2 = 64 bits) and INT_SEL
// (26:24), dw2/3 the address, dw4/5 the data, dw6 the interrupt context
// id (the KFD event id).
func (q *queue) release(b []uint32) error {
	sel, intSel := b[1]>>29, b[1]>>24&7
	addr := uint64(b[2]) | uint64(b[3])<<32
	n := uint64(0)
	switch sel {
	case 1:
		n = 4
	case 2:
		n = 8
	case 0:
	default:
		return fmt.Errorf("data select %d", sel)
	}
	if n > 0 {
		m := q.d.find(addr)
		if m == nil || addr+n > m.VA+m.Size || addr%4 != 0 {
			return fmt.Errorf("fence address %#x is not inside any allocation", addr)
		}
		off := addr - m.VA
		binary.LittleEndian.PutUint32(m.Host[off:], b[4])
		if n == 8 {
			binary.LittleEndian.PutUint32(m.Host[off+4:], b[5])
		}
	}
	if intSel != 0 {
		ev, ok := q.d.events[b[6]]
		if !ok {
			return fmt.Errorf("interrupt for event %d, which does not exist", b[6])
		}
		ev.signaled = true
	}
	return nil
}

// pending is a resolved dispatch waiting for the barrier that ends its
// window.
type pending struct {
	at   uint64 // ring dword of the packet
	k    *kernel
	args kcpu.Args
	mems []*kfd.Mem // writable allocations it points into
}

func (q *queue) resolve(grid []uint32) (pending, error) {
	d := q.d
	if !q.set[pm4.COMPUTE_PGM_LO] || !q.set[pm4.COMPUTE_PGM_HI] {
		return pending{}, fmt.Errorf("no program address set")
	}
	pgm := pgmAddr(q.sh[pm4.COMPUTE_PGM_LO], q.sh[pm4.COMPUTE_PGM_HI])
	k, err := d.kernelAt(pgm)
	if err != nil {
		return pending{}, err
	}
	nud := k.abi.UserDataDwords()
	ud, spec := q.sh[pm4.COMPUTE_USER_DATA_0:], k.spec
	if k.gfx != nil {
		var err error
		if ud, spec, err = q.kernarg(k, grid[3]); err != nil {
			return pending{}, fmt.Errorf("kernel %s: %w", k.name, err)
		}
	} else {
		for i := 0; i < nud; i++ {
			if !q.set[pm4.COMPUTE_USER_DATA_0+i] {
				return pending{}, fmt.Errorf("kernel %s needs %d user-data dwords, only %d set", k.name, nud, i)
			}
		}
	}
	out := pending{}
	args := kcpu.Args{Bufs: make([][]byte, len(k.abi.Bufs)), Grid: [3]uint32{grid[0], grid[1], grid[2]}, Spec: spec, Pool: d.pool, Work: &d.work}
	for i, role := range k.abi.Bufs {
		addr := uint64(ud[2*i]) | uint64(ud[2*i+1])<<32
		if addr == 0 {
			if !k.abi.Optional[role] {
				return pending{}, fmt.Errorf("kernel %s: null pointer for %s", k.name, role)
			}
			continue
		}
		m := d.find(addr)
		if m == nil {
			return pending{}, fmt.Errorf("kernel %s: %s: address %#x is not inside any allocation", k.name, role, addr)
		}
		if m.Kind == kfd.MemCode {
			return pending{}, fmt.Errorf("kernel %s: %s: address %#x points into code memory", k.name, role, addr)
		}
		args.Bufs[i] = m.Host[addr-m.VA:]
		if m.Kind != kfd.MemWeights && !slices.Contains(out.mems, m) {
			out.mems = append(out.mems, m)
		}
	}
	args.Push = append([]uint32(nil), ud[2*len(k.abi.Bufs):nud]...)
	out.k, out.args = k, args
	return out, nil
}

// kernarg checks a gfx kernel's dispatch registers against its code
// object and reads its arguments from the kernarg segment user data 0/1
// point at: the user-data dwords of the kernel ABI, then the slot values.
func (q *queue) kernarg(k *kernel, initiator uint32) (ud, spec []uint32, err error) {
	g := k.gfx
	want := []struct {
		reg  int
		v    uint32
		name string
	}{
		{kfd.RegPgmRsrc1, g.Descriptor.PgmRsrc1, "COMPUTE_PGM_RSRC1"}, {kfd.RegPgmRsrc2, g.Descriptor.PgmRsrc2, "COMPUTE_PGM_RSRC2"},
		{kfd.RegPgmRsrc3, g.Descriptor.PgmRsrc3, "COMPUTE_PGM_RSRC3"},
		{kfd.RegNumThreadX, g.ReqdWorkgroupSize[0], "COMPUTE_NUM_THREAD_X"}, {kfd.RegNumThreadY, max(g.ReqdWorkgroupSize[1], 1), "COMPUTE_NUM_THREAD_Y"},
		{kfd.RegNumThreadZ, max(g.ReqdWorkgroupSize[2], 1), "COMPUTE_NUM_THREAD_Z"}, {kfd.RegTmpringSize, 0, "COMPUTE_TMPRING_SIZE"},
	}
	for _, w := range want {
		if !q.set[w.reg] {
			return nil, nil, fmt.Errorf("%s not set for the dispatch", w.name)
		}
		if q.sh[w.reg] != w.v {
			return nil, nil, fmt.Errorf("%s is %#x, the code object says %#x", w.name, q.sh[w.reg], w.v)
		}
	}
	if w32 := initiator&kfd.InitiatorCSW32En != 0; w32 != g.Descriptor.Wave32() {
		return nil, nil, fmt.Errorf("dispatch initiator wave32=%v, the code object wave32=%v", w32, g.Descriptor.Wave32())
	}
	if !q.set[pm4.COMPUTE_USER_DATA_0] || !q.set[pm4.COMPUTE_USER_DATA_0+1] {
		return nil, nil, fmt.Errorf("no kernarg address in user data 0/1")
	}
	a := uint64(q.sh[pm4.COMPUTE_USER_DATA_0]) | uint64(q.sh[pm4.COMPUTE_USER_DATA_0+1])<<32
	nud, n := k.abi.UserDataDwords(), k.abi.UserDataDwords()+len(k.abi.Spec)
	if uint32(4*n) > g.KernargSegmentSize {
		return nil, nil, fmt.Errorf("the ABI's %d argument dwords exceed the code object's %d-byte kernarg segment", n, g.KernargSegmentSize)
	}
	m := q.d.find(a)
	if m == nil || a+uint64(4*n) > m.VA+m.Size || a%16 != 0 || m.Kind == kfd.MemCode {
		return nil, nil, fmt.Errorf("kernarg address %#x is not a 16-byte aligned segment of %d bytes inside a data allocation", a, 4*n)
	}
	words := make([]uint32, n)
	for i := range words {
		words[i] = binary.LittleEndian.Uint32(m.Host[a-m.VA+uint64(4*i):])
	}
	return words[:nud], words[nud:], nil
}

// drain runs the dispatches of the window a barrier closes. A GPU may run
// them concurrently and in any order, so the simulator runs them in
// stream order and again in reverse order from the same starting memory:
// if the results differ, one of them depends on another (read after
// write, write after read or write after write) and the stream lacks the
// barrier between them. It keeps the stream-order results.
func (q *queue) drain() error {
	w := q.pending
	q.pending = nil
	if len(w) == 0 {
		return nil
	}
	run := func(p *pending) error {
		if err := p.k.fn(&p.args); err != nil {
			return fmt.Errorf("ring dword %#x: kernel %s: %w", p.at, p.k.name, err)
		}
		return nil
	}
	q.d.Dispatches += len(w)
	if len(w) == 1 {
		return run(&w[0])
	}
	var mems []*kfd.Mem
	for _, p := range w {
		for _, m := range p.mems {
			if !slices.Contains(mems, m) {
				mems = append(mems, m)
			}
		}
	}
	start := make([][]byte, len(mems))
	for i, m := range mems {
		start[i] = append([]byte(nil), m.Host...)
	}
	for i := range w {
		if err := run(&w[i]); err != nil {
			return err
		}
	}
	fwd := make([][]byte, len(mems))
	for i, m := range mems {
		fwd[i] = append([]byte(nil), m.Host...)
		copy(m.Host, start[i])
	}
	for i := len(w) - 1; i >= 0; i-- {
		if err := run(&w[i]); err != nil {
			return err
		}
	}
	for i, m := range mems {
		if !bytes.Equal(m.Host, fwd[i]) {
			var names []string
			for _, p := range w {
				names = append(names, p.k.name)
			}
			return fmt.Errorf("ring dwords %#x..%#x: dispatches %s have no barrier between them yet give different results in different orders: one depends on another and the stream lacks the barrier it needs", w[0].at, w[len(w)-1].at, strings.Join(names, ", "))
		}
		copy(m.Host, fwd[i])
	}
	return nil
}

// kernelAt finds the kernel whose code entry is at pgm through the code
// directory of the executable allocation holding it.
func (d *Device) kernelAt(pgm uint64) (*kernel, error) {
	if k, ok := d.kern[pgm]; ok {
		return k, nil
	}
	m := d.find(pgm)
	if m == nil || pgm == m.VA+m.Size {
		return nil, fmt.Errorf("program address %#x is not inside any allocation", pgm)
	}
	if m.Kind != kfd.MemCode {
		return nil, fmt.Errorf("program address %#x is in %s memory, not executable memory", pgm, m.Kind)
	}
	le := binary.LittleEndian
	if le.Uint32(m.Host) != kfd.CodeDirMagic {
		return nil, fmt.Errorf("program address %#x: code allocation has no kernel directory", pgm)
	}
	n := uint64(le.Uint32(m.Host[4:]))
	if kfd.CodeDirHeader+n*kfd.CodeDirEntry > m.Size {
		return nil, fmt.Errorf("code directory of %d kernels overruns its allocation", n)
	}
	for i := uint64(0); i < n; i++ {
		e := m.Host[kfd.CodeDirHeader+i*kfd.CodeDirEntry:]
		entry, off, size := le.Uint64(e), uint64(le.Uint32(e[8:])), uint64(le.Uint32(e[12:]))
		if m.VA+entry != pgm {
			continue
		}
		if off+size > m.Size {
			return nil, fmt.Errorf("kernel image [%d,+%d) overruns its allocation", off, size)
		}
		blob, err := zrt.Decode(append([]byte(nil), m.Host[off:off+size]...))
		if err != nil {
			return nil, err
		}
		if err := blob.CheckPatched(); err != nil {
			return nil, err
		}
		abi, _, err := kernels.SplitInstance(blob.Name)
		if err != nil {
			return nil, err
		}
		fn, err := kcpu.Bind(blob.Name)
		if err != nil {
			return nil, err
		}
		k := &kernel{name: blob.Name, fn: fn, abi: abi}
		switch blob.Header.Target {
		case zrt.GFX1201, zrt.GFX1200, zrt.GFX1151, zrt.GFX1100:
			co, err := amd.ParseCodeObject(blob.Code)
			if err != nil {
				return nil, err
			}
			if len(co.Kernels) != 1 {
				return nil, fmt.Errorf("kernel %s: code object of %d kernels", blob.Name, len(co.Kernels))
			}
			k.gfx = &co.Kernels[0]
		}
		for _, s := range abi.Spec {
			v, err := blob.SlotValue(s.Name)
			if err != nil {
				return nil, err
			}
			k.spec = append(k.spec, v)
		}
		d.kern[pgm] = k
		return k, nil
	}
	return nil, fmt.Errorf("program address %#x is not the entry of any kernel", pgm)
}
