package amdgpu

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/zrtdev/zrt/runtime/amd/kfd"
)

// driver is the ioctl layer a Device drives: the render node
// (drm_linux.go), or a fake in tests. Handles are GEM handles.
type driver interface {
	GemCreate(size, align, domains, flags uint64) (uint32, error)
	// Map maps a GEM object into the process (GEM_MMAP, then mmap).
	Map(handle uint32, size uint64) ([]byte, error)
	Unmap(b []byte) error
	GemVA(op, handle, flags uint32, va, size uint64) error
	GemClose(handle uint32) error
	// UserqCreate creates a user queue; in.MQD is the address of mqd.
	UserqCreate(in *UserqIn, mqd *MQDComputeGfx11) (uint32, error)
	UserqFree(id uint32) error
	Close() error
}

// Device is T2's device: a render node's GPU VM, GEM objects and one or
// more compute user queues, behind kfd.Device so that T1's tier code
// (ring writer, packets, relocations, fences) drives it unchanged.
//
// Events are mailboxes on a host page that T1's closing RELEASE_MEM
// writes; WaitEvent polls the mailbox. (The RELEASE_MEM also asks for an
// interrupt with the event id as context id; amdgpu's EOP handler looks
// that id up among user-queue fence drivers and, finding none, ignores
// it.)
type Device struct {
	drv      driver
	info     kfd.Info
	dev      InfoDevice
	pageSize uint64

	mu       sync.Mutex
	vaNext   uint64
	vaEnd    uint64
	vaAlign  uint64
	bos      map[*kfd.Mem]uint32 // VA flags of each live allocation
	doorbell *kfd.Mem            // the doorbell object, mapped
	nextDB   uint32
	queues   map[uint32]*queue
	evPage   *kfd.Mem
	evUsed   []bool

	// PollInterval caps the sleep between mailbox polls once WaitEvent
	// has polled for eventSpin without one (default 200µs).
	PollInterval time.Duration
}

type queue struct {
	mqd *MQDComputeGfx11 // kept on the heap while the queue lives
}

// Doorbell sizes: compute user queues take 64-bit doorbells, indexed in
// the doorbell object in those units.
const (
	doorbellBytes    = 8
	doorbellObjBytes = 4096
)

// newDevice wraps an opened driver.
func newDevice(drv driver, di InfoDevice, info kfd.Info) *Device {
	ps := uint64(4096)
	align := max(ps, uint64(di.VirtualAddressAlignment))
	start := (di.VirtualAddressOffset + align - 1) &^ (align - 1)
	if start == 0 {
		start = 1 << 21 // never hand out address 0
	}
	info.GPUVMBase, info.GPUVMLimit = di.VirtualAddressOffset, di.VirtualAddressMax
	return &Device{drv: drv, info: info, dev: di, pageSize: ps, vaNext: start, vaEnd: di.VirtualAddressMax, vaAlign: align,
		bos: map[*kfd.Mem]uint32{}, queues: map[uint32]*queue{}}
}

// Info describes the device.
func (d *Device) Info() kfd.Info { return d.info }

// DeviceInfo is what AMDGPU_INFO_DEV_INFO said.
func (d *Device) DeviceInfo() InfoDevice { return d.dev }

// placement is where a memory kind lives: GEM domain and create flags,
// and the GPU VM page flags. Every object is per-VM (always valid): user
// queues have no command submission that would validate a BO list.
func placement(kind kfd.MemKind) (domain, flags uint64, va uint32, err error) {
	const bo = CreateVMAlwaysValid
	switch kind {
	case kfd.MemVRAM:
		return DomainVRAM, bo | CreateCPUAccessRequired, PageReadable | PageWriteable, nil
	case kfd.MemWeights: // read-only to the GPU; the CPU writes it through its own mapping
		return DomainVRAM, bo | CreateCPUAccessRequired, PageReadable, nil
	case kfd.MemCode:
		return DomainVRAM, bo | CreateCPUAccessRequired, PageReadable | PageExec, nil
	case kfd.MemHost: // ring, pointers, fences, mailboxes: coherent with the CPU
		return DomainGTT, bo, PageReadable | PageWriteable | MtypeUC, nil
	}
	return 0, 0, 0, fmt.Errorf("amdgpu: memory kind %d", kind)
}

