package amdgpu

import (
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/zrtdev/zrt/runtime/amd/internal/cfacts"
)

// off is one member offset the facts check (cfacts.Layout).
type off = cfacts.Off

func uapiFacts() []cfacts.Fact {
	var f []cfacts.Fact
	add := func(guard, c string, v uintptr) { f = append(f, cfacts.Fact{C: c, Go: uint64(v), Guard: guard}) }
	fields := func(guard, s string, size uintptr, offs []off) {
		f = append(f, cfacts.Layout(guard, s, size, offs...)...)
	}
	var v Version
	fields("", "struct drm_version", unsafe.Sizeof(v), []off{{C: "version_major", At: unsafe.Offsetof(v.Major)},
		{C: "version_minor", At: unsafe.Offsetof(v.Minor)}, {C: "version_patchlevel", At: unsafe.Offsetof(v.Patch)},
		{C: "name_len", At: unsafe.Offsetof(v.NameLen)}, {C: "name", At: unsafe.Offsetof(v.Name)}, {C: "date_len", At: unsafe.Offsetof(v.DateLen)},
		{C: "date", At: unsafe.Offsetof(v.Date)}, {C: "desc_len", At: unsafe.Offsetof(v.DescLen)}, {C: "desc", At: unsafe.Offsetof(v.Desc)}})
	var gc GemClose
	fields("", "struct drm_gem_close", unsafe.Sizeof(gc), []off{{C: "handle", At: unsafe.Offsetof(gc.Handle)}})
	var ci GemCreateIn
	fields("", "struct drm_amdgpu_gem_create_in", unsafe.Sizeof(ci), []off{{C: "bo_size", At: unsafe.Offsetof(ci.BOSize)},
		{C: "alignment", At: unsafe.Offsetof(ci.Alignment)}, {C: "domains", At: unsafe.Offsetof(ci.Domains)}, {C: "domain_flags", At: unsafe.Offsetof(ci.DomainFlags)}})
	fields("", "union drm_amdgpu_gem_create", unsafe.Sizeof(ci), []off{{C: "out.handle", At: 0}})
	var mm GemMmap
	fields("", "union drm_amdgpu_gem_mmap", unsafe.Sizeof(mm), []off{{C: "in.handle", At: 0}, {C: "out.addr_ptr", At: 0}})
	var va GemVA
	fields("", "struct drm_amdgpu_gem_va", 0, []off{{C: "handle", At: unsafe.Offsetof(va.Handle)}, {C: "operation", At: unsafe.Offsetof(va.Operation)},
		{C: "flags", At: unsafe.Offsetof(va.Flags)}, {C: "va_address", At: unsafe.Offsetof(va.VAAddress)}, {C: "offset_in_bo", At: unsafe.Offsetof(va.OffsetInBO)},
		{C: "map_size", At: unsafe.Offsetof(va.MapSize)}})
	var in InfoArgs
	fields("", "struct drm_amdgpu_info", unsafe.Sizeof(in), []off{{C: "return_pointer", At: unsafe.Offsetof(in.ReturnPointer)},
		{C: "return_size", At: unsafe.Offsetof(in.ReturnSize)}, {C: "query", At: unsafe.Offsetof(in.Query)},
		{C: "query_hw_ip.type", At: unsafe.Offsetof(in.IPType)}, {C: "query_hw_ip.ip_instance", At: unsafe.Offsetof(in.IPInstance)}})
	var hw InfoHWIP
	fields("", "struct drm_amdgpu_info_hw_ip", unsafe.Sizeof(hw), []off{{C: "hw_ip_version_major", At: unsafe.Offsetof(hw.VersionMajor)},
		{C: "hw_ip_version_minor", At: unsafe.Offsetof(hw.VersionMinor)}, {C: "capabilities_flags", At: unsafe.Offsetof(hw.CapabilitiesFlags)},
		{C: "ib_start_alignment", At: unsafe.Offsetof(hw.IBStartAlignment)}, {C: "ib_size_alignment", At: unsafe.Offsetof(hw.IBSizeAlignment)},
		{C: "available_rings", At: unsafe.Offsetof(hw.AvailableRings)}})
	// ip_discovery_version replaced the trailing _pad: the last 4 bytes.
	add("", "sizeof(struct drm_amdgpu_info_hw_ip) - 4", unsafe.Offsetof(hw.IPDiscoveryVersion))
	var di InfoDevice
	s := "struct drm_amdgpu_info_device"
	fields("", s, 0, []off{{C: "device_id", At: unsafe.Offsetof(di.DeviceID)}, {C: "chip_rev", At: unsafe.Offsetof(di.ChipRev)},
		{C: "external_rev", At: unsafe.Offsetof(di.ExternalRev)}, {C: "pci_rev", At: unsafe.Offsetof(di.PCIRev)}, {C: "family", At: unsafe.Offsetof(di.Family)},
		{C: "num_shader_engines", At: unsafe.Offsetof(di.NumShaderEngines)}, {C: "gpu_counter_freq", At: unsafe.Offsetof(di.GPUCounterFreq)},
		{C: "max_engine_clock", At: unsafe.Offsetof(di.MaxEngineClock)}, {C: "cu_active_number", At: unsafe.Offsetof(di.CUActiveNumber)},
		{C: "cu_bitmap", At: unsafe.Offsetof(di.CUBitmap)}, {C: "enabled_rb_pipes_mask", At: unsafe.Offsetof(di.EnabledRBPipesMask)},
		{C: "num_hw_gfx_contexts", At: unsafe.Offsetof(di.NumHWGfxContexts)}, {C: "ids_flags", At: unsafe.Offsetof(di.IDsFlags)},
		{C: "virtual_address_offset", At: unsafe.Offsetof(di.VirtualAddressOffset)}, {C: "virtual_address_max", At: unsafe.Offsetof(di.VirtualAddressMax)},
		{C: "virtual_address_alignment", At: unsafe.Offsetof(di.VirtualAddressAlignment)}, {C: "pte_fragment_size", At: unsafe.Offsetof(di.PTEFragmentSize)},
		{C: "gart_page_size", At: unsafe.Offsetof(di.GARTPageSize)}, {C: "vram_type", At: unsafe.Offsetof(di.VRAMType)},
		{C: "gc_double_offchip_lds_buf", At: unsafe.Offsetof(di.GCDoubleOffchipLDSBuf)}, {C: "prim_buf_gpu_addr", At: unsafe.Offsetof(di.PrimBufGPUAddr)},
		{C: "param_buf_size", At: unsafe.Offsetof(di.ParamBufSize)}, {C: "wave_front_size", At: unsafe.Offsetof(di.WaveFrontSize)},
		{C: "max_gs_waves_per_vgt", At: unsafe.Offsetof(di.MaxGSWavesPerVGT)}, {C: "cu_ao_bitmap", At: unsafe.Offsetof(di.CUAOBitmap)},
		{C: "high_va_offset", At: unsafe.Offsetof(di.HighVAOffset)}, {C: "high_va_max", At: unsafe.Offsetof(di.HighVAMax)},
		{C: "pa_sc_tile_steering_override", At: unsafe.Offsetof(di.PASCTileSteeringOverride)},
		{C: "tcc_disabled_mask", At: unsafe.Offsetof(di.TCCDisabledMask)}})
	// What follows tcc_disabled_mask is knowledge (Linux 6.16), checked
	// only against a header that has the user-queue uapi.
	const uq = "DRM_AMDGPU_USERQ"
	fields(uq, s, unsafe.Sizeof(di), []off{{C: "min_engine_clock", At: unsafe.Offsetof(di.MinEngineClock)},
		{C: "tcp_cache_size", At: unsafe.Offsetof(di.TCPCacheSize)}, {C: "mall_size", At: unsafe.Offsetof(di.MallSize)},
		{C: "csa_alignment", At: unsafe.Offsetof(di.CSAAlignment)}, {C: "userq_ip_mask", At: unsafe.Offsetof(di.UserqIPMask)}})
	add(uq, "offsetof(struct drm_amdgpu_info_hw_ip, ip_discovery_version)", unsafe.Offsetof(hw.IPDiscoveryVersion))
	var u UserqIn
	fields(uq, "struct drm_amdgpu_userq_in", unsafe.Sizeof(u), []off{{C: "op", At: unsafe.Offsetof(u.Op)}, {C: "queue_id", At: unsafe.Offsetof(u.QueueID)},
		{C: "ip_type", At: unsafe.Offsetof(u.IPType)}, {C: "doorbell_handle", At: unsafe.Offsetof(u.DoorbellHandle)},
		{C: "doorbell_offset", At: unsafe.Offsetof(u.DoorbellOffset)}, {C: "flags", At: unsafe.Offsetof(u.Flags)}, {C: "queue_va", At: unsafe.Offsetof(u.QueueVA)},
		{C: "queue_size", At: unsafe.Offsetof(u.QueueSize)}, {C: "rptr_va", At: unsafe.Offsetof(u.RptrVA)}, {C: "wptr_va", At: unsafe.Offsetof(u.WptrVA)},
		{C: "mqd", At: unsafe.Offsetof(u.MQD)}, {C: "mqd_size", At: unsafe.Offsetof(u.MQDSize)}})
	fields(uq, "union drm_amdgpu_userq", unsafe.Sizeof(u), []off{{C: "out.queue_id", At: 0}})
	var mqd MQDComputeGfx11
	fields(uq, "struct drm_amdgpu_userq_mqd_compute_gfx11", unsafe.Sizeof(mqd), []off{{C: "eop_va", At: unsafe.Offsetof(mqd.EOPVA)}})
	var sg UserqSignal
	fields(uq, "struct drm_amdgpu_userq_signal", unsafe.Sizeof(sg), []off{{C: "queue_id", At: unsafe.Offsetof(sg.QueueID)},
		{C: "syncobj_handles", At: unsafe.Offsetof(sg.SyncobjHandles)}, {C: "num_syncobj_handles", At: unsafe.Offsetof(sg.NumSyncobjHandles)},
		{C: "bo_read_handles", At: unsafe.Offsetof(sg.BOReadHandles)}, {C: "bo_write_handles", At: unsafe.Offsetof(sg.BOWriteHandles)},
		{C: "num_bo_read_handles", At: unsafe.Offsetof(sg.NumBOReadHandles)}, {C: "num_bo_write_handles", At: unsafe.Offsetof(sg.NumBOWriteHandles)}})
	var fi UserqFenceInfo
	fields(uq, "struct drm_amdgpu_userq_fence_info", unsafe.Sizeof(fi), []off{{C: "va", At: unsafe.Offsetof(fi.VA)}, {C: "value", At: unsafe.Offsetof(fi.Value)}})
	var w UserqWait
	fields(uq, "struct drm_amdgpu_userq_wait", unsafe.Sizeof(w), []off{{C: "waitq_id", At: unsafe.Offsetof(w.WaitqID)},
		{C: "syncobj_handles", At: unsafe.Offsetof(w.SyncobjHandles)}, {C: "syncobj_timeline_handles", At: unsafe.Offsetof(w.SyncobjTimelineHandles)},
		{C: "syncobj_timeline_points", At: unsafe.Offsetof(w.SyncobjTimelinePoints)}, {C: "bo_read_handles", At: unsafe.Offsetof(w.BOReadHandles)},
		{C: "bo_write_handles", At: unsafe.Offsetof(w.BOWriteHandles)}, {C: "num_syncobj_timeline_handles", At: unsafe.Offsetof(w.NumSyncobjTimelineHandles)},
		{C: "num_fences", At: unsafe.Offsetof(w.NumFences)}, {C: "num_syncobj_handles", At: unsafe.Offsetof(w.NumSyncobjHandles)},
		{C: "num_bo_read_handles", At: unsafe.Offsetof(w.NumBOReadHandles)}, {C: "num_bo_write_handles", At: unsafe.Offsetof(w.NumBOWriteHandles)},
		{C: "out_fences", At: unsafe.Offsetof(w.OutFences)}})
	for _, x := range []struct {
		guard, n string
		v        uintptr
	}{
		{"", "DRM_IOCTL_VERSION", IocVersion}, {"", "DRM_IOCTL_GEM_CLOSE", IocGemClose},
		{"", "DRM_COMMAND_BASE", DRMCommandBase},
		{"", "DRM_IOCTL_AMDGPU_GEM_CREATE", IocGemCreate}, {"", "DRM_IOCTL_AMDGPU_GEM_MMAP", IocGemMmap},
		{"", "DRM_IOCTL_AMDGPU_INFO", IocInfo}, {"", "DRM_IOCTL_AMDGPU_GEM_VA", IocGemVA},
		{"", "AMDGPU_GEM_DOMAIN_CPU", DomainCPU}, {"", "AMDGPU_GEM_DOMAIN_GTT", DomainGTT}, {"", "AMDGPU_GEM_DOMAIN_VRAM", DomainVRAM},
		{"", "AMDGPU_GEM_CREATE_CPU_ACCESS_REQUIRED", CreateCPUAccessRequired}, {"", "AMDGPU_GEM_CREATE_NO_CPU_ACCESS", CreateNoCPUAccess},
		{"", "AMDGPU_GEM_CREATE_CPU_GTT_USWC", CreateCPUGTTUSWC}, {"", "AMDGPU_GEM_CREATE_VRAM_CLEARED", CreateVRAMCleared},
		{"", "AMDGPU_GEM_CREATE_VM_ALWAYS_VALID", CreateVMAlwaysValid},
		{"", "AMDGPU_VA_OP_MAP", VAOpMap}, {"", "AMDGPU_VA_OP_UNMAP", VAOpUnmap}, {"", "AMDGPU_VM_PAGE_READABLE", PageReadable},
		{"", "AMDGPU_VM_PAGE_WRITEABLE", PageWriteable}, {"", "AMDGPU_VM_PAGE_EXECUTABLE", PageExec}, {"", "AMDGPU_VM_MTYPE_UC", MtypeUC},
		{"", "AMDGPU_INFO_HW_IP_INFO", InfoHWIPInfo}, {"", "AMDGPU_INFO_DEV_INFO", InfoDevInfo},
		{"", "AMDGPU_HW_IP_GFX", HWIPGFX}, {"", "AMDGPU_HW_IP_COMPUTE", HWIPCompute}, {"", "AMDGPU_HW_IP_DMA", HWIPDMA},
		{uq, "DRM_IOCTL_AMDGPU_USERQ", IocUserq}, {uq, "DRM_IOCTL_AMDGPU_USERQ_SIGNAL", IocUserqSignal},
		{uq, "DRM_IOCTL_AMDGPU_USERQ_WAIT", IocUserqWait}, {uq, "AMDGPU_USERQ_OP_CREATE", UserqOpCreate},
		{uq, "AMDGPU_USERQ_OP_FREE", UserqOpFree}, {uq, "AMDGPU_GEM_DOMAIN_DOORBELL", DomainDoorbell},
		{uq, "AMDGPU_USERQ_CREATE_FLAGS_QUEUE_PRIORITY_NORMAL_LOW", UserqPriorityNormalLow},
	} {
		add(x.guard, "(unsigned int)("+x.n+")", x.v)
	}
	return f
}

