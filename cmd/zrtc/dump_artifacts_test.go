package main

import (
	"fmt"
	"github.com/zrtdev/zrt/compiler/dump"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/asm/pm4"
	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/format/zrt"
	"github.com/zrtdev/zrt/internal/clitest"
	"github.com/zrtdev/zrt/internal/testmodel"
)

// zrtcArtifacts runs the command line in-process with the artifact dumps
// and verify registered, returning stdout and stderr.
func zrtcArtifacts(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	return clitest.Run("zrtc", args, buildCmd(), withArtifactDumps(dumpCmd()), verifyCmd())
}

func builtBundle(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "b")
	if _, _, err := zrtcArtifacts(t, "build", testmodel.Tiny(t), "-q", "--slots", "1", "-o", dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestDumpArtifacts(t *testing.T) {
	dir := builtBundle(t)
	g, _, err := bundle.ReadGraph(dir)
	if err != nil {
		t.Fatal(err)
	}

	// dump pkt: one listing per variant, each assembling back to the
	// bundle's stream with the bundle's own symbols.
	out, _, err := zrtcArtifacts(t, "dump", "pkt", dir)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out, "; relocs:\n"); n != len(g.Variants) {
		t.Errorf("dump pkt printed %d listings for %d variants", n, len(g.Variants))
	}
	for i, v := range g.Variants {
		one, _, err := zrtcArtifacts(t, "dump", "pkt", dir, "--variant", strconv.Itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(one, "; variant ") || !strings.Contains(one, "COMPUTE_PGM_LO=@k0:") {
			t.Errorf("variant %d listing:\n%.300s", i, one)
		}
		words, relocs, err := pm4.Assemble(one, dump.Symbols(g))
		if err != nil || !slices.Equal(words, v.Words) || !slices.Equal(relocs, v.Relocs) {
			t.Errorf("variant %d listing does not assemble back: %v", i, err)
		}
	}
	// prefill.s1.r128, decode.s1.r1 and its draft, draft.s1.r1.
	if _, _, err := zrtcArtifacts(t, "dump", "pkt", dir, "--variant", "9"); err == nil || !strings.Contains(err.Error(), "has 3 variants") {
		t.Errorf("out-of-range variant: %v", err)
	}

	// dump graph: every section, region and kernel by name.
	out, _, err = zrtcArtifacts(t, "dump", "graph", dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"graph file version 2.1", "STRM", "RELO", "source_sha256", "NEmbd", "fence", "BAR", g.Kernels[0].File, "decode.s1.r1"} {
		if !strings.Contains(out, want) {
			t.Errorf("dump graph lacks %q", want)
		}
	}

	// dump zrt: header and slots, typed by the catalog.
	blobs, _ := filepath.Glob(filepath.Join(dir, bundle.KernelDir, "*rms_norm*.zrt"))
	if len(blobs) == 0 {
		t.Fatal("no rms_norm blob")
	}
	out, _, err = zrtcArtifacts(t, "dump", "zrt", blobs[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{fmt.Sprintf("abi_version       %d", zrt.ABIVersion), "target            cpu (0xff)", "eps", "(f32)", "patched"} {
		if !strings.Contains(out, want) {
			t.Errorf("dump zrt lacks %q:\n%s", want, out)
		}
	}

	// The stage dumps still work beside the artifact dumps.
	if _, _, err := zrtcArtifacts(t, "dump", "memplan", testmodel.Tiny(t)); err != nil {
		t.Errorf("dump memplan: %v", err)
	}
}

func TestVerify(t *testing.T) {
	dir := builtBundle(t)
	out, info, err := zrtcArtifacts(t, "verify", dir)
	if err != nil || out != "ok\n" || !strings.Contains(info, "weights hash verified") {
		t.Fatalf("verify: %q %q %v", out, info, err)
	}

	// A graph file that is well formed but whose stream lost its fence:
	// the files all check out, the stream does not.
	g, _, err := bundle.ReadGraph(dir)
	if err != nil {
		t.Fatal(err)
	}
	v := &g.Variants[0]
	v.Words = v.Words[:len(v.Words)-8]
	v.Relocs = v.Relocs[:len(v.Relocs)-2]
	if err := os.WriteFile(filepath.Join(dir, bundle.GraphFile), g.Encode(), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, _, err := zrtcArtifacts(t, "verify", dir); err == nil || out != "" || !strings.Contains(err.Error(), "without a fence") {
		t.Errorf("stream without a fence: %q %v", out, err)
	}
	// The dumps still print what is there.
	if out, _, err := zrtcArtifacts(t, "dump", "pkt", dir, "--variant", "0"); err != nil || !strings.Contains(out, "; relocs:") {
		t.Errorf("dump of the broken stream: %v", err)
	}

	// A flipped byte in a kernel blob is caught by the file checks.
	dir2 := builtBundle(t)
	blobs, _ := filepath.Glob(filepath.Join(dir2, bundle.KernelDir, "*.zrt"))
	raw, _ := os.ReadFile(blobs[0])
	raw[len(raw)-1] ^= 1
	os.WriteFile(blobs[0], raw, 0o644)
	if _, _, err := zrtcArtifacts(t, "verify", dir2); err == nil || !strings.Contains(err.Error(), "does not match the hash") {
		t.Errorf("corrupt blob: %v", err)
	}
}

// TestVerifyEditedHparams: a graph file whose hyperparameters were edited
// (checksums valid, since Encode recomputes them) passes no longer: verify
// names the hyperparameter and the weight or kernel that disagrees.
func TestVerifyEditedHparams(t *testing.T) {
	good := builtBundle(t)
	for _, c := range testmodel.HparamEdits() {
		t.Run(c.Field, func(t *testing.T) {
			out, _, err := zrtcArtifacts(t, "verify", testmodel.Edited(t, good, c.Edit))
			if err == nil || out != "" || !strings.Contains(err.Error(), c.Want) {
				t.Errorf("verify of an edited %s: %q %v (want an error containing %q)", c.Field, out, err, c.Want)
			}
		})
	}
}
