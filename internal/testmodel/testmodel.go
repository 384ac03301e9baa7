// Package testmodel writes synthetic models and compiles them into
// bundles for tests: the one way the tree's tests get a GGUF and a bundle
// to run, so that each test says only what is particular to it (the
// shape, the model config, the compiler's options) and a change in how a
// model is written or built is made once.
//
// It is test support (runtime's layering test holds that only tests
// import it): it calls the compiler, which the runtime never does.
package testmodel

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/compiler/synth"
	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/format/gguf"
	"github.com/zrtdev/zrt/internal/reference"
	"github.com/zrtdev/zrt/runtime/tokenizer"
)

// Bytes returns the GGUF of shape s.
func Bytes(t testing.TB, s synth.Shape) []byte {
	t.Helper()
	b, err := synth.Write(s)
	if err != nil {
		t.Fatalf("synthetic model %+v: %v", s, err)
	}
	return b
}

// Parsed returns the GGUF of shape s, parsed.
func Parsed(t testing.TB, s synth.Shape) *gguf.File {
	t.Helper()
	f, err := gguf.Parse(Bytes(t, s))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// Write writes the GGUF of shape s to dir/name and returns its path.
func Write(t testing.TB, dir, name string, s synth.Shape) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, Bytes(t, s), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// Retyped writes the GGUF of shape s to a fresh temporary directory with
// the tensor named stored as all-zero blocks of typ (a valid block in
// every type), and returns its path: a model with one weight of a type
// the build may refuse.
func Retyped(t testing.TB, s synth.Shape, tensor string, typ ggml.Type) string {
	t.Helper()
	f := Parsed(t, s)
	w := gguf.NewWriter()
	for _, kv := range f.KV {
		w.Set(kv.Key, kv.Value)
	}
	for i := range f.Tensors {
		ti := &f.Tensors[i]
		tt, data := ti.Type, f.TensorData(ti)
		if ti.Name == tensor {
			n, err := typ.RowBytes(ti.Elements())
			if err != nil {
				t.Fatal(err)
			}
			tt, data = typ, make([]byte, n)
		}
		if err := w.AddTensor(ti.Name, tt, ti.Dims, data); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(t.TempDir(), typ.String()+".gguf")
	if err := os.WriteFile(path, w.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// New writes the GGUF of shape s to m.gguf in a fresh temporary
// directory and returns its path.
func New(t testing.TB, s synth.Shape) string {
	t.Helper()
	return Write(t, t.TempDir(), "m.gguf", s)
}

// Tiny is New of synth.Tiny, the shape that compiles and runs in
// milliseconds.
func Tiny(t testing.TB) string {
	t.Helper()
	return New(t, synth.Tiny)
}

// Compile compiles model into out with opt; a non-empty config is the
// model config, written to m.toml beside out (opt.ConfigPath names it),
// so that model may be a read-only file. It returns out.
func Compile(t testing.TB, model, out, config string, opt compiler.Options) string {
	t.Helper()
	if config != "" {
		opt.ConfigPath = filepath.Join(filepath.Dir(out), "m.toml")
		if err := os.WriteFile(opt.ConfigPath, []byte(config), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := compiler.Compile(context.Background(), model, out, opt); err != nil {
		t.Fatal(err)
	}
	return out
}

// Shared returns the path of file in ../shared/models (see
// reference.SharedDir), skipping the test when it is not there.
func Shared(t testing.TB, file string) string {
	t.Helper()
	model := filepath.Join(reference.SharedDir(), "models", file)
	if _, err := os.Stat(model); err != nil {
		t.Skipf("%s not present", model)
	}
	return model
}

// Tokenizer returns the tokenizer of file in ../shared/models (Shared),
// skipping the test when it is not there.
func Tokenizer(t testing.TB, file string) *tokenizer.Tokenizer {
	t.Helper()
	tok, err := tokenizer.FromGGUF(Shared(t, file))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// SharedModels lists the GGUF models of ../shared/models and of its
// synthetic/ (see reference.SharedDir), none where it is not there.
func SharedModels() []string {
	var out []string
	for _, pat := range []string{"*.gguf", filepath.Join("synthetic", "*.gguf")} {
		m, _ := filepath.Glob(filepath.Join(reference.SharedDir(), "models", pat))
		out = append(out, m...)
	}
	return out
}

// CompileShared compiles file of ../shared/models (Shared) with config
// and opt (Compile) into a fresh temporary directory and returns the
// bundle's path.
func CompileShared(t testing.TB, file, config string, opt compiler.Options) string {
	t.Helper()
	return Compile(t, Shared(t, file), filepath.Join(t.TempDir(), "b"), config, opt)
}

// ReadTree returns every file under dir (a bundle, a set, a cache entry)
// by its path relative to dir.
func ReadTree(t testing.TB, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out[rel], err = os.ReadFile(p)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// SameTree fails t unless the trees a and b hold the same files, at
// least least of them, byte for byte: builds are reproducible, and a
// cached or resumed build is the fresh one.
func SameTree(t testing.TB, a, b string, least int) {
	t.Helper()
	ta, tb := ReadTree(t, a), ReadTree(t, b)
	if len(ta) != len(tb) || len(ta) < least {
		t.Fatalf("%s holds %d files, %s %d", a, len(ta), b, len(tb))
	}
	for name, data := range ta {
		if y, ok := tb[name]; !ok || !bytes.Equal(data, y) {
			t.Errorf("%s differs between %s and %s", name, a, b)
		}
	}
}

// Bundle writes synth.Tiny (Tiny) and compiles it with config and opt
// (Compile) into b beside it, returning the model's path and the
// bundle's.
func Bundle(t testing.TB, config string, opt compiler.Options) (model, bundle string) {
	t.Helper()
	model = Tiny(t)
	return model, Compile(t, model, filepath.Join(filepath.Dir(model), "b"), config, opt)
}

// HparamEdit is an edit of a bundle's hyperparameters that its weights
// and kernels contradict, and a piece of the error that refuses it.
type HparamEdit struct {
	Field string
	Edit  func(h *bundle.Hparams)
	Want  string
}

// HparamEdits are the edits of n_embd, n_head, n_layer, head_dim and n_ff
// that `zrtc verify` and every loader must refuse (issue 45).
func HparamEdits() []HparamEdit {
	return []HparamEdit{
		{"n_embd", func(h *bundle.Hparams) { h.NEmbd *= 2 }, "n_embd = "},
		{"n_head", func(h *bundle.Hparams) { h.NHead *= 2 }, "n_head = "},
		{"n_layer", func(h *bundle.Hparams) { h.NLayer *= 2 }, "has no weights"},
		{"head_dim", func(h *bundle.Hparams) { h.HeadDim *= 2; h.NRot = h.HeadDim }, "head_dim = "},
		{"n_ff", func(h *bundle.Hparams) { h.NFF *= 2 }, "n_ff = "},
	}
}

// Edited copies the bundle at good into a temporary directory with its
// graph file's hyperparameters changed by edit — checksums valid, since
// Encode recomputes them — and returns the copy.
func Edited(t testing.TB, good string, edit func(h *bundle.Hparams)) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "b")
	if err := os.CopyFS(dir, os.DirFS(good)); err != nil {
		t.Fatal(err)
	}
	g, _, err := bundle.ReadGraph(dir)
	if err != nil {
		t.Fatal(err)
	}
	edit(&g.Hparams)
	if err := os.WriteFile(filepath.Join(dir, bundle.GraphFile), g.Encode(), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}
