package gguf

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
)

// Keys llama-gguf-split writes into every part of a split model.
const (
	KeySplitNo      = "split.no"            // u16: this part's index, from 0
	KeySplitCount   = "split.count"         // u16: the number of parts
	KeySplitTensors = "split.tensors.count" // i32: the tensors of all parts
)

// splitName matches a part of a split GGUF as llama-gguf-split names
// them: PREFIX-00001-of-00003.gguf.
var splitName = regexp.MustCompile(`^(.*)-(\d{5})-of-(\d{5})\.gguf$`)

// Parts returns the files a model is read from, in order: path alone, or,
// for the first part of a split GGUF (NAME-00001-of-0000N.gguf), all N
// parts beside it. Naming another part, or a part that is missing, is an
// error that names the file to give instead.
func Parts(path string) ([]string, error) {
	m := splitName.FindStringSubmatch(filepath.Base(path))
	if m == nil {
		return []string{path}, nil
	}
	no, _ := strconv.Atoi(m[2])
	n, _ := strconv.Atoi(m[3])
	dir := filepath.Dir(path)
	name := func(i int) string { return filepath.Join(dir, fmt.Sprintf("%s-%05d-of-%05d.gguf", m[1], i, n)) }
	if n < 1 || no < 1 || no > n {
		return nil, fmt.Errorf("%s: a split GGUF's name says part %d of %d", path, no, n)
	}
	if no != 1 {
		return nil, fmt.Errorf("%s is part %d of a split GGUF: give its first part, %s", path, no, filepath.Base(name(1)))
	}
	parts := make([]string, n)
	for i := range parts {
		parts[i] = name(i + 1)
		if _, err := os.Stat(parts[i]); err != nil {
			return nil, fmt.Errorf("split GGUF %s: part %d of %d: %w", path, i+1, n, err)
		}
	}
	return parts, nil
}

// OpenModel opens a model's GGUF: the file at path, or, given the first
// part of a split GGUF, every part as one File, with the metadata of the
// first part (where llama-gguf-split puts it) and the tensors of all.
// Each part is checked against the split keys it carries.
func OpenModel(path string) (*File, error) {
	parts, err := Parts(path)
	if err != nil {
		return nil, err
	}
	if len(parts) == 1 {
		return Open(path)
	}
	f := &File{}
	fail := func(err error) (*File, error) {
		f.Close()
		return nil, err
	}
	for i, p := range parts {
		part, err := Open(p)
		if err != nil {
			return fail(err)
		}
		f.parts = append(f.parts, part)
		if err := checkPart(part, i, len(parts)); err != nil {
			return fail(fmt.Errorf("%s: %w", p, err))
		}
		if i == 0 {
			f.Version, f.KV, f.kvIndex, f.Alignment, f.DataOffset = part.Version, part.KV, part.kvIndex, part.Alignment, part.DataOffset
			f.tIndex = map[string]int{}
		}
		for _, t := range part.Tensors {
			if _, dup := f.tIndex[t.Name]; dup {
				return fail(fmt.Errorf("%s: %w: tensor %q is also in an earlier part", p, ErrFormat, t.Name))
			}
			t.part = i
			f.tIndex[t.Name] = len(f.Tensors)
			f.Tensors = append(f.Tensors, t)
		}
	}
	if v, ok := f.Lookup(KeySplitTensors); ok {
		if n, err := v.Int(); err != nil || n != int64(len(f.Tensors)) {
			return fail(fmt.Errorf("split GGUF %s: %s says %v tensors, its %d parts hold %d", path, KeySplitTensors, v, len(parts), len(f.Tensors)))
		}
	}
	return f, nil
}

// checkPart checks that part says it is part i (from 0) of n.
func checkPart(part *File, i, n int) error {
	for _, c := range []struct {
		key  string
		want int
	}{{KeySplitNo, i}, {KeySplitCount, n}} {
		v, ok := part.Lookup(c.key)
		if !ok {
			return fmt.Errorf("%w: no %s: not a part of a split GGUF", ErrFormat, c.key)
		}
		if x, err := v.Uint(); err != nil || x != uint64(c.want) {
			return fmt.Errorf("%w: %s is %v, its name makes it %d", ErrFormat, c.key, v, c.want)
		}
	}
	return nil
}

// Sources returns the bytes the model was read from, one slice per file
// in order: the whole file, or each part of a split GGUF.
func (f *File) Sources() [][]byte {
	if f.parts == nil {
		return [][]byte{f.data}
	}
	out := make([][]byte, len(f.parts))
	for i, p := range f.parts {
		out[i] = p.data
	}
	return out
}

// Split returns f as n part files the way llama-gguf-split writes them:
// the metadata in the first part, the tensors in order in runs of about
// equal count, and the split keys in every part. OpenModel of the first
// part reads back f's metadata and tensors.
func Split(f *File, n int) ([][]byte, error) {
	if n < 1 || n > len(f.Tensors) || n > 99999 {
		return nil, fmt.Errorf("split: %d parts of %d tensors", n, len(f.Tensors))
	}
	out := make([][]byte, n)
	for i := range n {
		w := NewWriter()
		if i == 0 {
			for _, kv := range f.KV {
				switch kv.Key {
				case KeySplitNo, KeySplitCount, KeySplitTensors:
				default:
					w.Set(kv.Key, kv.Value)
				}
			}
		} else if a, ok := f.Lookup("general.alignment"); ok {
			w.Set("general.alignment", a)
		}
		w.Set(KeySplitNo, U16(uint16(i)))
		w.Set(KeySplitCount, U16(uint16(n)))
		w.Set(KeySplitTensors, I32(int32(len(f.Tensors))))
		lo, hi := i*len(f.Tensors)/n, (i+1)*len(f.Tensors)/n
		for j := lo; j < hi; j++ {
			t := &f.Tensors[j]
			if err := w.AddTensor(t.Name, t.Type, t.Dims, f.TensorData(t)); err != nil {
				return nil, err
			}
		}
		out[i] = w.Bytes()
	}
	return out, nil
}
