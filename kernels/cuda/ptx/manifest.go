package ptx

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
)

// Manifest is SOURCES, the text beside the archive that says what built
// each entry: the nvcc, each architecture's flags, the sha256 of every
// source file, and per entry its PTX's sha256 and the files nvcc read for
// it (its .cu and the .cuh it includes, transitively). A test rebuilds it
// from the tree and the archive and compares, so a source changed since
// the PTX was built, or an archive repacked by hand, is found without nvcc.
type Manifest struct {
	Arches  []Arch            // in name order
	Files   map[string]string // source path under kernels/cuda → sha256, hex
	Entries []Entry           // in path order
}

// Arch is one architecture's nvcc flags (besides -o and the input).
type Arch struct {
	Name  string // sm_90: the archive's directory and the target's suffix
	Flags string
	NVCC  string // the nvcc that built it: nvcc --version's last line
}

// Entry is one PTX of the archive.
type Entry struct {
	Path   string   // sm_90/matmul_q4_k.ptx
	Hash   string   // the PTX's sha256, hex
	Inputs []string // its .cu first, then the .cuh it includes in name order
}

var hexHash = regexp.MustCompile(`^[0-9a-f]{64}$`)

// ParseManifest reads SOURCES.
func ParseManifest(b []byte) (*Manifest, error) {
	m := &Manifest{Files: map[string]string{}}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		bad := func(why string) error { return fmt.Errorf("ptx: SOURCES line %d: %s: %q", n, why, line) }
		kw, rest, _ := strings.Cut(line, " ")
		f := strings.Fields(rest)
		switch kw {
		case "arch":
			if len(f) < 2 || slices.ContainsFunc(m.Arches, func(a Arch) bool { return a.Name == f[0] }) {
				return nil, bad("want arch NAME FLAGS…, once per name")
			}
			m.Arches = append(m.Arches, Arch{Name: f[0], Flags: strings.Join(f[1:], " ")})
		case "nvcc":
			i := slices.IndexFunc(m.Arches, func(a Arch) bool { return len(f) > 0 && a.Name == f[0] })
			if len(f) < 2 || i < 0 || m.Arches[i].NVCC != "" {
				return nil, bad("want nvcc ARCH VERSION once after each arch line")
			}
			m.Arches[i].NVCC = strings.Join(f[1:], " ")
		case "file":
			if len(f) != 2 || !hexHash.MatchString(f[1]) {
				return nil, bad("want file PATH SHA256")
			}
			if _, dup := m.Files[f[0]]; dup {
				return nil, bad("file listed twice")
			}
			m.Files[f[0]] = f[1]
		case "entry":
			if len(f) < 3 || !hexHash.MatchString(f[1]) {
				return nil, bad("want entry PATH SHA256 INPUT…")
			}
			if err := checkName(f[0]); err != nil {
				return nil, bad(err.Error())
			}
			m.Entries = append(m.Entries, Entry{Path: f[0], Hash: f[1], Inputs: f[2:]})
		default:
			return nil, bad("unknown keyword")
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("ptx: SOURCES: %w", err)
	}
	for _, a := range m.Arches {
		if a.NVCC == "" {
			return nil, fmt.Errorf("ptx: SOURCES: architecture %s has no nvcc line", a.Name)
		}
	}
	seen := map[string]bool{}
	for _, e := range m.Entries {
		if seen[e.Path] {
			return nil, fmt.Errorf("ptx: SOURCES: entry %s twice", e.Path)
		}
		seen[e.Path] = true
		arch, _, _ := strings.Cut(e.Path, "/")
		if !slices.ContainsFunc(m.Arches, func(a Arch) bool { return a.Name == arch }) {
			return nil, fmt.Errorf("ptx: SOURCES: entry %s of an architecture with no arch line", e.Path)
		}
		for _, in := range e.Inputs {
			if _, ok := m.Files[in]; !ok {
				return nil, fmt.Errorf("ptx: SOURCES: entry %s reads %s, which has no file line", e.Path, in)
			}
		}
	}
	return m, nil
}

