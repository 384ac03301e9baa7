package compiler

import (
	"encoding/binary"
	"fmt"

	"github.com/zrtdev/zrt/format/zrt"
	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/kernels/cuda"
	"github.com/zrtdev/zrt/kernels/cuda/ptx"
	"github.com/zrtdev/zrt/passes"
)

// loweredTargets are the targets zrtc has kernels for.
var loweredTargets = map[string]bool{"cpu": true, "cuda:sm_90": true}

// kernelBlobFor builds a kernel instance's blob for the bundle's target.
func kernelBlobFor(k passes.KernelInstance, target string) (*zrt.Blob, error) {
	switch target {
	case "cpu":
		return KernelBlob(k)
	case "cuda:sm_90":
		return CUDAKernelBlob(k, zrt.SM90)
	}
	return nil, fmt.Errorf("target %s: no kernels", target)
}

// CUDAKernelBlob builds the .zrt blob of a T-CUDA kernel instance: its code
// is the instance's PTX (embedded in zrtc from kernels/cuda/ptx), a NUL
// that ends the PTX text for cuModuleLoadData, padding to a dword, and one
// dword per specialization slot. The tier passes the slot values as the
// kernel's trailing parameters, so one PTX serves every shape and the blob
// is specialized, like every target's, by patching slots.
func CUDAKernelBlob(k passes.KernelInstance, target zrt.Target) (*zrt.Blob, error) {
	abi, _, err := kernels.SplitInstance(k.Name)
	if err != nil {
		return nil, err
	}
	src, err := ptx.Source(k.Name)
	if err != nil {
		return nil, err
	}
	code := append(append([]byte(nil), src...), 0)
	for len(code)%4 != 0 {
		code = append(code, 0)
	}
	b := &zrt.Blob{Name: k.Name, Header: zrt.Header{ABIVersion: zrt.ABIVersion, Target: target,
		BufferCount: uint32(len(abi.Bufs)), PushConstBytes: uint32(4 * len(abi.Push)), SubgroupSize: 32,
		Workgroup: [3]uint32{cuda.BlockSize(abi.Name), 1, 1}}}
	for _, p := range abi.Spec {
		b.Slots = append(b.Slots, zrt.Slot{Name: p.Name, CodeOffset: uint32(len(code))})
		code = binary.LittleEndian.AppendUint32(code, zrt.Placeholder)
	}
	b.Code = code
	for i, p := range abi.Spec {
		if err := b.Patch(p.Name, k.Spec[i]); err != nil {
			return nil, err
		}
	}
	return b, nil
}
