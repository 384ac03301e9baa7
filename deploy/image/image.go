// Package image builds zrt's container image without a container
// daemon, as ko does: one layer holding the linux/amd64 binaries zrtc and
// zrt-run (built with CGO_ENABLED=0; zrt-run still names the C library's
// loader, which purego uses to open libcuda, so the loader and the few
// libraries it needs are copied in from the build machine), on an empty
// base, run as a non-root user with the build cache on a volume. It writes a tarball that `docker load` and `podman
// load` read, and optionally an OCI image layout (for skopeo, crane or
// podman's oci: transport, or a registry push).
//
// The image is reproducible: every timestamp is fixed (SOURCE_DATE_EPOCH,
// else the Unix epoch) and every file is owned and ordered the same, so the
// same binaries give the same image digest.
//
// cmd/internal/ociimage is its command:
//
//	go run ./cmd/internal/ociimage --zrtc bin/linux-amd64/zrtc --zrt-run bin/linux-amd64/zrt-run -o bin/zrt-image.tar
package image

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's layout. The user is distroless's "nonroot" (65532), which
// Kubernetes manifests name in runAsUser (deploy/deployment.yaml).
const (
	binDir   = "/usr/local/bin"
	cacheDir = "/var/cache/zrt"
	uid      = 65532
	port     = "8080/tcp"
)

// options say what to put in the image and when it was made.
type options struct {
	zrtc, zrtRun string    // the binaries' paths on this machine
	created      time.Time // every timestamp in the image
	checkELF     bool      // refuse binaries that are not linux/amd64 ELF, and add a dynamic one's libraries
	libRoot      string    // where those libraries are read from ("": /)
}

// file is one entry of the layer.
type file struct {
	name string // absolute path in the image
	mode int64  // permission bits (and tar's type from dir)
	dir  bool
	uid  int
	body []byte
}

// build returns the image: one layer with the binaries, /etc/passwd and
// /etc/group naming the user, and the cache directory owned by it.
func build(o options) (v1.Image, error) {
	var files []file
	seen := map[string]struct{}{} // shared libraries already added
	for _, b := range []struct{ name, src string }{{"zrt-run", o.zrtRun}, {"zrtc", o.zrtc}} {
		body, err := os.ReadFile(b.src)
		if err != nil {
			return nil, fmt.Errorf("image: %s: %w", b.name, err)
		}
		if o.checkELF {
			libs, err := loaderDeps(body, o.libRoot)
			if err != nil {
				return nil, fmt.Errorf("image: %s (%s): %w", b.name, b.src, err)
			}
			for _, l := range libs {
				if _, dup := seen[l.name]; !dup {
					seen[l.name] = struct{}{}
					files = append(files, l)
				}
			}
		}
		files = append(files, file{name: path.Join(binDir, b.name), mode: 0o755, body: body})
	}
	dynamic := len(seen) > 0
	files = append(files,
		file{name: "/etc/passwd", mode: 0o644, body: []byte(fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:%s:/sbin/nologin\n", uid, uid, cacheDir))},
		file{name: "/etc/group", mode: 0o644, body: []byte(fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", uid))},
		file{name: cacheDir, mode: 0o755, dir: true, uid: uid},
		file{name: "/tmp", mode: 0o1777, dir: true},
	)
	layerTar, err := tarLayer(files, o.created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layerTar)), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("image: layer: %w", err)
	}
	// Only the v1.Layer methods: tarball's layer also describes itself
	// with an empty annotations map, which the manifest would then carry
	// in its struct but not in its bytes.
	layer = struct{ v1.Layer }{layer}
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	created := v1.Time{Time: o.created}
	img, err := mutate.AppendLayers(base, layer)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("image: config: %w", err)
	}
	cfg = cfg.DeepCopy()
	cfg.Created = created
	cfg.History = []v1.History{{Created: created, CreatedBy: "zrt ociimage: zrtc and zrt-run", Comment: "static linux/amd64 binaries"}}
	cfg.Architecture, cfg.OS = "amd64", "linux"
	cfg.Config.Entrypoint = []string{path.Join(binDir, "zrt-run")}
	cfg.Config.User = fmt.Sprintf("%d:%d", uid, uid)
	cfg.Config.WorkingDir = cacheDir
	// ZRTC_CACHE is the build cache zrt-run serve builds a GGUF into;
	// XDG_CACHE_HOME puts the user cache directory (unpacked packs) on
	// the same volume; HOME is the user's, as /etc/passwd says.
	cfg.Config.Env = []string{"PATH=" + binDir, "HOME=" + cacheDir, "ZRTC_CACHE=" + cacheDir, "XDG_CACHE_HOME=" + cacheDir}
	if dynamic {
		// Where the image's C library lives, and where the NVIDIA
		// container toolkit mounts libcuda.so.1 (which zrt-run opens at
		// run time) on Debian-like and other images.
		cfg.Config.Env = append(cfg.Config.Env, "LD_LIBRARY_PATH="+strings.Join(libDirs, ":"))
	}
	cfg.Config.Volumes = map[string]struct{}{cacheDir: {}}
	cfg.Config.ExposedPorts = map[string]struct{}{port: {}}
	cfg.Config.Labels = map[string]string{"org.opencontainers.image.title": "zrt",
		"org.opencontainers.image.description": "zrt-run and zrtc: compile GGUF models into bundles and serve them"}
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return nil, fmt.Errorf("image: config: %w", err)
	}
	return img, nil
}