// Bytes writes the manifest as SOURCES: a header, then its lines in a
// fixed order, so that the same manifest is always the same text.
func (m *Manifest) Bytes() []byte {
	var b bytes.Buffer
	b.WriteString(`# SOURCES: what built each PTX of ptx.tar.zst (written by kernels/cuda/gen -pack;
# TestArchiveFresh rebuilds it from the tree and the archive). Lines: each
# architecture's nvcc flags and the nvcc that built it; the sha256 of every
# source file; then per entry its PTX's sha256 and the files nvcc read for
# it.
`)
	arches := slices.Clone(m.Arches)
	slices.SortFunc(arches, func(a, b Arch) int { return strings.Compare(a.Name, b.Name) })
	for _, a := range arches {
		fmt.Fprintf(&b, "arch %s %s\nnvcc %s %s\n", a.Name, a.Flags, a.Name, a.NVCC)
	}
	files := make([]string, 0, len(m.Files))
	for f := range m.Files {
		files = append(files, f)
	}
	slices.Sort(files)
	for _, f := range files {
		fmt.Fprintf(&b, "file %s %s\n", f, m.Files[f])
	}
	entries := slices.Clone(m.Entries)
	slices.SortFunc(entries, func(a, b Entry) int { return strings.Compare(a.Path, b.Path) })
	for _, e := range entries {
		fmt.Fprintf(&b, "entry %s %s %s\n", e.Path, e.Hash, strings.Join(e.Inputs, " "))
	}
	return b.Bytes()
}

// Sum is the sha256 of b in hex, as SOURCES writes hashes.
func Sum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

var include = regexp.MustCompile(`(?m)^\s*#\s*include\s+"([^"]+)"`)

// Inputs lists the source files nvcc reads to compile cu (a path under
// dir, the kernels/cuda directory): cu itself, then every file it includes
// with #include "…", transitively, in name order, as paths under dir. An
// include is resolved against the including file's directory, as nvcc
// does; conditional includes count too (iq3s_grid.cuh, which only the
// IQ3_S instances compile), so the list can only err toward staleness.
func Inputs(dir, cu string) ([]string, error) {
	seen := map[string]bool{cu: true}
	queue := []string{cu}
	for len(queue) > 0 {
		f := queue[0]
		queue = queue[1:]
		src, err := os.ReadFile(path.Join(dir, f))
		if err != nil {
			return nil, fmt.Errorf("ptx: sources of %s: %w", cu, err)
		}
		for _, m := range include.FindAllSubmatch(src, -1) {
			p := path.Join(path.Dir(f), string(m[1]))
			if strings.HasPrefix(p, "../") {
				return nil, fmt.Errorf("ptx: %s includes %s, outside kernels/cuda", f, m[1])
			}
			if !seen[p] {
				seen[p] = true
				queue = append(queue, p)
			}
		}
	}
	var rest []string
	for p := range seen {
		if p != cu {
			rest = append(rest, p)
		}
	}
	slices.Sort(rest)
	return append([]string{cu}, rest...), nil
}

// BuildManifest is the manifest of the archive files (path → PTX) built
// as arches say from the .cu files in dir: each <arch>/<entry>.ptx from
// <entry>.cu.
func BuildManifest(dir string, arches []Arch, files map[string][]byte) (*Manifest, error) {
	m := &Manifest{Arches: slices.Clone(arches), Files: map[string]string{}}
	sums := map[string]string{}
	for p, ptx := range files {
		arch, file, ok := strings.Cut(p, "/")
		if !ok || !strings.HasSuffix(file, ".ptx") {
			return nil, fmt.Errorf("ptx: archive entry %s: want <arch>/<entry>.ptx", p)
		}
		if !slices.ContainsFunc(arches, func(a Arch) bool { return a.Name == arch }) {
			return nil, fmt.Errorf("ptx: archive entry %s: no flags for architecture %s", p, arch)
		}
		ins, err := Inputs(dir, strings.TrimSuffix(file, ".ptx")+".cu")
		if err != nil {
			return nil, err
		}
		for _, in := range ins {
			if _, ok := sums[in]; !ok {
				b, err := os.ReadFile(path.Join(dir, in))
				if err != nil {
					return nil, fmt.Errorf("ptx: %w", err)
				}
				sums[in] = Sum(b)
			}
			m.Files[in] = sums[in]
		}
		m.Entries = append(m.Entries, Entry{Path: p, Hash: Sum(ptx), Inputs: ins})
	}
	slices.SortFunc(m.Entries, func(a, b Entry) int { return strings.Compare(a.Path, b.Path) })
	slices.SortFunc(m.Arches, func(a, b Arch) int { return strings.Compare(a.Name, b.Name) })
	return m, nil
}
