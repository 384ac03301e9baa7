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

// targetTemplates says, per target zrtc lowers for, where kernel code
// comes from. A target missing here cannot be compiled for.
var targetTemplates = map[string]passes.Templates{
	"cpu":        cpuTemplate,
	"cuda:sm_90": cudaTemplate(zrt.SM90),
}

// template wraps code in a blob for target with one placeholder dword per
// specialization slot of the instance's kernel, appended after the code
// (padded to a dword); specialize patches them.
func template(instance string, target zrt.Target, code []byte, subgroup, workgroup uint32) (*zrt.Blob, error) {
	abi, _, err := kernels.SplitInstance(instance)
	if err != nil {
		return nil, err
	}
	code = append(code, 0)
	for len(code)%4 != 0 {
		code = append(code, 0)
	}
	b := &zrt.Blob{Name: instance, Header: zrt.Header{ABIVersion: zrt.ABIVersion, Target: target,
		BufferCount: uint32(len(abi.Bufs)), PushConstBytes: uint32(4 * len(abi.Push)), SubgroupSize: subgroup,
		Workgroup: [3]uint32{workgroup, 1, 1}}}
	for _, p := range abi.Spec {
		b.Slots = append(b.Slots, zrt.Slot{Name: p.Name, CodeOffset: uint32(len(code))})
		code = binary.LittleEndian.AppendUint32(code, zrt.Placeholder)
	}
	b.Code = code
	return b, nil
}

// cpuTemplate: a T-CPU kernel is Go code compiled into zrt-run, so the
// blob's code is the entry symbol the tier binds.
func cpuTemplate(instance string) (*zrt.Blob, error) {
	return template(instance, zrt.CPU, []byte(instance), 0, 1)
}

// cudaTemplate: the code is the instance's PTX (embedded in zrtc from
// kernels/cuda/ptx), NUL-terminated for cuModuleLoadData. The tier passes
// the slot values as the kernel's trailing parameters, so one PTX serves
// every shape and the blob is specialized, like every target's, by
// patching slots.
func cudaTemplate(target zrt.Target) passes.Templates {
	return func(instance string) (*zrt.Blob, error) {
		abi, _, err := kernels.SplitInstance(instance)
		if err != nil {
			return nil, err
		}
		src, err := ptx.Source(instance)
		if err != nil {
			return nil, err
		}
		return template(instance, target, append([]byte(nil), src...), 32, cuda.BlockSize(abi.Name))
	}
}

// templatesFor returns a target's templates.
func templatesFor(target string) (passes.Templates, error) {
	t, ok := targetTemplates[target]
	if !ok {
		return nil, fmt.Errorf("target %s: this zrtc has no kernels for it (it lowers for cpu and cuda:sm_90)", target)
	}
	return t, nil
}
