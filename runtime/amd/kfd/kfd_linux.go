//go:build linux

package kfd

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Paths the real device uses.
const (
	DevicePath   = "/dev/kfd"
	TopologyPath = "/sys/devices/virtual/kfd/kfd/topology/nodes"
)

// Node is a GPU node of the KFD topology.
type Node struct {
	Index       int
	GPUID       uint32
	GfxVersion  uint32
	RenderMinor int
	CWSRSize    uint32 // context save area per queue, control stack included (0: the kernel does not say)
	CtlStack    uint32 // its control stack part
	DebugMem    uint32 // debugger memory the save area's allocation adds
	EOPBytes    uint32 // end-of-pipe buffer size the kernel expects (0: not said)
}

// Nodes reads the KFD topology's GPU nodes (CPU nodes have gpu_id 0).
func Nodes() ([]Node, error) {
	dirs, err := os.ReadDir(TopologyPath)
	if err != nil {
		return nil, fmt.Errorf("KFD topology: %w", err)
	}
	var out []Node
	for _, d := range dirs {
		idx, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		dir := filepath.Join(TopologyPath, d.Name())
		id, err := os.ReadFile(filepath.Join(dir, "gpu_id"))
		if err != nil {
			continue
		}
		gid, _ := strconv.ParseUint(strings.TrimSpace(string(id)), 10, 32)
		if gid == 0 {
			continue
		}
		n := Node{Index: idx, GPUID: uint32(gid)}
		f, err := os.Open(filepath.Join(dir, "properties"))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			kv := strings.Fields(sc.Text())
			if len(kv) != 2 {
				continue
			}
			v, _ := strconv.ParseUint(kv[1], 10, 64)
			switch kv[0] {
			case "gfx_target_version":
				n.GfxVersion = uint32(v)
			case "drm_render_minor":
				n.RenderMinor = int(v)
			case "cwsr_size":
				n.CWSRSize = uint32(v)
			case "ctl_stack_size":
				n.CtlStack = uint32(v)
			case "debug_memory_size":
				n.DebugMem = uint32(v)
			case "eop_buffer_size":
				n.EOPBytes = uint32(v)
			}
		}
		f.Close()
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Index < out[j].Index })
	return out, nil
}

// Probe says whether T1 can run here and, if not, exactly why: the
// device node, its permissions, the interface version, a GPU node, its
// render node, its gfx version (supported: the gfx names in gfx).
func Probe(gfx []string) (Info, error) {
	d, err := Open(OpenOptions{Gfx: gfx})
	if err != nil {
		return Info{}, err
	}
	info := d.Info()
	d.Close()
	return info, nil
}

// OpenOptions configure Open.
type OpenOptions struct {
	Node int      // GPU node index among the GPU nodes (0: the first)
	Gfx  []string // gfx targets accepted ("gfx1201"); empty: any
}

// Real is the KFD device.
type Real struct {
	fd, drm  int
	info     Info
	pageSize uint64
	evPage   *Mem
	doorbell []byte
	node     Node // context-save sizes for CreateQueue
}

// Ioctl issues ioctl request req on fd with arg, again when a signal
// interrupts it or the driver asks for a retry (EINTR, EAGAIN), as
// libdrm's drmIoctl does. The amdgpu package's DRM calls use it too.
func Ioctl(fd int, req uintptr, arg unsafe.Pointer) error {
	for {
		_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(arg))
		if e == unix.EINTR || e == unix.EAGAIN {
			continue
		}
		if e != 0 {
			return e
		}
		return nil
	}
}

func openReason(path string, err error) error {
	switch {
	case errors.Is(err, unix.ENOENT):
		if path == DevicePath {
			return fmt.Errorf("no %s: the amdgpu driver with KFD (HSA) support is not loaded, or this machine has no AMD GPU", path)
		}
		return fmt.Errorf("no %s", path)
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return fmt.Errorf("permission denied opening %s: add the user to the render (and video) group", path)
	}
	return fmt.Errorf("open %s: %w", path, err)
}

