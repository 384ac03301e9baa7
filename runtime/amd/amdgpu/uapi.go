// Package amdgpu is T2's device layer: the DRM and amdgpu ioctls of a
// render node (/dev/dri/renderD*) through golang.org/x/sys/unix, with
// user-mode queues, behind the kfd.Device interface that T1's tier code
// (runtime/amd/t1) drives. T2 is T1's submission path — ring, packets,
// relocations, fences — over the amdgpu DRM uapi instead of /dev/kfd.
package amdgpu

// The uapi: drm/drm.h and drm/amdgpu_drm.h, mirrored field for field.
//
// Two sources, kept apart:
//
//   - Checked: everything TestUAPILayout compiles against the installed
//     header (Debian's libdrm-dev 2.4.114 puts it in
//     /usr/include/libdrm/amdgpu_drm.h; a newer linux-libc-dev in
//     /usr/include/drm): the DRM version and GEM close ioctls, GEM
//     create/mmap/VA, INFO with the device-info and HW-IP-info queries,
//     their flags and ioctl numbers.
//   - Written from knowledge, following Linux 6.16's
//     include/uapi/drm/amdgpu_drm.h (the release that made the amdgpu
//     user-queue uapi public) — NOT checked against any header on this
//     machine: the user-queue ioctls (DRM_AMDGPU_USERQ, _SIGNAL, _WAIT)
//     and their structs, the compute MQD, AMDGPU_GEM_DOMAIN_DOORBELL, the
//     tail of drm_amdgpu_info_device after tcc_disabled_mask (up to
//     userq_ip_mask) and drm_amdgpu_info_hw_ip.ip_discovery_version (the
//     old _pad). TestUAPILayout checks these too where the installed
//     header has them (it defines DRM_AMDGPU_USERQ).
//
// The layouts are those of a 64-bit process (pointers and size_t are 8
// bytes), which is what zrt-run is built for.

// DRM ioctl encoding: _IOC with type 'd' (drm/drm.h), driver ioctls from
// DRM_COMMAND_BASE.
const (
	iocWrite       = 1
	iocRead        = 2
	drmIocBase     = 'd'
	DRMCommandBase = 0x40
)

func drmIOC(dir, nr, size uintptr) uintptr {
	return dir<<30 | size<<16 | drmIocBase<<8 | nr
}

func drmIOWR(nr, size uintptr) uintptr { return drmIOC(iocRead|iocWrite, nr, size) }
func drmIOW(nr, size uintptr) uintptr  { return drmIOC(iocWrite, nr, size) }

// Version is struct drm_version (64-bit layout).
type Version struct {
	Major, Minor, Patch int32
	_                   int32
	NameLen             uint64
	Name                uint64 // char *
	DateLen             uint64
	Date                uint64 // char *
	DescLen             uint64
	Desc                uint64 // char *
}

// GemClose is struct drm_gem_close.
type GemClose struct {
	Handle, Pad uint32
}

// amdgpu driver ioctl numbers (DRM_AMDGPU_*): checked.
const (
	nrGemCreate = 0x00
	nrGemMmap   = 0x01
	nrInfo      = 0x05
	nrGemVA     = 0x08
)

// User-queue ioctl numbers: from knowledge (Linux 6.16).
const (
	nrUserq       = 0x16
	nrUserqSignal = 0x17
	nrUserqWait   = 0x18
)

// GEM domains (AMDGPU_GEM_DOMAIN_*): checked, but for Doorbell (Linux
// 6.16 knowledge; the doorbell domain arrived with the doorbell-manager
// rework for user queues).
const (
	DomainCPU      = 0x1
	DomainGTT      = 0x2
	DomainVRAM     = 0x4
	DomainDoorbell = 0x40 // knowledge
)

// GEM create flags (AMDGPU_GEM_CREATE_*): checked.
const (
	CreateCPUAccessRequired = 1 << 0
	CreateNoCPUAccess       = 1 << 1
	CreateCPUGTTUSWC        = 1 << 2
	CreateVRAMCleared       = 1 << 3
	CreateVMAlwaysValid     = 1 << 6
)

// GEM VA operations and page flags: checked.
const (
	VAOpMap       = 1
	VAOpUnmap     = 2
	PageReadable  = 1 << 1
	PageWriteable = 1 << 2
	PageExec      = 1 << 3
	MtypeUC       = 4 << 5
)

