package cuda

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/zrtdev/zrt/kernels"
)

// TestFamiliesCoverTargets holds the family table to the catalog and the
// target registry: every family a CUDA-tier target can lower onto (each
// catalog family no target lists as fused, and each fused family the
// target lists) has a number, numbers are distinct, and every family in
// the table is in the catalog. A new catalog family or a new fusion for
// cuda:sm_90 thus cannot go without a CUDA kernel unnoticed.
func TestFamiliesCoverTargets(t *testing.T) {
	ids := map[int]string{}
	implemented := map[string]bool{}
	for _, f := range Families() {
		if f.ID <= 0 {
			t.Errorf("family %s: number %d, want a positive one", f.Name, f.ID)
		}
		if prev, ok := ids[f.ID]; ok {
			t.Errorf("families %s and %s share number %d", prev, f.Name, f.ID)
		}
		ids[f.ID] = f.Name
		if implemented[f.Name] {
			t.Errorf("family %s listed twice", f.Name)
		}
		implemented[f.Name] = true
		if _, ok := kernels.Lookup(f.Name); !ok {
			t.Errorf("family %s is not in the kernel catalog", f.Name)
		}
	}
	fused := map[string]bool{}
	for _, tg := range kernels.Targets() {
		for _, fam := range tg.Fused {
			fused[fam] = true
		}
	}
	cudaTargets := 0
	for _, tg := range kernels.Targets() {
		if tg.Tier != kernels.TierCUDA {
			continue
		}
		cudaTargets++
		for _, fam := range kernels.Families() {
			if (!fused[fam] || tg.Fuses(fam)) && !implemented[fam] {
				t.Errorf("target %s lowers onto family %s, which has no CUDA family number in families.go", tg.Name, fam)
			}
		}
	}
	if cudaTargets == 0 {
		t.Error("no target of tier cuda in kernels.Targets")
	}
}

// TestInstances checks that every typed family is instantiated for every
// T-CUDA weight type, every KV-typed family for F16 and every layout of
// KVLayouts, and every plain family once, that each instance's
// source is in this directory, and that Shape knows its launch.
func TestInstances(t *testing.T) {
	insts, err := Instances()
	if err != nil {
		t.Fatal(err)
	}
	per := map[string]int{}
	for _, in := range insts {
		per[in.Family.Name]++
		if _, err := os.Stat(in.Entry() + ".cu"); err != nil {
			t.Errorf("instance %s: %v (run make generate)", in.Name, err)
		}
		abi, typ, err := kernels.SplitInstance(in.Name)
		if err != nil || abi != in.ABI || (abi.Typed && typ != in.Type) {
			t.Errorf("instance %s does not split back into its family and type: %v", in.Name, err)
		}
		if kv, err := kernels.InstanceKV(in.Name); err != nil || kv != in.KV {
			t.Errorf("instance %s addresses a %v cache, its row says %v (%v)", in.Name, kv, in.KV, err)
		}
		if e := in.Entry(); !regexp.MustCompile(`^[a-z][a-z0-9_]*$`).MatchString(e) {
			t.Errorf("instance %s: entry %q is no C identifier", in.Name, e)
		}
		// Values large enough for every family's shape arithmetic.
		vals := make([]uint32, 16)
		for i := range vals {
			vals[i] = 256
		}
		rows, spec := 4, vals
		if oneRowFamilies[in.Family.Name] {
			// One row, and rms_norm_qkv_rope_kv_write's neox (and what
			// follows the shapes) 0.
			rows, spec = 1, append(append([]uint32(nil), vals[:4]...), make([]uint32, 12)...)
		}
		if _, err := Shape(in.Name, vals, spec, rows, false); err != nil {
			t.Errorf("instance %s has no launch shape: %v", in.Name, err)
		}
	}
	for _, f := range Families() {
		abi, _ := kernels.Lookup(f.Name)
		want := 1
		switch {
		case abi.Typed:
			want = len(InstanceTypes())
		case abi.KVTyped:
			want = 1 + len(KVLayouts())
		}
		if per[f.Name] != want {
			t.Errorf("family %s: %d instances, want %d", f.Name, per[f.Name], want)
		}
	}
}

