package compiler_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/compiler/synth"
	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/format/gguf"
	"github.com/zrtdev/zrt/internal/testmodel"
)

// TestTiedEmbeddingStoredOnce: a model whose output reuses token_embd
// (no output.weight) stores that table once in the weights pack, and the
// LM head points at the embedding table's bytes; the pack then holds no
// more than the GGUF's tensors (plus alignment).
func TestTiedEmbeddingStoredOnce(t *testing.T) {
	dir := t.TempDir()
	tied := synth.Tiny
	tied.Arch = "gemma2" // gemma ties its output to the embeddings
	models := []string{testmodel.Write(t, dir, "tied.gguf", tied)}
	for _, m := range sharedModels() {
		if filepath.Base(m) == "TinyStories-656K.Q8_0.gguf" {
			models = append(models, m)
		}
	}
	for i, model := range models {
		out := filepath.Join(dir, "b"+string(rune('0'+i)))
		if err := compiler.Compile(context.Background(), model, out, compiler.Options{}); err != nil {
			t.Fatal(err)
		}
		g, _, err := bundle.ReadGraph(filepath.Join(out, bundle.GraphFile))
		if err != nil {
			t.Fatal(err)
		}
		var embed, head *bundle.Weight
		for i := range g.Weights {
			switch w := &g.Weights[i]; w.Buffer {
			case "model.embed_table":
				embed = w
			case "model.lm_head":
				head = w
			}
		}
		if embed == nil || head == nil || head.Tensor != "token_embd.weight" {
			t.Fatalf("%s: embed %+v, head %+v: not a tied model", model, embed, head)
		}
		if head.Region != embed.Region || head.Offset != embed.Offset {
			t.Errorf("%s: the LM head is at region %d offset %d, the embedding table at region %d offset %d: stored twice",
				model, head.Region, head.Offset, embed.Region, embed.Offset)
		}
		f, err := gguf.Open(model)
		if err != nil {
			t.Fatal(err)
		}
		var tensors int64
		for _, t := range f.Tensors {
			tensors += t.Size
		}
		f.Close()
		st, err := os.Stat(filepath.Join(out, bundle.WeightsFile))
		if err != nil {
			t.Fatal(err)
		}
		// Each weight aligned to 256 bytes, each region to a 4 KiB page,
		// and a header page: at most this much beside the tensors.
		slack := int64(len(g.Weights))*256 + int64(len(g.Regions)+1)*4096
		if st.Size() > tensors+slack {
			t.Errorf("%s: the weights pack is %d bytes for %d bytes of tensors", model, st.Size(), tensors)
		}
	}
}
