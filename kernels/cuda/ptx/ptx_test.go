package ptx

import (
	"bytes"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/kernels/cuda"
)

func committedManifest(t *testing.T) *Manifest {
	t.Helper()
	src, err := os.ReadFile("SOURCES")
	if err != nil {
		t.Fatal(err)
	}
	m, err := ParseManifest(src)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestArchiveFresh fails when the archive's PTX was built from sources
// other than the tree's, or SOURCES does not describe the archive: it
// rebuilds the manifest from the tree and the archive, as gen -pack writes
// it, and compares. Rebuild with build_ptx.sh on a machine with nvcc,
// then go run ./kernels/cuda/gen -pack (make ptx does both).
func TestArchiveFresh(t *testing.T) {
	committed := committedManifest(t)
	files, err := Embedded().Files()
	if err != nil {
		t.Fatal(err)
	}
	rebuilt, err := BuildManifest("..", committed.Arches, files)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(rebuilt.Bytes(), committed.Bytes()) {
		return
	}
	for f, sum := range rebuilt.Files {
		if old, ok := committed.Files[f]; ok && old != sum {
			t.Errorf("kernels/cuda/%s changed since its PTX was built: run make ptx", f)
		}
	}
	want := map[string]Entry{}
	for _, e := range committed.Entries {
		want[e.Path] = e
	}
	for _, e := range rebuilt.Entries {
		w, ok := want[e.Path]
		switch {
		case !ok:
			t.Errorf("the archive holds %s, which SOURCES does not list", e.Path)
		case w.Hash != e.Hash:
			t.Errorf("%s in the archive is not the PTX SOURCES lists", e.Path)
		case !slices.Equal(w.Inputs, e.Inputs):
			t.Errorf("%s is now built from %v, not %v: run make ptx", e.Path, e.Inputs, w.Inputs)
		}
		delete(want, e.Path)
	}
	for p := range want {
		t.Errorf("SOURCES lists %s, which the archive lacks", p)
	}
	if !t.Failed() {
		t.Error("SOURCES differs from the manifest gen -pack writes for the archive: run make ptx")
	}
}

// TestArchiveReproducible holds the committed archive to what Pack makes
// of its own files: the same PTX always packs to the same bytes, so a
// rebuild that changes no kernel changes no committed byte.
func TestArchiveReproducible(t *testing.T) {
	if testing.Short() {
		t.Skip("packs 14 MiB of PTX")
	}
	files, err := Embedded().Files()
	if err != nil {
		t.Fatal(err)
	}
	again, err := Pack(files)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again, packed) {
		t.Errorf("repacking the archive's %d files gives %d bytes that differ from ptx.tar.zst's %d: repack with make ptx (a new zstd encoder?)", len(files), len(again), len(packed))
	}
}

// TestEveryInstanceEmbedded holds the archive to T-CUDA's family table:
// each architecture it has holds, for every instance the table lists
// (every typed family for every T-CUDA weight type), a PTX with the
// instance's entry point, so a model of any of those types can be built
// for each of its targets; and sm_90 is one of them.
func TestEveryInstanceEmbedded(t *testing.T) {
	insts, err := cuda.Instances()
	if err != nil {
		t.Fatal(err)
	}
	arches := Embedded().Arches()
	if !slices.Contains(arches, "sm_90") {
		t.Fatalf("the archive has PTX for %v, not sm_90", arches)
	}
	for _, arch := range arches {
		for _, in := range insts {
			p, err := Source(arch, in.Name, "")
			if err != nil {
				t.Error(err)
				continue
			}
			if !bytes.Contains(p, []byte(".entry "+in.Entry()+"(")) {
				t.Errorf("%s lacks the entry %s", File(arch, in.Name), in.Entry())
			}
			if !bytes.Contains(p, []byte("\n.target "+arch+"\n")) {
				t.Errorf("%s is not PTX for .target %s", File(arch, in.Name), arch)
			}
		}
		if got, want := WeightTypes(arch), cuda.InstanceTypes(); !slices.Equal(got, want) {
			t.Errorf("WeightTypes(%s) = %v, want cuda.InstanceTypes() %v", arch, got, want)
		}
	}
}

func TestSource(t *testing.T) {
	for _, inst := range []string{"matmul.q4_k", "flash_attn", "lm_head.q8_0", "rms_norm"} {
		if _, err := Source("sm_90", inst, ""); err != nil {
			t.Error(err)
		}
	}
	if _, err := Source("sm_90", "matmul.bogus", ""); err == nil {
		t.Error("Source of a missing instance succeeded")
	}
	_, err := Source("sm_70", "matmul.q4_k", "")
	if err == nil || !strings.Contains(err.Error(), "no PTX for sm_70") {
		t.Errorf("Source for an architecture the archive lacks: %v, want an error naming it", err)
	}
	dir := t.TempDir()
	os.Mkdir(dir+"/sm_90", 0o755)
	os.WriteFile(dir+"/sm_90/rms_norm.ptx", []byte("from dir"), 0o644)
	if b, err := Source("sm_90", "rms_norm", dir); err != nil || string(b) != "from dir" {
		t.Errorf("Source from a directory: %q, %v", b, err)
	}
	if got := TargetArch("cuda:sm_80"); got != "sm_80" {
		t.Errorf("TargetArch(cuda:sm_80) = %s", got)
	}
}