// tarLayer writes files as a tar stream with their parent directories,
// sorted by path, owned by root unless a file says otherwise, every time
// set to created.
func tarLayer(files []file, created time.Time) ([]byte, error) {
	entries := map[string]file{}
	for _, f := range files {
		entries[f.name] = f
		for d := path.Dir(f.name); d != "/"; d = path.Dir(d) {
			if _, ok := entries[d]; !ok {
				entries[d] = file{name: d, mode: 0o755, dir: true}
			}
		}
	}
	names := make([]string, 0, len(entries))
	for n := range entries {
		names = append(names, n)
	}
	// Parents sort before their children ("/a" < "/a/b").
	slices.Sort(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		f := entries[n]
		h := &tar.Header{Name: n[1:], Mode: f.mode, Uid: f.uid, Gid: f.uid, ModTime: created, Format: tar.FormatPAX}
		if f.dir {
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("image: layer: %s: %w", n, err)
		}
		if _, err := tw.Write(f.body); err != nil {
			return nil, fmt.Errorf("image: layer: %s: %w", n, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("image: layer: %w", err)
	}
	return buf.Bytes(), nil
}

// libDirs are where loaderDeps looks for shared libraries, in order, and
// where the image keeps them.
var libDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64"}

// loaderDeps checks that body is an x86-64 Linux ELF executable and
// returns what it needs to start: nothing for a static binary; for a
// dynamic one — zrt-run is one, since purego without cgo links the C
// library's loader to open libcuda at run time — its program interpreter
// and its shared libraries, transitively, read from under root (the
// build machine's own, by default) and placed at the same paths.
func loaderDeps(body []byte, root string) ([]file, error) {
	if root == "" {
		root = "/"
	}
	f, err := elf.NewFile(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("not an ELF executable (%v): build it with GOOS=linux GOARCH=amd64", err)
	}
	defer f.Close()
	if f.Machine != elf.EM_X86_64 || f.Class != elf.ELFCLASS64 {
		return nil, fmt.Errorf("an ELF for %v, not x86-64: build it with GOOS=linux GOARCH=amd64", f.Machine)
	}
	var interp string
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b, err := io.ReadAll(p.Open())
			if err != nil {
				return nil, fmt.Errorf("reading its program interpreter: %w", err)
			}
			interp = strings.TrimRight(string(b), "\x00")
		}
	}
	if interp == "" {
		return nil, nil
	}
	var out []file
	add := func(name string) ([]byte, error) {
		b, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			return nil, err
		}
		out = append(out, file{name: name, mode: 0o755, body: b})
		return b, nil
	}
	if _, err := add(interp); err != nil {
		return nil, fmt.Errorf("its program interpreter: %w", err)
	}
	needed, err := f.ImportedLibraries()
	if err != nil {
		return nil, fmt.Errorf("reading its shared libraries: %w", err)
	}
	done := map[string]bool{path.Base(interp): true}
	for len(needed) > 0 {
		lib := needed[0]
		needed = needed[1:]
		if done[lib] {
			continue
		}
		done[lib] = true
		var b []byte
		for _, d := range libDirs {
			if b, err = add(path.Join(d, lib)); err == nil {
				break
			}
		}
		if b == nil {
			return nil, fmt.Errorf("it needs %s, found in none of %s under %s", lib, strings.Join(libDirs, ", "), root)
		}
		lf, err := elf.NewFile(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", lib, err)
		}
		more, err := lf.ImportedLibraries()
		lf.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", lib, err)
		}
		needed = append(needed, more...)
	}
	return out, nil
}

// Created is SOURCE_DATE_EPOCH's time (reproducible-builds.org), or
// the Unix epoch.
func Created(env string) (time.Time, error) {
	if env == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	s, err := strconv.ParseInt(env, 10, 64)
	if err != nil || s < 0 {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q is not a count of seconds", env)
	}
	return time.Unix(s, 0).UTC(), nil
}

// Options say what image Write builds and where it writes it.
type Options struct {
	Zrtc, ZrtRun string    // the static linux/amd64 binaries' paths on this machine
	LibRoot      string    // the root file system a dynamic binary's loader and libraries are copied from ("": /)
	Created      time.Time // every timestamp in the image (Created parses SOURCE_DATE_EPOCH)
	// Out is the tarball for docker load / podman load ("": none);
	// Layout an OCI image layout directory ("": none); Tag the name the
	// tarball loads as and the layout annotates.
	Out, Layout, Tag string
}

// Write builds the image of o's binaries and writes it where o says,
// returning its digest.
func Write(o Options) (v1.Hash, error) {
	img, err := build(options{zrtc: o.Zrtc, zrtRun: o.ZrtRun, created: o.Created, checkELF: true, libRoot: o.LibRoot})
	if err != nil {
		return v1.Hash{}, err
	}
	if o.Out != "" {
		ref, err := name.NewTag(o.Tag)
		if err != nil {
			return v1.Hash{}, fmt.Errorf("--tag %q: %w", o.Tag, err)
		}
		if err := tarball.WriteToFile(o.Out, ref, img); err != nil {
			return v1.Hash{}, fmt.Errorf("writing %s: %w", o.Out, err)
		}
	}
	if o.Layout != "" {
		if err := writeLayout(o.Layout, img, o.Tag); err != nil {
			return v1.Hash{}, err
		}
	}
	return img.Digest()
}

// writeLayout writes img as the only image of a fresh OCI layout in dir,
// annotated with its tag (org.opencontainers.image.ref.name).
func writeLayout(dir string, img v1.Image, tag string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("layout %s: %w", dir, err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": tag})); err != nil {
		return fmt.Errorf("layout %s: %w", dir, err)
	}
	return nil
}
