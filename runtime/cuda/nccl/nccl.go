// Package nccl binds the part of NVIDIA's NCCL that T-CUDA's
// tensor-parallel sets use: communicators over the GPUs of one process
// and the collectives their ranks meet at (all-reduce, all-gather,
// broadcast), enqueued on a CUDA stream so that a captured CUDA graph
// records them like any kernel. libnccl.so.2 is opened at run time with
// purego, so zrt-run stays one CGO_ENABLED=0 binary; where NCCL is
// absent only a tensor-parallel set fails to load, saying where it
// looked.
//
// Communicators come from ncclCommInitAll, one process driving every
// rank, rather than ncclGetUniqueId and ncclCommInitRank: the latter
// takes the 128-byte ncclUniqueId by value, which the System V ABI
// passes on the stack in 16 eightbytes, more than purego's calls carry
// (9 stack slots); ncclCommInitAll takes only pointers and ints.
//
// Every ncclResult_t is checked; a failure becomes an *Error naming the
// call, NCCL's error string and, where NCCL has one, its last error
// message.
package nccl

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ebitengine/purego"
	"github.com/zrtdev/zrt/runtime/cuda/driver"
)

// Soname is the library opened.
const Soname = "libnccl.so.2"

// Result is an ncclResult_t.
type Result int32

// Success is ncclSuccess.
const Success Result = 0

// DataType is an ncclDataType_t.
type DataType int32

// The data types the tier uses (nccl.h's values).
const (
	Int32   DataType = 2
	Float16 DataType = 6
	Float32 DataType = 7
)

// size is the bytes of one element.
func (d DataType) size() int {
	if d == Float16 {
		return 2
	}
	return 4
}

// redSum is ncclSum, the one ncclRedOp_t the tier reduces with.
const redSum = 0

// Error is a failed NCCL call.
type Error struct {
	Call string
	Code Result
	Text string // ncclGetErrorString's
	// Last is ncclGetLastError's message, where the library has it (it
	// says which argument or which peer).
	Last string
}

func (e *Error) Error() string {
	s := fmt.Sprintf("nccl: %s: %s (%d)", e.Call, e.Text, int32(e.Code))
	if e.Last != "" {
		s += ": " + e.Last
	}
	return s
}

// Options configure Open. Libraries read no environment, so what the
// commands take from it arrives here.
type Options struct {
	// Paths are library files to try before the usual places (a flag's
	// or the command's choice); a directory stands for its libnccl.so.2.
	Paths []string
	// NVLS leaves NVLink SHARP (multicast objects over the NVSwitch) to
	// NCCL's default. By default Open sets NCCL_NVLS_ENABLE=0 in the
	// process environment before NCCL first reads it (at its first call):
	// zrt never uses multicast memory, which on the lent machines must
	// stay off, and for decode's small messages NVLS buys nothing. NCCL
	// takes its settings only from the environment (or a config file),
	// so this is the one way to give it this one; the caller's value, if
	// it set one before, is overwritten.
	NVLS bool
}

// usualPaths are where NCCL is installed when the loader's search path
// does not find it: the distribution's package (libnccl2 puts it in the
// multiarch directory), the CUDA toolkit's directories, and the NCCL wheel
// of a system Python (nvidia-nccl-cu12 and kin).
var usualPaths = []string{
	"/usr/lib/x86_64-linux-gnu/libnccl.so.2",
	"/usr/lib/aarch64-linux-gnu/libnccl.so.2",
	"/usr/lib/sbsa-linux-gnu/libnccl.so.2",
	"/usr/lib64/libnccl.so.2",
	"/usr/local/lib/libnccl.so.2",
	"/usr/local/cuda/lib64/libnccl.so.2",
	"/usr/local/cuda/targets/x86_64-linux/lib/libnccl.so.2",
	"/usr/local/cuda/targets/sbsa-linux/lib/libnccl.so.2",
	"/opt/nccl/lib/libnccl.so.2",
	"/usr/local/lib/python3*/dist-packages/nvidia/nccl/lib/libnccl.so.2",
	"/usr/local/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2",
	"/usr/lib/python3*/dist-packages/nvidia/nccl/lib/libnccl.so.2",
	"/usr/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2",
}

