package kfd

// The KFD uapi (linux/kfd_ioctl.h, interface version 1.x): the ioctl
// numbers and argument structs T1 uses, mirrored field for field.
// TestUAPILayout compiles a C program against the installed header and
// compares every size, offset and number below with it.

// Interface version this package was written against; the kernel's major
// must match, its minor must be at least MinMinor.
const (
	MajorVersion = 1
	MinMinor     = 2 // acquire VM / alloc memory of GPU arrived in 1.2
)

// Queue types (kfd_ioctl_create_queue_args.queue_type).
const (
	QueueTypeCompute    = 0x0 // a PM4 compute ring: what T1 writes
	QueueTypeComputeAQL = 0x2
)

// Queue limits.
const (
	MaxQueuePercentage = 100
	MaxQueuePriority   = 15
)

// Allocation flags (kfd_ioctl_alloc_memory_of_gpu_args.flags).
const (
	AllocVRAM       = 1 << 0
	AllocGTT        = 1 << 1
	AllocUserptr    = 1 << 2
	AllocDoorbell   = 1 << 3
	AllocWritable   = 1 << 31
	AllocExecutable = 1 << 30
	AllocPublic     = 1 << 29
	AllocNoSubst    = 1 << 28
	AllocCoherent   = 1 << 26
	AllocUncached   = 1 << 25
)

// Event types and wait results.
const (
	EventSignal           = 0
	WaitResultComplete    = 0
	WaitResultTimeout     = 1
	WaitResultFail        = 2
	SignalEventLimit      = 4096
	eventSlotBytes        = 8 // one uint64 per signal event on the event page
	defaultEventPageBytes = SignalEventLimit * eventSlotBytes
)

// GetVersionArgs is struct kfd_ioctl_get_version_args.
type GetVersionArgs struct {
	Major, Minor uint32
}

// CreateQueueArgs is struct kfd_ioctl_create_queue_args.
type CreateQueueArgs struct {
	RingBase        uint64
	WritePtrAddr    uint64
	ReadPtrAddr     uint64
	DoorbellOffset  uint64
	RingSize        uint32
	GPUID           uint32
	QueueType       uint32
	QueuePercentage uint32
	QueuePriority   uint32
	QueueID         uint32
	EOPAddr         uint64
	EOPSize         uint64
	CtxSaveAddr     uint64
	CtxSaveSize     uint32
	CtlStackSize    uint32
}

// DestroyQueueArgs is struct kfd_ioctl_destroy_queue_args.
type DestroyQueueArgs struct {
	QueueID, Pad uint32
}

// ProcessDeviceApertures is struct kfd_process_device_apertures.
type ProcessDeviceApertures struct {
	LDSBase, LDSLimit         uint64
	ScratchBase, ScratchLimit uint64
	GPUVMBase, GPUVMLimit     uint64
	GPUID, Pad                uint32
}

// GetProcessAperturesNewArgs is struct kfd_ioctl_get_process_apertures_new_args.
type GetProcessAperturesNewArgs struct {
	AperturesPtr uint64
	NumNodes     uint32
	Pad          uint32
}

// AcquireVMArgs is struct kfd_ioctl_acquire_vm_args.
type AcquireVMArgs struct {
	DRMFD, GPUID uint32
}

// AllocMemoryArgs is struct kfd_ioctl_alloc_memory_of_gpu_args.
type AllocMemoryArgs struct {
	VA         uint64
	Size       uint64
	Handle     uint64
	MmapOffset uint64
	GPUID      uint32
	Flags      uint32
}

// FreeMemoryArgs is struct kfd_ioctl_free_memory_of_gpu_args.
type FreeMemoryArgs struct {
	Handle uint64
}

// MapMemoryArgs is struct kfd_ioctl_map_memory_to_gpu_args (and, with the
// same layout, kfd_ioctl_unmap_memory_from_gpu_args).
type MapMemoryArgs struct {
	Handle     uint64
	DevicesPtr uint64
	NDevices   uint32
	NSuccess   uint32
}

// CreateEventArgs is struct kfd_ioctl_create_event_args.
type CreateEventArgs struct {
	EventPageOffset  uint64
	EventTriggerData uint32
	EventType        uint32
	AutoReset        uint32
	NodeID           uint32
	EventID          uint32
	EventSlotIndex   uint32
}

// DestroyEventArgs is struct kfd_ioctl_destroy_event_args.
type DestroyEventArgs struct {
	EventID, Pad uint32
}

// EventData is struct kfd_event_data: a 32-byte union of exception data
// (unused for signal events), the extension pointer, the event id.
type EventData struct {
	Exception [32]byte
	Ext       uint64
	EventID   uint32
	Pad       uint32
}

// WaitEventsArgs is struct kfd_ioctl_wait_events_args.
type WaitEventsArgs struct {
	EventsPtr  uint64
	NumEvents  uint32
	WaitForAll uint32
	TimeoutMs  uint32
	WaitResult uint32
}

// Linux _IOC encoding (asm-generic/ioctl.h, which x86-64 and arm64 use).
const (
	iocNone  = 0
	iocWrite = 1
	iocRead  = 2
	iocBase  = 'K'
)

func ioc(dir, nr, size uintptr) uintptr {
	return dir<<30 | size<<16 | iocBase<<8 | nr
}

// The ioctl numbers (AMDKFD_IOC_*).
var (
	IocGetVersion           = ioc(iocRead, 0x01, 8)
	IocCreateQueue          = ioc(iocRead|iocWrite, 0x02, 88)
	IocDestroyQueue         = ioc(iocRead|iocWrite, 0x03, 8)
	IocCreateEvent          = ioc(iocRead|iocWrite, 0x08, 32)
	IocDestroyEvent         = ioc(iocWrite, 0x09, 8)
	IocWaitEvents           = ioc(iocRead|iocWrite, 0x0C, 24)
	IocGetProcessAperturesN = ioc(iocRead|iocWrite, 0x14, 16)
	IocAcquireVM            = ioc(iocWrite, 0x15, 8)
	IocAllocMemoryOfGPU     = ioc(iocRead|iocWrite, 0x16, 40)
	IocFreeMemoryOfGPU      = ioc(iocWrite, 0x17, 8)
	IocMapMemoryToGPU       = ioc(iocRead|iocWrite, 0x18, 24)
	IocUnmapMemoryFromGPU   = ioc(iocRead|iocWrite, 0x19, 24)
)