// allocVA reserves GPU virtual addresses: a bump allocator over the
// device's range (2 MiB aligned for objects of 2 MiB or more, for large
// page-table fragments). Freed ranges are not reused.
func (d *Device) allocVA(size uint64) (uint64, error) {
	align := d.vaAlign
	if size >= 2<<20 {
		align = max(align, 2<<20)
	}
	va := (d.vaNext + align - 1) &^ (align - 1)
	if va+size < va || (d.vaEnd != 0 && va+size > d.vaEnd) {
		return 0, fmt.Errorf("amdgpu: GPU virtual address space exhausted (%d bytes at %#x, limit %#x)", size, va, d.vaEnd)
	}
	d.vaNext = va + size
	return va, nil
}

// Alloc creates a GEM object, maps it for the CPU and at a fresh GPU
// virtual address.
func (d *Device) Alloc(size uint64, kind kfd.MemKind) (*kfd.Mem, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.alloc(size, kind)
}

func (d *Device) alloc(size uint64, kind kfd.MemKind) (*kfd.Mem, error) {
	domain, flags, vaFlags, err := placement(kind)
	if err != nil {
		return nil, err
	}
	size = (size + d.pageSize - 1) &^ (d.pageSize - 1)
	if size == 0 {
		size = d.pageSize
	}
	h, err := d.drv.GemCreate(size, d.pageSize, domain, flags)
	if err != nil {
		return nil, fmt.Errorf("amdgpu: DRM_IOCTL_AMDGPU_GEM_CREATE of %d bytes (%s): %w", size, kind, err)
	}
	host, err := d.drv.Map(h, size)
	if err != nil {
		d.drv.GemClose(h)
		return nil, fmt.Errorf("amdgpu: mapping %d bytes of %s for the CPU: %w", size, kind, err)
	}
	va, err := d.allocVA(size)
	if err == nil {
		err = d.drv.GemVA(VAOpMap, h, vaFlags, va, size)
		if err != nil {
			err = fmt.Errorf("amdgpu: DRM_IOCTL_AMDGPU_GEM_VA map of %d bytes at %#x: %w", size, va, err)
		}
	}
	if err != nil {
		d.drv.Unmap(host)
		d.drv.GemClose(h)
		return nil, err
	}
	m := &kfd.Mem{VA: va, Size: size, Kind: kind, Handle: uint64(h), Host: host}
	d.bos[m] = vaFlags
	return m, nil
}

// Free unmaps and closes an allocation.
func (d *Device) Free(m *kfd.Mem) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.free(m)
}

func (d *Device) free(m *kfd.Mem) error {
	flags, ok := d.bos[m]
	if !ok {
		return fmt.Errorf("amdgpu: freeing memory at %#x that this device did not allocate (or freed already)", m.VA)
	}
	delete(d.bos, m)
	h := uint32(m.Handle)
	err := d.drv.GemVA(VAOpUnmap, h, flags, m.VA, m.Size)
	d.drv.Unmap(m.Host)
	if e := d.drv.GemClose(h); err == nil {
		err = e
	}
	if err != nil {
		return fmt.Errorf("amdgpu: freeing %d bytes at %#x: %w", m.Size, m.VA, err)
	}
	return nil
}