// Library is an opened libnccl with its entry points bound. It holds no
// resources of its own (the library stays loaded for the process's
// life, as NCCL expects); its communicators do.
type Library struct {
	path    string
	version int

	ncclGetVersion     func(*int32) Result
	ncclGetErrorString func(Result) *byte
	ncclGetLastError   func(uintptr) *byte // optional (2.13)
	ncclCommInitAll    func(*uintptr, int32, *int32) Result
	ncclCommDestroy    func(uintptr) Result
	ncclCommAbort      func(uintptr) Result
	ncclAllReduce      func(uintptr, uintptr, uintptr, DataType, int32, uintptr, driver.Stream) Result
	ncclAllGather      func(uintptr, uintptr, uintptr, DataType, uintptr, driver.Stream) Result
	ncclBroadcast      func(uintptr, uintptr, uintptr, DataType, int32, uintptr, driver.Stream) Result
	ncclGroupStart     func() Result
	ncclGroupEnd       func() Result
}

// candidates lists what Open tries, in order: the given paths, the
// soname on the loader's search path (LD_LIBRARY_PATH, the ldconfig
// cache), then the usual places that exist.
func candidates(opt Options) []string {
	var out []string
	for _, p := range opt.Paths {
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			p = filepath.Join(p, Soname)
		}
		out = append(out, p)
	}
	out = append(out, Soname)
	for _, p := range usualPaths {
		if strings.Contains(p, "*") {
			m, _ := filepath.Glob(p)
			out = append(out, m...)
			continue
		}
		if _, err := os.Stat(p); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// Open finds libnccl.so.2 (Options.Paths, the loader's search path, the
// usual places), binds its entry points and reads its version; the error
// of a machine without it lists every place tried.
func Open(opt Options) (*Library, error) {
	var tried []string
	for _, p := range candidates(opt) {
		h, err := purego.Dlopen(p, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			tried = append(tried, err.Error())
			continue
		}
		if err := settings(opt); err != nil {
			return nil, err
		}
		l, err := bind(h)
		if err != nil {
			return nil, fmt.Errorf("nccl: %s: %w", p, err)
		}
		l.path = p
		if !strings.Contains(p, "/") {
			l.path = loadedPath(p)
		}
		var v int32
		if err := l.check("ncclGetVersion", 0, l.ncclGetVersion(&v)); err != nil {
			return nil, err
		}
		l.version = int(v)
		return l, nil
	}
	var dirs []string
	for _, p := range usualPaths {
		dirs = append(dirs, filepath.Dir(p))
	}
	return nil, fmt.Errorf("nccl: no %s on the loader's search path (LD_LIBRARY_PATH, the ldconfig cache) nor in %s (%s)",
		Soname, strings.Join(dirs, ", "), strings.Join(tried, "; "))
}

// settings writes into the process environment, before NCCL's first
// call reads it (once), the settings T-CUDA runs NCCL with. NCCL takes
// its parameters only from the environment (or a config file); this
// process's environment is the only way to hand them over. (In a
// CGO_ENABLED=0 binary os.Setenv reaches the C library's environment
// through purego's runtime hooks, which is where NCCL's getenv looks.)
//
//   - NCCL_NVLS_ENABLE=0 unless opt.NVLS: no NVLink SHARP multicast
//     objects (see Options.NVLS).
//   - NCCL_RUNTIME_CONNECT=0: a communicator connects its peers when it
//     is made rather than at its first collective of each algorithm,
//     which on T-CUDA would fall inside a graph capture (one rank then
//     blocking there until its peers capture too).
func settings(opt Options) error {
	env := [][2]string{{"NCCL_RUNTIME_CONNECT", "0"}}
	if !opt.NVLS {
		env = append(env, [2]string{"NCCL_NVLS_ENABLE", "0"})
	}
	for _, kv := range env {
		if err := os.Setenv(kv[0], kv[1]); err != nil {
			return fmt.Errorf("nccl: setting %s=%s: %w", kv[0], kv[1], err)
		}
	}
	return nil
}

func bind(h uintptr) (l *Library, err error) {
	// purego panics on a signature it cannot call; an error is kinder.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("binding: %v", r)
		}
	}()
	l = &Library{}
	for _, s := range []struct {
		fn   any
		name string
	}{
		{&l.ncclGetVersion, "ncclGetVersion"},
		{&l.ncclGetErrorString, "ncclGetErrorString"},
		{&l.ncclCommInitAll, "ncclCommInitAll"},
		{&l.ncclCommDestroy, "ncclCommDestroy"},
		{&l.ncclCommAbort, "ncclCommAbort"},
		{&l.ncclAllReduce, "ncclAllReduce"},
		{&l.ncclAllGather, "ncclAllGather"},
		{&l.ncclBroadcast, "ncclBroadcast"},
		{&l.ncclGroupStart, "ncclGroupStart"},
		{&l.ncclGroupEnd, "ncclGroupEnd"},
	} {
		sym, err := purego.Dlsym(h, s.name)
		if err != nil {
			return nil, fmt.Errorf("lacks %s (NCCL too old?): %v", s.name, err)
		}
		purego.RegisterFunc(s.fn, sym)
	}
	if sym, err := purego.Dlsym(h, "ncclGetLastError"); err == nil {
		purego.RegisterFunc(&l.ncclGetLastError, sym)
	}
	return l, nil
}

