package bundle

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"

	"github.com/zrtdev/zrt/format/gguf"
	"github.com/zrtdev/zrt/format/zrt"
)

// File names inside a bundle directory.
const (
	GraphFile   = "graph.zrg"
	WeightsFile = "weights.zrw"
	KernelDir   = "kernels"
)

// WriteDir builds a bundle directory atomically: fill populates a fresh
// temporary directory beside dst, which then replaces dst in one rename.
// On any error nothing at dst changes.
func WriteDir(dst string, fill func(tmp string) error) error {
	dst = filepath.Clean(dst)
	tmp, err := os.MkdirTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".tmp*")
	if err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	if err := fill(tmp); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	// A directory cannot be renamed over a non-empty one: move the old
	// bundle aside first, and put it back if the swap fails.
	var old string
	if st, err := os.Stat(dst); err == nil {
		if !st.IsDir() {
			os.RemoveAll(tmp)
			return fmt.Errorf("bundle: %s exists and is not a directory", dst)
		}
		old = tmp + ".old"
		if err := os.Rename(dst, old); err != nil {
			os.RemoveAll(tmp)
			return err
		}
	}
	if err := os.Rename(tmp, dst); err != nil {
		if old != "" {
			os.Rename(old, dst)
		}
		os.RemoveAll(tmp)
		return err
	}
	if old != "" {
		os.RemoveAll(old)
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
// matching its recorded hash, for the bundle's target, fully patched; the
// weights pack's table consistent with the memory plan. With full set it
// also hashes the weights data against the recorded hash.
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
	raw, err := os.ReadFile(filepath.Join(dir, GraphFile))
	if err != nil {
		return fail(err)
	}
	if b.Graph, err = DecodeGraph(raw); err != nil {
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
		kb, err := os.ReadFile(filepath.Join(dir, KernelDir, k.File))
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
	pack, unmap, err := gguf.MapFile(filepath.Join(dir, WeightsFile))
	if err != nil {
		return fail(err)
	}
	b.Pack = pack
	b.unmap = append(b.unmap, unmap)
	regions, err := DecodePackTable(pack)
	if err != nil {
		return fail(fmt.Errorf("%s: %w", WeightsFile, err))
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
	if full && PackDataHash(pack) != b.Graph.Ident.WeightsHash {
		return fail(fmt.Errorf("%s: weights data does not match the hash recorded in the graph file (corrupt)", WeightsFile))
	}
	return b, nil
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
