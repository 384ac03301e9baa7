package kfd

import (
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/zrtdev/zrt/runtime/amd/internal/cfacts"
)

func layoutFacts() []cfacts.Fact {
	var f []cfacts.Fact
	add := func(c string, v uintptr) { f = append(f, cfacts.Fact{C: c, Go: uint64(v)}) }
	layout := func(s string, size uintptr, offs ...cfacts.Off) {
		f = append(f, cfacts.Layout("", s, size, offs...)...)
	}
	var ver GetVersionArgs
	layout("struct kfd_ioctl_get_version_args", unsafe.Sizeof(ver), []cfacts.Off{{C: "major_version", At: unsafe.Offsetof(ver.Major)}, {C: "minor_version", At: unsafe.Offsetof(ver.Minor)}}...)
	var q CreateQueueArgs
	s := "struct kfd_ioctl_create_queue_args"
	layout(s, unsafe.Sizeof(q), []cfacts.Off{{C: "ring_base_address", At: unsafe.Offsetof(q.RingBase)}, {C: "write_pointer_address", At: unsafe.Offsetof(q.WritePtrAddr)},
		{C: "read_pointer_address", At: unsafe.Offsetof(q.ReadPtrAddr)}, {C: "doorbell_offset", At: unsafe.Offsetof(q.DoorbellOffset)},
		{C: "ring_size", At: unsafe.Offsetof(q.RingSize)}, {C: "gpu_id", At: unsafe.Offsetof(q.GPUID)}, {C: "queue_type", At: unsafe.Offsetof(q.QueueType)},
		{C: "queue_percentage", At: unsafe.Offsetof(q.QueuePercentage)}, {C: "queue_priority", At: unsafe.Offsetof(q.QueuePriority)},
		{C: "queue_id", At: unsafe.Offsetof(q.QueueID)}, {C: "eop_buffer_address", At: unsafe.Offsetof(q.EOPAddr)},
		{C: "eop_buffer_size", At: unsafe.Offsetof(q.EOPSize)}, {C: "ctx_save_restore_address", At: unsafe.Offsetof(q.CtxSaveAddr)},
		{C: "ctx_save_restore_size", At: unsafe.Offsetof(q.CtxSaveSize)}, {C: "ctl_stack_size", At: unsafe.Offsetof(q.CtlStackSize)}}...)
	var dq DestroyQueueArgs
	layout("struct kfd_ioctl_destroy_queue_args", unsafe.Sizeof(dq), []cfacts.Off{{C: "queue_id", At: unsafe.Offsetof(dq.QueueID)}}...)
	var ap ProcessDeviceApertures
	s = "struct kfd_process_device_apertures"
	layout(s, unsafe.Sizeof(ap), []cfacts.Off{{C: "lds_base", At: unsafe.Offsetof(ap.LDSBase)}, {C: "lds_limit", At: unsafe.Offsetof(ap.LDSLimit)}, {C: "scratch_base", At: unsafe.Offsetof(ap.ScratchBase)},
		{C: "scratch_limit", At: unsafe.Offsetof(ap.ScratchLimit)}, {C: "gpuvm_base", At: unsafe.Offsetof(ap.GPUVMBase)},
		{C: "gpuvm_limit", At: unsafe.Offsetof(ap.GPUVMLimit)}, {C: "gpu_id", At: unsafe.Offsetof(ap.GPUID)}}...)
	var an GetProcessAperturesNewArgs
	s = "struct kfd_ioctl_get_process_apertures_new_args"
	layout(s, unsafe.Sizeof(an), []cfacts.Off{{C: "kfd_process_device_apertures_ptr", At: unsafe.Offsetof(an.AperturesPtr)}, {C: "num_of_nodes", At: unsafe.Offsetof(an.NumNodes)}}...)
	var vm AcquireVMArgs
	layout("struct kfd_ioctl_acquire_vm_args", unsafe.Sizeof(vm), []cfacts.Off{{C: "drm_fd", At: unsafe.Offsetof(vm.DRMFD)}, {C: "gpu_id", At: unsafe.Offsetof(vm.GPUID)}}...)
	var am AllocMemoryArgs
	s = "struct kfd_ioctl_alloc_memory_of_gpu_args"
	layout(s, unsafe.Sizeof(am), []cfacts.Off{{C: "va_addr", At: unsafe.Offsetof(am.VA)}, {C: "size", At: unsafe.Offsetof(am.Size)}, {C: "handle", At: unsafe.Offsetof(am.Handle)},
		{C: "mmap_offset", At: unsafe.Offsetof(am.MmapOffset)}, {C: "gpu_id", At: unsafe.Offsetof(am.GPUID)}, {C: "flags", At: unsafe.Offsetof(am.Flags)}}...)
	var fm FreeMemoryArgs
	layout("struct kfd_ioctl_free_memory_of_gpu_args", unsafe.Sizeof(fm), []cfacts.Off{{C: "handle", At: unsafe.Offsetof(fm.Handle)}}...)
	var mm MapMemoryArgs
	for _, s := range []string{"struct kfd_ioctl_map_memory_to_gpu_args", "struct kfd_ioctl_unmap_memory_from_gpu_args"} {
		layout(s, unsafe.Sizeof(mm), cfacts.Off{C: "handle", At: unsafe.Offsetof(mm.Handle)}, cfacts.Off{C: "device_ids_array_ptr", At: unsafe.Offsetof(mm.DevicesPtr)},
			cfacts.Off{C: "n_devices", At: unsafe.Offsetof(mm.NDevices)}, cfacts.Off{C: "n_success", At: unsafe.Offsetof(mm.NSuccess)})
	}
	var ce CreateEventArgs
	s = "struct kfd_ioctl_create_event_args"
	layout(s, unsafe.Sizeof(ce), []cfacts.Off{{C: "event_page_offset", At: unsafe.Offsetof(ce.EventPageOffset)}, {C: "event_trigger_data", At: unsafe.Offsetof(ce.EventTriggerData)},
		{C: "event_type", At: unsafe.Offsetof(ce.EventType)}, {C: "auto_reset", At: unsafe.Offsetof(ce.AutoReset)}, {C: "node_id", At: unsafe.Offsetof(ce.NodeID)},
		{C: "event_id", At: unsafe.Offsetof(ce.EventID)}, {C: "event_slot_index", At: unsafe.Offsetof(ce.EventSlotIndex)}}...)
	var de DestroyEventArgs
	layout("struct kfd_ioctl_destroy_event_args", unsafe.Sizeof(de), []cfacts.Off{{C: "event_id", At: unsafe.Offsetof(de.EventID)}}...)
	var ed EventData
	layout("struct kfd_event_data", unsafe.Sizeof(ed), []cfacts.Off{{C: "kfd_event_data_ext", At: unsafe.Offsetof(ed.Ext)}, {C: "event_id", At: unsafe.Offsetof(ed.EventID)}}...)
	var we WaitEventsArgs
	s = "struct kfd_ioctl_wait_events_args"
	layout(s, unsafe.Sizeof(we), []cfacts.Off{{C: "events_ptr", At: unsafe.Offsetof(we.EventsPtr)}, {C: "num_events", At: unsafe.Offsetof(we.NumEvents)},
		{C: "wait_for_all", At: unsafe.Offsetof(we.WaitForAll)}, {C: "timeout", At: unsafe.Offsetof(we.TimeoutMs)}, {C: "wait_result", At: unsafe.Offsetof(we.WaitResult)}}...)
	for _, x := range []struct {
		n string
		v uintptr
	}{{"AMDKFD_IOC_GET_VERSION", IocGetVersion}, {"AMDKFD_IOC_CREATE_QUEUE", IocCreateQueue}, {"AMDKFD_IOC_DESTROY_QUEUE", IocDestroyQueue},
		{"AMDKFD_IOC_CREATE_EVENT", IocCreateEvent}, {"AMDKFD_IOC_DESTROY_EVENT", IocDestroyEvent}, {"AMDKFD_IOC_WAIT_EVENTS", IocWaitEvents},
		{"AMDKFD_IOC_GET_PROCESS_APERTURES_NEW", IocGetProcessAperturesN}, {"AMDKFD_IOC_ACQUIRE_VM", IocAcquireVM},
		{"AMDKFD_IOC_ALLOC_MEMORY_OF_GPU", IocAllocMemoryOfGPU}, {"AMDKFD_IOC_FREE_MEMORY_OF_GPU", IocFreeMemoryOfGPU},
		{"AMDKFD_IOC_MAP_MEMORY_TO_GPU", IocMapMemoryToGPU}, {"AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU", IocUnmapMemoryFromGPU},
		{"KFD_IOCTL_MAJOR_VERSION", MajorVersion}, {"KFD_IOC_QUEUE_TYPE_COMPUTE", QueueTypeCompute},
		{"KFD_IOC_QUEUE_TYPE_COMPUTE_AQL", QueueTypeComputeAQL}, {"KFD_MAX_QUEUE_PERCENTAGE", MaxQueuePercentage},
		{"KFD_MAX_QUEUE_PRIORITY", MaxQueuePriority}, {"KFD_IOC_ALLOC_MEM_FLAGS_VRAM", AllocVRAM},
		{"KFD_IOC_ALLOC_MEM_FLAGS_GTT", AllocGTT}, {"KFD_IOC_ALLOC_MEM_FLAGS_USERPTR", AllocUserptr},
		{"KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL", AllocDoorbell}, {"KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE", AllocWritable},
		{"KFD_IOC_ALLOC_MEM_FLAGS_EXECUTABLE", AllocExecutable}, {"KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC", AllocPublic},
		{"KFD_IOC_ALLOC_MEM_FLAGS_NO_SUBSTITUTE", AllocNoSubst}, {"KFD_IOC_ALLOC_MEM_FLAGS_COHERENT", AllocCoherent},
		{"KFD_IOC_ALLOC_MEM_FLAGS_UNCACHED", AllocUncached}, {"KFD_IOC_EVENT_SIGNAL", EventSignal},
		{"KFD_IOC_WAIT_RESULT_COMPLETE", WaitResultComplete}, {"KFD_IOC_WAIT_RESULT_TIMEOUT", WaitResultTimeout},
		{"KFD_IOC_WAIT_RESULT_FAIL", WaitResultFail}, {"KFD_SIGNAL_EVENT_LIMIT", SignalEventLimit}} {
		add("(unsigned int)("+x.n+")", x.v) // all fit 32 bits; flags like 1<<31 are int in C
	}
	return f
}

