package ptx

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"
)

// An archive is a tar stream (ustar, entries in name order, every header
// field fixed but name and size) compressed as one zstd frame: `tar
// --zstd -tf ptx.tar.zst` lists it, and the same files always pack to the
// same bytes. Its entries are <arch>/<entry>.ptx: sm_90/matmul_q4_k.ptx.

// maxUnpacked bounds what an archive may unpack to, so that a corrupt or
// hostile one fails with an error instead of exhausting memory: many times
// the 14 MiB of today's PTX for two architectures.
const maxUnpacked = 512 << 20

// Pack writes files (archive path → content) as an archive. The result
// depends on nothing but files and the zstd encoder's version.
func Pack(files map[string][]byte) ([]byte, error) {
	names := make([]string, 0, len(files))
	for n := range files {
		if err := checkName(n); err != nil {
			return nil, err
		}
		names = append(names, n)
	}
	slices.Sort(names)
	var t bytes.Buffer
	tw := tar.NewWriter(&t)
	for _, n := range names {
		h := &tar.Header{Name: n, Mode: 0o644, Size: int64(len(files[n])), ModTime: time.Unix(0, 0),
			Typeflag: tar.TypeReg, Format: tar.FormatUSTAR}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("ptx: pack %s: %w", n, err)
		}
		if _, err := tw.Write(files[n]); err != nil {
			return nil, fmt.Errorf("ptx: pack %s: %w", n, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("ptx: pack: %w", err)
	}
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedBestCompression), zstd.WithEncoderConcurrency(1),
		zstd.WithEncoderCRC(true))
	if err != nil {
		return nil, fmt.Errorf("ptx: pack: %w", err)
	}
	defer enc.Close()
	return enc.EncodeAll(t.Bytes(), nil), nil
}

// checkName accepts an entry name of the form <arch>/<file>: two clean,
// relative path elements, as Unpack expects them.
func checkName(n string) error {
	dir, file, ok := strings.Cut(n, "/")
	if !ok || dir == "" || file == "" || strings.Contains(file, "/") || path.Clean(n) != n || dir == ".." || file == ".." {
		return fmt.Errorf("ptx: archive entry %q: want <arch>/<file>", n)
	}
	return nil
}

// Unpack reads an archive back into its files.
func Unpack(packed []byte) (map[string][]byte, error) {
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(maxUnpacked))
	if err != nil {
		return nil, fmt.Errorf("ptx: unpack: %w", err)
	}
	defer dec.Close()
	raw, err := dec.DecodeAll(packed, nil)
	if err != nil {
		return nil, fmt.Errorf("ptx: unpack: %w", err)
	}
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(raw))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("ptx: unpack: %w", err)
		}
		if h.Typeflag != tar.TypeReg {
			return nil, fmt.Errorf("ptx: unpack: entry %q is not a regular file", h.Name)
		}
		if err := checkName(h.Name); err != nil {
			return nil, err
		}
		if _, dup := files[h.Name]; dup {
			return nil, fmt.Errorf("ptx: unpack: entry %q twice", h.Name)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, fmt.Errorf("ptx: unpack %s: %w", h.Name, err)
		}
		files[h.Name] = b
	}
	return files, nil
}

// Archive is a packed archive that unpacks itself on first use, once: a
// zrtc that builds only CPU bundles never pays for it.
type Archive struct {
	packed []byte
	once   sync.Once
	files  map[string][]byte
	err    error
}

// NewArchive returns the archive of packed (Pack's output).
func NewArchive(packed []byte) *Archive { return &Archive{packed: packed} }

// Files returns the archive's files by path (<arch>/<entry>.ptx). The map
// is shared: callers must not change it.
func (a *Archive) Files() (map[string][]byte, error) {
	a.once.Do(func() { a.files, a.err = Unpack(a.packed) })
	return a.files, a.err
}

// Arches lists the architectures the archive has PTX for (sm_80, sm_90),
// in name order.
func (a *Archive) Arches() []string {
	files, _ := a.Files()
	var out []string
	for n := range files {
		dir, _, _ := strings.Cut(n, "/")
		if !slices.Contains(out, dir) {
			out = append(out, dir)
		}
	}
	slices.Sort(out)
	return out
}