// INFO queries and HW IP types: checked.
const (
	InfoHWIPInfo = 0x02
	InfoDevInfo  = 0x16
	HWIPGFX      = 0
	HWIPCompute  = 1
	HWIPDMA      = 2
)

// GemCreateIn is struct drm_amdgpu_gem_create_in; the union
// drm_amdgpu_gem_create is its size, its out part the handle at offset 0.
type GemCreateIn struct {
	BOSize      uint64
	Alignment   uint64
	Domains     uint64
	DomainFlags uint64
}

// GemMmap is union drm_amdgpu_gem_mmap: in, the handle (u32 + pad); out,
// the fake offset to mmap the render node at.
type GemMmap struct {
	HandleOrOffset uint64
}

// GemVA is struct drm_amdgpu_gem_va (the 40-byte form; Linux 6.16+ appends
// timeline-syncobj fields, which DRM zero-fills for a caller that passes
// the short form).
type GemVA struct {
	Handle     uint32
	Pad        uint32
	Operation  uint32
	Flags      uint32
	VAAddress  uint64
	OffsetInBO uint64
	MapSize    uint64
}

// InfoArgs is struct drm_amdgpu_info with the query_hw_ip member of its
// union (the union is 16 bytes).
type InfoArgs struct {
	ReturnPointer uint64
	ReturnSize    uint32
	Query         uint32
	IPType        uint32 // query_hw_ip.type
	IPInstance    uint32 // query_hw_ip.ip_instance
	_             [8]byte
}

// InfoHWIP is struct drm_amdgpu_info_hw_ip. IPDiscoveryVersion is the
// header's old _pad: (major<<16 | minor<<8 | revision) of the IP block
// (knowledge: Linux 6.7 and newer fill it).
type InfoHWIP struct {
	VersionMajor       uint32
	VersionMinor       uint32
	CapabilitiesFlags  uint64
	IBStartAlignment   uint32
	IBSizeAlignment    uint32
	AvailableRings     uint32
	IPDiscoveryVersion uint32
}

// InfoDevice is struct drm_amdgpu_info_device. Up to TCCDisabledMask the
// layout is checked; the rest follows Linux 6.16 (knowledge). The kernel
// copies min(its size, ours), so a kernel with a shorter struct leaves the
// tail as the caller set it: Open pre-fills it to tell "field absent"
// from zero.
type InfoDevice struct {
	DeviceID                 uint32
	ChipRev                  uint32
	ExternalRev              uint32
	PCIRev                   uint32
	Family                   uint32
	NumShaderEngines         uint32
	NumShaderArraysPerEngine uint32
	GPUCounterFreq           uint32
	MaxEngineClock           uint64
	MaxMemoryClock           uint64
	CUActiveNumber           uint32
	CUAOMask                 uint32
	CUBitmap                 [4][4]uint32
	EnabledRBPipesMask       uint32
	NumRBPipes               uint32
	NumHWGfxContexts         uint32
	PCIeGen                  uint32 // _pad in older headers
	IDsFlags                 uint64
	VirtualAddressOffset     uint64
	VirtualAddressMax        uint64
	VirtualAddressAlignment  uint32
	PTEFragmentSize          uint32
	GARTPageSize             uint32
	CERAMSize                uint32
	VRAMType                 uint32
	VRAMBitWidth             uint32
	VCEHarvestConfig         uint32
	GCDoubleOffchipLDSBuf    uint32
	PrimBufGPUAddr           uint64
	PosBufGPUAddr            uint64
	CntlSBBufGPUAddr         uint64
	ParamBufGPUAddr          uint64
	PrimBufSize              uint32
	PosBufSize               uint32
	CntlSBBufSize            uint32
	ParamBufSize             uint32
	WaveFrontSize            uint32
	NumShaderVisibleVGPRs    uint32
	NumCUPerSH               uint32
	NumTCCBlocks             uint32
	GSVGTTableDepth          uint32
	GSPrimBufferDepth        uint32
	MaxGSWavesPerVGT         uint32
	PCIeNumLanes             uint32 // _pad1 in older headers
	CUAOBitmap               [4][4]uint32
	HighVAOffset             uint64
	HighVAMax                uint64
	PASCTileSteeringOverride uint32
	TCCDisabledMask          uint64
	// From here on: Linux 6.16 (knowledge).
	MinEngineClock       uint64
	MinMemoryClock       uint64
	TCPCacheSize         uint32
	NumSQCPerWGP         uint32
	SQCDataCacheSize     uint32
	SQCInstCacheSize     uint32
	GL1CCacheSize        uint32
	GL2CCacheSize        uint32
	MallSize             uint64
	EnabledRBPipesMaskHi uint32
	ShadowSize           uint32
	ShadowAlignment      uint32
	CSASize              uint32
	CSAAlignment         uint32
	UserqIPMask          uint32 // 1 << AMDGPU_HW_IP_* that have user queues
	Pad                  uint32
}

