package gguf

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zrtdev/zrt/format/ggml"
	"golang.org/x/sys/unix"
)

// sharedModels lists every GGUF under ../shared/models, if it is there.
func sharedModels(t testing.TB) []string {
	root := filepath.Join("..", "..", "..", "shared", "models")
	var out []string
	filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		if err == nil && strings.HasSuffix(p, ".gguf") {
			out = append(out, p)
		}
		return nil
	})
	return out
}

func TestOpenSharedModels(t *testing.T) {
	models := sharedModels(t)
	if len(models) == 0 {
		t.Skip("../shared/models not present")
	}
	for _, p := range models {
		f, err := Open(p)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		if _, err := f.String("general.architecture"); err != nil {
			t.Errorf("%s: %v", p, err)
		}
		for i := range f.Tensors {
			ti := &f.Tensors[i]
			if got := len(f.TensorData(ti)); int64(got) != ti.Size {
				t.Errorf("%s: %s: %d bytes", p, ti.Name, got)
			}
		}
		f.Close()
	}
}

func sample() *Writer {
	w := NewWriter()
	w.Set("general.architecture", Str("llama"))
	w.Set("llama.block_count", U32(2))
	w.Set("x.i32", I32(-5))
	w.Set("x.f32", F32(1.5))
	w.Set("x.bool", Bool(true))
	w.Set("x.strs", Strs([]string{"a", "bé", ""}))
	w.Set("x.f32s", F32s([]float32{1, 2, 3}))
	w.Set("x.i32s", I32s([]int32{-1, 7}))
	w.Set("x.nested", Value{Type: TypeArray, Elem: TypeArray, v: []Value{I32s([]int32{1}), Strs([]string{"q"})}})
	w.AddTensor("a", ggml.F32, []int64{4, 2}, make([]byte, 32))
	w.AddTensor("b", ggml.Q8_0, []int64{32}, make([]byte, 34))
	return w
}

func TestRoundTrip(t *testing.T) {
	b := sample().Bytes()
	f, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := f.String("general.architecture"); s != "llama" {
		t.Errorf("arch %q", s)
	}
	if n, _ := f.Uint("llama.block_count"); n != 2 {
		t.Errorf("block_count %d", n)
	}
	v, _ := f.Lookup("x.i32")
	if i, _ := v.Int(); i != -5 {
		t.Errorf("i32 %d", i)
	}
	if _, err := v.Uint(); err == nil {
		t.Error("negative value read as unsigned")
	}
	if x, _ := f.Float("x.f32"); x != 1.5 {
		t.Errorf("f32 %v", x)
	}
	v, _ = f.Lookup("x.strs")
	if s, _ := v.Strings(); len(s) != 3 || s[1] != "bé" {
		t.Errorf("strs %q", s)
	}
	v, _ = f.Lookup("x.nested")
	if v.Len() != 2 {
		t.Errorf("nested len %d", v.Len())
	}
	ti, ok := f.Tensor("b")
	if !ok || ti.Type != ggml.Q8_0 || ti.Size != 34 || ti.Offset%32 != 0 {
		t.Errorf("tensor b %+v", ti)
	}
	if !bytes.Equal(sample().Bytes(), b) {
		t.Error("writer is not deterministic")
	}
}

// TestRejectsCorruption truncates the file at every length and flips
// every header byte: each must parse or fail with ErrFormat, never panic.
func TestRejectsCorruption(t *testing.T) {
	b := sample().Bytes()
	full, _ := Parse(b)
	last := full.Tensors[len(full.Tensors)-1]
	end := int(full.DataOffset + last.Offset + last.Size) // trailing padding may go
	for n := 0; n < end; n++ {
		if _, err := Parse(b[:n]); err == nil {
			t.Errorf("truncated to %d bytes: accepted", n)
		} else if !errors.Is(err, ErrFormat) {
			t.Errorf("truncated to %d: error %v does not wrap ErrFormat", n, err)
		}
	}
	for i := 0; i < len(b); i++ {
		for _, x := range []byte{0xff, 0x80, 0x01} {
			c := append([]byte(nil), b...)
			c[i] ^= x
			if _, err := Parse(c); err != nil && !errors.Is(err, ErrFormat) {
				t.Errorf("flip byte %d: error %v does not wrap ErrFormat", i, err)
			}
		}
	}
}

