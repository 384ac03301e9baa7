package compiler

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/zrtdev/zrt/compiler/arch"
	"github.com/zrtdev/zrt/compiler/ir"
	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/format/support"
	"github.com/zrtdev/zrt/format/zrt"
	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/kernels/amd"
	amdobj "github.com/zrtdev/zrt/kernels/amd/obj"
	"github.com/zrtdev/zrt/kernels/cuda"
	"github.com/zrtdev/zrt/kernels/cuda/ptx"
	"github.com/zrtdev/zrt/kernels/quant"
	"github.com/zrtdev/zrt/passes"
)

// tierKernels says, per tier kind, where a target's kernel code comes from,
// which weight types those kernels compute with, where not every
// catalog family has one, which families they implement, and the KV
// cache element types their attention addresses. The targets themselves
// are kernels.Targets; a target whose tier kind is missing here cannot be
// compiled for.
var tierKernels = map[kernels.TierKind]struct {
	templates   func(t kernels.Target, opt Options) passes.Templates
	weightTypes func(t kernels.Target) []ggml.Type
	families    func() []string // nil: every catalog family
	kvTypes     []ggml.Type
	// kvLayouts, where not nil, lists the caches other than F16 the
	// target's kernels address, with their rotations (T-CUDA instantiates
	// whole layouts: q8_0 K with q8_0 V); nil: any K and V of kvTypes.
	kvLayouts func(t kernels.Target) []kernels.KVTypes
}{
	kernels.TierCPU: {func(kernels.Target, Options) passes.Templates { return cpuTemplate },
		func(kernels.Target) []ggml.Type { return quant.WeightTypes() }, nil, []ggml.Type{ggml.F16, ggml.Q8_0, kernels.FP8E4M3}, nil},
	kernels.TierCUDA: {func(t kernels.Target, opt Options) passes.Templates { return cudaTemplate(t.Code, opt.PTXDir) },
		func(t kernels.Target) []ggml.Type { return ptx.WeightTypes(ptx.TargetArch(t.Name)) }, nil, []ggml.Type{ggml.F16, ggml.Q8_0, kernels.FP8E4M3},
		func(t kernels.Target) []kernels.KVTypes { return ptx.KVLayouts(ptx.TargetArch(t.Name)) }},
	kernels.TierAMD: {func(t kernels.Target, _ Options) passes.Templates { return amdTemplate(t.Code) },
		func(kernels.Target) []ggml.Type { return amdobj.WeightTypes(amd.Targets[0]) }, amd.Families, []ggml.Type{ggml.F16}, nil},
}

