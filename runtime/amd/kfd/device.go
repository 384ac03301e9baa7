// Package kfd is T1's device layer: the AMD KFD ioctls (/dev/kfd) through
// golang.org/x/sys/unix, behind the Device interface that the tier
// (runtime/amd/t1) drives and that a simulated device (runtime/amd/kfdsim)
// also implements for tests.
package kfd

import (
	"encoding/binary"
	"sync/atomic"
	"time"
	"unsafe"
)

// MemKind says where an allocation lives and what it is for.
type MemKind uint8

// The kinds T1 allocates. Every kind is mapped for the CPU too: T1 needs
// host views of the request table and the outputs, and uploads weights and
// code through them (VRAM through the PCIe BAR, which needs large BAR or
// resizable BAR for models bigger than 256 MiB).
const (
	MemVRAM    MemKind = iota + 1 // device-local: regions, weights
	MemHost                       // GTT (system memory, coherent, uncached): ring, pointers, fences, event page
	MemCode                       // device-local and executable: kernel code
	MemWeights                    // device-local, read-only to the GPU: weights
)

func (k MemKind) String() string {
	switch k {
	case MemVRAM:
		return "vram"
	case MemHost:
		return "gtt"
	case MemCode:
		return "code"
	case MemWeights:
		return "weights"
	}
	return "?"
}

// Mem is one allocation, mapped to the GPU at VA and to the process at
// Host (the same address on a real device: T1 maps both at one VA).
type Mem struct {
	VA     uint64
	Size   uint64
	Kind   MemKind
	Host   []byte
	Handle uint64
	// Watch, when set, hears every Store32/Store64 (the dword offset): a
	// simulated device uses it to see in which order the ring was written.
	// Real devices leave it nil.
	Watch func(off uint64)
}

// Store32 stores a dword at byte offset off with release ordering.
func (m *Mem) Store32(off uint64, v uint32) {
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&m.Host[off])), v)
	if m.Watch != nil {
		m.Watch(off)
	}
}

// Store64 stores a quad word at byte offset off with release ordering.
func (m *Mem) Store64(off uint64, v uint64) {
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&m.Host[off])), v)
	if m.Watch != nil {
		m.Watch(off)
	}
}

// Load64 loads a quad word at byte offset off with acquire ordering.
func (m *Mem) Load64(off uint64) uint64 {
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(&m.Host[off])))
}

// Load32 loads a dword at byte offset off with acquire ordering.
func (m *Mem) Load32(off uint64) uint32 {
	return atomic.LoadUint32((*uint32)(unsafe.Pointer(&m.Host[off])))
}

// Uint32 reads a dword without ordering (host data such as a fence).
func (m *Mem) Uint32(off uint64) uint32 { return binary.LittleEndian.Uint32(m.Host[off:]) }

// Info describes the device.
type Info struct {
	Name       string // "kfd gpu_id 0x1234 gfx1201" or "kfdsim"
	GPUID      uint32
	GfxVersion uint32 // gfx_target_version as KFD reports it: 120001 is gfx1201
	Major      uint32 // KFD interface version
	Minor      uint32
	GPUVMBase  uint64 // from the process apertures
	GPUVMLimit uint64
	EOPBytes   uint64 // the end-of-pipe buffer a queue needs (0: 4 KiB)
}

// Gfx names the gfx target of a gfx_target_version ("gfx1201").
func Gfx(v uint32) string {
	major, minor, step := v/10000, v/100%100, v%100
	return "gfx" + itoa(major) + string("0123456789abcdef"[minor%16]) + string("0123456789abcdef"[step%16])
}

func itoa(x uint32) string {
	if x == 0 {
		return "0"
	}
	var b []byte
	for ; x > 0; x /= 10 {
		b = append([]byte{byte('0' + x%10)}, b...)
	}
	return string(b)
}

// QueueSpec is what a PM4 compute queue is made of: the ring (a power of
// two of bytes in MemHost memory), and a MemHost allocation whose first
// quad word is the read pointer the CP advances and whose second is the
// write pointer the host advances (both in dwords, never wrapped), and the
// end-of-pipe buffer the CP firmware needs.
type QueueSpec struct {
	Ring     *Mem
	Pointers *Mem
	EOP      *Mem
}

// Offsets of the pointers in QueueSpec.Pointers.
const (
	ReadPtrOff  = 0
	WritePtrOff = 8
)

// Doorbell wakes the CP of a queue: the 64-bit store of the new write
// pointer. A real doorbell cannot fail; a simulated one reports a
// malformed submission at once.
type Doorbell interface {
	Ring(wptr uint64) error
}

// Queue is a created queue.
type Queue struct {
	ID       uint32
	Doorbell Doorbell
}

// Event is a signal event: a RELEASE_MEM that writes ID to Mailbox with an
// interrupt whose context id is ID signals it.
type Event struct {
	ID      uint32
	Mailbox uint64 // GPU address of the event's slot on the event page
}

// Device is what T1 needs of a GPU: memory, one PM4 compute queue, signal
// events.
type Device interface {
	Info() Info
	// Alloc allocates size bytes (rounded up to pages), maps them to the
	// GPU and to the process.
	Alloc(size uint64, kind MemKind) (*Mem, error)
	Free(m *Mem) error
	CreateQueue(s QueueSpec) (*Queue, error)
	DestroyQueue(q *Queue) error
	CreateEvent() (Event, error)
	// WaitEvent waits for the event to be signalled (it resets
	// automatically) for at most timeout.
	WaitEvent(e Event, timeout time.Duration) error
	DestroyEvent(e Event) error
	Close() error
}

// The code directory T1 writes at the start of its code allocation: magic,
// kernel count, then per kernel the byte offset of its code entry (u64)
// and the offset and size of its whole .zrt image (u32 each), all in the
// same allocation. A GPU ignores it (it runs the code the program address
// points at); the simulated device reads it to know which kernel a
// program address is, and the blob's specialization values.
const (
	CodeDirMagic  = 0x444B525A // "ZRKD"
	CodeDirHeader = 8
	CodeDirEntry  = 16
)

// Program addresses: COMPUTE_PGM_LO holds address bits 39:8, PGM_HI bits
// 47:40, so code entries are 256-byte aligned.
const CodeAlign = 256