// User-queue operations and flags (knowledge: Linux 6.16).
const (
	UserqOpCreate          = 1
	UserqOpFree            = 2
	UserqPriorityNormalLow = 0 // AMDGPU_USERQ_CREATE_FLAGS_QUEUE_PRIORITY_NORMAL_LOW
)

// UserqIn is struct drm_amdgpu_userq_in (knowledge: Linux 6.16); union
// drm_amdgpu_userq is its size, the out part (queue_id, pad) at offset 0.
type UserqIn struct {
	Op             uint32
	QueueID        uint32 // for UserqOpFree
	IPType         uint32 // AMDGPU_HW_IP_*
	DoorbellHandle uint32 // GEM handle of the doorbell object
	DoorbellOffset uint32 // doorbell index in the object, in 64-bit doorbells for compute
	Flags          uint32
	QueueVA        uint64
	QueueSize      uint64
	RptrVA         uint64
	WptrVA         uint64
	MQD            uint64 // pointer to the IP's MQD struct
	MQDSize        uint64
}

// MQDComputeGfx11 is struct drm_amdgpu_userq_mqd_compute_gfx11
// (knowledge: Linux 6.16; gfx12 uses it too).
type MQDComputeGfx11 struct {
	EOPVA uint64
}

// UserqSignal is struct drm_amdgpu_userq_signal (knowledge: Linux 6.16).
type UserqSignal struct {
	QueueID           uint32
	Pad               uint32
	SyncobjHandles    uint64
	NumSyncobjHandles uint64
	BOReadHandles     uint64
	BOWriteHandles    uint64
	NumBOReadHandles  uint32
	NumBOWriteHandles uint32
}

// UserqFenceInfo is struct drm_amdgpu_userq_fence_info (knowledge).
type UserqFenceInfo struct {
	VA, Value uint64
}

// UserqWait is struct drm_amdgpu_userq_wait (knowledge: Linux 6.16).
type UserqWait struct {
	WaitqID                   uint32
	Pad                       uint32
	SyncobjHandles            uint64
	SyncobjTimelineHandles    uint64
	SyncobjTimelinePoints     uint64
	BOReadHandles             uint64
	BOWriteHandles            uint64
	NumSyncobjTimelineHandles uint16
	NumFences                 uint16
	NumSyncobjHandles         uint32
	NumBOReadHandles          uint32
	NumBOWriteHandles         uint32
	OutFences                 uint64
}

// The ioctl numbers. DRM looks a driver ioctl up by its number alone and
// copies min(the caller's size, the kernel's), zero-filling the rest, so
// the short forms work on kernels whose structs grew.
var (
	IocVersion     = drmIOWR(0x00, 64)
	IocGemClose    = drmIOW(0x09, 8)
	IocGemCreate   = drmIOWR(DRMCommandBase+nrGemCreate, 32)
	IocGemMmap     = drmIOWR(DRMCommandBase+nrGemMmap, 8)
	IocInfo        = drmIOW(DRMCommandBase+nrInfo, 32)
	IocGemVA       = drmIOW(DRMCommandBase+nrGemVA, 40)
	IocUserq       = drmIOWR(DRMCommandBase+nrUserq, 72)       // knowledge
	IocUserqSignal = drmIOWR(DRMCommandBase+nrUserqSignal, 48) // knowledge
	IocUserqWait   = drmIOWR(DRMCommandBase+nrUserqWait, 72)   // knowledge
)