// checkKVTypes refuses, as unsupported, a KV cache element type
// (cache_type_k, cache_type_v) that the target's attention kernels cannot
// address, naming the option: a bundle never runs with its cache read
// in another layout. With ptxDir (Options.PTXDir) a cuda target's
// layouts are all of T-CUDA's: the PTX comes from that directory, and a
// missing file is the template's error.
func checkKVTypes(m *arch.Model, target, ptxDir string) error {
	t, ok := kernels.LookupTarget(target)
	k, has := tierKernels[t.Tier]
	if !ok || !has {
		return nil
	}
	kv := m.KV
	if kv == (kernels.KVTypes{}) {
		kv = kernels.F16KV
	}
	for _, c := range []struct {
		key string
		t   ggml.Type
	}{{"cache_type_k", kv.K}, {"cache_type_v", kv.V}} {
		if !slices.Contains(k.kvTypes, c.t) {
			names := make([]string, len(k.kvTypes))
			for i, t := range k.kvTypes {
				names[i] = kernels.KVTypeName(t)
			}
			detail := fmt.Sprintf("target %s's attention kernels address %s caches only; set %s = \"f16\" or build for cpu", target, strings.Join(names, ", "), c.key)
			return &support.Error{What: "KV cache type", Value: kernels.KVTypeName(c.t), Where: support.Key(c.key), Detail: detail}
		}
		// FP8 KV is for GPUs that have FP8 (Ada and Hopper on): the
		// kernels code E4M3 in integer operations, which any GPU runs,
		// but where FP8 is not the hardware's the cache is only q8_0's
		// bytes at a higher cost.
		if major, minor, ok := t.ComputeCapability(); c.t == kernels.FP8E4M3 && ok && major*10+minor < 89 {
			detail := fmt.Sprintf("T-CUDA lays out an FP8 cache from compute capability 8.9 (cuda:sm_89, cuda:sm_90); %s is %d.%d, which has no FP8; set %s = \"q8_0\" (the same bytes) or \"f16\", or build for cuda:sm_89 or cpu",
				target, major, minor, c.key)
			return &support.Error{What: "KV cache type", Value: kernels.KVTypeName(c.t), Where: support.Key(c.key), Detail: detail}
		}
	}
	layouts := k.kvLayouts
	if t.Tier == kernels.TierCUDA && ptxDir != "" {
		layouts = func(kernels.Target) []kernels.KVTypes { return cuda.KVLayouts() }
	}
	if layouts == nil || kv.IsF16() || slices.Contains(layouts(t), kv) {
		return nil
	}
	names := []string{kernels.F16KV.String()}
	for _, l := range layouts(t) {
		names = append(names, l.String())
	}
	detail := fmt.Sprintf("target %s's kernels address the caches %s only; set cache_type_k and cache_type_v alike (q8_0 K with q8_0 V), or build for cpu", target, strings.Join(names, "; "))
	if t.Tier == kernels.TierCUDA && slices.Contains(cuda.KVLayouts(), kv) {
		detail = fmt.Sprintf("this zrtc has no %s PTX for a %s cache: run kernels/cuda/build_ptx.sh on a machine with nvcc, then go run ./kernels/cuda/gen -pack",
			ptx.TargetArch(target), kv)
	}
	return &support.Error{What: "KV cache", Value: kv.String(), Where: support.Key("cache_type_k, cache_type_v"), Detail: detail}
}

// checkKernelFamilies refuses, as unsupported, the first operation of the
// model whose kernel family the target has no kernels for (the AMD
// targets cover the llama lineage's families so far): a valid model this
// target cannot run yet, said before any pass runs.
func checkKernelFamilies(m *arch.Model, target string) error {
	t, ok := kernels.LookupTarget(target)
	k, has := tierKernels[t.Tier]
	if !ok || !has || k.families == nil {
		return nil
	}
	fams := k.families()
	for _, g := range m.Graphs {
		for _, in := range g.Insts {
			info, _ := in.Op.Info()
			if !slices.Contains(fams, info.Kernel) {
				return &support.Error{What: "operation", Value: in.Op.String(), Where: support.In("architecture " + m.Hparams.Arch),
					Detail: fmt.Sprintf("target %s has no %s kernel yet", target, info.Kernel)}
			}
		}
	}
	return nil
}