// Open opens /dev/kfd and prepares one GPU: version check, topology,
// render node, process apertures, acquire VM.
func Open(o OpenOptions) (*Real, error) {
	fd, err := unix.Open(DevicePath, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, openReason(DevicePath, err)
	}
	d := &Real{fd: fd, drm: -1, pageSize: uint64(unix.Getpagesize())}
	fail := func(err error) (*Real, error) { d.Close(); return nil, err }
	var v GetVersionArgs
	if err := Ioctl(fd, IocGetVersion, unsafe.Pointer(&v)); err != nil {
		return fail(fmt.Errorf("%s: AMDKFD_IOC_GET_VERSION: %w", DevicePath, err))
	}
	if v.Major != MajorVersion || v.Minor < MinMinor {
		return fail(fmt.Errorf("%s: KFD interface %d.%d, T1 needs %d.%d or newer", DevicePath, v.Major, v.Minor, MajorVersion, MinMinor))
	}
	nodes, err := Nodes()
	if err != nil {
		return fail(err)
	}
	if len(nodes) == 0 {
		return fail(fmt.Errorf("%s: the KFD topology lists no GPU node", DevicePath))
	}
	if o.Node < 0 || o.Node >= len(nodes) {
		return fail(fmt.Errorf("KFD GPU node %d: there are %d", o.Node, len(nodes)))
	}
	n := nodes[o.Node]
	gfx := Gfx(n.GfxVersion)
	if len(o.Gfx) > 0 && !contains(o.Gfx, gfx) {
		return fail(fmt.Errorf("GPU node %d is %s (gfx_target_version %d); T1 has kernels for %s", n.Index, gfx, n.GfxVersion, strings.Join(o.Gfx, ", ")))
	}
	render := fmt.Sprintf("/dev/dri/renderD%d", n.RenderMinor)
	if d.drm, err = unix.Open(render, unix.O_RDWR|unix.O_CLOEXEC, 0); err != nil {
		return fail(openReason(render, err))
	}
	ap := make([]ProcessDeviceApertures, len(nodes))
	pa := GetProcessAperturesNewArgs{AperturesPtr: uint64(uintptr(unsafe.Pointer(&ap[0]))), NumNodes: uint32(len(ap))}
	if err := Ioctl(fd, IocGetProcessAperturesN, unsafe.Pointer(&pa)); err != nil {
		return fail(fmt.Errorf("AMDKFD_IOC_GET_PROCESS_APERTURES_NEW: %w", err))
	}
	d.info = Info{Name: fmt.Sprintf("kfd gpu_id %#x %s (%s)", n.GPUID, gfx, render), GPUID: n.GPUID, GfxVersion: n.GfxVersion, Major: v.Major, Minor: v.Minor, EOPBytes: uint64(n.EOPBytes)}
	for _, a := range ap[:pa.NumNodes] {
		if a.GPUID == n.GPUID {
			d.info.GPUVMBase, d.info.GPUVMLimit = a.GPUVMBase, a.GPUVMLimit
		}
	}
	vm := AcquireVMArgs{DRMFD: uint32(d.drm), GPUID: n.GPUID}
	if err := Ioctl(fd, IocAcquireVM, unsafe.Pointer(&vm)); err != nil {
		return fail(fmt.Errorf("AMDKFD_IOC_ACQUIRE_VM on %s: %w", render, err))
	}
	d.node = n
	return d, nil
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// Info describes the device.
func (d *Real) Info() Info { return d.info }

// Alloc reserves a CPU address range, allocates GPU memory at that same
// address, maps it into the process over the render node and maps it to
// the GPU.
func (d *Real) Alloc(size uint64, kind MemKind) (*Mem, error) {
	size = (size + d.pageSize - 1) &^ (d.pageSize - 1)
	if size == 0 {
		size = d.pageSize
	}
	flags := uint32(AllocNoSubst)
	switch kind {
	case MemVRAM:
		flags |= AllocVRAM | AllocPublic | AllocWritable
	case MemWeights: // the GPU maps it read-only; the CPU writes it through its own mapping
		flags |= AllocVRAM | AllocPublic
	case MemCode:
		flags |= AllocVRAM | AllocPublic | AllocExecutable | AllocWritable
	case MemHost:
		flags |= AllocGTT | AllocCoherent | AllocUncached | AllocWritable
	default:
		return nil, fmt.Errorf("kfd: memory kind %d", kind)
	}
	va, err := unix.MmapPtr(-1, 0, nil, uintptr(size), unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return nil, fmt.Errorf("kfd: reserving %d bytes of address space: %w", size, err)
	}
	a := AllocMemoryArgs{VA: uint64(uintptr(va)), Size: size, GPUID: d.info.GPUID, Flags: flags}
	if err := Ioctl(d.fd, IocAllocMemoryOfGPU, unsafe.Pointer(&a)); err != nil {
		unix.MunmapPtr(va, uintptr(size))
		return nil, fmt.Errorf("kfd: AMDKFD_IOC_ALLOC_MEMORY_OF_GPU of %d bytes (%s): %w", size, kind, err)
	}
	m := &Mem{VA: a.VA, Size: size, Kind: kind, Handle: a.Handle, Host: unsafe.Slice((*byte)(va), size)}
	if _, err := unix.MmapPtr(d.drm, int64(a.MmapOffset), va, uintptr(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_FIXED); err != nil {
		d.Free(m)
		return nil, fmt.Errorf("kfd: mapping %d bytes of %s for the CPU: %w", size, kind, err)
	}
	ids := []uint32{d.info.GPUID}
	mm := MapMemoryArgs{Handle: a.Handle, DevicesPtr: uint64(uintptr(unsafe.Pointer(&ids[0]))), NDevices: 1}
	if err := Ioctl(d.fd, IocMapMemoryToGPU, unsafe.Pointer(&mm)); err != nil || mm.NSuccess != 1 {
		d.Free(m)
		return nil, fmt.Errorf("kfd: AMDKFD_IOC_MAP_MEMORY_TO_GPU: %v (%d of 1 mapped)", err, mm.NSuccess)
	}
	return m, nil
}

// Free unmaps and frees an allocation.
func (d *Real) Free(m *Mem) error {
	ids := []uint32{d.info.GPUID}
	um := MapMemoryArgs{Handle: m.Handle, DevicesPtr: uint64(uintptr(unsafe.Pointer(&ids[0]))), NDevices: 1}
	Ioctl(d.fd, IocUnmapMemoryFromGPU, unsafe.Pointer(&um)) // fails harmlessly when never mapped
	f := FreeMemoryArgs{Handle: m.Handle}
	err := Ioctl(d.fd, IocFreeMemoryOfGPU, unsafe.Pointer(&f))
	unix.MunmapPtr(unsafe.Pointer(unsafe.SliceData(m.Host)), uintptr(m.Size))
	if err != nil {
		return fmt.Errorf("kfd: AMDKFD_IOC_FREE_MEMORY_OF_GPU: %w", err)
	}
	return nil
}

type realDoorbell struct{ p *uint64 }

func (r realDoorbell) Ring(w uint64) error { atomic.StoreUint64(r.p, w); return nil }

// CreateQueue creates a PM4 compute queue on the ring and maps its
// doorbell.
func (d *Real) CreateQueue(s QueueSpec) (*Queue, error) {
	a := CreateQueueArgs{
		RingBase: s.Ring.VA, RingSize: uint32(s.Ring.Size),
		ReadPtrAddr: s.Pointers.VA + ReadPtrOff, WritePtrAddr: s.Pointers.VA + WritePtrOff,
		GPUID: d.info.GPUID, QueueType: QueueTypeCompute, QueuePercentage: MaxQueuePercentage, QueuePriority: 7,
		EOPAddr: s.EOP.VA, EOPSize: s.EOP.Size,
	}
	if n := uint64(d.node.EOPBytes); n > 0 && n <= s.EOP.Size {
		a.EOPSize = n // kernels 6.12+ want exactly the topology's size
	}
	if d.node.CWSRSize > 0 {
		// The context save area (kernels 6.12+ check it against the
		// topology): cwsr_size bytes, the debugger's memory after them.
		save, err := d.Alloc(uint64(d.node.CWSRSize)+uint64(d.node.DebugMem), MemHost)
		if err != nil {
			return nil, err
		}
		a.CtxSaveAddr, a.CtxSaveSize, a.CtlStackSize = save.VA, d.node.CWSRSize, d.node.CtlStack
	}
	if err := Ioctl(d.fd, IocCreateQueue, unsafe.Pointer(&a)); err != nil {
		if errors.Is(err, unix.ENOMEM) || errors.Is(err, unix.ENOSPC) {
			return nil, fmt.Errorf("kfd: AMDKFD_IOC_CREATE_QUEUE: no compute queue slots left (%w)", err)
		}
		return nil, fmt.Errorf("kfd: AMDKFD_IOC_CREATE_QUEUE: %w", err)
	}
	if d.doorbell == nil {
		base := a.DoorbellOffset &^ 0x1FFF
		b, err := unix.Mmap(d.fd, int64(base), 0x2000, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			return nil, fmt.Errorf("kfd: mapping the doorbell page: %w", err)
		}
		d.doorbell = b
	}
	p := (*uint64)(unsafe.Pointer(&d.doorbell[a.DoorbellOffset&0x1FFF]))
	return &Queue{ID: a.QueueID, Doorbell: realDoorbell{p}}, nil
}

// DestroyQueue destroys a queue.
func (d *Real) DestroyQueue(q *Queue) error {
	a := DestroyQueueArgs{QueueID: q.ID}
	if err := Ioctl(d.fd, IocDestroyQueue, unsafe.Pointer(&a)); err != nil {
		return fmt.Errorf("kfd: AMDKFD_IOC_DESTROY_QUEUE: %w", err)
	}
	return nil
}

// CreateEvent creates an auto-reset signal event; the first one also
// hands KFD the event page.
func (d *Real) CreateEvent() (Event, error) {
	a := CreateEventArgs{EventType: EventSignal, AutoReset: 1}
	if d.evPage == nil {
		p, err := d.Alloc(defaultEventPageBytes, MemHost)
		if err != nil {
			return Event{}, err
		}
		d.evPage, a.EventPageOffset = p, p.Handle
	}
	if err := Ioctl(d.fd, IocCreateEvent, unsafe.Pointer(&a)); err != nil {
		return Event{}, fmt.Errorf("kfd: AMDKFD_IOC_CREATE_EVENT: %w", err)
	}
	return Event{ID: a.EventID, Mailbox: d.evPage.VA + uint64(a.EventSlotIndex)*eventSlotBytes}, nil
}

// WaitEvent waits for a signal event.
func (d *Real) WaitEvent(e Event, timeout time.Duration) error {
	ev := EventData{EventID: e.ID}
	a := WaitEventsArgs{EventsPtr: uint64(uintptr(unsafe.Pointer(&ev))), NumEvents: 1, WaitForAll: 1, TimeoutMs: uint32(timeout.Milliseconds())}
	if err := Ioctl(d.fd, IocWaitEvents, unsafe.Pointer(&a)); err != nil {
		return fmt.Errorf("kfd: AMDKFD_IOC_WAIT_EVENTS: %w", err)
	}
	switch a.WaitResult {
	case WaitResultComplete:
		return nil
	case WaitResultTimeout:
		return fmt.Errorf("kfd: event %d not signalled within %v (GPU hang?)", e.ID, timeout)
	}
	return fmt.Errorf("kfd: waiting for event %d failed (result %d)", e.ID, a.WaitResult)
}

// DestroyEvent destroys an event.
func (d *Real) DestroyEvent(e Event) error {
	a := DestroyEventArgs{EventID: e.ID}
	return Ioctl(d.fd, IocDestroyEvent, unsafe.Pointer(&a))
}

// Close releases the device (KFD frees what the process still holds).
func (d *Real) Close() error {
	if d.doorbell != nil {
		unix.Munmap(d.doorbell)
	}
	if d.drm >= 0 {
		unix.Close(d.drm)
	}
	return unix.Close(d.fd)
}