// loadedPath finds the file the dynamic loader mapped for soname, from
// the process's memory map; the soname itself where it cannot tell.
func loadedPath(soname string) string {
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return soname
	}
	for _, line := range bytes.Split(maps, []byte("\n")) {
		f := strings.Fields(string(line))
		if len(f) >= 6 && strings.HasPrefix(filepath.Base(f[len(f)-1]), "libnccl.so") {
			return f[len(f)-1]
		}
	}
	return soname
}

// Path is the library file opened.
func (l *Library) Path() string { return l.path }

// Version is NCCL's version code: 22803 for 2.28.3.
func (l *Library) Version() int { return l.version }

// VersionString writes the version as 2.28.3.
func (l *Library) VersionString() string {
	v := l.version
	if v < 10000 { // before 2.9: X*1000 + Y*100 + Z
		return fmt.Sprintf("%d.%d.%d", v/1000, v%1000/100, v%100)
	}
	return fmt.Sprintf("%d.%d.%d", v/10000, v%10000/100, v%100)
}

// check turns an ncclResult_t into an error; comm, when not 0, is asked
// for its last error message.
func (l *Library) check(call string, comm uintptr, r Result) error {
	if r == Success {
		return nil
	}
	e := &Error{Call: call, Code: r, Text: "unknown NCCL error"}
	if p := l.ncclGetErrorString(r); p != nil {
		e.Text = driver.GoString(p)
	}
	if l.ncclGetLastError != nil {
		if p := l.ncclGetLastError(comm); p != nil {
			e.Last = driver.GoString(p)
		}
	}
	return e
}

// Comm is one rank's communicator.
type Comm struct {
	lib         *Library
	h           uintptr
	rank, ranks int
	devices     []int // every rank's device
}

