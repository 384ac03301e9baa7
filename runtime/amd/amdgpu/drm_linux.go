//go:build linux

package amdgpu

import (
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/zrtdev/zrt/runtime/amd/kfd"
)

// DRIDir is where render nodes live.
var DRIDir = "/dev/dri"

// drm is the real driver: one open render node.
type drm struct{ fd int }

func (r drm) GemCreate(size, align, domains, flags uint64) (uint32, error) {
	a := GemCreateIn{BOSize: size, Alignment: align, Domains: domains, DomainFlags: flags}
	if err := kfd.Ioctl(r.fd, IocGemCreate, unsafe.Pointer(&a)); err != nil {
		return 0, err
	}
	return *(*uint32)(unsafe.Pointer(&a)), nil // out.handle overlays in.bo_size
}

func (r drm) Map(handle uint32, size uint64) ([]byte, error) {
	a := GemMmap{HandleOrOffset: uint64(handle)}
	if err := kfd.Ioctl(r.fd, IocGemMmap, unsafe.Pointer(&a)); err != nil {
		return nil, fmt.Errorf("DRM_IOCTL_AMDGPU_GEM_MMAP: %w", err)
	}
	return unix.Mmap(r.fd, int64(a.HandleOrOffset), int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
}

func (r drm) Unmap(b []byte) error { return unix.Munmap(b) }

func (r drm) GemVA(op, handle, flags uint32, va, size uint64) error {
	a := GemVA{Handle: handle, Operation: op, Flags: flags, VAAddress: va, MapSize: size}
	return kfd.Ioctl(r.fd, IocGemVA, unsafe.Pointer(&a))
}

func (r drm) GemClose(handle uint32) error {
	a := GemClose{Handle: handle}
	return kfd.Ioctl(r.fd, IocGemClose, unsafe.Pointer(&a))
}

func (r drm) UserqCreate(in *UserqIn, mqd *MQDComputeGfx11) (uint32, error) {
	err := kfd.Ioctl(r.fd, IocUserq, unsafe.Pointer(in))
	runtime.KeepAlive(mqd)
	if err != nil {
		return 0, userqError(err)
	}
	return *(*uint32)(unsafe.Pointer(in)), nil // out.queue_id overlays in.op
}

func (r drm) UserqFree(id uint32) error {
	a := UserqIn{Op: UserqOpFree, QueueID: id}
	return kfd.Ioctl(r.fd, IocUserq, unsafe.Pointer(&a))
}

// UserqSignal issues DRM_IOCTL_AMDGPU_USERQ_SIGNAL (T2 does not use it:
// it waits on mailboxes).
func (r drm) UserqSignal(a *UserqSignal) error {
	return kfd.Ioctl(r.fd, IocUserqSignal, unsafe.Pointer(a))
}

// UserqWait issues DRM_IOCTL_AMDGPU_USERQ_WAIT (unused by T2, as above).
func (r drm) UserqWait(a *UserqWait) error { return kfd.Ioctl(r.fd, IocUserqWait, unsafe.Pointer(a)) }

func (r drm) Close() error { return unix.Close(r.fd) }

// userqError explains a failed DRM_IOCTL_AMDGPU_USERQ create.
func userqError(err error) error {
	switch {
	case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOTTY), errors.Is(err, unix.EOPNOTSUPP):
		return fmt.Errorf("amdgpu: kernel without user queues for compute: DRM_IOCTL_AMDGPU_USERQ create failed (%w); user queues need Linux 6.16+, a gfx11/gfx12 GPU whose MES firmware supports them and, where the kernel gates them, amdgpu.user_queue=1", err)
	case errors.Is(err, unix.ENOMEM), errors.Is(err, unix.ENOSPC):
		return fmt.Errorf("amdgpu: DRM_IOCTL_AMDGPU_USERQ: no user queue slots left (%w)", err)
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		return fmt.Errorf("amdgpu: DRM_IOCTL_AMDGPU_USERQ: not permitted (%w)", err)
	}
	return fmt.Errorf("amdgpu: DRM_IOCTL_AMDGPU_USERQ create: %w", err)
}

// RenderNodes lists the render nodes, renderD128 first.
func RenderNodes() ([]string, error) {
	ents, err := filepath.Glob(filepath.Join(DRIDir, "renderD*"))
	if err != nil {
		return nil, err
	}
	num := func(p string) int { n, _ := strconv.Atoi(strings.TrimPrefix(filepath.Base(p), "renderD")); return n }
	sort.Slice(ents, func(i, j int) bool { return num(ents[i]) < num(ents[j]) })
	return ents, nil
}

// DriverVersion reads DRM_IOCTL_VERSION: the driver name and version.
func DriverVersion(fd int) (name string, v Version, err error) {
	buf := make([]byte, 64)
	v = Version{NameLen: uint64(len(buf)), Name: uint64(uintptr(unsafe.Pointer(&buf[0])))}
	if err := kfd.Ioctl(fd, IocVersion, unsafe.Pointer(&v)); err != nil {
		return "", Version{}, fmt.Errorf("DRM_IOCTL_VERSION: %w", err)
	}
	n := min(int(v.NameLen), len(buf))
	v.Name, v.Date, v.Desc = 0, 0, 0
	return string(buf[:n]), v, nil
}

// info runs one AMDGPU_INFO query into out.
func info(fd int, query, ipType uint32, out unsafe.Pointer, size uintptr) error {
	a := InfoArgs{ReturnPointer: uint64(uintptr(out)), ReturnSize: uint32(size), Query: query, IPType: ipType}
	return kfd.Ioctl(fd, IocInfo, unsafe.Pointer(&a))
}

