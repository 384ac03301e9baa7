package zrtp

import (
	"bytes"
	"errors"
	"io/fs"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/format/bundleset"
	"github.com/zrtdev/zrt/internal/testmodel"
)

// writeBundle fills dir with a bundle's files: a graph file for target,
// a weights file of random (barely compressible) and zero bytes, and two
// kernels.
func writeBundle(t *testing.T, dir, target string, seed int64) {
	t.Helper()
	g := &bundle.Graph{Ident: bundle.Ident{Target: target}}
	w := make([]byte, 300<<10)
	rand.New(rand.NewSource(seed)).Read(w[:100<<10])
	files := map[string][]byte{
		bundle.GraphFile:          g.Encode(),
		bundle.WeightsFile:        w,
		"kernels/000_embed.zrt":   []byte("embed " + target),
		"kernels/001_argmax.zrt":  bytes.Repeat([]byte("argmax "), 50),
		"kernels/002_empty.zrt":   nil,
		"kernels/010_matmul.zrt":  []byte(strings.Repeat(target, 99)),
		"kernels/sub/003_odd.zrt": []byte("a nested file"),
		"kernels/004_shared.zrt":  bytes.Repeat([]byte("the same in every member "), 40),
	}
	for name, b := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// writeSet writes a set of a cpu and a cuda:sm_90 member at dir.
func writeSet(t *testing.T, dir string) {
	t.Helper()
	x := &bundleset.Index{Producer: "zrtc test", Model: bundleset.Model{Source: "m.gguf", SHA256: "ab", Architecture: "llama"},
		Bundles: []bundleset.Member{
			{Target: "cpu", Dir: "cpu", Requires: bundleset.Requires{Tier: "cpu"}},
			{Target: "cuda:sm_90", Dir: "cuda_sm_90", Requires: bundleset.Requires{Tier: "cuda", CUDAComputeCapability: "9.0"}},
		}}
	err := bundleset.Write(dir, x, func(tmp string) error {
		for i, m := range x.Bundles {
			writeBundle(t, m.Path(tmp), m.Target, int64(i))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestRoundTripAndReproducible(t *testing.T) {
	for _, kind := range []string{KindSet, KindBundle} {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			src := filepath.Join(dir, "src")
			if kind == KindSet {
				writeSet(t, src)
			} else {
				writeBundle(t, src, "cpu", 7)
			}
			p1, p2 := filepath.Join(dir, "a.zrtp"), filepath.Join(dir, "b.zrtp")
			for _, p := range []string{p1, p2, p1} { // p1 twice: replacing a pack
				if err := Write(p, src); err != nil {
					t.Fatal(err)
				}
			}
			b1, _ := os.ReadFile(p1)
			b2, _ := os.ReadFile(p2)
			if !bytes.Equal(b1, b2) {
				t.Fatal("packing the same input twice gave different bytes")
			}
			if !Is(p1) || Is(src) {
				t.Fatal("Is wrong")
			}
			r, err := Open(p1)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if r.Index().Kind != kind {
				t.Fatalf("kind %s, want %s", r.Index().Kind, kind)
			}
			packed, raw := r.Index().Sizes()
			if packed >= raw {
				t.Errorf("packed %d B of %d B: nothing compressed", packed, raw)
			}
			if kind == KindSet {
				// A file the members share is stored once.
				a, _ := r.Index().Member("cpu")
				b, _ := r.Index().Member("cuda:sm_90")
				var fa, fb File
				for i := range a.Files {
					if a.Files[i].Path == "kernels/004_shared.zrt" {
						fa, fb = a.Files[i], b.Files[i]
					}
				}
				if fa.Offset != fb.Offset || fa.SHA256 != fb.SHA256 || fa.Size == 0 {
					t.Errorf("the shared file is stored twice: %+v, %+v", fa, fb)
				}
			}
			out := filepath.Join(dir, "out")
			if err := r.Unpack(out); err != nil {
				t.Fatal(err)
			}
			testmodel.SameTree(t, src, out, 0)
			// One member alone is that member's bundle.
			m := r.Index().Members[len(r.Index().Members)-1]
			one := filepath.Join(dir, "one")
			if err := r.UnpackMember(m, one); err != nil {
				t.Fatal(err)
			}
			testmodel.SameTree(t, filepath.Join(src, m.Dir), one, 0)
		})
	}
}

func TestRefusesDamage(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	writeSet(t, src)
	p := filepath.Join(dir, "m.zrtp")
	if err := Write(p, src); err != nil {
		t.Fatal(err)
	}
	good, _ := os.ReadFile(p)
	r, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	x := r.Index()
	r.Close()
	cuda, _ := x.Member("cuda:sm_90")
	var weights File
	for _, f := range cuda.Files {
		if f.Path == bundle.WeightsFile {
			weights = f
		}
	}
	dataStart := int64(len(good)) - func() int64 { p, _ := x.Sizes(); return p }()

	t.Run("flipped byte in a member", func(t *testing.T) {
		b := bytes.Clone(good)
		b[dataStart+weights.Offset+weights.Size/2] ^= 0x40
		bad := filepath.Join(dir, "flip.zrtp")
		os.WriteFile(bad, b, 0o644)
		r, err := Open(bad) // the index is intact: listing still works
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		// The cpu member does not share the damaged bytes.
		cpu, _ := r.Index().Member("cpu")
		if err := r.UnpackMember(cpu, filepath.Join(dir, "cpu")); err != nil {
			t.Fatalf("undamaged member: %v", err)
		}
		out := filepath.Join(dir, "cuda")
		err = r.UnpackMember(cuda, out)
		if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), bundle.WeightsFile) || !strings.Contains(err.Error(), "cuda:sm_90") {
			t.Fatalf("got %v, want a malformed-pack error naming cuda:sm_90's %s", err, bundle.WeightsFile)
		}
		if _, err := os.Stat(out); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("a refused unpack left %s behind", out)
		}
	})
	for _, c := range []struct {
		name string
		edit func([]byte) []byte
		want string
	}{
		{"truncated", func(b []byte) []byte { return b[:len(b)-1] }, "truncated"},
		{"truncated in the index", func(b []byte) []byte { return b[:200] }, "truncated"},
		{"truncated in the header", func(b []byte) []byte { return b[:20] }, "truncated"},
		{"trailing bytes", func(b []byte) []byte { return append(b, 0) }, "trailing"},
		{"index edited", func(b []byte) []byte { b[60] ^= 1; return b }, "checksum"},
		{"magic", func(b []byte) []byte { b[0] = 'X'; return b }, "magic"},
	} {
		t.Run(c.name, func(t *testing.T) {
			bad := filepath.Join(dir, "bad.zrtp")
			os.WriteFile(bad, c.edit(bytes.Clone(good)), 0o644)
			_, err := Open(bad)
			if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want a malformed-pack error saying %q", err, c.want)
			}
		})
	}
}

func TestWriteKeepsWhatItDidNotWrite(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	writeBundle(t, src, "cpu", 1)
	notes := filepath.Join(dir, "notes.txt")
	os.WriteFile(notes, []byte("mine"), 0o644)
	if err := Write(notes, src); err == nil {
		t.Fatal("Write replaced a file that is not a pack")
	}
	if err := Write(filepath.Join(dir, "x.zrtp"), dir); err == nil || !strings.Contains(err.Error(), "bundle set") {
		t.Fatalf("packing a directory that is neither a bundle nor a set: %v", err)
	}
}