// TestFamilyRows checks that every row of the family table is complete:
// it has a launch geometry and a kernel source that exists and defines the
// instance's entry (NAME), and no source under family/ is left without a
// row. A family without its source would compile to a PTX with no entry,
// found only on a machine with nvcc.
func TestFamilyRows(t *testing.T) {
	used := map[string]bool{}
	for _, f := range Families() {
		if f.Launch == nil {
			t.Errorf("family %s has no launch geometry", f.Name)
		}
		src, err := os.ReadFile(f.File())
		if err != nil {
			t.Errorf("family %s: %v", f.Name, err)
			continue
		}
		used[f.File()] = true
		if !regexp.MustCompile(`extern "C" __global__ void __launch_bounds__\([^)]*\)\s+NAME\b`).Match(src) {
			t.Errorf("%s defines no entry NAME for family %s", f.File(), f.Name)
		}
	}
	files, _ := filepath.Glob("family/*.cuh")
	if len(files) == 0 {
		t.Fatal("no family/*.cuh")
	}
	for _, p := range files {
		if !used[p] {
			t.Errorf("%s is no family's source (families.go)", p)
		}
	}
}

// TestSourcesUseFamilyNames checks the CUDA sources' use of FAMILY: no
// source tests it against a bare number, every FAMILY_ name is a family,
// and only a source that families share tests FAMILY at all (one .cuh
// per family replaced the #if FAMILY blocks).
func TestSourcesUseFamilyNames(t *testing.T) {
	macros := map[string]bool{}
	shared := map[string]bool{}
	for _, f := range Families() {
		macros[f.Macro()] = true
		if f.Source != "" {
			shared[f.File()] = true
		}
	}
	files, _ := filepath.Glob("*.cuh")
	more, _ := filepath.Glob("family/*.cuh")
	for _, p := range append(files, more...) {
		if p == "families.cuh" {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		src := string(b)
		if m := regexp.MustCompile(`FAMILY\s*==\s*[0-9]`).FindString(src); m != "" {
			t.Errorf("%s tests a family by number (%q): use families.cuh's names", p, m)
		}
		code := regexp.MustCompile(`//.*`).ReplaceAllString(src, "")
		if regexp.MustCompile(`\bFAMILY\b`).MatchString(code) && !shared[p] {
			t.Errorf("%s tests FAMILY, but no two families share it: a family's kernels go in its own family/*.cuh", p)
		}
		for _, m := range regexp.MustCompile(`FAMILY_[A-Z0-9_]+`).FindAllString(src, -1) {
			if !macros[m] {
				t.Errorf("%s names %s, which is no family", p, m)
				macros[m] = true // once
			}
		}
	}
}

// TestPeerLaunch holds PeerBlocks and PeerThreads to peer.cuh's
// PEER_BLOCKS and PEER_THREADS: the one-shot collectives' flags have room
// for that many blocks, and every launch must run exactly that many.
func TestPeerLaunch(t *testing.T) {
	src, err := os.ReadFile("peer.cuh")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]uint32{"PEER_BLOCKS": PeerBlocks, "PEER_THREADS": PeerThreads} {
		m := regexp.MustCompile(`(?m)^#define ` + name + ` (\d+)$`).FindSubmatch(src)
		if m == nil || string(m[1]) != fmt.Sprint(want) {
			t.Errorf("peer.cuh's %s is %q, kernels/cuda says %d", name, m, want)
		}
	}
	l, err := peer(Dispatch{Family: "all_reduce_sum", Rows: 64})
	if err != nil || l.Grid != [3]uint32{PeerBlocks, 1, 1} || l.Block != [3]uint32{PeerThreads, 1, 1} {
		t.Errorf("peer launch %+v, %v", l, err)
	}
	// A large all-reduce spreads: a block per pass's worth
	// (PeerThreads·ALL_REDUCE_U floats), PeerBlocks at least, a block a
	// multiprocessor at most.
	src, err = os.ReadFile("family/all_reduce_sum.cuh")
	if err != nil {
		t.Fatal(err)
	}
	if m := regexp.MustCompile(`(?m)^#define ALL_REDUCE_U (\d+)$`).FindSubmatch(src); m == nil || string(m[1]) != fmt.Sprint(peerReduceFloats/PeerThreads) {
		t.Errorf("all_reduce_sum.cuh's ALL_REDUCE_U is %q, kernels/cuda sums %d floats a block a pass", m, peerReduceFloats)
	}
	for _, c := range []struct{ rows, cols, sms, want int }{
		{1, 4096, 132, PeerBlocks}, {16, 4096, 132, PeerBlocks}, {64, 4096, 132, 64}, {64, 8192, 132, 128},
		{512, 8192, 132, 132}, {64, 4096, 8, PeerBlocks},
	} {
		if l := PeerReduceLaunch(c.rows, c.cols, c.sms); l.Grid != [3]uint32{uint32(c.want), 1, 1} || l.Block != [3]uint32{PeerThreads, 1, 1} {
			t.Errorf("PeerReduceLaunch(%d, %d, %d) = %+v, want %d blocks", c.rows, c.cols, c.sms, l, c.want)
		}
	}
}
