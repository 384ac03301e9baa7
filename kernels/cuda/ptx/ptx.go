// Package ptx holds T-CUDA's kernels as PTX, one per catalog instance and
// architecture, in one zstd archive (ptx.tar.zst, Pack's format) with its
// manifest beside it in text (SOURCES, Manifest): built by
// kernels/cuda/build_ptx.sh on a machine with nvcc and packed by
// kernels/cuda/gen -pack, both committed. Only zrtc imports it: the PTX
// travels to the runtime inside the bundle's kernel blobs.
package ptx

import (
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/kernels/cuda"
)

//go:embed ptx.tar.zst
var packed []byte

// embedded is this zrtc's archive; it unpacks on first use.
var embedded = NewArchive(packed)

// Embedded returns the archive compiled into this zrtc.
func Embedded() *Archive { return embedded }

// TargetArch is the archive directory of a CUDA target's PTX: cuda:sm_80 →
// sm_80, and cuda:sm_86 and cuda:sm_89, which carry compute_80 PTX, sm_80
// too. A name that is no registered target maps to its own spelling, so
// the archive's error names it.
func TargetArch(target string) string {
	if t, ok := kernels.LookupTarget(target); ok && t.PTX != "" {
		return t.PTX
	}
	return strings.TrimPrefix(target, "cuda:")
}

// File is the archive path of an instance's PTX for arch:
// sm_90/matmul_q4_k.ptx.
func File(arch, instance string) string { return arch + "/" + cuda.Entry(instance) + ".ptx" }

// Source returns the PTX of a catalog instance (matmul.q4_k) for arch
// (sm_90). Where dir is not empty, the PTX comes from that directory
// instead (dir/sm_90/matmul_q4_k.ptx): a kernel developer on a machine with
// nvcc tries new kernels with the same zrtc binary, without re-embedding
// (build_ptx.sh DIR writes one; zrtc takes it from $ZRT_PTX_DIR).
func Source(arch, instance, dir string) ([]byte, error) {
	name := File(arch, instance)
	if dir != "" {
		return os.ReadFile(filepath.Join(dir, filepath.FromSlash(name)))
	}
	files, err := embedded.Files()
	if err != nil {
		return nil, fmt.Errorf("cuda: this zrtc's PTX archive: %w", err)
	}
	b, ok := files[name]
	if !ok {
		if !hasArch(files, arch) {
			return nil, fmt.Errorf("cuda: this zrtc has no PTX for %s (it has %s): run kernels/cuda/build_ptx.sh on a machine with nvcc, then go run ./kernels/cuda/gen -pack", arch, strings.Join(embedded.Arches(), ", "))
		}
		return nil, fmt.Errorf("cuda: no %s PTX for kernel %s in this zrtc (regenerate with make generate and make ptx)", arch, instance)
	}
	return b, nil
}

func hasArch(files map[string][]byte, arch string) bool {
	for n := range files {
		if strings.HasPrefix(n, arch+"/") {
			return true
		}
	}
	return false
}

// WeightTypes lists, in id order, the weight types for which this zrtc
// has every typed kernel family's PTX for arch: the types a model may use
// to be built for that target.
func WeightTypes(arch string) []ggml.Type {
	files, err := embedded.Files()
	if err != nil {
		return nil
	}
	var fams []string
	for _, f := range kernels.Families() {
		if has(files, arch, f) {
			fams = append(fams, f)
		}
	}
	return kernels.CompleteTypes(fams, func(instance string) bool {
		_, ok := files[File(arch, instance)]
		return ok
	})
}

// Has reports whether this zrtc's archive holds any PTX of a kernel
// family for arch. A family it holds none of is one added after the
// archive was built (its PTX comes with the next `make ptx`): it holds
// no weight type back (WeightTypes), and zrtc forms no fused op of it
// (compiler's Lacks), so such a zrtc still builds what it built before.
func Has(arch, family string) bool {
	files, err := embedded.Files()
	return err == nil && has(files, arch, family)
}

// DirHas is Has for a directory of PTX in the archive's layout
// (build_ptx.sh's output, $ZRT_PTX_DIR).
func DirHas(dir, arch, family string) bool {
	return anyInstance(family, func(instance string) bool {
		_, err := os.Stat(filepath.Join(dir, filepath.FromSlash(File(arch, instance))))
		return err == nil
	})
}

func has(files map[string][]byte, arch, family string) bool {
	return anyInstance(family, func(instance string) bool {
		_, ok := files[File(arch, instance)]
		return ok
	})
}

// anyInstance reports whether present holds for one of family's instances.
func anyInstance(family string, present func(instance string) bool) bool {
	abi, ok := kernels.Lookup(family)
	if !ok {
		return false
	}
	if !abi.Typed {
		return present(family)
	}
	for _, t := range ggml.Types() {
		if present(kernels.InstanceName(abi, t)) {
			return true
		}
	}
	return false
}

// KVLayouts lists the quantized KV cache layouts (of T-CUDA's
// cuda.KVLayouts) for which this zrtc has the PTX of every instance for
// arch: the caches a model may use to be built for that target.
func KVLayouts(arch string) []kernels.KVTypes {
	files, err := embedded.Files()
	if err != nil {
		return nil
	}
	insts, err := cuda.Instances()
	if err != nil {
		return nil
	}
	var out []kernels.KVTypes
	for _, kv := range cuda.KVLayouts() {
		complete := true
		for _, in := range insts {
			if _, ok := files[File(arch, in.Name)]; in.KV == kv && !ok {
				complete = false
				break
			}
		}
		if complete {
			out = append(out, kv)
		}
	}
	return out
}
