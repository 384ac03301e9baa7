package image

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

// dummies writes two small stand-ins for the binaries.
func dummies(t *testing.T, zrtc, zrtRun string) options {
	dir := t.TempDir()
	o := options{zrtc: filepath.Join(dir, "zrtc"), zrtRun: filepath.Join(dir, "zrt-run"), created: time.Unix(1700000000, 0).UTC()}
	os.WriteFile(o.zrtc, []byte(zrtc), 0o755)
	os.WriteFile(o.zrtRun, []byte(zrtRun), 0o755)
	return o
}

// layerFiles reads the image's one layer back: each entry's header and
// body, in order.
func layerFiles(t *testing.T, img v1.Image) ([]*tar.Header, map[string]string) {
	t.Helper()
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers: %d, %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var hs []*tar.Header
	bodies := map[string]string{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		hs = append(hs, h)
		bodies[h.Name] = string(b)
	}
	return hs, bodies
}

func TestImage(t *testing.T) {
	o := dummies(t, "zrtc binary", "zrt-run binary")
	img, err := build(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Image(img); err != nil {
		t.Fatalf("the image is not self-consistent: %v", err)
	}
	if mt, _ := img.MediaType(); mt != types.OCIManifestSchema1 {
		t.Errorf("manifest media type %s", mt)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.Config
	if !slices.Equal(c.Entrypoint, []string{"/usr/local/bin/zrt-run"}) || c.User != "65532:65532" || cfg.OS != "linux" || cfg.Architecture != "amd64" {
		t.Errorf("entrypoint %q, user %q, platform %s/%s", c.Entrypoint, c.User, cfg.OS, cfg.Architecture)
	}
	if !slices.Contains(c.Env, "ZRTC_CACHE=/var/cache/zrt") || len(c.Volumes) != 1 || c.Volumes["/var/cache/zrt"] != struct{}{} {
		t.Errorf("env %q, volumes %v: want ZRTC_CACHE on the volume /var/cache/zrt", c.Env, c.Volumes)
	}
	if !cfg.Created.Time.Equal(o.created) || len(cfg.History) != 1 || !cfg.History[0].Created.Time.Equal(o.created) {
		t.Errorf("created %v, history %+v: want every time %v", cfg.Created, cfg.History, o.created)
	}

	hs, bodies := layerFiles(t, img)
	var names []string
	for _, h := range hs {
		names = append(names, h.Name)
		if !h.ModTime.Equal(o.created) {
			t.Errorf("%s: mtime %v", h.Name, h.ModTime)
		}
		switch h.Name {
		case "usr/local/bin/zrt-run", "usr/local/bin/zrtc":
			if h.Mode != 0o755 || h.Uid != 0 || h.Typeflag != tar.TypeReg {
				t.Errorf("%s: mode %o uid %d type %c", h.Name, h.Mode, h.Uid, h.Typeflag)
			}
		case "var/cache/zrt/":
			if h.Uid != 65532 || h.Gid != 65532 || h.Typeflag != tar.TypeDir {
				t.Errorf("the cache directory: uid %d gid %d type %c; the user must own it", h.Uid, h.Gid, h.Typeflag)
			}
		}
	}
	want := []string{"etc/", "etc/group", "etc/passwd", "tmp/", "usr/", "usr/local/", "usr/local/bin/", "usr/local/bin/zrt-run", "usr/local/bin/zrtc", "var/", "var/cache/", "var/cache/zrt/"}
	if !slices.Equal(names, want) {
		t.Errorf("layer entries %q, want %q", names, want)
	}
	if bodies["usr/local/bin/zrt-run"] != "zrt-run binary" || bodies["usr/local/bin/zrtc"] != "zrtc binary" {
		t.Errorf("binaries in the layer: %q", bodies)
	}
	if !strings.Contains(bodies["etc/passwd"], "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd: %q", bodies["etc/passwd"])
	}

	// Reproducible: the same inputs give the same digest; other bytes or
	// another time do not.
	d1, _ := img.Digest()
	again, _ := build(o)
	d2, _ := again.Digest()
	if d1 != d2 {
		t.Errorf("two builds of the same binaries: %s and %s", d1, d2)
	}
	other, _ := build(dummies(t, "zrtc binary", "zrt-run binarY"))
	if d3, _ := other.Digest(); d3 == d1 {
		t.Error("another zrt-run gives the same digest")
	}
	later := o
	later.created = o.created.Add(time.Second)
	if img4, _ := build(later); img4 != nil {
		if d4, _ := img4.Digest(); d4 == d1 {
			t.Error("another SOURCE_DATE_EPOCH gives the same digest")
		}
	}
}

// TestWrite writes the docker-loadable tarball and the OCI layout and
// reads each back as the image it was written from.
func TestWrite(t *testing.T) {
	img, err := build(dummies(t, "a", "b"))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := img.Digest()
	dir := t.TempDir()
	tarPath := filepath.Join(dir, "zrt.tar")
	ref, _ := name.NewTag("zrt:test")
	if err := tarball.WriteToFile(tarPath, ref, img); err != nil {
		t.Fatal(err)
	}
	back, err := tarball.ImageFromPath(tarPath, &ref)
	if err != nil {
		t.Fatal(err)
	}
	// A docker tarball keeps the config and the layers, not the manifest:
	// the image's identity there is its config's digest (docker's image
	// ID), and the layers' diff ids.
	wantID, _ := img.ConfigName()
	if got, err := back.ConfigName(); got != wantID || err != nil {
		t.Errorf("tarball: image id %s (%v), want %s", got, err, wantID)
	}
	if err := validate.Image(back); err != nil {
		t.Errorf("tarball: %v", err)
	}
	// docker load reads manifest.json at the tarball's top level.
	f, _ := os.Open(tarPath)
	defer f.Close()
	tr, found := tar.NewReader(f), false
	for h, err := tr.Next(); err == nil; h, err = tr.Next() {
		if h.Name == "manifest.json" {
			b, _ := io.ReadAll(tr)
			found = bytes.Contains(b, []byte(`"zrt:test"`))
		}
	}
	if !found {
		t.Error("the tarball has no manifest.json naming zrt:test")
	}

	lay := filepath.Join(dir, "layout")
	if err := writeLayout(lay, img, "zrt:test"); err != nil {
		t.Fatal(err)
	}
	p, err := layout.FromPath(lay)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil || len(m.Manifests) != 1 || m.Manifests[0].Digest != want || m.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "zrt:test" {
		t.Fatalf("layout index %+v (%v): want the one image %s", m, err, want)
	}
}

func TestRefuses(t *testing.T) {
	o := dummies(t, "not an ELF", "not an ELF")
	o.checkELF = true
	if _, err := build(o); err == nil || !strings.Contains(err.Error(), "not an ELF") {
		t.Errorf("a non-ELF binary: %v", err)
	}
	o.zrtRun = filepath.Join(t.TempDir(), "missing")
	if _, err := build(o); err == nil || !strings.Contains(err.Error(), "zrt-run") {
		t.Errorf("a missing binary: %v", err)
	}
	for _, s := range []string{"x", "-1", "1.5"} {
		if _, err := Created(s); err == nil {
			t.Errorf("SOURCE_DATE_EPOCH=%q accepted", s)
		}
	}
	if c, err := Created("1700000000"); err != nil || c.Unix() != 1700000000 {
		t.Errorf("SOURCE_DATE_EPOCH=1700000000: %v %v", c, err)
	}
}

// TestDynamic builds an image around a dynamically linked program of this
// machine (as zrt-run is one): its loader and libraries come along, at the
// paths the loader looks, and LD_LIBRARY_PATH names them.
func TestDynamic(t *testing.T) {
	var prog string
	for _, p := range []string{"/bin/true", "/usr/bin/true", "/bin/ls"} {
		if f, err := elf.Open(p); err == nil {
			libs, _ := f.ImportedLibraries()
			f.Close()
			if len(libs) > 0 && runtime.GOARCH == "amd64" {
				prog = p
				break
			}
		}
	}
	if prog == "" {
		t.Skip("no dynamically linked x86-64 program here to build around")
	}
	o := dummies(t, "", "")
	o.zrtc, o.zrtRun, o.checkELF = prog, prog, true
	img, err := build(o)
	if err != nil {
		t.Fatal(err)
	}
	_, bodies := layerFiles(t, img)
	f, _ := elf.Open(prog)
	defer f.Close()
	libs, _ := f.ImportedLibraries()
	var interp string
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b, _ := io.ReadAll(p.Open())
			interp = strings.TrimRight(string(b), "\x00")
		}
	}
	if _, ok := bodies[strings.TrimPrefix(interp, "/")]; !ok {
		t.Errorf("the loader %s is not in the image", interp)
	}
	for _, l := range libs {
		found := false
		for _, d := range libDirs {
			_, ok := bodies[strings.TrimPrefix(path.Join(d, l), "/")]
			found = found || ok
		}
		if !found {
			t.Errorf("%s needs %s, which is not in the image", prog, l)
		}
	}
	cfg, _ := img.ConfigFile()
	if !slices.ContainsFunc(cfg.Config.Env, func(e string) bool { return strings.HasPrefix(e, "LD_LIBRARY_PATH=/lib/x86_64-linux-gnu") }) {
		t.Errorf("env %q lacks LD_LIBRARY_PATH", cfg.Config.Env)
	}
	// A root without the libraries: the error names what is missing.
	o.libRoot = t.TempDir()
	if _, err := build(o); err == nil || !strings.Contains(err.Error(), "interpreter") {
		t.Errorf("libraries missing under the root: %v", err)
	}
}
