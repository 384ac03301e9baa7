package passes

import (
	"context"
	"fmt"

	"github.com/zrtdev/zrt/compiler/ir"
	"github.com/zrtdev/zrt/format/zrt"
	"github.com/zrtdev/zrt/kernels"
)

// Templates returns the target's kernel blob for an instance with its
// specialization slots unpatched (seed 000 §11.5): the compiled code plus
// placeholder slots that specialize fills in.
type Templates func(instance string) (*zrt.Blob, error)

// specialize picks each instruction's kernel instance — the op's kernel
// family, typed by its weight's type where the family is typed — computes
// the instance's specialization values from the instruction's attributes,
// and patches them into a copy of the target's template: a host-side copy,
// never a recompile. Instances with equal values share one blob.
func specialize(_ context.Context, u *Unit) error {
	if u.Templates == nil {
		return fmt.Errorf("target %q has no kernel templates", u.Target)
	}
	index := map[string]int{}
	u.Kernels, u.Blobs = nil, nil
	u.InstKernel = make([][]int, len(u.Graphs))
	for gi, g := range u.Graphs {
		u.InstKernel[gi] = make([]int, len(g.Insts))
		for ii := range g.Insts {
			in := &g.Insts[ii]
			k, err := selectKernel(g, in, u.kvTypes())
			if err != nil {
				return fmt.Errorf("variant %s: inst %d (%s): %w", g.Key, ii, in.Op, err)
			}
			key := fmt.Sprint(k.Name, k.Spec)
			ki, ok := index[key]
			if !ok {
				blob, err := u.Templates(k.Name)
				if err != nil {
					return err
				}
				abi, _, _ := kernels.SplitInstance(k.Name)
				for i, p := range abi.Spec {
					if err := blob.Patch(p.Name, k.Spec[i]); err != nil {
						return err
					}
				}
				if err := blob.CheckPatched(); err != nil {
					return err
				}
				ki = len(u.Kernels)
				index[key] = ki
				u.Kernels = append(u.Kernels, k)
				u.Blobs = append(u.Blobs, blob)
			}
			in.Kernel = k.Name
			u.InstKernel[gi][ii] = ki
		}
	}
	return nil
}

// selectKernel names an instruction's kernel instance and its slot values;
// an instance that addresses the KV cache is the one for its types kv.
func selectKernel(g *ir.Graph, in *ir.Inst, kv kernels.KVTypes) (KernelInstance, error) {
	info, _ := in.Op.Info()
	abi, ok := kernels.Lookup(info.Kernel)
	if !ok {
		return KernelInstance{}, fmt.Errorf("no kernel family %q", info.Kernel)
	}
	name := kernels.KVInstanceName(abi, kv)
	if abi.Typed {
		o, ok := in.Operand(info.TypedBy)
		if !ok || o.Kind != ir.BufOperand {
			return KernelInstance{}, fmt.Errorf("no weight operand %q to type its kernel", info.TypedBy)
		}
		name = kernels.InstanceName(abi, g.Buffers[o.ID].Type)
	}
	spec := make([]uint32, len(abi.Spec))
	for i, p := range abi.Spec {
		spec[i] = encodeParam(p, in.Attrs[p.Name])
	}
	return KernelInstance{Name: name, Spec: spec}, nil
}
