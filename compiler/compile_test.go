package compiler_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/compiler/synth"
	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/format/gguf"
)

func writeModel(t *testing.T, s synth.Shape) string {
	t.Helper()
	b, err := synth.Write(s)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "m.gguf")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// readTree returns every file under dir by relative path.
func readTree(t *testing.T, dir string) map[string][]byte {
	out := map[string][]byte{}
	filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(dir, p)
		out[rel] = b
		return nil
	})
	return out
}

func TestReproducibleBuild(t *testing.T) {
	for _, s := range []synth.Shape{synth.Tiny, {Arch: "qwen2", Layers: 1, Embd: 64, Heads: 2, HeadsKV: 1, FF: 96, Vocab: 300, Context: 64, Type: ggml.Q8_0, Seed: 2},
		{Arch: "qwen3", Layers: 1, Embd: 64, Heads: 4, HeadsKV: 2, HeadDim: 32, FF: 64, Vocab: 300, Context: 64, Type: ggml.F16, Seed: 3}} {
		model := writeModel(t, s)
		a, b := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
		for _, out := range []string{a, b} {
			if err := compiler.Compile(context.Background(), model, out, compiler.Options{VerifyEach: true}); err != nil {
				t.Fatalf("%s: %v", s.Arch, err)
			}
		}
		ta, tb := readTree(t, a), readTree(t, b)
		if len(ta) != len(tb) || len(ta) < 3 {
			t.Fatalf("%s: %d vs %d files", s.Arch, len(ta), len(tb))
		}
		for name, x := range ta {
			if !bytes.Equal(x, tb[name]) {
				t.Errorf("%s: %s differs between two builds", s.Arch, name)
			}
		}
	}
}

// TestRebuildReplacesAtomically overwrites an existing bundle and checks a
// failed build leaves the old one untouched.
func TestRebuildReplacesAtomically(t *testing.T) {
	model := writeModel(t, synth.Tiny)
	out := filepath.Join(t.TempDir(), "b")
	ctx := context.Background()
	if err := compiler.Compile(ctx, model, out, compiler.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := compiler.Compile(ctx, model, out, compiler.Options{}); err != nil {
		t.Fatalf("rebuild over an existing bundle: %v", err)
	}
	before := readTree(t, out)
	bad := filepath.Join(t.TempDir(), "bad.gguf")
	os.WriteFile(bad, []byte("GGUF\x03\x00\x00\x00"), 0o644)
	if err := compiler.Compile(ctx, bad, out, compiler.Options{}); err == nil {
		t.Fatal("compiled a truncated GGUF")
	}
	after := readTree(t, out)
	for k, v := range before {
		if !bytes.Equal(v, after[k]) {
			t.Errorf("%s changed after a failed build", k)
		}
	}
	entries, _ := os.ReadDir(filepath.Dir(out))
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp") {
			t.Errorf("temporary %s left behind", e.Name())
		}
	}
}

// TestHostileModels checks that malformed models are refused with an error
// that names the problem.
func TestHostileModels(t *testing.T) {
	good, err := synth.Write(synth.Tiny)
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(good)
	if err != nil {
		t.Fatal(err)
	}
	// rewrite copies the model, letting edit change metadata and tensors.
	rewrite := func(edit func(key string, v gguf.Value) (gguf.Value, bool), dropTensor string, reshape map[string][]int64) []byte {
		w := gguf.NewWriter()
		for _, kv := range f.KV {
			v, keep := edit(kv.Key, kv.Value)
			if keep {
				w.Set(kv.Key, v)
			}
		}
		for i := range f.Tensors {
			ti := &f.Tensors[i]
			if ti.Name == dropTensor {
				continue
			}
			dims, data := ti.Dims, f.TensorData(ti)
			if d, ok := reshape[ti.Name]; ok {
				dims = d
				data = make([]byte, 4*d[0]*d[1])
			}
			if err := w.AddTensor(ti.Name, ti.Type, dims, data); err != nil {
				t.Fatal(err)
			}
		}
		return w.Bytes()
	}
	same := func(k string, v gguf.Value) (gguf.Value, bool) { return v, true }
	cases := []struct {
		name, want string
		data       []byte
	}{
		{"missing tensor", "missing tensor blk.1.ffn_up.weight", rewrite(same, "blk.1.ffn_up.weight", nil)},
		{"wrong shape", "blk.0.attn_q.weight has shape", rewrite(same, "", map[string][]int64{"blk.0.attn_q.weight": {64, 32}})},
		{"unknown arch", `architecture "mamba9" is not supported`, rewrite(func(k string, v gguf.Value) (gguf.Value, bool) {
			if k == "general.architecture" {
				return gguf.Str("mamba9"), true
			}
			return v, true
		}, "", nil)},
		{"missing hparam", "llama.embedding_length", rewrite(func(k string, v gguf.Value) (gguf.Value, bool) {
			return v, k != "llama.embedding_length"
		}, "", nil)},
		{"bad head count", "head_count", rewrite(func(k string, v gguf.Value) (gguf.Value, bool) {
			if k == "llama.attention.head_count_kv" {
				return gguf.U32(3), true
			}
			return v, true
		}, "", nil)},
		{"truncated", "truncated", good[:len(good)/2]},
	}
	for _, c := range cases {
		p := filepath.Join(t.TempDir(), "m.gguf")
		os.WriteFile(p, c.data, 0o644)
		err := compiler.Compile(context.Background(), p, filepath.Join(t.TempDir(), "out"), compiler.Options{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.name, err, c.want)
		}
	}
}
