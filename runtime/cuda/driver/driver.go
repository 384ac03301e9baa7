// Package driver binds the part of the CUDA Driver API that T-CUDA uses.
// libcuda.so.1 is opened at run time with purego, so zrt-run stays one
// CGO_ENABLED=0 binary that starts on machines without a GPU or driver and
// only fails, with a reason, when CUDA is actually asked for.
//
// Every call's CUresult is checked; a failure becomes an *Error naming the
// call and the driver's error name. The driver's current context is per OS
// thread, so callers lock their goroutine to a thread (runtime.LockOSThread)
// and make the context current (Context.SetCurrent) before a run of calls.
package driver

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// Result is a CUresult.
type Result int32

// CUresult values the package looks at.
const (
	Success  Result = 0
	NotReady Result = 600
)

// Handles are the driver's opaque pointers; a device pointer is a
// CUdeviceptr (64-bit on every platform zrt supports).
type (
	Device    int32
	Context   uintptr
	Module    uintptr
	Function  uintptr
	Stream    uintptr
	Event     uintptr
	Graph     uintptr
	GraphExec uintptr
	DevPtr    uint64
)

// Error is a failed driver call.
type Error struct {
	Call string
	Code Result
	Name string // CUDA_ERROR_…, from cuGetErrorName
}

func (e *Error) Error() string {
	return fmt.Sprintf("cuda: %s: %s (%d)", e.Call, e.Name, int32(e.Code))
}

// IsNotReady reports whether err is CUDA_ERROR_NOT_READY (work still pending).
func IsNotReady(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == NotReady
}

// The bound entry points. Versioned symbols (_v2) are the ones the
// headers map the plain names to; binding them directly keeps the 64-bit
// sizes and pointer semantics of the current API.
var api struct {
	cuGetErrorName              func(Result, **byte) Result
	cuInit                      func(uint32) Result
	cuDriverGetVersion          func(*int32) Result
	cuDeviceGetCount            func(*int32) Result
	cuDeviceGet                 func(*Device, int32) Result
	cuDeviceGetName             func(*byte, int32, Device) Result
	cuDeviceGetAttribute        func(*int32, int32, Device) Result
	cuDeviceTotalMem            func(*uint64, Device) Result
	cuDevicePrimaryCtxRetain    func(*Context, Device) Result
	cuDevicePrimaryCtxRelease   func(Device) Result
	cuCtxSetCurrent             func(Context) Result
	cuCtxSynchronize            func() Result
	cuMemAlloc                  func(*DevPtr, uintptr) Result
	cuMemsetD32Async            func(DevPtr, uint32, uintptr, Stream) Result
	cuOccupancyMaxActiveBlocks  func(*int32, Function, int32, uintptr) Result
	cuMemGetInfo                func(*uintptr, *uintptr) Result
	cuMemFree                   func(DevPtr) Result
	cuMemHostAlloc              func(*unsafe.Pointer, uintptr, uint32) Result
	cuMemFreeHost               func(unsafe.Pointer) Result
	cuMemcpyHtoD                func(DevPtr, unsafe.Pointer, uintptr) Result
	cuMemcpyDtoH                func(unsafe.Pointer, DevPtr, uintptr) Result
	cuMemcpyHtoDAsync           func(DevPtr, unsafe.Pointer, uintptr, Stream) Result
	cuMemcpyDtoHAsync           func(unsafe.Pointer, DevPtr, uintptr, Stream) Result
	cuMemcpyDtoDAsync           func(DevPtr, DevPtr, uintptr, Stream) Result
	cuMemsetD8                  func(DevPtr, uint8, uintptr) Result
	cuMemcpy2DAsync             func(unsafe.Pointer, Stream) Result
	cuDeviceCanAccessPeer       func(*int32, Device, Device) Result
	cuCtxEnablePeerAccess       func(Context, uint32) Result
	cuModuleLoadDataEx          func(*Module, unsafe.Pointer, uint32, *int32, *unsafe.Pointer) Result
	cuModuleUnload              func(Module) Result
	cuModuleGetFunction         func(*Function, Module, *byte) Result
	cuFuncSetAttribute          func(Function, int32, int32) Result
	cuLaunchKernel              func(Function, uint32, uint32, uint32, uint32, uint32, uint32, uint32, Stream, unsafe.Pointer, unsafe.Pointer) Result
	cuLaunchKernelEx            func(unsafe.Pointer, Function, unsafe.Pointer, unsafe.Pointer) Result // optional (CUDA 12)
	cuStreamCreate              func(*Stream, uint32) Result
	cuStreamDestroy             func(Stream) Result
	cuStreamSynchronize         func(Stream) Result
	cuEventCreate               func(*Event, uint32) Result
	cuEventRecord               func(Event, Stream) Result
	cuStreamWaitEvent           func(Stream, Event, uint32) Result
	cuEventQuery                func(Event) Result
	cuEventDestroy              func(Event) Result
	cuEventElapsedTime          func(*float32, Event, Event) Result
	cuStreamBeginCapture        func(Stream, int32) Result
	cuStreamEndCapture          func(Stream, *Graph) Result
	cuGraphInstantiateWithFlags func(*GraphExec, Graph, uint64) Result
	cuGraphLaunch               func(GraphExec, Stream) Result
	cuGraphExecDestroy          func(GraphExec) Result
	cuGraphDestroy              func(Graph) Result
}

