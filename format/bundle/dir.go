package bundle

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"

	"github.com/zrtdev/zrt/format/publish"

	"github.com/zrtdev/zrt/format/gguf"
	"github.com/zrtdev/zrt/format/zrt"
)

// File names inside a bundle directory.
const (
	GraphFile   = "graph.zrg"
	WeightsFile = "weights.zrw"
	KernelDir   = "kernels"
)

// WriteDir builds a bundle directory crash-safely (format/publish): fill
// populates a fresh temporary directory beside dst, which then replaces
// dst in one atomic exchange. dst must be missing or a bundle: anything
// else is refused, never deleted. On any error nothing at dst changes.
func WriteDir(dst string, fill func(tmp string) error) error {
	return publish.Dir(publish.OS{}, dst, IsBundle, fill)
}

// IsBundle accepts a directory that holds a zrt graph file (of any
// version), the only kind of directory zrtc may replace.
func IsBundle(path string, fi fs.FileInfo) error {
	if !fi.IsDir() {
		return fmt.Errorf("it is not a directory")
	}
	f, err := os.Open(filepath.Join(path, GraphFile))
	if err != nil {
		return fmt.Errorf("it is not a zrt bundle (no %s)", GraphFile)
	}
	defer f.Close()
	var magic [4]byte
	if _, err := io.ReadFull(f, magic[:]); err != nil || binary.LittleEndian.Uint32(magic[:]) != GraphMagic {
		return fmt.Errorf("it is not a zrt bundle (%s is not a zrt graph file)", GraphFile)
	}
	return nil
}

// Bundle is an opened, validated bundle.
type Bundle struct {
	Dir   string
	Graph *Graph
	Blobs []*zrt.Blob
	// Pack is the mapped weights pack; Weights maps a weights region name
	// to its bytes inside it.
	Pack    []byte
	Weights map[string][]byte
	unmap   []func() error
}

// Open maps and validates a bundle. The minimal check, always done: graph
// file header, section checksums and tables; every kernel blob present,
// matching its recorded hash, for the bundle's target, fully patched, and
// specialized for the graph file's hyperparameters (checkSlots); the
// weights pack's table consistent with the memory plan and its recorded
// data hash the graph file's. With full set it also hashes the weights
// data against that hash.
//
// The directory is opened once and every file read through that handle,
// and every file is tied to the graph file by a hash, so a bundle replaced
// while it is opened yields the whole old build, the whole new one, or an
// error, never a mix.
func Open(dir string, full bool) (*Bundle, error) {
	b := &Bundle{Dir: dir, Weights: map[string][]byte{}}
	fail := func(err error) (*Bundle, error) {
		b.Close()
		return nil, fmt.Errorf("bundle %s: %w", dir, err)
	}
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("bundle: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("bundle: %s is not a bundle directory (zrtc build writes one)", dir)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("bundle: %w", err)
	}
	defer root.Close()
	raw, err := readFile(root, GraphFile)
	if err != nil {
		return fail(err)
	}
	if b.Graph, err = DecodeGraph(raw); err != nil {
		return fail(fmt.Errorf("%s: %w", GraphFile, err))
	}
	if err := b.Graph.Check(); err != nil {
		return fail(fmt.Errorf("%s: %w", GraphFile, err))
	}
	target, err := zrt.ParseTarget(b.Graph.Ident.Target)
	if err != nil {
		return fail(err)
	}
	for _, k := range b.Graph.Kernels {
		if filepath.Base(k.File) != k.File {
			return fail(fmt.Errorf("%w: kernel file name %q", ErrFormat, k.File))
		}
		kb, err := readFile(root, filepath.Join(KernelDir, k.File))
		if err != nil {
			return fail(err)
		}
		if sha256.Sum256(kb) != k.Hash {
			return fail(fmt.Errorf("kernel %s: %s does not match the hash recorded in the graph file (corrupt or replaced)", k.Name, k.File))
		}
		blob, err := zrt.Decode(kb)
		if err != nil {
			return fail(fmt.Errorf("kernel %s: %w", k.File, err))
		}
		if blob.Header.Target != target {
			return fail(fmt.Errorf("kernel %s is for %s, the bundle for %s", k.File, blob.Header.Target, target))
		}
		if blob.Name != k.Name {
			return fail(fmt.Errorf("kernel %s is named %q, the graph file says %q", k.File, blob.Name, k.Name))
		}
		if err := blob.CheckPatched(); err != nil {
			return fail(err)
		}
		b.Blobs = append(b.Blobs, blob)
	}
	if err := b.Graph.checkSlots(b.Blobs); err != nil {
		return fail(fmt.Errorf("%w: hyperparameters against the kernels: %v", ErrFormat, err))
	}
	pf, err := root.Open(WeightsFile)
	if err != nil {
		return fail(err)
	}
	pack, unmap, err := gguf.MapOpen(pf)
	pf.Close()
	if err != nil {
		return fail(err)
	}
	b.Pack = pack
	b.unmap = append(b.unmap, unmap)
	regions, hash, err := DecodePackTable(pack)
	if err != nil {
		return fail(fmt.Errorf("%s: %w", WeightsFile, err))
	}
	if hash != b.Graph.Ident.WeightsHash {
		return fail(fmt.Errorf("%s is not from the build of %s (its data hash differs; replaced during the open, or files copied from two builds)", WeightsFile, GraphFile))
	}
	byName := map[string]PackRegion{}
	for _, r := range regions {
		byName[r.Name] = r
	}
	for i, r := range b.Graph.Regions {
		if !isWeightRegion(b.Graph, i) {
			continue
		}
		pr, ok := byName[r.Name]
		if !ok || pr.Bytes != r.Bytes {
			return fail(fmt.Errorf("%s: region %s missing or of the wrong size (pack and graph file are from different builds?)", WeightsFile, r.Name))
		}
		b.Weights[r.Name] = pack[pr.Offset : pr.Offset+pr.Bytes : pr.Offset+pr.Bytes]
	}
	if full {
		if err := VerifyWeights(pack, b.Graph.Ident.WeightsHash); err != nil {
			return fail(fmt.Errorf("%s: %w", WeightsFile, err))
		}
	}
	return b, nil
}

// readFile reads name under root, saying that the bundle is incomplete
// when it is missing.
func readFile(root *os.Root, name string) ([]byte, error) {
	b, err := root.ReadFile(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s is missing (an incomplete copy, or the bundle was replaced while it was opened: retry)", name)
	}
	return b, err
}

// VerifyWeights hashes a pack's data against want. A fault while reading
// the mapping (the file truncated under it) is an error, not a crash.
func VerifyWeights(pack []byte, want [32]byte) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("reading the weights failed (%v): was the file truncated or changed while mapped?", r)
		}
	}()
	if PackDataHash(pack) != want {
		return fmt.Errorf("weights data does not match the hash recorded in the graph file (corrupt)")
	}
	return nil
}

// isWeightRegion reports whether region i holds weights.
func isWeightRegion(g *Graph, i int) bool {
	for _, w := range g.Weights {
		if int(w.Region) == i {
			return true
		}
	}
	return false
}

// Close unmaps the bundle's files.
func (b *Bundle) Close() error {
	var first error
	for _, u := range b.unmap {
		if err := u(); err != nil && first == nil {
			first = err
		}
	}
	b.unmap = nil
	return first
}