// QueueArgs builds the user-queue creation arguments for a T1 queue spec
// (a compute queue): the ring, its read and write pointers in the
// pointers allocation (kfd.ReadPtrOff, kfd.WritePtrOff), the doorbell
// object and index, the compute MQD (its EOP buffer), normal priority.
func QueueArgs(s kfd.QueueSpec, dbHandle, dbIndex uint32, mqd *MQDComputeGfx11) (UserqIn, error) {
	if s.Ring == nil || s.Pointers == nil || s.EOP == nil {
		return UserqIn{}, fmt.Errorf("amdgpu: a compute user queue needs a ring, pointers and an EOP buffer")
	}
	if n := s.Ring.Size; n < 256 || n&(n-1) != 0 {
		return UserqIn{}, fmt.Errorf("amdgpu: ring of %d bytes: a user queue wants a power of two of at least 256", n)
	}
	if s.Pointers.Size < kfd.WritePtrOff+8 {
		return UserqIn{}, fmt.Errorf("amdgpu: pointer allocation of %d bytes is too small", s.Pointers.Size)
	}
	mqd.EOPVA = s.EOP.VA
	return UserqIn{
		Op: UserqOpCreate, IPType: HWIPCompute,
		DoorbellHandle: dbHandle, DoorbellOffset: dbIndex,
		Flags:   UserqPriorityNormalLow,
		QueueVA: s.Ring.VA, QueueSize: s.Ring.Size,
		RptrVA: s.Pointers.VA + kfd.ReadPtrOff, WptrVA: s.Pointers.VA + kfd.WritePtrOff,
		MQD: uint64(uintptr(unsafe.Pointer(mqd))), MQDSize: uint64(unsafe.Sizeof(*mqd)),
	}, nil
}

// Doorbell is a user queue's doorbell: a 64-bit slot in the mapped
// doorbell object that takes the write pointer (in dwords, as T1's ring
// counts it).
type Doorbell struct {
	page []byte
	off  uint64
}

// Ring stores the write pointer in the doorbell.
func (b *Doorbell) Ring(w uint64) error {
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&b.page[b.off])), w)
	return nil
}

// Index is the doorbell's index in the doorbell object.
func (b *Doorbell) Index() uint32 { return uint32(b.off / doorbellBytes) }

// CreateQueue creates a compute user queue on the spec's ring. The first
// queue creates and maps the doorbell object; each queue takes the next
// doorbell in it.
func (d *Device) CreateQueue(s kfd.QueueSpec) (*kfd.Queue, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.doorbell == nil {
		h, err := d.drv.GemCreate(doorbellObjBytes, d.pageSize, DomainDoorbell, 0)
		if err != nil {
			return nil, fmt.Errorf("amdgpu: creating the doorbell object (GEM domain DOORBELL, Linux 6.16+): %w", err)
		}
		page, err := d.drv.Map(h, doorbellObjBytes)
		if err != nil {
			d.drv.GemClose(h)
			return nil, fmt.Errorf("amdgpu: mapping the doorbell object: %w", err)
		}
		d.doorbell = &kfd.Mem{Size: doorbellObjBytes, Handle: uint64(h), Host: page}
	}
	if uint64(d.nextDB+1)*doorbellBytes > d.doorbell.Size {
		return nil, fmt.Errorf("amdgpu: all %d doorbells of the doorbell object are taken", d.doorbell.Size/doorbellBytes)
	}
	q := &queue{mqd: new(MQDComputeGfx11)}
	in, err := QueueArgs(s, uint32(d.doorbell.Handle), d.nextDB, q.mqd)
	if err != nil {
		return nil, err
	}
	id, err := d.drv.UserqCreate(&in, q.mqd)
	runtime.KeepAlive(q)
	if err != nil {
		return nil, err // the driver says why (userqError)
	}
	d.queues[id] = q
	db := &Doorbell{page: d.doorbell.Host, off: uint64(d.nextDB) * doorbellBytes}
	d.nextDB++
	return &kfd.Queue{ID: id, Doorbell: db}, nil
}

// DestroyQueue frees a user queue.
func (d *Device) DestroyQueue(q *kfd.Queue) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.queues[q.ID]; !ok {
		return fmt.Errorf("amdgpu: no user queue %d", q.ID)
	}
	delete(d.queues, q.ID)
	if err := d.drv.UserqFree(q.ID); err != nil {
		return fmt.Errorf("amdgpu: DRM_IOCTL_AMDGPU_USERQ free of queue %d: %w", q.ID, err)
	}
	return nil
}

// Event mailboxes: 8 bytes each on one host page.
const (
	evSlotBytes = 8
	evPageBytes = 4096
)