// OpenOptions configure Open.
type OpenOptions struct {
	Node int      // index among the amdgpu render nodes (0: the first)
	Gfx  []string // gfx targets accepted ("gfx1201"); empty: any
}

// Open finds an amdgpu render node and checks that T2 can use it: the
// DRM driver is amdgpu, the GPU's gfx version is one of o.Gfx, and the
// kernel offers compute user queues (AMDGPU_INFO_DEV_INFO's
// userq_ip_mask). Whether a queue can really be created is the caller's
// next step (t2.Probe creates one). Each failure says exactly why.
func Open(o OpenOptions) (*Device, error) {
	nodes, err := RenderNodes()
	if err != nil {
		return nil, err
	}
	if len(nodes) == 0 {
		if err := unix.Stat(DRIDir, new(unix.Stat_t)); err != nil {
			return nil, fmt.Errorf("no render node: %s does not exist (no GPU with a DRM driver on this machine)", DRIDir)
		}
		return nil, fmt.Errorf("no render node: %s has no renderD* device (no GPU with a DRM driver on this machine)", DRIDir)
	}
	var others []string
	var denied error
	amd := 0
	for _, p := range nodes {
		fd, err := unix.Open(p, unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
				if denied == nil {
					denied = fmt.Errorf("permission denied opening %s: add the user to the render (and video) group", p)
				}
				continue
			}
			others = append(others, fmt.Sprintf("%s: %v", filepath.Base(p), err))
			continue
		}
		name, v, err := DriverVersion(fd)
		if err != nil || name != "amdgpu" {
			unix.Close(fd)
			if err != nil {
				others = append(others, fmt.Sprintf("%s: %v", filepath.Base(p), err))
			} else {
				others = append(others, fmt.Sprintf("%s is %s", filepath.Base(p), name))
			}
			continue
		}
		if amd != o.Node {
			amd++
			unix.Close(fd)
			continue
		}
		d, err := openNode(fd, p, v, o)
		if err != nil {
			unix.Close(fd)
			return nil, err
		}
		return d, nil
	}
	if amd > 0 {
		return nil, fmt.Errorf("amdgpu render node %d: there are %d", o.Node, amd)
	}
	if denied != nil {
		return nil, denied
	}
	return nil, fmt.Errorf("not amdgpu: no render node is driven by amdgpu (%s)", strings.Join(others, "; "))
}

// noField fills the tail of InfoDevice before the query: a kernel whose
// struct is shorter leaves it so.
const noField = 0xFFFFFFFF

func openNode(fd int, path string, v Version, o OpenOptions) (*Device, error) {
	node := filepath.Base(path)
	var di InfoDevice
	di.UserqIPMask, di.Pad = noField, noField
	if err := info(fd, InfoDevInfo, 0, unsafe.Pointer(&di), unsafe.Sizeof(di)); err != nil {
		return nil, fmt.Errorf("%s: AMDGPU_INFO_DEV_INFO: %w", node, err)
	}
	var ip InfoHWIP
	if err := info(fd, InfoHWIPInfo, HWIPCompute, unsafe.Pointer(&ip), unsafe.Sizeof(ip)); err != nil {
		return nil, fmt.Errorf("%s: AMDGPU_INFO_HW_IP_INFO (compute): %w", node, err)
	}
	if ip.IPDiscoveryVersion == 0 {
		return nil, fmt.Errorf("%s: kernel without user queues: AMDGPU_INFO_HW_IP_INFO has no IP discovery version (amdgpu DRM %d.%d; user queues need Linux 6.16+)", node, v.Major, v.Minor)
	}
	gv := GfxTargetVersion(ip.IPDiscoveryVersion)
	ipStr := fmt.Sprintf("GC %d.%d.%d", ip.IPDiscoveryVersion>>16&0xFF, ip.IPDiscoveryVersion>>8&0xFF, ip.IPDiscoveryVersion&0xFF)
	gfx := kfd.Gfx(gv)
	if gv == 0 {
		gfx = "pre-gfx10"
	}
	if len(o.Gfx) > 0 && !contains(o.Gfx, gfx) {
		return nil, fmt.Errorf("unsupported gfx version: %s is %s (%s, device %#x); T2 has kernels for %s", node, gfx, ipStr, di.DeviceID, strings.Join(o.Gfx, ", "))
	}
	switch {
	case di.UserqIPMask == noField:
		return nil, fmt.Errorf("%s: kernel without user queues: AMDGPU_INFO_DEV_INFO has no userq_ip_mask (amdgpu DRM %d.%d; user queues need Linux 6.16+)", node, v.Major, v.Minor)
	case di.UserqIPMask&(1<<HWIPCompute) == 0:
		return nil, fmt.Errorf("%s (%s): kernel without user queues for compute: userq_ip_mask is %#x (a kernel before Linux 6.16 reports 0; 6.16+ offers them on gfx11/gfx12 with suitable MES firmware, where gated with amdgpu.user_queue=1)", node, gfx, di.UserqIPMask)
	}
	name := fmt.Sprintf("amdgpu %s %s (%s, device %#x, user queues)", node, gfx, ipStr, di.DeviceID)
	return newDevice(drm{fd}, di, kfd.Info{Name: name, GPUID: di.DeviceID, GfxVersion: gv, Major: uint32(v.Major), Minor: uint32(v.Minor)}), nil
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
