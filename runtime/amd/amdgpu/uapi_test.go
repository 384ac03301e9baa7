package amdgpu

import (
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/zrtdev/zrt/runtime/amd/internal/cfacts"
)

// fact is one checked fact: a C expression, the value Go has for it, and
// the macro that must be defined for the header to know it ("" always).
type off struct {
	n string
	o uintptr
}

func uapiFacts() []cfacts.Fact {
	var f []cfacts.Fact
	add := func(guard, c string, v uintptr) { f = append(f, cfacts.Fact{C: c, Go: uint64(v), Guard: guard}) }
	fields := func(guard, s string, size uintptr, offs []off) {
		if size != 0 {
			add(guard, "sizeof("+s+")", size)
		}
		for _, x := range offs {
			add(guard, "offsetof("+s+", "+x.n+")", x.o)
		}
	}
	var v Version
	fields("", "struct drm_version", unsafe.Sizeof(v), []off{{"version_major", unsafe.Offsetof(v.Major)},
		{"version_minor", unsafe.Offsetof(v.Minor)}, {"version_patchlevel", unsafe.Offsetof(v.Patch)},
		{"name_len", unsafe.Offsetof(v.NameLen)}, {"name", unsafe.Offsetof(v.Name)}, {"date_len", unsafe.Offsetof(v.DateLen)},
		{"date", unsafe.Offsetof(v.Date)}, {"desc_len", unsafe.Offsetof(v.DescLen)}, {"desc", unsafe.Offsetof(v.Desc)}})
	var gc GemClose
	fields("", "struct drm_gem_close", unsafe.Sizeof(gc), []off{{"handle", unsafe.Offsetof(gc.Handle)}})
	var ci GemCreateIn
	fields("", "struct drm_amdgpu_gem_create_in", unsafe.Sizeof(ci), []off{{"bo_size", unsafe.Offsetof(ci.BOSize)},
		{"alignment", unsafe.Offsetof(ci.Alignment)}, {"domains", unsafe.Offsetof(ci.Domains)}, {"domain_flags", unsafe.Offsetof(ci.DomainFlags)}})
	fields("", "union drm_amdgpu_gem_create", unsafe.Sizeof(ci), []off{{"out.handle", 0}})
	var mm GemMmap
	fields("", "union drm_amdgpu_gem_mmap", unsafe.Sizeof(mm), []off{{"in.handle", 0}, {"out.addr_ptr", 0}})
	var va GemVA
	fields("", "struct drm_amdgpu_gem_va", 0, []off{{"handle", unsafe.Offsetof(va.Handle)}, {"operation", unsafe.Offsetof(va.Operation)},
		{"flags", unsafe.Offsetof(va.Flags)}, {"va_address", unsafe.Offsetof(va.VAAddress)}, {"offset_in_bo", unsafe.Offsetof(va.OffsetInBO)},
		{"map_size", unsafe.Offsetof(va.MapSize)}})
	var in InfoArgs
	fields("", "struct drm_amdgpu_info", unsafe.Sizeof(in), []off{{"return_pointer", unsafe.Offsetof(in.ReturnPointer)},
		{"return_size", unsafe.Offsetof(in.ReturnSize)}, {"query", unsafe.Offsetof(in.Query)},
		{"query_hw_ip.type", unsafe.Offsetof(in.IPType)}, {"query_hw_ip.ip_instance", unsafe.Offsetof(in.IPInstance)}})
	var hw InfoHWIP
	fields("", "struct drm_amdgpu_info_hw_ip", unsafe.Sizeof(hw), []off{{"hw_ip_version_major", unsafe.Offsetof(hw.VersionMajor)},
		{"hw_ip_version_minor", unsafe.Offsetof(hw.VersionMinor)}, {"capabilities_flags", unsafe.Offsetof(hw.CapabilitiesFlags)},
		{"ib_start_alignment", unsafe.Offsetof(hw.IBStartAlignment)}, {"ib_size_alignment", unsafe.Offsetof(hw.IBSizeAlignment)},
		{"available_rings", unsafe.Offsetof(hw.AvailableRings)}})
	// ip_discovery_version replaced the trailing _pad: the last 4 bytes.
	add("", "sizeof(struct drm_amdgpu_info_hw_ip) - 4", unsafe.Offsetof(hw.IPDiscoveryVersion))
	var di InfoDevice
	s := "struct drm_amdgpu_info_device"
	fields("", s, 0, []off{{"device_id", unsafe.Offsetof(di.DeviceID)}, {"chip_rev", unsafe.Offsetof(di.ChipRev)},
		{"external_rev", unsafe.Offsetof(di.ExternalRev)}, {"pci_rev", unsafe.Offsetof(di.PCIRev)}, {"family", unsafe.Offsetof(di.Family)},
		{"num_shader_engines", unsafe.Offsetof(di.NumShaderEngines)}, {"gpu_counter_freq", unsafe.Offsetof(di.GPUCounterFreq)},
		{"max_engine_clock", unsafe.Offsetof(di.MaxEngineClock)}, {"cu_active_number", unsafe.Offsetof(di.CUActiveNumber)},
		{"cu_bitmap", unsafe.Offsetof(di.CUBitmap)}, {"enabled_rb_pipes_mask", unsafe.Offsetof(di.EnabledRBPipesMask)},
		{"num_hw_gfx_contexts", unsafe.Offsetof(di.NumHWGfxContexts)}, {"ids_flags", unsafe.Offsetof(di.IDsFlags)},
		{"virtual_address_offset", unsafe.Offsetof(di.VirtualAddressOffset)}, {"virtual_address_max", unsafe.Offsetof(di.VirtualAddressMax)},
		{"virtual_address_alignment", unsafe.Offsetof(di.VirtualAddressAlignment)}, {"pte_fragment_size", unsafe.Offsetof(di.PTEFragmentSize)},
		{"gart_page_size", unsafe.Offsetof(di.GARTPageSize)}, {"vram_type", unsafe.Offsetof(di.VRAMType)},
		{"gc_double_offchip_lds_buf", unsafe.Offsetof(di.GCDoubleOffchipLDSBuf)}, {"prim_buf_gpu_addr", unsafe.Offsetof(di.PrimBufGPUAddr)},
		{"param_buf_size", unsafe.Offsetof(di.ParamBufSize)}, {"wave_front_size", unsafe.Offsetof(di.WaveFrontSize)},
		{"max_gs_waves_per_vgt", unsafe.Offsetof(di.MaxGSWavesPerVGT)}, {"cu_ao_bitmap", unsafe.Offsetof(di.CUAOBitmap)},
		{"high_va_offset", unsafe.Offsetof(di.HighVAOffset)}, {"high_va_max", unsafe.Offsetof(di.HighVAMax)},
		{"pa_sc_tile_steering_override", unsafe.Offsetof(di.PASCTileSteeringOverride)},
		{"tcc_disabled_mask", unsafe.Offsetof(di.TCCDisabledMask)}})
	// What follows tcc_disabled_mask is knowledge (Linux 6.16), checked
	// only against a header that has the user-queue uapi.
	const uq = "DRM_AMDGPU_USERQ"
	fields(uq, s, unsafe.Sizeof(di), []off{{"min_engine_clock", unsafe.Offsetof(di.MinEngineClock)},
		{"tcp_cache_size", unsafe.Offsetof(di.TCPCacheSize)}, {"mall_size", unsafe.Offsetof(di.MallSize)},
		{"csa_alignment", unsafe.Offsetof(di.CSAAlignment)}, {"userq_ip_mask", unsafe.Offsetof(di.UserqIPMask)}})
	add(uq, "offsetof(struct drm_amdgpu_info_hw_ip, ip_discovery_version)", unsafe.Offsetof(hw.IPDiscoveryVersion))
	var u UserqIn
	fields(uq, "struct drm_amdgpu_userq_in", unsafe.Sizeof(u), []off{{"op", unsafe.Offsetof(u.Op)}, {"queue_id", unsafe.Offsetof(u.QueueID)},
		{"ip_type", unsafe.Offsetof(u.IPType)}, {"doorbell_handle", unsafe.Offsetof(u.DoorbellHandle)},
		{"doorbell_offset", unsafe.Offsetof(u.DoorbellOffset)}, {"flags", unsafe.Offsetof(u.Flags)}, {"queue_va", unsafe.Offsetof(u.QueueVA)},
		{"queue_size", unsafe.Offsetof(u.QueueSize)}, {"rptr_va", unsafe.Offsetof(u.RptrVA)}, {"wptr_va", unsafe.Offsetof(u.WptrVA)},
		{"mqd", unsafe.Offsetof(u.MQD)}, {"mqd_size", unsafe.Offsetof(u.MQDSize)}})
	fields(uq, "union drm_amdgpu_userq", unsafe.Sizeof(u), []off{{"out.queue_id", 0}})
	var mqd MQDComputeGfx11
	fields(uq, "struct drm_amdgpu_userq_mqd_compute_gfx11", unsafe.Sizeof(mqd), []off{{"eop_va", unsafe.Offsetof(mqd.EOPVA)}})
	var sg UserqSignal
	fields(uq, "struct drm_amdgpu_userq_signal", unsafe.Sizeof(sg), []off{{"queue_id", unsafe.Offsetof(sg.QueueID)},
		{"syncobj_handles", unsafe.Offsetof(sg.SyncobjHandles)}, {"num_syncobj_handles", unsafe.Offsetof(sg.NumSyncobjHandles)},
		{"bo_read_handles", unsafe.Offsetof(sg.BOReadHandles)}, {"bo_write_handles", unsafe.Offsetof(sg.BOWriteHandles)},
		{"num_bo_read_handles", unsafe.Offsetof(sg.NumBOReadHandles)}, {"num_bo_write_handles", unsafe.Offsetof(sg.NumBOWriteHandles)}})
	var fi UserqFenceInfo
	fields(uq, "struct drm_amdgpu_userq_fence_info", unsafe.Sizeof(fi), []off{{"va", unsafe.Offsetof(fi.VA)}, {"value", unsafe.Offsetof(fi.Value)}})
	var w UserqWait
	fields(uq, "struct drm_amdgpu_userq_wait", unsafe.Sizeof(w), []off{{"waitq_id", unsafe.Offsetof(w.WaitqID)},
		{"syncobj_handles", unsafe.Offsetof(w.SyncobjHandles)}, {"syncobj_timeline_handles", unsafe.Offsetof(w.SyncobjTimelineHandles)},
		{"syncobj_timeline_points", unsafe.Offsetof(w.SyncobjTimelinePoints)}, {"bo_read_handles", unsafe.Offsetof(w.BOReadHandles)},
		{"bo_write_handles", unsafe.Offsetof(w.BOWriteHandles)}, {"num_syncobj_timeline_handles", unsafe.Offsetof(w.NumSyncobjTimelineHandles)},
		{"num_fences", unsafe.Offsetof(w.NumFences)}, {"num_syncobj_handles", unsafe.Offsetof(w.NumSyncobjHandles)},
		{"num_bo_read_handles", unsafe.Offsetof(w.NumBOReadHandles)}, {"num_bo_write_handles", unsafe.Offsetof(w.NumBOWriteHandles)},
		{"out_fences", unsafe.Offsetof(w.OutFences)}})
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