var symbols = []struct {
	fn   any
	name string
}{
	{&api.cuGetErrorName, "cuGetErrorName"},
	{&api.cuInit, "cuInit"},
	{&api.cuDriverGetVersion, "cuDriverGetVersion"},
	{&api.cuDeviceGetCount, "cuDeviceGetCount"},
	{&api.cuDeviceGet, "cuDeviceGet"},
	{&api.cuDeviceGetName, "cuDeviceGetName"},
	{&api.cuDeviceGetAttribute, "cuDeviceGetAttribute"},
	{&api.cuDeviceTotalMem, "cuDeviceTotalMem_v2"},
	{&api.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"},
	{&api.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2"},
	{&api.cuCtxSetCurrent, "cuCtxSetCurrent"},
	{&api.cuCtxSynchronize, "cuCtxSynchronize"},
	{&api.cuMemAlloc, "cuMemAlloc_v2"},
	{&api.cuMemsetD32Async, "cuMemsetD32Async"},
	{&api.cuOccupancyMaxActiveBlocks, "cuOccupancyMaxActiveBlocksPerMultiprocessor"},
	{&api.cuMemGetInfo, "cuMemGetInfo_v2"},
	{&api.cuMemFree, "cuMemFree_v2"},
	{&api.cuMemHostAlloc, "cuMemHostAlloc"},
	{&api.cuMemFreeHost, "cuMemFreeHost"},
	{&api.cuMemcpyHtoD, "cuMemcpyHtoD_v2"},
	{&api.cuMemcpyDtoH, "cuMemcpyDtoH_v2"},
	{&api.cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2"},
	{&api.cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2"},
	{&api.cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2"},
	{&api.cuMemsetD8, "cuMemsetD8_v2"},
	{&api.cuMemcpy2DAsync, "cuMemcpy2DAsync_v2"},
	{&api.cuDeviceCanAccessPeer, "cuDeviceCanAccessPeer"},
	{&api.cuCtxEnablePeerAccess, "cuCtxEnablePeerAccess"},
	{&api.cuModuleLoadDataEx, "cuModuleLoadDataEx"},
	{&api.cuModuleUnload, "cuModuleUnload"},
	{&api.cuModuleGetFunction, "cuModuleGetFunction"},
	{&api.cuFuncSetAttribute, "cuFuncSetAttribute"},
	{&api.cuLaunchKernel, "cuLaunchKernel"},
	{&api.cuStreamCreate, "cuStreamCreate"},
	{&api.cuStreamDestroy, "cuStreamDestroy_v2"},
	{&api.cuStreamSynchronize, "cuStreamSynchronize"},
	{&api.cuEventCreate, "cuEventCreate"},
	{&api.cuEventRecord, "cuEventRecord"},
	{&api.cuStreamWaitEvent, "cuStreamWaitEvent"},
	{&api.cuEventQuery, "cuEventQuery"},
	{&api.cuEventDestroy, "cuEventDestroy_v2"},
	{&api.cuEventElapsedTime, "cuEventElapsedTime"},
	{&api.cuStreamBeginCapture, "cuStreamBeginCapture_v2"},
	{&api.cuStreamEndCapture, "cuStreamEndCapture"},
	{&api.cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags"},
	{&api.cuGraphLaunch, "cuGraphLaunch"},
	{&api.cuGraphExecDestroy, "cuGraphExecDestroy"},
	{&api.cuGraphDestroy, "cuGraphDestroy"},
}

// Library is the soname opened; ZRT_LIBCUDA is not consulted on purpose:
// the loader's search path (LD_LIBRARY_PATH, ldconfig) already decides.
const Library = "libcuda.so.1"

var (
	loadOnce sync.Once
	loadErr  error
)

// Load opens libcuda, binds every entry point and calls cuInit. It runs
// once; later calls return the first result.
func Load() error {
	loadOnce.Do(func() { loadErr = load() })
	return loadErr
}

func load() (err error) {
	// purego panics on unsupported signatures; turn any such surprise into
	// an error rather than take zrt-run down on a machine without CUDA.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("cuda: binding %s: %v", Library, r)
		}
	}()
	h, err := purego.Dlopen(Library, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		// dlopen's message names the library already.
		msg := err.Error()
		if !strings.Contains(msg, Library) {
			msg = Library + ": " + msg
		}
		return fmt.Errorf("cuda: no driver library: %s", msg)
	}
	for _, s := range symbols {
		sym, err := purego.Dlsym(h, s.name)
		if err != nil {
			return fmt.Errorf("cuda: %s lacks %s (driver too old?): %v", Library, s.name, err)
		}
		purego.RegisterFunc(s.fn, sym)
	}
	if sym, err := purego.Dlsym(h, "cuLaunchKernelEx"); err == nil {
		purego.RegisterFunc(&api.cuLaunchKernelEx, sym)
	}
	return check("cuInit", api.cuInit(0))
}

// check turns a CUresult into an error.
func check(call string, r Result) error {
	if r == Success {
		return nil
	}
	return &Error{Call: call, Code: r, Name: errorName(r)}
}

func errorName(r Result) string {
	var p *byte
	if api.cuGetErrorName == nil || api.cuGetErrorName(r, &p) != Success || p == nil {
		return "CUDA_ERROR_UNKNOWN_CODE"
	}
	return GoString(p)
}

// GoString copies a NUL-terminated C string that a CUDA library (the
// driver, NCCL) owns, reading at most 4096 bytes.
func GoString(p *byte) string {
	var b []byte
	for i := uintptr(0); i < 4096; i++ {
		c := *(*byte)(unsafe.Add(unsafe.Pointer(p), i))
		if c == 0 {
			break
		}
		b = append(b, c)
	}
	return string(b)
}

// Info describes the device a probe found.
type Info struct {
	Name          string
	Major, Minor  int // compute capability
	TotalMem      uint64
	DriverVersion int // e.g. 12040 for CUDA 12.4
	Devices       int
}

// SM is the compute capability as a target suffix: 90 for sm_90.
func (i Info) SM() int { return 10*i.Major + i.Minor }

func (i Info) String() string {
	return fmt.Sprintf("%s (sm_%d, %.1f GiB, driver CUDA %d.%d)", i.Name, i.SM(), float64(i.TotalMem)/(1<<30),
		i.DriverVersion/1000, i.DriverVersion%1000/10)
}

// Probe reports device 0, or why CUDA cannot run here.
func Probe() (Info, error) {
	var info Info
	if err := Load(); err != nil {
		return info, err
	}
	var n, v int32
	if err := check("cuDeviceGetCount", api.cuDeviceGetCount(&n)); err != nil {
		return info, err
	}
	if n == 0 {
		return info, fmt.Errorf("cuda: driver loaded but no CUDA device is visible")
	}
	if err := check("cuDriverGetVersion", api.cuDriverGetVersion(&v)); err != nil {
		return info, err
	}
	info, err := Describe(0)
	info.Devices, info.DriverVersion = int(n), int(v)
	return info, err
}

// Describe returns device ordinal i's name, compute capability and
// memory (Info's fields of a device; the driver is loaded).
func Describe(i int) (Info, error) {
	var info Info
	d, err := GetDevice(i)
	if err != nil {
		return info, err
	}
	if info.Name, err = d.Name(); err != nil {
		return info, err
	}
	if info.Major, err = d.Attribute(AttrComputeCapabilityMajor); err != nil {
		return info, err
	}
	if info.Minor, err = d.Attribute(AttrComputeCapabilityMinor); err != nil {
		return info, err
	}
	err = check("cuDeviceTotalMem", api.cuDeviceTotalMem(&info.TotalMem, d))
	return info, err
}

// Device attributes (CUdevice_attribute).
const (
	AttrMaxSharedMemoryPerBlockOptin = 97
	AttrMultiprocessorCount          = 16
	AttrComputeCapabilityMajor       = 75
	AttrComputeCapabilityMinor       = 76
	AttrClockRate                    = 13 // the multiprocessors' peak clock, kHz
)

// GetDevice returns device ordinal i.
func GetDevice(i int) (Device, error) {
	var d Device
	return d, check("cuDeviceGet", api.cuDeviceGet(&d, int32(i)))
}

// Name is the device's marketing name.
func (d Device) Name() (string, error) {
	buf := make([]byte, 256)
	if err := check("cuDeviceGetName", api.cuDeviceGetName(&buf[0], int32(len(buf)), d)); err != nil {
		return "", err
	}
	return GoString(&buf[0]), nil
}

// Attribute reads a device attribute.
func (d Device) Attribute(a int32) (int, error) {
	var v int32
	err := check("cuDeviceGetAttribute", api.cuDeviceGetAttribute(&v, a, d))
	return int(v), err
}

// PrimaryContext retains the device's primary context (the one the
// runtime API would use, so zrt coexists with other CUDA users).
func (d Device) PrimaryContext() (Context, error) {
	var c Context
	return c, check("cuDevicePrimaryCtxRetain", api.cuDevicePrimaryCtxRetain(&c, d))
}

// ReleasePrimaryContext drops the reference PrimaryContext took.
func (d Device) ReleasePrimaryContext() error {
	return check("cuDevicePrimaryCtxRelease", api.cuDevicePrimaryCtxRelease(d))
}

// CanAccessPeer reports whether device d can map peer's memory
// (NVLink or PCIe peer-to-peer).
func (d Device) CanAccessPeer(peer Device) (bool, error) {
	var v int32
	err := check("cuDeviceCanAccessPeer", api.cuDeviceCanAccessPeer(&v, d, peer))
	return v != 0, err
}

// peerAccessAlreadyEnabled is CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED.
const peerAccessAlreadyEnabled Result = 704

// EnablePeerAccess lets the current context address peer's memory
// directly (its device pointers, through unified addressing). Access
// another user of the contexts (NCCL) already enabled is no error.
func EnablePeerAccess(peer Context) error {
	r := api.cuCtxEnablePeerAccess(peer, 0)
	if r == peerAccessAlreadyEnabled {
		return nil
	}
	return check("cuCtxEnablePeerAccess", r)
}

// SetCurrent binds c to the calling OS thread.
func (c Context) SetCurrent() error { return check("cuCtxSetCurrent", api.cuCtxSetCurrent(c)) }

// Synchronize waits for all work in the current context.
func Synchronize() error { return check("cuCtxSynchronize", api.cuCtxSynchronize()) }

// MemAlloc allocates device memory.
func MemAlloc(n int) (DevPtr, error) {
	var p DevPtr
	return p, check(fmt.Sprintf("cuMemAlloc(%d)", n), api.cuMemAlloc(&p, uintptr(n)))
}

// MemGetInfo returns the current context's device's free and total
// memory in bytes.
func MemGetInfo() (free, total int64, err error) {
	var f, t uintptr
	err = check("cuMemGetInfo", api.cuMemGetInfo(&f, &t))
	return int64(f), int64(t), err
}

// MemFree frees device memory.
func MemFree(p DevPtr) error { return check("cuMemFree", api.cuMemFree(p)) }

// MemHostAlloc allocates n bytes of page-locked host memory, which async
// copies (and so captured graphs) can read and write directly.
func MemHostAlloc(n int) ([]byte, error) {
	var p unsafe.Pointer
	if err := check(fmt.Sprintf("cuMemHostAlloc(%d)", n), api.cuMemHostAlloc(&p, uintptr(n), 0)); err != nil {
		return nil, err
	}
	return unsafe.Slice((*byte)(p), n), nil
}

// MemFreeHost frees memory from MemHostAlloc.
func MemFreeHost(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	return check("cuMemFreeHost", api.cuMemFreeHost(unsafe.Pointer(&b[0])))
}

// MemcpyHtoD copies src to device memory, synchronously.
func MemcpyHtoD(dst DevPtr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	return check("cuMemcpyHtoD", api.cuMemcpyHtoD(dst, unsafe.Pointer(&src[0]), uintptr(len(src))))
}

// MemcpyDtoH copies device memory into dst, synchronously.
func MemcpyDtoH(dst []byte, src DevPtr) error {
	if len(dst) == 0 {
		return nil
	}
	return check("cuMemcpyDtoH", api.cuMemcpyDtoH(unsafe.Pointer(&dst[0]), src, uintptr(len(dst))))
}

// MemcpyHtoDAsync enqueues a copy from pinned host memory.
func MemcpyHtoDAsync(dst DevPtr, src []byte, s Stream) error {
	if len(src) == 0 {
		return nil
	}
	return check("cuMemcpyHtoDAsync", api.cuMemcpyHtoDAsync(dst, unsafe.Pointer(&src[0]), uintptr(len(src)), s))
}

// MemcpyDtoHAsync enqueues a copy into pinned host memory.
func MemcpyDtoHAsync(dst []byte, src DevPtr, s Stream) error {
	if len(dst) == 0 {
		return nil
	}
	return check("cuMemcpyDtoHAsync", api.cuMemcpyDtoHAsync(unsafe.Pointer(&dst[0]), src, uintptr(len(dst)), s))
}

// MemcpyDtoDAsync enqueues a copy of n bytes from device memory src to
// device memory dst (the ranges must not overlap).
func MemcpyDtoDAsync(dst, src DevPtr, n int, s Stream) error {
	if n == 0 {
		return nil
	}
	return check("cuMemcpyDtoDAsync", api.cuMemcpyDtoDAsync(dst, src, uintptr(n), s))
}

// MemsetD8 fills n bytes of device memory with v.
func MemsetD8(p DevPtr, v uint8, n int) error {
	return check("cuMemsetD8", api.cuMemsetD8(p, v, uintptr(n)))
}

// memcpy2D is CUDA_MEMCPY2D: source and destination (memory type,
// address, pitch, starting byte and row), then the width in bytes and
// the rows. The CUmemorytype fields are 32-bit enums padded to 8 bytes.
type memcpy2D struct {
	srcXInBytes, srcY uintptr
	srcMemoryType     uint32
	_                 uint32
	srcHost           uintptr
	srcDevice         DevPtr
	srcArray          uintptr
	srcPitch          uintptr
	dstXInBytes, dstY uintptr
	dstMemoryType     uint32
	_                 uint32
	dstHost           uintptr
	dstDevice         DevPtr
	dstArray          uintptr
	dstPitch          uintptr
	widthInBytes      uintptr
	height            uintptr
}

// memoryTypeDevice is CU_MEMORYTYPE_DEVICE.
const memoryTypeDevice = 2

// Memcpy2DAsync enqueues on s a copy of rows rows of width bytes from
// device memory src, rows srcPitch bytes apart, to device memory dst,
// rows dstPitch bytes apart (a graph captured from s records it as a
// copy node).
func Memcpy2DAsync(dst DevPtr, dstPitch int, src DevPtr, srcPitch int, width, rows int, s Stream) error {
	if width == 0 || rows == 0 {
		return nil
	}
	c := memcpy2D{srcMemoryType: memoryTypeDevice, srcDevice: src, srcPitch: uintptr(srcPitch),
		dstMemoryType: memoryTypeDevice, dstDevice: dst, dstPitch: uintptr(dstPitch),
		widthInBytes: uintptr(width), height: uintptr(rows)}
	return check(fmt.Sprintf("cuMemcpy2DAsync(%d rows of %d bytes)", rows, width), api.cuMemcpy2DAsync(unsafe.Pointer(&c), s))
}

// JIT options of cuModuleLoadDataEx (CUjit_option).
const (
	jitErrorLogBuffer          = 5
	jitErrorLogBufferSizeBytes = 6
)

// ModuleLoadData loads a module image (PTX text, NUL-terminated, or a
// cubin). PTX is JIT-compiled for the device; a compile error's log is
// part of the returned error.
func ModuleLoadData(image []byte) (Module, error) {
	if len(image) == 0 || image[len(image)-1] != 0 {
		image = append(append([]byte(nil), image...), 0)
	}
	// The log buffer is handed to the driver as an option value, so it
	// must be C memory: the option array holds its address.
	logBuf, err := MemHostAlloc(8192)
	if err != nil {
		return 0, err
	}
	defer MemFreeHost(logBuf)
	opts := []int32{jitErrorLogBuffer, jitErrorLogBufferSizeBytes}
	vals, err := MemHostAlloc(16)
	if err != nil {
		return 0, err
	}
	defer MemFreeHost(vals)
	pv := (*[2]unsafe.Pointer)(unsafe.Pointer(&vals[0]))
	pv[0] = unsafe.Pointer(&logBuf[0])
	*(*uintptr)(unsafe.Pointer(&pv[1])) = uintptr(len(logBuf))
	var m Module
	r := api.cuModuleLoadDataEx(&m, unsafe.Pointer(&image[0]), 2, &opts[0], &pv[0])
	if err := check("cuModuleLoadDataEx", r); err != nil {
		if log := GoString(&logBuf[0]); log != "" {
			return 0, fmt.Errorf("%w: %s", err, log)
		}
		return 0, err
	}
	return m, nil
}

// Unload releases a module.
func (m Module) Unload() error { return check("cuModuleUnload", api.cuModuleUnload(m)) }

// Function looks up an entry point by name.
func (m Module) Function(name string) (Function, error) {
	var f Function
	n := append([]byte(name), 0)
	return f, check("cuModuleGetFunction("+name+")", api.cuModuleGetFunction(&f, m, &n[0]))
}

// MemsetD32Async queues the filling of n 32-bit words of device memory
// with v on stream s (a memset node when s is capturing).
func MemsetD32Async(p DevPtr, v uint32, n int, s Stream) error {
	return check("cuMemsetD32Async", api.cuMemsetD32Async(p, v, uintptr(n), s))
}

// MaxActiveBlocks is how many blocks of f, of block threads and
// sharedBytes of dynamic shared memory, one multiprocessor keeps resident
// at once (cuOccupancyMaxActiveBlocksPerMultiprocessor).
func (f Function) MaxActiveBlocks(block, sharedBytes int) (int, error) {
	var n int32
	err := check("cuOccupancyMaxActiveBlocksPerMultiprocessor", api.cuOccupancyMaxActiveBlocks(&n, f, int32(block), uintptr(sharedBytes)))
	return int(n), err
}

// FuncAttrMaxDynamicSharedSize is CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES.
const FuncAttrMaxDynamicSharedSize = 8

// SetAttribute sets a function attribute.
func (f Function) SetAttribute(attr, v int) error {
	return check("cuFuncSetAttribute", api.cuFuncSetAttribute(f, int32(attr), int32(v)))
}

// Launch enqueues a kernel. params points at an array of pointers, one per
// kernel parameter, each to the parameter's value; the driver copies the
// values during the call, so the memory may be reused right after.
func (f Function) Launch(grid, block [3]uint32, sharedBytes int, s Stream, params unsafe.Pointer) error {
	return check("cuLaunchKernel", api.cuLaunchKernel(f, grid[0], grid[1], grid[2], block[0], block[1], block[2],
		uint32(sharedBytes), s, params, nil))
}

// LaunchScratchBytes is the memory LaunchOverlapped builds its
// CUlaunchConfig (56 bytes) and that config's one CUlaunchAttribute (72)
// in.
const LaunchScratchBytes = 56 + 72

// attrProgrammaticStreamSerialization is
// CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION.
const attrProgrammaticStreamSerialization = 6

// CanOverlapLaunches reports whether the driver has cuLaunchKernelEx, which
// LaunchOverlapped needs.
func CanOverlapLaunches() bool { return api.cuLaunchKernelEx != nil }

// LaunchOverlapped enqueues a kernel like Launch, but allows it to start
// before the previous kernel on the stream has finished (programmatic
// dependent launch, compute capability 9.0 and up): the kernel must
// execute griddepcontrol.wait before it reads that kernel's results or
// writes what that kernel may still read. scratch is LaunchScratchBytes of
// memory outside the Go heap (the driver follows a pointer inside it).
func (f Function) LaunchOverlapped(grid, block [3]uint32, sharedBytes int, s Stream, params, scratch unsafe.Pointer) error {
	if api.cuLaunchKernelEx == nil {
		return fmt.Errorf("cuda: cuLaunchKernelEx: not in this driver")
	}
	// CUlaunchConfig: grid and block dimensions and the shared bytes (7
	// u32), padding, hStream at 32, attrs at 40, numAttrs at 48.
	cfg := unsafe.Slice((*uint32)(scratch), 14)
	copy(cfg[0:3], grid[:])
	copy(cfg[3:6], block[:])
	cfg[6], cfg[7] = uint32(sharedBytes), 0
	attr := unsafe.Add(scratch, 56)
	*(*uintptr)(unsafe.Add(scratch, 32)) = uintptr(s)
	*(*unsafe.Pointer)(unsafe.Add(scratch, 40)) = attr
	cfg[12], cfg[13] = 1, 0
	// CUlaunchAttribute: id, padding to 8, then the value union (64
	// bytes), here programmaticStreamSerializationAllowed = 1.
	a := unsafe.Slice((*uint32)(attr), 18)
	clear(a)
	a[0], a[2] = attrProgrammaticStreamSerialization, 1
	return check("cuLaunchKernelEx", api.cuLaunchKernelEx(scratch, f, params, nil))
}

// StreamNonBlocking is CU_STREAM_NON_BLOCKING: no implicit sync with stream 0.
const StreamNonBlocking = 1

// NewStream creates a stream.
func NewStream(flags uint32) (Stream, error) {
	var s Stream
	return s, check("cuStreamCreate", api.cuStreamCreate(&s, flags))
}

// Destroy destroys the stream.
func (s Stream) Destroy() error { return check("cuStreamDestroy", api.cuStreamDestroy(s)) }

// Synchronize waits for the stream's work.
func (s Stream) Synchronize() error { return check("cuStreamSynchronize", api.cuStreamSynchronize(s)) }

// Capture modes (CUstreamCaptureMode).
const (
	CaptureGlobal      = 0
	CaptureThreadLocal = 1
	CaptureRelaxed     = 2
)

// BeginCapture starts recording the stream's work into a graph.
func (s Stream) BeginCapture(mode int) error {
	return check("cuStreamBeginCapture", api.cuStreamBeginCapture(s, int32(mode)))
}

// EndCapture stops recording and returns the graph.
func (s Stream) EndCapture() (Graph, error) {
	var g Graph
	return g, check("cuStreamEndCapture", api.cuStreamEndCapture(s, &g))
}

// Capture records what enqueue puts on the stream into an executable
// graph, in relaxed mode: the capturing goroutine is locked to its thread
// anyway, and other CUDA users in the process must not be disturbed. An
// error of enqueue's is returned before one of the capture's.
func (s Stream) Capture(enqueue func() error) (GraphExec, error) {
	if err := s.BeginCapture(CaptureRelaxed); err != nil {
		return 0, err
	}
	recErr := enqueue()
	g, err := s.EndCapture()
	if recErr != nil {
		if err == nil {
			g.Destroy()
		}
		return 0, recErr
	}
	if err != nil {
		return 0, err
	}
	defer g.Destroy()
	return g.Instantiate()
}

// EventDisableTiming is CU_EVENT_DISABLE_TIMING, the cheapest event to query.
const EventDisableTiming = 2

// NewEvent creates an event.
func NewEvent(flags uint32) (Event, error) {
	var e Event
	return e, check("cuEventCreate", api.cuEventCreate(&e, flags))
}

// Record enqueues the event on s.
func (e Event) Record(s Stream) error { return check("cuEventRecord", api.cuEventRecord(e, s)) }

// WaitEvent makes the work s is given after it wait until e, as last
// recorded on another stream, has completed, without the host waiting.
func (s Stream) WaitEvent(e Event) error {
	return check("cuStreamWaitEvent", api.cuStreamWaitEvent(s, e, 0))
}

// Query reports whether the event has completed: nil when done, an error
// for which IsNotReady holds while pending, another error on failure (a
// kernel fault surfaces here).
func (e Event) Query() error { return check("cuEventQuery", api.cuEventQuery(e)) }

// Ready reports whether the work e records has completed (cuEventQuery),
// with CUDA_ERROR_NOT_READY as false rather than an error: a loop that
// polls it on every step's wait would otherwise name an error (a driver
// call) and unwrap it each time it finds the GPU still busy.
func (e Event) Ready() (bool, error) {
	switch r := api.cuEventQuery(e); r {
	case Success:
		return true, nil
	case NotReady:
		return false, nil
	default:
		return false, check("cuEventQuery", r)
	}
}

// Elapsed is the time from start to e, both recorded and complete, in
// milliseconds (events created without EventDisableTiming).
func (e Event) Elapsed(start Event) (float32, error) {
	var ms float32
	return ms, check("cuEventElapsedTime", api.cuEventElapsedTime(&ms, start, e))
}

// Destroy destroys the event.
func (e Event) Destroy() error { return check("cuEventDestroy", api.cuEventDestroy(e)) }

// Instantiate makes an executable graph.
func (g Graph) Instantiate() (GraphExec, error) {
	var x GraphExec
	return x, check("cuGraphInstantiateWithFlags", api.cuGraphInstantiateWithFlags(&x, g, 0))
}

// Destroy destroys the graph.
func (g Graph) Destroy() error { return check("cuGraphDestroy", api.cuGraphDestroy(g)) }

// Launch enqueues the executable graph on s.
func (x GraphExec) Launch(s Stream) error { return check("cuGraphLaunch", api.cuGraphLaunch(x, s)) }

// Destroy destroys the executable graph.
func (x GraphExec) Destroy() error { return check("cuGraphExecDestroy", api.cuGraphExecDestroy(x)) }
