// Package zrtp reads and writes a zrt pack (.zrtp): a bundle or a bundle
// set in one file, for artifact stores and scp. The index comes first, so
// a box lists a pack, and picks the member its hardware runs, from its
// first few kilobytes; each member's files follow compressed with zstd,
// each with the SHA-256 of its raw bytes, so a box unpacks only its own
// member and checks every byte it unpacks.
//
// Layout, integers little-endian:
//
//	offset 0    magic "ZRTP"
//	       4    version u32 (1)
//	       8    index length u64 (L)
//	      16    SHA-256 of the index's L bytes
//	      48    the index: JSON, padded with spaces to L bytes
//	    48+L    the data: each distinct file of the index as one zstd
//	            frame, in index order (the set's own files, then each
//	            member's), back to back, and nothing after the last
//
// The index:
//
//	{"format": "zrt-pack", "version": 1, "kind": "set" or "bundle",
//	 "set": {… the set's set.json, format/bundleset; absent for a bundle …},
//	 "files": [… the set's own files, set.json …],
//	 "members": [{"target": "cpu", "dir": "cpu",
//	              "files": [{"path": "graph.zrg", "offset": 0, "size": 1234,
//	                         "raw_size": 5678, "sha256": "…"}, …]}, …]}
//
// A pack of one bundle has one member whose dir is "". A file's path is
// relative to its member's directory and slash-separated; its offset is
// from the start of the data, size is its compressed bytes and raw_size
// its bytes unpacked. Files are in lexical path order.
//
// A file whose bytes equal an earlier file's (the same SHA-256: the
// weights pack that a set's cpu and cuda members share) is stored once;
// its entry has the earlier entry's offset, size, raw size and SHA-256.
//
// The writer reserves the index's space before it compresses anything
// (the index with every number at its widest), writes the data after it,
// and fills the index in last; so a pack is written in one pass, and
// packing the same input twice gives the same bytes: the encoder settings
// are fixed, the order sorted, and nothing records a time, an owner or a
// mode. Readers refuse another magic, a version above their own, an index
// whose checksum or layout is wrong, and a file whose length is not
// exactly what the index adds up to (a truncated pack); unpacking refuses
// a file whose bytes do not match its SHA-256, naming it.
package zrtp

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"math"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/klauspost/compress/zstd"
	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/format/bundleset"
	"github.com/zrtdev/zrt/format/publish"
)

// Ext is a pack's file name extension.
const Ext = ".zrtp"

// The index's format name and version; Version is also the header's.
const (
	FormatName = "zrt-pack"
	Version    = 1
)

// Kinds of pack.
const (
	KindBundle = "bundle"
	KindSet    = "set"
)

// ErrFormat is wrapped by every error for a pack that breaks the format:
// a wrong magic or checksum, a truncated file, a file whose bytes do not
// match the index.
var ErrFormat = errors.New("zrtp: malformed pack")

const (
	magic      = "ZRTP"
	headerSize = 48
	// maxIndex bounds the index a reader loads: far above any real set's.
	maxIndex = 64 << 20
)

// Index is a pack's index.
type Index struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
	Kind    string `json:"kind"`
	// Set is the set's index for a pack of a set, nil for a bundle.
	Set *bundleset.Index `json:"set,omitempty"`
	// Files are the set's own files (its set.json), relative to the set.
	Files   []File   `json:"files,omitempty"`
	Members []Member `json:"members"`
}

// Member is one bundle in the pack.
type Member struct {
	Target string `json:"target"`
	// Dir is the bundle's directory inside the set, "" for a pack of one
	// bundle.
	Dir   string `json:"dir"`
	Files []File `json:"files"`
}

// File is one file of a member (or of the set), stored as one zstd frame.
type File struct {
	Path    string `json:"path"`     // relative, slash-separated
	Offset  int64  `json:"offset"`   // from the start of the data
	Size    int64  `json:"size"`     // compressed bytes
	RawSize int64  `json:"raw_size"` // bytes unpacked
	SHA256  string `json:"sha256"`   // of the raw bytes, hex
}

// Member returns the member built for target.
func (x *Index) Member(target string) (Member, bool) {
	for _, m := range x.Members {
		if m.Target == target {
			return m, true
		}
	}
	return Member{}, false
}