// weightTypes returns the weight types a target computes with (none for a
// target zrtc cannot compile for).
func weightTypes(target string) []ggml.Type {
	t, ok := kernels.LookupTarget(target)
	if k, has := tierKernels[t.Tier]; ok && has {
		return k.weightTypes(t)
	}
	return nil
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

// lacks is the Unit's Lacks for a target: a CUDA target's families with
// no PTX in this zrtc's archive, or in ptxDir where that is given (so
// that a PTX directory without a fused family's files builds the bundle
// of before that family, for A/B runs); with the megakernel, also the
// families the persistent kernel does not serve, so that its decode
// variants still run on it. nil for the other tiers.
func lacks(target, ptxDir string, megakernel bool) func(family string) bool {
	t, ok := kernels.LookupTarget(target)
	if !ok || t.Tier != kernels.TierCUDA {
		return nil
	}
	arch := ptx.TargetArch(target)
	return func(family string) bool {
		switch {
		case cuda.Collective(family): // without PTX it runs through NCCL (cudaTemplate)
			return false
		case megakernel && !cuda.MegakernelFamily(family):
			return true
		case ptxDir != "":
			return !ptx.DirHas(ptxDir, arch, family)
		}
		return !ptx.Has(arch, family)
	}
}

// cudaTemplate: the code is the instance's PTX for the target's
// architecture (embedded in zrtc from kernels/cuda/ptx's archive),
// NUL-terminated for cuModuleLoadData. The tier passes
// the slot values as the kernel's trailing parameters, so one PTX serves
// every shape and the blob is specialized, like every target's, by
// patching slots. A collective's blob (kernels/cuda.Collective) holds
// its one-shot kernel's PTX where the archive has it, else only its name
// after NCCLBlobPrefix: the tier then runs it through NCCL.
func cudaTemplate(target zrt.Target, ptxDir string) passes.Templates {
	return func(instance string) (*zrt.Blob, error) {
		abi, _, err := kernels.SplitInstance(instance)
		if err != nil {
			return nil, err
		}
		src, err := ptx.Source(ptx.TargetArch(target.String()), instance, ptxDir)
		if err != nil && cuda.Collective(abi.Name) {
			// No one-shot kernel in this zrtc's PTX: the tier runs the
			// collective through NCCL, which the blob names.
			return template(instance, target, []byte(cuda.NCCLBlobPrefix+instance), 32, 1)
		}
		if err != nil {
			return nil, err
		}
		return template(instance, target, append([]byte(nil), src...), 32, cuda.BlockSize(abi.Name))
	}
}

// megakernelBlob is T-CUDA's persistent decode kernel for target (a
// build with the config's megakernel = true): its PTX for the target's
// architecture, from ptxDir as every instance's is, else from this
// zrtc's archive, NUL-terminated. The bundle carries it as one more
// kernel, which no dispatch names: the runtime loads every PTX it runs
// from the bundle, never from an archive of its own.
func megakernelBlob(target string, ptxDir string) (*zrt.Blob, error) {
	t, err := zrt.ParseTarget(target)
	if err != nil {
		return nil, err
	}
	src, err := ptx.Source(ptx.TargetArch(target), cuda.MegakernelModule, ptxDir)
	if err != nil {
		return nil, fmt.Errorf("megakernel = true: %w", err)
	}
	code := append(append([]byte(nil), src...), 0)
	for len(code)%4 != 0 {
		code = append(code, 0)
	}
	return &zrt.Blob{Name: cuda.MegakernelModule, Code: code, Header: zrt.Header{ABIVersion: zrt.ABIVersion, Target: t,
		SubgroupSize: 32, Workgroup: [3]uint32{cuda.MegakernelThreads, 1, 1}}}, nil
}

// amdTemplate: the code is the instance's HSA code object v5 for the
// target's processor (embedded in zrtc from kernels/amd/obj), followed by
// the slot placeholders. The header's workgroup size, wavefront size, LDS
// bytes and VGPR and SGPR counts are the code object's own (its kernel
// descriptor and metadata note, which ParseCodeObject holds to each
// other), never typed here. The kernel's arguments are the dispatch's
// user-data dwords followed by the slot values (kernels/amd): the tier
// copies the patched slots after the user data in the kernarg segment.
func amdTemplate(target zrt.Target) passes.Templates {
	gfx := strings.TrimPrefix(target.String(), "amd:")
	return func(instance string) (*zrt.Blob, error) {
		code, err := amdobj.Source(gfx, instance)
		if err != nil {
			return nil, err
		}
		k, err := amdKernel(code, gfx, instance)
		if err != nil {
			return nil, err
		}
		b, err := template(instance, target, append([]byte(nil), code...), k.WavefrontSize, k.ReqdWorkgroupSize[0])
		if err != nil {
			return nil, err
		}
		b.Header.Workgroup = k.ReqdWorkgroupSize
		b.Header.LDSBytes = k.GroupSegmentFixedSize
		b.Header.VGPRCount, b.Header.SGPRCount = k.VGPRCount, k.SGPRCount
		return b, nil
	}
}

// amdKernel parses an instance's code object and returns its kernel,
// checking that the object is for processor gfx.
func amdKernel(code []byte, gfx, instance string) (*amd.Kernel, error) {
	co, err := amd.ParseCodeObject(code)
	if err != nil {
		return nil, fmt.Errorf("kernel %s: %w", instance, err)
	}
	if co.Processor() != gfx {
		return nil, fmt.Errorf("kernel %s: code object for %s (%s), want %s", instance, co.Processor(), co.Target, gfx)
	}
	k, ok := co.Kernel(amd.Entry(instance))
	if !ok || len(co.Kernels) != 1 {
		return nil, fmt.Errorf("kernel %s: code object lacks the kernel %s", instance, amd.Entry(instance))
	}
	if k.ReqdWorkgroupSize[0] == 0 || k.ReqdWorkgroupSize[1] != 1 || k.ReqdWorkgroupSize[2] != 1 {
		return nil, fmt.Errorf("kernel %s: required workgroup size %v", instance, k.ReqdWorkgroupSize)
	}
	return k, nil
}

// Targets lists the targets this zrtc compiles for.
func Targets() []string {
	var out []string
	for _, t := range kernels.Targets() {
		if _, ok := tierKernels[t.Tier]; ok {
			out = append(out, t.Name)
		}
	}
	return out
}

// UnsupportedTarget is the error for a target this zrtc does not compile
// for: unsupported, not malformed, since a GPU zrt has no kernels for yet
// (cuda:sm_75) is a fair thing to ask for.
func UnsupportedTarget(target string) error {
	return &support.Error{What: "target", Value: strconv.Quote(target), Detail: "zrtc compiles for " + strings.Join(Targets(), ", ")}
}

// templatesFor returns a target's templates.
func templatesFor(target string, opt Options) (passes.Templates, error) {
	t, ok := kernels.LookupTarget(target)
	k, has := tierKernels[t.Tier]
	if !ok || !has {
		return nil, UnsupportedTarget(target)
	}
	return k.templates(t, opt), nil
}

// checkWeightTypes refuses, as unsupported, the first weight whose tensor
// type the target's kernels cannot compute with. The GGUF reader walks
// every ggml type; this is where a build learns it cannot use one.
func checkWeightTypes(m *arch.Model, target string) error {
	types := weightTypes(target)
	if t, ok := kernels.LookupTarget(target); ok && len(types) == 0 {
		detail := "this zrtc has no kernels for it"
		if t.Tier == kernels.TierCUDA {
			detail = fmt.Sprintf("this zrtc has no %s PTX (its archive has %s): run kernels/cuda/build_ptx.sh on a machine with nvcc, then go run ./kernels/cuda/gen -pack",
				ptx.TargetArch(target), strings.Join(ptx.Embedded().Arches(), ", "))
		}
		return &support.Error{What: "target", Value: target, Detail: detail}
	}
	for _, g := range m.Graphs {
		for _, b := range g.Buffers {
			if b.Class != ir.Weight || slices.Contains(types, b.Type) {
				continue
			}
			detail := fmt.Sprintf("target %s computes %s", target, typeList(types))
			if ti, _ := b.Type.Info(); ti.Removed != "" {
				detail = "ggml has removed this layout; " + ti.Removed
			}
			return &support.Error{What: "tensor type", Value: b.Type.Describe(), Where: support.In(b.Tensor), Detail: detail}
		}
	}
	return nil
}

// RefusesWeightType reports whether a build for target refuses weights of
// type t (for listings such as zrtc inspect). Unknown targets refuse
// nothing here; Load reports them.
func RefusesWeightType(target string, t ggml.Type) bool {
	types := weightTypes(target)
	return types != nil && !slices.Contains(types, t)
}

func typeList(types []ggml.Type) string {
	names := make([]string, len(types))
	for i, t := range types {
		names[i] = t.String()
	}
	return strings.Join(names, ", ")
}
