package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/kernels/cuda/ptx"
)

// fakeBuild writes, under out, what build_ptx.sh would for arch: the
// committed sm_90 PTX relabelled as arch, and a BUILD with the tree's
// source hashes (edit changes one of them).
func fakeBuild(t *testing.T, out, arch string, edit func(files map[string][]byte, hashes map[string]string)) {
	t.Helper()
	files, err := ptx.Embedded().Files()
	if err != nil {
		t.Fatal(err)
	}
	mine := map[string][]byte{}
	for p, b := range files {
		if name, ok := strings.CutPrefix(p, "sm_90/"); ok {
			mine[name] = bytes.Replace(b, []byte("\n.target sm_90\n"), []byte("\n.target "+arch+"\n"), 1)
		}
	}
	// An archive built before the persistent kernel existed lacks its
	// module: a stand-in with its entry lets pack's other checks run.
	if _, ok := mine["megakernel.ptx"]; !ok {
		mine["megakernel.ptx"] = []byte("\n.target " + arch + "\n.visible .entry megakernel(\n)\n{\n}\n")
	}
	srcs, _ := filepath.Glob("../*.cu")
	more, _ := filepath.Glob("../*.cuh")
	fam, _ := filepath.Glob("../family/*.cuh")
	hashes := map[string]string{}
	for _, p := range append(append(srcs, more...), fam...) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		hashes[strings.TrimPrefix(p, "../")] = ptx.Sum(b)
	}
	if edit != nil {
		edit(mine, hashes)
	}
	dir := filepath.Join(out, arch)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for n, b := range mine {
		os.WriteFile(filepath.Join(dir, n), b, 0o644)
	}
	var meta strings.Builder
	meta.WriteString("nvcc Build test\narch " + arch + " -arch=" + arch + " -ptx -O3 --fmad=false -std=c++17\n")
	names := make([]string, 0, len(hashes))
	for n := range hashes {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		meta.WriteString(hashes[n] + "  " + n + "\n")
	}
	os.WriteFile(filepath.Join(dir, "BUILD"), []byte(meta.String()), 0o644)
}

// committedPTX copies the committed archive and manifest into a fresh
// directory for pack to write.
func committedPTX(t *testing.T) string {
	t.Helper()
	dst := t.TempDir()
	for _, n := range []string{"ptx.tar.zst", "SOURCES"} {
		b, err := os.ReadFile(filepath.Join("..", "ptx", n))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dst, n), b, 0o644)
	}
	return dst
}

// TestPackAddsArchitecture packs a new architecture beside the committed
// one: the archive gains its entries, keeps sm_90's byte for byte, and
// the manifest it writes describes both.
func TestPackAddsArchitecture(t *testing.T) {
	if testing.Short() {
		t.Skip("packs 28 MiB of PTX")
	}
	out, dst := t.TempDir(), committedPTX(t)
	fakeBuild(t, out, "sm_86", nil) // an architecture the committed archive lacks
	if err := pack("..", dst, []string{out}); err != nil {
		t.Fatal(err)
	}
	packed, _ := os.ReadFile(filepath.Join(dst, "ptx.tar.zst"))
	files, err := ptx.Unpack(packed)
	if err != nil {
		t.Fatal(err)
	}
	old, _ := ptx.Embedded().Files()
	arches := len(ptx.Embedded().Arches())
	want := len(old) + len(old)/arches
	if _, ok := old["sm_90/megakernel.ptx"]; !ok {
		want++ // fakeBuild's stand-in for the persistent kernel
	}
	if len(files) != want {
		t.Fatalf("%d entries, want %d", len(files), want)
	}
	for p, b := range old {
		if !bytes.Equal(files[p], b) {
			t.Errorf("%s changed", p)
		}
	}
	src, _ := os.ReadFile(filepath.Join(dst, "SOURCES"))
	m, err := ptx.ParseManifest(src)
	if err != nil {
		t.Fatal(err)
	}
	again, err := ptx.BuildManifest("..", m.Arches, files)
	if err != nil || !bytes.Equal(again.Bytes(), src) {
		t.Fatalf("the written SOURCES is not the archive's manifest: %v", err)
	}
	added := slices.IndexFunc(m.Arches, func(a ptx.Arch) bool { return a.Name == "sm_86" })
	if len(m.Arches) != arches+1 || added < 0 || m.Arches[added].NVCC != "Build test" {
		t.Errorf("arches %+v", m.Arches)
	}
}

// TestPackRefuses checks pack's refusals: PTX built from other sources,
// an instance without PTX, and a directory that is no build.
func TestPackRefuses(t *testing.T) {
	for _, c := range []struct {
		name, want string
		edit       func(map[string][]byte, map[string]string)
	}{
		{"changed source", "kernels/cuda/common.cuh changed since build_ptx.sh built sm_80", func(_ map[string][]byte, h map[string]string) {
			h["common.cuh"] = strings.Repeat("0", 64)
		}},
		{"missing PTX", "no PTX sm_80/add.ptx", func(f map[string][]byte, _ map[string]string) { delete(f, "add.ptx") }},
		{"stray PTX", "PTX sm_80/gone.ptx is of no instance", func(f map[string][]byte, _ map[string]string) { f["gone.ptx"] = []byte("x") }},
		{"no entry", "sm_80/zero.ptx lacks the entry zero", func(f map[string][]byte, _ map[string]string) { f["zero.ptx"] = []byte(".target sm_80\n") }},
	} {
		out, dst := t.TempDir(), committedPTX(t)
		fakeBuild(t, out, "sm_80", c.edit)
		err := pack("..", dst, []string{out})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.name, err, c.want)
		}
	}
	if err := pack("..", committedPTX(t), []string{t.TempDir()}); err == nil || !strings.Contains(err.Error(), "not an output of kernels/cuda/build_ptx.sh") {
		t.Errorf("an empty directory: %v", err)
	}
	// A .tgz of the output (what comes back from a GPU machine) reads as
	// the directory would: here with the missing PTX.
	out := t.TempDir()
	fakeBuild(t, filepath.Join(out, "ptx"), "sm_80", func(f map[string][]byte, _ map[string]string) { delete(f, "add.ptx") })
	tgz := filepath.Join(t.TempDir(), "ptx.tgz")
	if b, err := exec.Command("tar", "-C", out, "-czf", tgz, "ptx").CombinedOutput(); err != nil {
		t.Skipf("tar: %v %s", err, b)
	}
	if err := pack("..", committedPTX(t), []string{tgz}); err == nil || !strings.Contains(err.Error(), "no PTX sm_80/add.ptx") {
		t.Errorf("a .tgz of a build without add.ptx: %v", err)
	}
}