func TestSpecificErrors(t *testing.T) {
	cases := map[string]func(*Writer){
		"type id 99, which no ggml version defines": func(w *Writer) {
			w.tensors = append(w.tensors, wtensor{"z", []int64{4}, ggml.Type(99), make([]byte, 4)})
		},
		"type id 4, which no ggml version defines": func(w *Writer) { // Q4_2, retired before GGUF
			w.tensors = append(w.tensors, wtensor{"z", []int64{32}, ggml.Type(4), make([]byte, 32)})
		},
		"duplicate tensor":       func(w *Writer) { w.AddTensor("a", ggml.F32, []int64{1}, make([]byte, 4)) },
		"duplicate metadata key": func(w *Writer) { w.Set("x.f32", F32(2)) },
	}
	for want, mod := range cases {
		w := sample()
		mod(w)
		_, err := Parse(w.Bytes())
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v", want, err)
		}
	}
	bad := sample().Bytes()
	copy(bad, "GGUG")
	if _, err := Parse(bad); err == nil || !strings.Contains(err.Error(), "magic") {
		t.Errorf("bad magic: %v", err)
	}
}

// TestWalksEveryType: a file may hold any type ggml defines, whether or not
// zrt computes with it; the reader sizes and maps each, and only a build
// decides what it supports.
func TestWalksEveryType(t *testing.T) {
	w := NewWriter()
	w.Set("general.architecture", Str("llama"))
	types := ggml.Types()
	for _, typ := range types {
		ti, _ := typ.Info()
		n := int64(2 * ti.BlockSize)
		if err := w.AddTensor("t."+typ.String(), typ, []int64{n, 3}, bytes.Repeat([]byte{byte(typ)}, 6*ti.BlockBytes)); err != nil {
			t.Fatal(err)
		}
	}
	f, err := Parse(w.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Tensors) != len(types) {
		t.Fatalf("%d tensors, want %d", len(f.Tensors), len(types))
	}
	for i, typ := range types {
		ti, _ := typ.Info()
		got := &f.Tensors[i]
		if got.Type != typ || got.Size != int64(6*ti.BlockBytes) {
			t.Errorf("%s: type %v, %d bytes", typ, got.Type, got.Size)
		}
		if d := f.TensorData(got); !bytes.Equal(d, bytes.Repeat([]byte{byte(typ)}, 6*ti.BlockBytes)) {
			t.Errorf("%s: data not where the table puts it", typ)
		}
	}
	// Geometry spot checks against ggml-common.h's static_asserts.
	for typ, want := range map[ggml.Type][2]int{ggml.IQ4_XS: {256, 136}, ggml.IQ4_NL: {32, 18}, ggml.IQ3_S: {256, 110},
		ggml.IQ2_XXS: {256, 66}, ggml.IQ1_M: {256, 56}, ggml.TQ1_0: {256, 54}, ggml.MXFP4: {32, 17}, ggml.NVFP4: {64, 36}, ggml.Q1_0: {128, 18}} {
		if ti, _ := typ.Info(); ti.BlockSize != want[0] || ti.BlockBytes != want[1] {
			t.Errorf("%s: %d elements in %d bytes, want %v", typ, ti.BlockSize, ti.BlockBytes, want)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add(sample().Bytes())
	f.Add(NewWriter().Bytes())
	// Dims whose byte size overflows int64 (and wrapped to 0 once).
	big := NewWriter()
	big.tensors = append(big.tensors, wtensor{"big", []int64{1 << 31, 1 << 31}, ggml.F32, nil}, wtensor{"q", []int64{1 << 32, 1 << 30}, ggml.Q4_K, nil})
	f.Add(big.Bytes())
	for _, p := range sharedModels(f) {
		if b, err := os.ReadFile(p); err == nil && len(b) < 1<<20 {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		file, err := Parse(b)
		if err != nil {
			return
		}
		for i := range file.Tensors {
			_ = file.TensorData(&file.Tensors[i])
		}
	})
}

// TestSizeOverflow: dims whose byte size overflows int64 are refused, not
// wrapped to a small size that fits the file.
func TestSizeOverflow(t *testing.T) {
	w := NewWriter()
	w.tensors = append(w.tensors, wtensor{"big", []int64{1 << 31, 1 << 31}, ggml.F32, nil})
	_, err := Parse(w.Bytes())
	if err == nil || !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "larger than any file") {
		t.Fatalf("got %v", err)
	}
}

// TestMapRefusesSpecialFiles: a FIFO, a directory or a device is refused at
// once; opening a FIFO does not wait for a writer.
func TestMapRefusesSpecialFiles(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Skip("no FIFOs here:", err)
	}
	for path, want := range map[string]string{fifo: "FIFO", t.TempDir(): "directory", "/dev/zero": "character device"} {
		done := make(chan error, 1)
		go func() { _, err := Open(path); done <- err }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "not a regular file (a "+want+")") {
				t.Errorf("%s: %v", path, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: Open blocked", path)
		}
	}
}