// Sizes returns the pack's bytes of data (each shared frame once) and
// the raw bytes of every file it unpacks to.
func (x *Index) Sizes() (packed, raw int64) {
	frames := map[int64]bool{}
	x.each(func(_ string, f *File) {
		if !frames[f.Offset] {
			frames[f.Offset] = true
			packed += f.Size
		}
		raw += f.RawSize
	})
	return packed, raw
}

// each calls fn for every file in data order with its path in the
// unpacked tree.
func (x *Index) each(fn func(rel string, f *File)) {
	for i := range x.Files {
		fn(x.Files[i].Path, &x.Files[i])
	}
	for i := range x.Members {
		m := &x.Members[i]
		for j := range m.Files {
			fn(path.Join(m.Dir, m.Files[j].Path), &m.Files[j])
		}
	}
}

// check validates the index against a data section of dataSize bytes.
func (x *Index) check(dataSize int64) error {
	if x.Format != FormatName {
		return fmt.Errorf("%w: index format %q, not %s", ErrFormat, x.Format, FormatName)
	}
	if x.Version < 1 || x.Version > Version {
		return fmt.Errorf("index version %d, this zrt reads 1–%d: use a newer zrt", x.Version, Version)
	}
	switch {
	case x.Kind == KindSet && x.Set != nil:
		if err := x.Set.Check(); err != nil {
			return fmt.Errorf("%w: %v", ErrFormat, err)
		}
	case x.Kind == KindBundle && x.Set == nil && len(x.Members) == 1 && x.Members[0].Dir == "":
	default:
		return fmt.Errorf("%w: kind %q does not match its members", ErrFormat, x.Kind)
	}
	if len(x.Members) == 0 {
		return fmt.Errorf("%w: no members", ErrFormat)
	}
	for _, m := range x.Members {
		if x.Kind == KindSet && !validName(m.Dir) {
			return fmt.Errorf("%w: member %s: directory %q is not a plain name", ErrFormat, m.Target, m.Dir)
		}
	}
	var next int64
	var err error
	seen := map[string]bool{}
	frames := map[int64]*File{} // by offset
	x.each(func(rel string, f *File) {
		prev := frames[f.Offset]
		switch {
		case err != nil:
		case !validPath(f.Path) || seen[rel]:
			err = fmt.Errorf("%w: file path %q is not a relative path unique in the pack", ErrFormat, rel)
		case prev != nil && f.Offset < next:
			// A file stored once for several entries.
			if f.Size != prev.Size || f.RawSize != prev.RawSize || f.SHA256 != prev.SHA256 {
				err = fmt.Errorf("%w: %s shares the frame at %d with another file but not its sizes and SHA-256", ErrFormat, rel, f.Offset)
			}
			seen[rel] = true
		case f.Offset != next || f.Size <= 0 || f.RawSize < 0 || f.Size > dataSize-next:
			err = fmt.Errorf("%w: %s: offset %d, size %d do not follow the previous file (at %d) inside %d bytes of data (truncated?)", ErrFormat, rel, f.Offset, f.Size, next, dataSize)
		case len(f.SHA256) != 64:
			err = fmt.Errorf("%w: %s: SHA-256 %q is not 64 hex digits", ErrFormat, rel, f.SHA256)
		default:
			seen[rel] = true
			frames[f.Offset] = f
			next += f.Size
		}
	})
	if err != nil {
		return err
	}
	if next != dataSize {
		return fmt.Errorf("%w: the index accounts for %d bytes of data, the file holds %d (trailing bytes)", ErrFormat, next, dataSize)
	}
	return nil
}