// InitAll creates a communicator for each of devices (CUDA device
// ordinals, as the driver numbers the visible ones), rank r on
// devices[r], all in this process. It sets devices current on the
// calling thread as it goes, so callers make their own context current
// again after it.
func (l *Library) InitAll(devices []int) ([]*Comm, error) {
	if len(devices) == 0 {
		return nil, fmt.Errorf("nccl: a communicator of no devices")
	}
	devs := make([]int32, len(devices))
	for i, d := range devices {
		devs[i] = int32(d)
	}
	hs := make([]uintptr, len(devices))
	if err := l.check(fmt.Sprintf("ncclCommInitAll(%d devices %v)", len(devices), devices), 0,
		l.ncclCommInitAll(&hs[0], int32(len(devs)), &devs[0])); err != nil {
		return nil, err
	}
	comms := make([]*Comm, len(devices))
	for r, h := range hs {
		comms[r] = &Comm{lib: l, h: h, rank: r, ranks: len(devices), devices: slices.Clone(devices)}
	}
	return comms, nil
}

// Rank is the communicator's rank.
func (c *Comm) Rank() int { return c.rank }

// Ranks is the number of ranks.
func (c *Comm) Ranks() int { return c.ranks }

// Device is the CUDA device ordinal of the rank.
func (c *Comm) Device() int { return c.devices[c.rank] }

// Devices lists every rank's CUDA device ordinal, by rank.
func (c *Comm) Devices() []int { return slices.Clone(c.devices) }

// Library is the library the communicator belongs to.
func (c *Comm) Library() *Library { return c.lib }

// AllReduceSum enqueues on s the sum over the ranks of count elements
// at send into recv (send may be recv: in place). Every rank receives
// the same bits.
func (c *Comm) AllReduceSum(send, recv driver.DevPtr, count int, t DataType, s driver.Stream) error {
	return c.lib.check(fmt.Sprintf("ncclAllReduce(%d × %d bytes)", count, t.size()), c.h,
		c.lib.ncclAllReduce(uintptr(send), uintptr(recv), uintptr(count), t, redSum, c.h, s))
}

// AllGather enqueues on s the gather of count elements from each rank's
// send into recv, rank r's at recv + r·count elements.
func (c *Comm) AllGather(send, recv driver.DevPtr, count int, t DataType, s driver.Stream) error {
	return c.lib.check(fmt.Sprintf("ncclAllGather(%d × %d bytes)", count, t.size()), c.h,
		c.lib.ncclAllGather(uintptr(send), uintptr(recv), uintptr(count), t, c.h, s))
}

// Broadcast enqueues on s the copy of count elements of root's send into
// every rank's recv (send is read on root only).
func (c *Comm) Broadcast(send, recv driver.DevPtr, count int, t DataType, root int, s driver.Stream) error {
	return c.lib.check(fmt.Sprintf("ncclBroadcast(%d × %d bytes from rank %d)", count, t.size(), root), c.h,
		c.lib.ncclBroadcast(uintptr(send), uintptr(recv), uintptr(count), t, int32(root), c.h, s))
}

// Group runs enqueue between ncclGroupStart and ncclGroupEnd, so the
// collectives it enqueues (several broadcasts of one rank) are launched
// as one.
func (l *Library) Group(enqueue func() error) error {
	if err := l.check("ncclGroupStart", 0, l.ncclGroupStart()); err != nil {
		return err
	}
	err := enqueue()
	if end := l.check("ncclGroupEnd", 0, l.ncclGroupEnd()); err == nil {
		err = end
	}
	return err
}

// Destroy frees the communicator once its enqueued work is done.
func (c *Comm) Destroy() error { return c.free("ncclCommDestroy", c.lib.ncclCommDestroy) }

// Abort frees the communicator at once, ending its pending work: for a
// set one of whose ranks failed, whose peers would otherwise wait on the
// GPU for it.
func (c *Comm) Abort() error { return c.free("ncclCommAbort", c.lib.ncclCommAbort) }

// free ends the communicator through fn, NCCL's call of that name, once:
// a freed Comm's handle is 0.
func (c *Comm) free(call string, fn func(uintptr) Result) error {
	if c.h == 0 {
		return nil
	}
	err := c.lib.check(call, 0, fn(c.h))
	c.h = 0
	return err
}
