package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/spf13/cobra"
	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/format/bundleset"
	"github.com/zrtdev/zrt/format/zrtp"
	"github.com/zrtdev/zrt/internal/clitest"
)

// sharedModel is ../shared/models/NAME beside the module root ($ZRT_SHARED
// overrides ../shared), skipping the test without it.
func sharedModel(t *testing.T, name string) string {
	t.Helper()
	shared := os.Getenv("ZRT_SHARED")
	if shared == "" {
		wd, _ := os.Getwd()
		shared = filepath.Join(wd, "..", "..", "..", "shared")
	}
	p := filepath.Join(shared, "models", name)
	if _, err := os.Stat(p); err != nil {
		t.Skipf("%s not present", p)
	}
	return p
}

// runGenerate runs zrt-run generate with args and returns its stdout.
func runGenerate(t *testing.T, args ...string) string {
	t.Helper()
	out, _, err := execGenerate(args...)
	if err != nil {
		t.Fatalf("generate %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// execGenerate runs `zrt-run generate args...` and returns both output
// streams and its error.
func execGenerate(args ...string) (stdout, stderr string, err error) {
	return execCommand(generateCmd(), args...)
}

// execCommand runs the subcommand c under a root command with args and
// returns both output streams and its error.
func execCommand(c *cobra.Command, args ...string) (stdout, stderr string, err error) {
	return clitest.Run("zrt-run", append([]string{c.Name()}, args...), c)
}

func inode(t *testing.T, p string) uint64 {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// TestRunPack: zrt-run on a pack of stories260K, a bundle's and a set's,
// generates the text it generates on the bundle, unpacking the member
// once and reusing it on the next run.
func TestRunPack(t *testing.T) {
	model := sharedModel(t, "stories260K.gguf")
	dir := t.TempDir()
	b, set := filepath.Join(dir, "b"), filepath.Join(dir, "set")
	ctx := context.Background()
	if err := compiler.Compile(ctx, model, b, compiler.Options{}); err != nil {
		t.Fatal(err)
	}
	x := &bundleset.Index{Producer: "test", Bundles: []bundleset.Member{
		{Target: "cpu", Dir: "cpu", Requires: bundleset.Requires{Tier: "cpu"}},
		{Target: "cuda:sm_90", Dir: "cuda_sm_90", Requires: bundleset.Requires{Tier: "cuda", CUDAComputeCapability: "9.0"}},
	}}
	// Each member is compiled beside the set and moved in: a write inside
	// the set's temporary would wait on the set's own lock.
	for _, m := range x.Bundles {
		if err := compiler.Compile(ctx, model, filepath.Join(dir, m.Dir), compiler.Options{Target: m.Target}); err != nil {
			t.Fatal(err)
		}
	}
	err := bundleset.Write(set, x, func(tmp string) error {
		for _, m := range x.Bundles {
			if err := os.Rename(filepath.Join(dir, m.Dir), m.Path(tmp)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	gen := []string{"-p", "Once upon a time", "-n", "32", "--tier", "cpu", "--threads", "1"}
	want := runGenerate(t, append([]string{b}, gen...)...)
	if len(want) < len("Once upon a time")+10 {
		t.Fatalf("the bundle generated too little: %q", want)
	}
	for _, src := range []string{b, set} {
		pack := src + zrtp.Ext
		if err := zrtp.Write(pack, src); err != nil {
			t.Fatal(err)
		}
		cache := filepath.Join(dir, "cache")
		args := append([]string{pack, "--unpack-dir", cache}, gen...)
		if got := runGenerate(t, args...); got != want {
			t.Fatalf("%s: generated %q, the bundle %q", pack, got, want)
		}
		r, err := zrtp.Open(pack)
		if err != nil {
			t.Fatal(err)
		}
		name := map[string]string{b: "bundle", set: "cpu"}[src]
		graph := filepath.Join(cache, r.Digest(), name, bundle.GraphFile)
		r.Close()
		before := inode(t, graph)
		if got := runGenerate(t, args...); got != want {
			t.Fatalf("%s, second run: generated %q, the bundle %q", pack, got, want)
		}
		if inode(t, graph) != before {
			t.Errorf("%s: the second run unpacked the member again", pack)
		}
	}
}
