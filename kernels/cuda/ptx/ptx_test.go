package ptx

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/kernels/cuda"
)

// sourceHash is build_ptx.sh's hash: the .cu followed by every .cuh in
// name order.
func sourceHash(t *testing.T, cu string) string {
	h := sha256.New()
	b, err := os.ReadFile(cu)
	if err != nil {
		t.Fatal(err)
	}
	h.Write(b)
	hs, _ := filepath.Glob(filepath.Join(filepath.Dir(cu), "*.cuh"))
	sort.Strings(hs)
	for _, p := range hs {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// TestPTXFresh fails when a committed PTX was built from sources other
// than the ones in the tree, or a .cu has no PTX: run `make ptx` on a
// machine with nvcc and commit kernels/cuda/ptx.
func TestPTXFresh(t *testing.T) {
	recorded := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(Sources()))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		hash, name, ok := strings.Cut(line, "  ")
		if !ok {
			t.Fatalf("SOURCES: malformed line %q", line)
		}
		recorded[name] = hash
	}
	cus, _ := filepath.Glob(filepath.Join("..", "*.cu"))
	if len(cus) == 0 {
		t.Fatal("no kernels/cuda/*.cu")
	}
	for _, cu := range cus {
		name := filepath.Base(cu)
		want, ok := recorded[name]
		if !ok {
			t.Errorf("%s has no PTX: run make ptx", name)
			continue
		}
		if got := sourceHash(t, cu); got != want {
			t.Errorf("ptx/%s.ptx is stale against %s and the .cuh headers: run make ptx", strings.TrimSuffix(name, ".cu"), name)
		}
		entry := strings.TrimSuffix(name, ".cu")
		p, err := files.ReadFile(entry + ".ptx")
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if !bytes.Contains(p, []byte(".entry "+entry+"(")) {
			t.Errorf("%s.ptx lacks the entry %s", entry, entry)
		}
		delete(recorded, name)
	}
	for name := range recorded {
		t.Errorf("SOURCES lists %s, which is not in kernels/cuda", name)
	}
}

func TestSource(t *testing.T) {
	for _, inst := range []string{"matmul.q4_k", "flash_attn", "lm_head.q8_0", "rms_norm"} {
		if _, err := Source(inst, ""); err != nil {
			t.Error(err)
		}
	}
	if _, err := Source("matmul.bogus", ""); err == nil {
		t.Error("Source of a missing instance succeeded")
	}
}

// TestEveryInstanceEmbedded holds the embedded PTX to T-CUDA's family
// table: every instance it lists (every typed family for every T-CUDA
// weight type) has a PTX here with its entry point, so a model of any of
// those types can be built for T-CUDA.
func TestEveryInstanceEmbedded(t *testing.T) {
	insts, err := cuda.Instances()
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range insts {
		p, err := Source(in.Name, "")
		if err != nil {
			t.Error(err)
			continue
		}
		if !bytes.Contains(p, []byte(".entry "+in.Entry()+"(")) {
			t.Errorf("%s.ptx lacks the entry %s", in.Entry(), in.Entry())
		}
	}
	got, want := WeightTypes(), cuda.InstanceTypes()
	if len(got) != len(want) {
		t.Fatalf("WeightTypes() = %v, want cuda.InstanceTypes() %v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("WeightTypes() = %v, want cuda.InstanceTypes() %v", got, want)
		}
	}
}
