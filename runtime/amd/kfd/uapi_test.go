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
	var ver GetVersionArgs
	add("sizeof(struct kfd_ioctl_get_version_args)", unsafe.Sizeof(ver))
	add("offsetof(struct kfd_ioctl_get_version_args, major_version)", unsafe.Offsetof(ver.Major))
	add("offsetof(struct kfd_ioctl_get_version_args, minor_version)", unsafe.Offsetof(ver.Minor))
	var q CreateQueueArgs
	s := "struct kfd_ioctl_create_queue_args"
	add("sizeof("+s+")", unsafe.Sizeof(q))
	for _, x := range []struct {
		n string
		o uintptr
	}{{"ring_base_address", unsafe.Offsetof(q.RingBase)}, {"write_pointer_address", unsafe.Offsetof(q.WritePtrAddr)},
		{"read_pointer_address", unsafe.Offsetof(q.ReadPtrAddr)}, {"doorbell_offset", unsafe.Offsetof(q.DoorbellOffset)},
		{"ring_size", unsafe.Offsetof(q.RingSize)}, {"gpu_id", unsafe.Offsetof(q.GPUID)}, {"queue_type", unsafe.Offsetof(q.QueueType)},
		{"queue_percentage", unsafe.Offsetof(q.QueuePercentage)}, {"queue_priority", unsafe.Offsetof(q.QueuePriority)},
		{"queue_id", unsafe.Offsetof(q.QueueID)}, {"eop_buffer_address", unsafe.Offsetof(q.EOPAddr)},
		{"eop_buffer_size", unsafe.Offsetof(q.EOPSize)}, {"ctx_save_restore_address", unsafe.Offsetof(q.CtxSaveAddr)},
		{"ctx_save_restore_size", unsafe.Offsetof(q.CtxSaveSize)}, {"ctl_stack_size", unsafe.Offsetof(q.CtlStackSize)}} {
		add("offsetof("+s+", "+x.n+")", x.o)
	}
	var dq DestroyQueueArgs
	add("sizeof(struct kfd_ioctl_destroy_queue_args)", unsafe.Sizeof(dq))
	add("offsetof(struct kfd_ioctl_destroy_queue_args, queue_id)", unsafe.Offsetof(dq.QueueID))
	var ap ProcessDeviceApertures
	s = "struct kfd_process_device_apertures"
	add("sizeof("+s+")", unsafe.Sizeof(ap))
	for _, x := range []struct {
		n string
		o uintptr
	}{{"lds_base", unsafe.Offsetof(ap.LDSBase)}, {"lds_limit", unsafe.Offsetof(ap.LDSLimit)}, {"scratch_base", unsafe.Offsetof(ap.ScratchBase)},
		{"scratch_limit", unsafe.Offsetof(ap.ScratchLimit)}, {"gpuvm_base", unsafe.Offsetof(ap.GPUVMBase)},
		{"gpuvm_limit", unsafe.Offsetof(ap.GPUVMLimit)}, {"gpu_id", unsafe.Offsetof(ap.GPUID)}} {
		add("offsetof("+s+", "+x.n+")", x.o)
	}
	var an GetProcessAperturesNewArgs
	s = "struct kfd_ioctl_get_process_apertures_new_args"
	add("sizeof("+s+")", unsafe.Sizeof(an))
	add("offsetof("+s+", kfd_process_device_apertures_ptr)", unsafe.Offsetof(an.AperturesPtr))
	add("offsetof("+s+", num_of_nodes)", unsafe.Offsetof(an.NumNodes))
	var vm AcquireVMArgs
	add("sizeof(struct kfd_ioctl_acquire_vm_args)", unsafe.Sizeof(vm))
	add("offsetof(struct kfd_ioctl_acquire_vm_args, drm_fd)", unsafe.Offsetof(vm.DRMFD))
	add("offsetof(struct kfd_ioctl_acquire_vm_args, gpu_id)", unsafe.Offsetof(vm.GPUID))
	var am AllocMemoryArgs
	s = "struct kfd_ioctl_alloc_memory_of_gpu_args"
	add("sizeof("+s+")", unsafe.Sizeof(am))
	for _, x := range []struct {
		n string
		o uintptr
	}{{"va_addr", unsafe.Offsetof(am.VA)}, {"size", unsafe.Offsetof(am.Size)}, {"handle", unsafe.Offsetof(am.Handle)},
		{"mmap_offset", unsafe.Offsetof(am.MmapOffset)}, {"gpu_id", unsafe.Offsetof(am.GPUID)}, {"flags", unsafe.Offsetof(am.Flags)}} {
		add("offsetof("+s+", "+x.n+")", x.o)
	}
	var fm FreeMemoryArgs
	add("sizeof(struct kfd_ioctl_free_memory_of_gpu_args)", unsafe.Sizeof(fm))
	add("offsetof(struct kfd_ioctl_free_memory_of_gpu_args, handle)", unsafe.Offsetof(fm.Handle))
	var mm MapMemoryArgs
	for _, s := range []string{"struct kfd_ioctl_map_memory_to_gpu_args", "struct kfd_ioctl_unmap_memory_from_gpu_args"} {
		add("sizeof("+s+")", unsafe.Sizeof(mm))
		add("offsetof("+s+", handle)", unsafe.Offsetof(mm.Handle))
		add("offsetof("+s+", device_ids_array_ptr)", unsafe.Offsetof(mm.DevicesPtr))
		add("offsetof("+s+", n_devices)", unsafe.Offsetof(mm.NDevices))
		add("offsetof("+s+", n_success)", unsafe.Offsetof(mm.NSuccess))
	}
	var ce CreateEventArgs
	s = "struct kfd_ioctl_create_event_args"
	add("sizeof("+s+")", unsafe.Sizeof(ce))
	for _, x := range []struct {
		n string
		o uintptr
	}{{"event_page_offset", unsafe.Offsetof(ce.EventPageOffset)}, {"event_trigger_data", unsafe.Offsetof(ce.EventTriggerData)},
		{"event_type", unsafe.Offsetof(ce.EventType)}, {"auto_reset", unsafe.Offsetof(ce.AutoReset)}, {"node_id", unsafe.Offsetof(ce.NodeID)},
		{"event_id", unsafe.Offsetof(ce.EventID)}, {"event_slot_index", unsafe.Offsetof(ce.EventSlotIndex)}} {
		add("offsetof("+s+", "+x.n+")", x.o)
	}
	var de DestroyEventArgs
	add("sizeof(struct kfd_ioctl_destroy_event_args)", unsafe.Sizeof(de))
	add("offsetof(struct kfd_ioctl_destroy_event_args, event_id)", unsafe.Offsetof(de.EventID))
	var ed EventData
	add("sizeof(struct kfd_event_data)", unsafe.Sizeof(ed))
	add("offsetof(struct kfd_event_data, kfd_event_data_ext)", unsafe.Offsetof(ed.Ext))
	add("offsetof(struct kfd_event_data, event_id)", unsafe.Offsetof(ed.EventID))
	var we WaitEventsArgs
	s = "struct kfd_ioctl_wait_events_args"
	add("sizeof("+s+")", unsafe.Sizeof(we))
	for _, x := range []struct {
		n string
		o uintptr
	}{{"events_ptr", unsafe.Offsetof(we.EventsPtr)}, {"num_events", unsafe.Offsetof(we.NumEvents)},
		{"wait_for_all", unsafe.Offsetof(we.WaitForAll)}, {"timeout", unsafe.Offsetof(we.TimeoutMs)}, {"wait_result", unsafe.Offsetof(we.WaitResult)}} {
		add("offsetof("+s+", "+x.n+")", x.o)
	}
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