func validName(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.ContainsAny(s, `/\`)
}

func validPath(p string) bool {
	if p == "" || strings.Contains(p, `\`) || path.IsAbs(p) || path.Clean(p) != p {
		return false
	}
	for _, e := range strings.Split(p, "/") {
		if !validName(e) {
			return false
		}
	}
	return true
}

// Is reports whether path is a regular file that starts with a pack's
// magic. It does not check the rest; Open does.
func Is(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return false
	}
	var b [4]byte
	_, err = io.ReadFull(f, b[:])
	return err == nil && string(b[:]) == magic
}

// isPack accepts, for replacement by Write, an existing pack.
func isPack(p string, fi fs.FileInfo) error {
	if !fi.Mode().IsRegular() || !Is(p) {
		return errors.New("it is not a zrt pack")
	}
	return nil
}

// encoderOptions are fixed, whatever the machine: the output depends on
// them, and a pack must be byte-reproducible. One goroutine per encoder
// keeps the block boundaries independent of the machine's CPUs.
func newEncoder() (*zstd.Encoder, error) {
	return zstd.NewWriter(nil,
		zstd.WithEncoderLevel(zstd.SpeedDefault),
		zstd.WithEncoderConcurrency(1),
		zstd.WithWindowSize(8<<20),
		zstd.WithEncoderCRC(true),
		zstd.WithZeroFrames(true))
}

// source is a file to pack: where it is on disk and its index entry.
type source struct {
	disk string
	file *File
}

// Write packs the bundle or bundle set at src into a pack at dst,
// atomically (format/publish). dst must be missing or a pack.
func Write(dst, src string) error {
	x, srcs, err := plan(src)
	if err != nil {
		return err
	}
	// Reserve the index at its widest: every number at the width of the
	// largest int64.
	for _, s := range srcs {
		*s.file = File{Path: s.file.Path, Offset: math.MaxInt64, Size: math.MaxInt64, RawSize: math.MaxInt64, SHA256: strings.Repeat("0", 64)}
	}
	wide, err := json.MarshalIndent(x, "", " ")
	if err != nil {
		return err
	}
	reserved := len(wide) + 1
	return publish.FileFunc(publish.OS{}, dst, isPack, func(tmp string) error {
		f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			return err
		}
		err = writeData(f, int64(headerSize+reserved), srcs)
		if err == nil {
			err = writeHead(f, x, reserved)
		}
		return errors.Join(err, f.Close())
	})
}

// plan lists the files of the bundle or set at src in pack order.
func plan(src string) (*Index, []source, error) {
	x := &Index{Format: FormatName, Version: Version}
	var srcs []source
	if bundleset.IsSet(src) {
		set, err := bundleset.Read(src)
		if err != nil {
			return nil, nil, err
		}
		x.Kind, x.Set = KindSet, set
		x.Files = []File{{Path: bundleset.IndexFile}}
		for _, m := range set.Bundles {
			if err := bundleset.VerifyMember(src, m); err != nil {
				return nil, nil, err
			}
			x.Members = append(x.Members, Member{Target: m.Target, Dir: m.Dir})
		}
	} else {
		fi, err := os.Stat(src)
		if err != nil {
			return nil, nil, err
		}
		if err := bundle.IsBundle(src, fi); err != nil {
			return nil, nil, fmt.Errorf("%s: %v, nor a bundle set (no %s)", src, err, bundleset.IndexFile)
		}
		g, _, err := bundle.ReadGraph(src)
		if err != nil {
			return nil, nil, err
		}
		x.Kind = KindBundle
		x.Members = []Member{{Target: g.Ident.Target}}
	}
	for i := range x.Members {
		m := &x.Members[i]
		root := filepath.Join(src, m.Dir)
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			switch {
			case err != nil:
				return err
			case d.IsDir():
				return nil
			case !d.Type().IsRegular():
				return fmt.Errorf("%s: not a regular file; a bundle holds only files and directories", p)
			}
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			m.Files = append(m.Files, File{Path: filepath.ToSlash(rel)})
			return nil
		})
		if err != nil {
			return nil, nil, fmt.Errorf("pack %s: %w", src, err)
		}
	}
	for i := range x.Files {
		srcs = append(srcs, source{filepath.Join(src, x.Files[i].Path), &x.Files[i]})
	}
	for i := range x.Members {
		m := &x.Members[i]
		for j := range m.Files {
			srcs = append(srcs, source{filepath.Join(src, m.Dir, filepath.FromSlash(m.Files[j].Path)), &m.Files[j]})
		}
	}
	return x, srcs, nil
}

// countWriter counts the bytes written through it.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// writeData compresses every source into f from offset at, filling in
// their index entries.
func writeData(f *os.File, at int64, srcs []source) error {
	if _, err := f.Seek(at, io.SeekStart); err != nil {
		return err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	cw := &countWriter{w: bw}
	enc, err := newEncoder()
	if err != nil {
		return err
	}
	defer enc.Close()
	// Members of a set often hold the same file (the weights pack of a
	// cpu and a cuda bundle): it is stored once, and later entries point
	// at its frame.
	frames := map[string]File{}
	for _, s := range srcs {
		sum, err := fileSum(s.disk)
		if err != nil {
			return fmt.Errorf("pack %s: %w", s.disk, err)
		}
		if f, ok := frames[sum]; ok {
			*s.file = File{Path: s.file.Path, Offset: f.Offset, Size: f.Size, RawSize: f.RawSize, SHA256: sum}
			continue
		}
		in, err := os.Open(s.disk)
		if err != nil {
			return err
		}
		h := sha256.New()
		start := cw.n
		enc.Reset(cw)
		raw, err := io.Copy(enc, io.TeeReader(in, h))
		if err == nil {
			err = enc.Close()
		}
		in.Close()
		if err == nil && hexSum(h) != sum {
			err = errors.New("the file changed while it was packed")
		}
		if err != nil {
			return fmt.Errorf("pack %s: %w", s.disk, err)
		}
		*s.file = File{Path: s.file.Path, Offset: start, Size: cw.n - start, RawSize: raw, SHA256: sum}
		frames[sum] = *s.file
	}
	return bw.Flush()
}

// fileSum is the hex SHA-256 of the file at p.
func fileSum(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hexSum(h), nil
}

// writeHead writes the header and the index, padded to reserved bytes.
func writeHead(f *os.File, x *Index, reserved int) error {
	b, err := json.MarshalIndent(x, "", " ")
	if err != nil {
		return err
	}
	if len(b) > reserved {
		return fmt.Errorf("pack: the index (%d bytes) outgrew its reserved %d", len(b), reserved)
	}
	b = append(b, bytes.Repeat([]byte{' '}, reserved-len(b))...)
	b[len(b)-1] = '\n'
	head := make([]byte, headerSize, headerSize+len(b))
	copy(head, magic)
	binary.LittleEndian.PutUint32(head[4:], Version)
	binary.LittleEndian.PutUint64(head[8:], uint64(len(b)))
	sum := sha256.Sum256(b)
	copy(head[16:], sum[:])
	_, err = f.WriteAt(append(head, b...), 0)
	return err
}

// Reader is an open pack.
type Reader struct {
	// Progress, when set, is called as an unpack writes: with the file
	// being unpacked, and the bytes unpacked so far of total, the
	// unpack's (every few MiB, and after each file).
	Progress func(file string, done, total int64)

	f         *os.File
	path      string
	index     *Index
	digest    string
	dataStart int64
	done      int64 // bytes unpacked by the running unpack
	total     int64 // bytes the running unpack writes
}

// Open reads and checks a pack's header and index; it reads nothing of
// the data but its length.
func Open(p string) (*Reader, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	r, err := open(f, p)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("pack %s: %w", p, err)
	}
	return r, nil
}

func open(f *os.File, p string) (*Reader, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	var head [headerSize]byte
	if _, err := io.ReadFull(f, head[:]); err != nil {
		return nil, fmt.Errorf("%w: header: %v (truncated?)", ErrFormat, err)
	}
	if string(head[:4]) != magic {
		return nil, fmt.Errorf("%w: magic %q, not %q", ErrFormat, head[:4], magic)
	}
	if v := binary.LittleEndian.Uint32(head[4:]); v < 1 || v > Version {
		return nil, fmt.Errorf("version %d, this zrt reads 1–%d: use a newer zrt", v, Version)
	}
	n := binary.LittleEndian.Uint64(head[8:])
	if n > maxIndex || int64(n) > fi.Size()-headerSize {
		return nil, fmt.Errorf("%w: index of %d bytes in a %d-byte file (truncated?)", ErrFormat, n, fi.Size())
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, fmt.Errorf("%w: index: %v", ErrFormat, err)
	}
	if sum := sha256.Sum256(b); !bytes.Equal(sum[:], head[16:48]) {
		return nil, fmt.Errorf("%w: the index does not match its checksum", ErrFormat)
	}
	x := &Index{}
	if err := json.Unmarshal(b, x); err != nil {
		return nil, fmt.Errorf("%w: index: %v", ErrFormat, err)
	}
	dataStart := int64(headerSize + n)
	if err := x.check(fi.Size() - dataStart); err != nil {
		return nil, err
	}
	return &Reader{f: f, path: p, index: x, digest: hex.EncodeToString(head[16:48]), dataStart: dataStart}, nil
}

// Index returns the pack's index.
func (r *Reader) Index() *Index { return r.index }

// Digest is the hex SHA-256 of the index, which names the pack's content:
// every file's checksum is in the index.
func (r *Reader) Digest() string { return r.digest }

// Close closes the pack.
func (r *Reader) Close() error { return r.f.Close() }

// Unpack writes the whole pack to dst atomically: the set (set.json and
// every member) or the bundle, exactly as packed. dst must be missing or
// a bundle or set.
func (r *Reader) Unpack(dst string) error {
	_, r.total = r.index.Sizes()
	r.done = 0
	return r.wrap(publish.Dir(publish.OS{}, dst, bundleset.IsOutput, func(tmp string) error {
		dec, err := newDecoder()
		if err != nil {
			return err
		}
		defer dec.Close()
		for _, f := range r.index.Files {
			if err := r.unpackFile(dec, f, filepath.Join(tmp, filepath.FromSlash(f.Path))); err != nil {
				return err
			}
		}
		for _, m := range r.index.Members {
			if err := r.unpackMember(dec, m, filepath.Join(tmp, m.Dir)); err != nil {
				return err
			}
		}
		return nil
	}))
}

// wrap names the pack in an unpack's error.
func (r *Reader) wrap(err error) error {
	if err != nil {
		return fmt.Errorf("pack %s: %w", r.path, err)
	}
	return nil
}

// UnpackMember writes one member's bundle to dst atomically. dst must be
// missing or a bundle.
func (r *Reader) UnpackMember(m Member, dst string) error {
	r.done, r.total = 0, 0
	for _, f := range m.Files {
		r.total += f.RawSize
	}
	return r.wrap(publish.Dir(publish.OS{}, dst, bundle.IsBundle, func(tmp string) error {
		dec, err := newDecoder()
		if err != nil {
			return err
		}
		defer dec.Close()
		return r.unpackMember(dec, m, tmp)
	}))
}

func newDecoder() (*zstd.Decoder, error) {
	return zstd.NewReader(nil, zstd.WithDecoderConcurrency(1))
}

func (r *Reader) unpackMember(dec *zstd.Decoder, m Member, dir string) error {
	for _, f := range m.Files {
		if err := r.unpackFile(dec, f, filepath.Join(dir, filepath.FromSlash(f.Path))); err != nil {
			if m.Target != "" {
				return fmt.Errorf("member %s: %w", m.Target, err)
			}
			return err
		}
	}
	return nil
}

// unpackFile decompresses f to dst, checking its size and SHA-256.
func (r *Reader) unpackFile(dec *zstd.Decoder, f File, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	err = r.decode(dec, f, out)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s: %w", f.Path, err)
	}
	return nil
}

func (r *Reader) decode(dec *zstd.Decoder, f File, out io.Writer) error {
	if err := dec.Reset(io.NewSectionReader(r.f, r.dataStart+f.Offset, f.Size)); err != nil {
		return fmt.Errorf("%w: %v", ErrFormat, err)
	}
	h := sha256.New()
	var w io.Writer = io.MultiWriter(out, h)
	if r.Progress != nil {
		w = &progressWriter{w: w, r: r, file: f.Path}
		defer func() { r.Progress(f.Path, r.done, r.total) }() // once the file is written
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	// One byte more than the index says shows a file too long.
	n, err := io.Copy(bw, io.LimitReader(dec, f.RawSize+1))
	if err != nil {
		if errors.Is(err, fs.ErrClosed) || isWriteErr(err) {
			return err
		}
		return fmt.Errorf("%w: does not decompress: %v", ErrFormat, err)
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if n != f.RawSize {
		return fmt.Errorf("%w: %d bytes unpacked, the index says %d", ErrFormat, n, f.RawSize)
	}
	if got := hexSum(h); got != f.SHA256 {
		return fmt.Errorf("%w: SHA-256 %s does not match the index's %s (the pack is damaged)", ErrFormat, got, f.SHA256)
	}
	return nil
}

// progressEvery is how many bytes an unpack writes between reports.
const progressEvery = 16 << 20

// progressWriter counts an unpack's bytes into its reader and reports
// them every progressEvery bytes.
type progressWriter struct {
	w    io.Writer
	r    *Reader
	file string
}

func (p *progressWriter) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	before := p.r.done
	p.r.done += int64(n)
	if p.r.done/progressEvery != before/progressEvery {
		p.r.Progress(p.file, p.r.done, p.r.total)
	}
	return n, err
}

// isWriteErr reports an error of the file system rather than the pack.
func isWriteErr(err error) bool {
	var pe *fs.PathError
	return errors.As(err, &pe)
}

func hexSum(h hash.Hash) string { return hex.EncodeToString(h.Sum(nil)) }
