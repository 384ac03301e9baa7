package main

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/format/bundleset"
	"github.com/zrtdev/zrt/kernels/cuda/ptx"
)

// TestBuildAmpere builds for cuda:sm_80, alone and in a set beside
// cuda:sm_90, whose index asks for compute capability 8.0 and 9.0. Until
// the PTX archive holds sm_80 entries (build_ptx.sh on a machine with
// nvcc, then gen -pack), the build must fail saying so, and the rest is
// skipped.
func TestBuildAmpere(t *testing.T) {
	t.Setenv(cacheEnv, "")
	model := oldModel(t)
	dir := t.TempDir()
	at := func(n string) string { return filepath.Join(dir, n) }
	_, stderr, err := run(t, "build", model, "-q", "--no-cache", "--target", "cuda:sm_80", "-o", at("ampere"))
	if !slices.Contains(ptx.Embedded().Arches(), "sm_80") {
		if err == nil || !strings.Contains(err.Error()+stderr, "no sm_80 PTX") {
			t.Fatalf("cuda:sm_80 without sm_80 PTX: %v\n%s\nwant an error saying there is no sm_80 PTX", err, stderr)
		}
		t.Skip("this zrtc's PTX archive has no sm_80 entries yet: run kernels/cuda/build_ptx.sh on a machine with nvcc, then go run ./kernels/cuda/gen -dir kernels/cuda -pack OUT")
	}
	if err != nil {
		t.Fatal(err, stderr)
	}
	b, err := bundle.Open(at("ampere"), false)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.Graph.Ident.Target; got != "cuda:sm_80" {
		t.Errorf("bundle target %s", got)
	}
	for _, k := range b.Blobs {
		if !strings.Contains(string(k.Code), "\n.target sm_80\n") {
			t.Errorf("kernel %s is not sm_80 PTX", k.Name)
			break
		}
	}
	b.Close()
	s := buildJSON(t, model, "--no-cache", "--target", "cuda:sm_90,cuda:sm_89,cuda:sm_80", "-o", at("set"))
	if !s.Set || len(s.Outputs) != 3 {
		t.Fatalf("set summary: %+v", s)
	}
	x, err := bundleset.Read(at("set"))
	if err != nil {
		t.Fatal(err)
	}
	// Ada's bundle requires 8.9 but carries the compute_80 PTX.
	if m, ok := x.Member("cuda:sm_89"); ok {
		ada, err := bundle.Open(m.Path(at("set")), false)
		if err != nil {
			t.Fatal(err)
		}
		if len(ada.Blobs) == 0 || !strings.Contains(string(ada.Blobs[0].Code), "\n.target sm_80\n") {
			t.Errorf("the cuda:sm_89 bundle does not carry sm_80 PTX")
		}
		ada.Close()
	}
	for target, cc := range map[string]string{"cuda:sm_80": "8.0", "cuda:sm_89": "8.9", "cuda:sm_90": "9.0"} {
		m, ok := x.Member(target)
		if !ok || m.Requires != (bundleset.Requires{Tier: "cuda", CUDAComputeCapability: cc}) {
			t.Errorf("member %s: %+v (ok %v), want compute capability %s", target, m, ok, cc)
		}
	}
}
