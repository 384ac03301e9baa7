package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/zrtdev/zrt/kernels/cuda"
	"github.com/zrtdev/zrt/kernels/cuda/ptx"
)

// build is one architecture's output of build_ptx.sh: OUT/<arch>/*.ptx and
// OUT/<arch>/BUILD.
type build struct {
	arch   ptx.Arch
	hashes map[string]string // source path → sha256 when nvcc ran
	files  map[string][]byte // archive path → PTX
}

// readBuilds reads the architectures of build_ptx.sh's output
// directories, or of gzipped tar files of them (untar gives OUT's
// <arch>/ directories, at its top or one level down).
func readBuilds(outs []string) (map[string]build, error) {
	builds := map[string]build{}
	for _, out := range outs {
		if st, err := os.Stat(out); err == nil && st.Mode().IsRegular() {
			tmp, err := os.MkdirTemp("", "zrt-ptx-")
			if err != nil {
				return nil, err
			}
			defer os.RemoveAll(tmp)
			if out, err = untar(out, tmp); err != nil {
				return nil, err
			}
		}
		metas, err := filepath.Glob(filepath.Join(out, "*", "BUILD"))
		if err != nil {
			return nil, err
		}
		if len(metas) == 0 {
			return nil, fmt.Errorf("%s: no <arch>/BUILD: not an output of kernels/cuda/build_ptx.sh", out)
		}
		for _, meta := range metas {
			b, err := readBuild(meta)
			if err != nil {
				return nil, err
			}
			if b.arch.Name != filepath.Base(filepath.Dir(meta)) {
				return nil, fmt.Errorf("%s: architecture %s in the directory of %s", meta, b.arch.Name, filepath.Base(filepath.Dir(meta)))
			}
			if _, dup := builds[b.arch.Name]; dup {
				return nil, fmt.Errorf("%s: architecture %s given twice", out, b.arch.Name)
			}
			ptxs, err := filepath.Glob(filepath.Join(filepath.Dir(meta), "*.ptx"))
			if err != nil {
				return nil, err
			}
			for _, p := range ptxs {
				src, err := os.ReadFile(p)
				if err != nil {
					return nil, err
				}
				b.files[b.arch.Name+"/"+filepath.Base(p)] = src
			}
			builds[b.arch.Name] = b
		}
	}
	return builds, nil
}

// readBuild parses a BUILD file: "nvcc VERSION", "arch NAME FLAGS…", then
// sha256sum's lines for the sources.
func readBuild(path string) (build, error) {
	b := build{hashes: map[string]string{}, files: map[string][]byte{}}
	src, err := os.ReadFile(path)
	if err != nil {
		return b, err
	}
	sc := bufio.NewScanner(bytes.NewReader(src))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch kw, rest, _ := strings.Cut(line, " "); {
		case line == "":
		case kw == "nvcc":
			b.arch.NVCC = rest
		case kw == "arch":
			b.arch.Name, b.arch.Flags, _ = strings.Cut(rest, " ")
		default:
			hash, file, ok := strings.Cut(line, "  ")
			if !ok || len(hash) != 64 {
				return b, fmt.Errorf("%s:%d: want sha256sum's HASH  FILE: %q", path, n, line)
			}
			b.hashes[strings.TrimPrefix(file, "./")] = hash
		}
	}
	if b.arch.Name == "" || b.arch.Flags == "" || b.arch.NVCC == "" {
		return b, fmt.Errorf("%s: no nvcc or arch line", path)
	}
	return b, sc.Err()
}

// pack writes dst/ptx.tar.zst and dst/SOURCES (dst is kernels/cuda/ptx)
// from build_ptx.sh's output directories outs, built from the sources in
// dir (kernels/cuda). It refuses PTX built from sources other than the
// tree's, and an instance without PTX. The architectures outs do not hold
// keep the archive's PTX, which must still be fresh.
func pack(dir, dst string, outs []string) error {
	builds, err := readBuilds(outs)
	if err != nil {
		return err
	}
	files := map[string][]byte{}
	var arches []ptx.Arch
	oldPacked, err := os.ReadFile(filepath.Join(dst, "ptx.tar.zst"))
	if err == nil {
		old, err := ptx.Unpack(oldPacked)
		if err != nil {
			return err
		}
		src, err := os.ReadFile(filepath.Join(dst, "SOURCES"))
		if err != nil {
			return err
		}
		m, err := ptx.ParseManifest(src)
		if err != nil {
			return err
		}
		for _, a := range m.Arches {
			if _, rebuilt := builds[a.Name]; rebuilt {
				continue
			}
			arches = append(arches, a)
			for p, b := range old {
				if strings.HasPrefix(p, a.Name+"/") {
					files[p] = b
				}
			}
		}
		kept, err := ptx.BuildManifest(dir, arches, files)
		if err != nil {
			return err
		}
		if !bytes.Equal(kept.Bytes(), subManifest(m, arches).Bytes()) {
			return fmt.Errorf("the archive's PTX for %s is stale against the tree: rebuild those architectures too (build_ptx.sh with ARCHES=…)", archNames(arches))
		}
	} else if !os.IsNotExist(err) {
		return err
	}
	for _, b := range builds {
		arches = append(arches, b.arch)
		for p, src := range b.files {
			files[p] = src
		}
	}
	if err := complete(arches, files, builds); err != nil {
		return err
	}
	m, err := ptx.BuildManifest(dir, arches, files)
	if err != nil {
		return err
	}
	for src, sum := range m.Files {
		for _, b := range builds {
			if got, ok := b.hashes[src]; !ok || got != sum {
				return fmt.Errorf("kernels/cuda/%s changed since build_ptx.sh built %s (or it did not read it): run it again", src, b.arch.Name)
			}
		}
	}
	packed, err := ptx.Pack(files)
	if err != nil {
		return err
	}
	return write(dst, map[string][]byte{"ptx.tar.zst": packed, "SOURCES": m.Bytes()})
}