func TestPackRoundTrip(t *testing.T) {
	files := map[string][]byte{"sm_90/b.ptx": []byte("bb"), "sm_80/a.ptx": []byte("a"), "sm_90/empty.ptx": nil}
	a, err := Pack(files)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Pack(files)
	if !bytes.Equal(a, b) {
		t.Fatal("Pack is not deterministic")
	}
	got, err := Unpack(a)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(files) {
		t.Fatalf("unpacked %d files, want %d", len(got), len(files))
	}
	for n, want := range files {
		if !bytes.Equal(got[n], want) {
			t.Errorf("%s: %q, want %q", n, got[n], want)
		}
	}
	if arches := NewArchive(a).Arches(); !slices.Equal(arches, []string{"sm_80", "sm_90"}) {
		t.Errorf("Arches = %v", arches)
	}
	for _, bad := range []string{"x.ptx", "../x.ptx", "sm_90/../x", "sm_90/a/b.ptx", "/sm_90/x.ptx"} {
		if _, err := Pack(map[string][]byte{bad: nil}); err == nil {
			t.Errorf("Pack took the entry name %q", bad)
		}
	}
	if _, err := Unpack([]byte("not zstd")); err == nil {
		t.Error("Unpack of garbage succeeded")
	}
}

func TestManifestRoundTrip(t *testing.T) {
	m := committedManifest(t)
	again, err := ParseManifest(m.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again.Bytes(), m.Bytes()) {
		t.Error("SOURCES does not survive a parse and a write")
	}
	for _, bad := range []string{
		"arch sm_90\n",
		"arch sm_90 -ptx\nnvcc sm_90 v\nentry sm_90/a.ptx " + strings.Repeat("0", 64) + " a.cu\n",
		"arch sm_90 -ptx\n",
		"file a.cu xyz\n",
		"bogus line\n",
		"arch sm_90 -ptx\nnvcc sm_90 v\nfile a.cu " + strings.Repeat("0", 64) + "\nentry sm_80/a.ptx " + strings.Repeat("0", 64) + " a.cu\n",
	} {
		if _, err := ParseManifest([]byte(bad)); err == nil {
			t.Errorf("ParseManifest(%q) succeeded", bad)
		}
	}
}

// TestInputs checks the include closure on a small tree: quoted includes
// resolved against the including file, transitively, once each.
func TestInputs(t *testing.T) {
	dir := t.TempDir()
	os.Mkdir(dir+"/family", 0o755)
	os.WriteFile(dir+"/x.cu", []byte("#define A\n#include \"family/x.cuh\"\n"), 0o644)
	os.WriteFile(dir+"/family/x.cuh", []byte("#include \"../common.cuh\"\n  #  include \"../b.cuh\"\n"), 0o644)
	os.WriteFile(dir+"/common.cuh", []byte("#include <stdint.h>\n#include \"b.cuh\"\n"), 0o644)
	os.WriteFile(dir+"/b.cuh", nil, 0o644)
	got, err := Inputs(dir, "x.cu")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"x.cu", "b.cuh", "common.cuh", "family/x.cuh"}; !slices.Equal(got, want) {
		t.Errorf("Inputs = %v, want %v", got, want)
	}
	os.WriteFile(dir+"/y.cu", []byte("#include \"missing.cuh\"\n"), 0o644)
	if _, err := Inputs(dir, "y.cu"); err == nil {
		t.Error("Inputs with a missing include succeeded")
	}
}

func FuzzParseManifest(f *testing.F) {
	src, _ := os.ReadFile("SOURCES")
	f.Add(src[:min(len(src), 4096)])
	f.Add([]byte("arch sm_90 -ptx\nnvcc sm_90 v\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseManifest(b)
		if err != nil {
			return
		}
		again, err := ParseManifest(m.Bytes())
		if err != nil {
			t.Fatalf("a parsed manifest's text does not parse: %v", err)
		}
		if !bytes.Equal(again.Bytes(), m.Bytes()) {
			t.Fatal("manifest text changes across a round trip")
		}
	})
}

func FuzzUnpack(f *testing.F) {
	small, _ := Pack(map[string][]byte{"sm_90/a.ptx": []byte(".entry a(")})
	f.Add(small)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		files, err := Unpack(b)
		if err != nil {
			return
		}
		if _, err := Pack(files); err != nil {
			t.Fatalf("unpacked files do not pack again: %v", err)
		}
	})
}