// TestUAPILayout compiles a C program against linux/kfd_ioctl.h that
// prints every size, offset, ioctl number and flag this package mirrors,
// and compares them with Go's.
func TestUAPILayout(t *testing.T) {
	header := "/usr/include/linux/kfd_ioctl.h"
	if _, err := os.Stat(header); err != nil {
		t.Skipf("skipping: %s is missing (install linux-libc-dev)", header)
	}
	args := []string{}
	if _, err := os.Stat("/usr/include/drm/drm.h"); err != nil {
		// kfd_ioctl.h includes drm/drm.h only for the __u32/__u64 types;
		// some images ship linux-libc-dev without the drm directory.
		stub := filepath.Join(t.TempDir(), "inc", "drm")
		os.MkdirAll(stub, 0o755)
		os.WriteFile(filepath.Join(stub, "drm.h"), []byte("#include <linux/types.h>\n"), 0o644)
		args = append(args, "-I", filepath.Dir(stub))
		t.Log("drm/drm.h is missing: compiling with a stub that includes linux/types.h")
	}
	facts := layoutFacts()
	cfacts.Check(t, []string{"linux/kfd_ioctl.h"}, args, facts)
	if t.Failed() {
		return
	}
	t.Logf("%d sizes, offsets, ioctl numbers and flags match %s", len(facts), header)
}