// complete checks that every architecture has a PTX, with its entry
// point, for every instance, and no other; and that every architecture
// built now has the persistent decode kernel's (one kept from an archive
// older than it may lack it: the tier then runs the graph path).
func complete(arches []ptx.Arch, files map[string][]byte, built map[string]build) error {
	insts, err := cuda.Instances()
	if err != nil {
		return err
	}
	want := map[string]bool{}
	for _, a := range arches {
		// The persistent decode kernel is a module of its own beside the
		// instances' (megakernel.cu), with one entry of the same name.
		var modules []string
		if _, now := built[a.Name]; now || files[ptx.File(a.Name, cuda.MegakernelModule)] != nil {
			modules = append(modules, cuda.MegakernelModule)
		}
		for _, in := range insts {
			modules = append(modules, in.Name)
		}
		for _, name := range modules {
			p := ptx.File(a.Name, name)
			want[p] = true
			src, ok := files[p]
			if !ok {
				return fmt.Errorf("no PTX %s for instance %s", p, name)
			}
			if entry := cuda.Entry(name); !bytes.Contains(src, []byte(".entry "+entry+"(")) {
				return fmt.Errorf("%s lacks the entry %s", p, entry)
			}
		}
	}
	for p := range files {
		if !want[p] {
			return fmt.Errorf("PTX %s is of no instance (a stale .cu in the build?)", p)
		}
	}
	return nil
}

// subManifest is m reduced to the architectures arches.
func subManifest(m *ptx.Manifest, arches []ptx.Arch) *ptx.Manifest {
	out := &ptx.Manifest{Arches: arches, Files: map[string]string{}}
	for _, e := range m.Entries {
		arch, _, _ := strings.Cut(e.Path, "/")
		if !slices.ContainsFunc(arches, func(a ptx.Arch) bool { return a.Name == arch }) {
			continue
		}
		out.Entries = append(out.Entries, e)
		for _, in := range e.Inputs {
			out.Files[in] = m.Files[in]
		}
	}
	return out
}

func archNames(arches []ptx.Arch) string {
	var names []string
	for _, a := range arches {
		names = append(names, a.Name)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// untar extracts the gzipped tar file at path into dir and returns the
// directory holding its <arch>/BUILD files: dir, or its one subdirectory
// (tar -C /tmp -czf ptx.tgz ptx). Only regular files and directories are
// taken, and no path may leave dir.
func untar(path, dir string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return "", fmt.Errorf("%s: %w (want a .tgz of build_ptx.sh's output)", path, err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", fmt.Errorf("%s: %w", path, err)
		}
		name := filepath.Clean(filepath.FromSlash(h.Name))
		if !filepath.IsLocal(name) {
			return "", fmt.Errorf("%s: entry %q leaves the archive", path, h.Name)
		}
		to := filepath.Join(dir, name)
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(to, 0o755)
		case tar.TypeReg:
			if err = os.MkdirAll(filepath.Dir(to), 0o755); err == nil {
				var b []byte
				if b, err = io.ReadAll(io.LimitReader(tr, 256<<20)); err == nil {
					err = os.WriteFile(to, b, 0o644)
				}
			}
		}
		if err != nil {
			return "", fmt.Errorf("%s: %s: %w", path, h.Name, err)
		}
	}
	if metas, _ := filepath.Glob(filepath.Join(dir, "*", "BUILD")); len(metas) > 0 {
		return dir, nil
	}
	subs, _ := filepath.Glob(filepath.Join(dir, "*", "*", "BUILD"))
	if len(subs) > 0 {
		return filepath.Dir(filepath.Dir(subs[0])), nil
	}
	return dir, nil
}