// headerDir finds amdgpu_drm.h: linux-libc-dev's /usr/include/drm, or
// libdrm-dev's /usr/include/libdrm (which also has drm.h).
func headerDir() string {
	for _, d := range []string{"/usr/include/drm", "/usr/include/libdrm"} {
		if _, err := os.Stat(filepath.Join(d, "amdgpu_drm.h")); err == nil {
			return d
		}
	}
	return ""
}

// TestUAPILayout compiles a C program against amdgpu_drm.h that prints
// every size, offset, ioctl number and flag this package mirrors, and
// compares them with Go's. Facts the installed header predates (the
// user-queue uapi, written from Linux 6.16) print "-" and are reported
// as unchecked.
func TestUAPILayout(t *testing.T) {
	dir := headerDir()
	if dir == "" {
		t.Skip("skipping: amdgpu_drm.h is missing (install libdrm-dev, or a linux-libc-dev that ships /usr/include/drm)")
	}
	checked, unchecked := cfacts.Check(t, []string{"drm.h", "amdgpu_drm.h"}, []string{"-I", dir}, uapiFacts())
	if t.Failed() {
		return
	}
	t.Logf("%d sizes, offsets, ioctl numbers and flags match %s/amdgpu_drm.h", checked, dir)
	if unchecked > 0 {
		t.Logf("%d facts of the user-queue uapi are not in this header: they follow Linux 6.16 from knowledge, unchecked", unchecked)
	}
}