// CreateEvent takes a mailbox on the event page (allocated on first
// use); the event id is the slot index plus one, so a mailbox holding 0
// is unsignalled.
func (d *Device) CreateEvent() (kfd.Event, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.evPage == nil {
		p, err := d.alloc(evPageBytes, kfd.MemHost)
		if err != nil {
			return kfd.Event{}, fmt.Errorf("amdgpu: event page: %w", err)
		}
		d.evPage, d.evUsed = p, make([]bool, evPageBytes/evSlotBytes)
	}
	for i, used := range d.evUsed {
		if !used {
			d.evUsed[i] = true
			d.evPage.Store64(uint64(i)*evSlotBytes, 0)
			return kfd.Event{ID: uint32(i + 1), Mailbox: d.evPage.VA + uint64(i)*evSlotBytes}, nil
		}
	}
	return kfd.Event{}, fmt.Errorf("amdgpu: all %d event mailboxes are taken", len(d.evUsed))
}

func (d *Device) slot(e kfd.Event) (uint64, error) {
	if d.evPage == nil || e.ID == 0 || int(e.ID) > len(d.evUsed) || !d.evUsed[e.ID-1] || e.Mailbox != d.evPage.VA+uint64(e.ID-1)*evSlotBytes {
		return 0, fmt.Errorf("amdgpu: no event %d", e.ID)
	}
	return uint64(e.ID-1) * evSlotBytes, nil
}

// WaitEvent polls the event's mailbox until it holds the event id, then
// clears it (auto reset): yielding between polls for eventSpin, then
// sleeping.
func (d *Device) WaitEvent(e kfd.Event, timeout time.Duration) error {
	d.mu.Lock()
	off, err := d.slot(e)
	page := d.evPage
	d.mu.Unlock()
	if err != nil {
		return err
	}
	limit := d.PollInterval
	if limit <= 0 {
		limit = 200 * time.Microsecond
	}
	start := time.Now()
	deadline := start.Add(timeout)
	sleep := time.Microsecond
	for {
		if page.Load32(off) == e.ID {
			page.Store32(off, 0)
			return nil
		}
		now := time.Now()
		if now.After(deadline) {
			return fmt.Errorf("amdgpu: event %d not signalled within %v (GPU hang?)", e.ID, timeout)
		}
		if now.Sub(start) < eventSpin {
			runtime.Gosched()
			continue
		}
		time.Sleep(sleep)
		sleep = min(2*sleep, limit)
	}
}

// eventSpin is how long WaitEvent polls without sleeping: a Go sleep of
// microseconds can wake up to a millisecond late, which T-CUDA measured
// as a quarter of a 3 ms decode step (runtime/cuda's wait), so a decode
// step's event is polled by yielding and only a long one sleeps.
const eventSpin = 20 * time.Millisecond

// DestroyEvent frees the event's mailbox.
func (d *Device) DestroyEvent(e kfd.Event) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := d.slot(e); err != nil {
		return err
	}
	d.evUsed[e.ID-1] = false
	return nil
}

// Close frees the user queues, the event page and the doorbell object
// and closes the render node (the kernel frees whatever is left).
func (d *Device) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for id := range d.queues {
		d.drv.UserqFree(id)
		delete(d.queues, id)
	}
	if d.evPage != nil {
		d.free(d.evPage)
		d.evPage, d.evUsed = nil, nil
	}
	if d.doorbell != nil {
		d.drv.Unmap(d.doorbell.Host)
		d.drv.GemClose(uint32(d.doorbell.Handle))
		d.doorbell = nil
	}
	return d.drv.Close()
}

// GfxTargetVersion turns a GC IP discovery version (major<<16 |
// minor<<8 | revision, from AMDGPU_INFO_HW_IP_INFO) into the
// gfx_target_version KFD reports (kfd.Gfx names it: 120001 is gfx1201).
// The table follows amdkfd's kfd_device.c for gfx11 and gfx12, where GC
// revisions and gfx names differ; other gfx10+ versions map digit for
// digit. 0: unknown (gfx9 and older, whose names do not follow the IP
// version).
func GfxTargetVersion(ip uint32) uint32 {
	major, minor, rev := ip>>16&0xFF, ip>>8&0xFF, ip&0xFF
	switch ip {
	case 11<<16 | 0<<8 | 1, 11<<16 | 0<<8 | 4: // Phoenix, Phoenix2
		return 110003
	case 11<<16 | 0<<8 | 3: // Navi32
		return 110001
	}
	if major < 10 {
		return 0
	}
	return major*10000 + minor*100 + rev
}
