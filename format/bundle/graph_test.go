package bundle

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/zrtdev/zrt/asm/pm4"
)

func sampleGraph() *Graph {
	return &Graph{
		Ident:      Ident{Producer: "test", Target: "cpu", SourceName: "m.gguf"},
		Hparams:    Hparams{Arch: "llama", NVocab: 10, NEmbd: 8, NLayer: 1, Eps: 1e-5},
		ConfigTOML: "target = \"cpu\"\n",
		Vocab:      []byte{1, 2, 3},
		Regions:    []Region{{Name: "weights.embed", Heap: 1, Bytes: 320, Align: 4096}, {Name: "io", Heap: 3, Bytes: 64, Align: 4096}},
		Weights:    []Weight{{Buffer: "model.embed_table", Tensor: "token_embd.weight", Dims: []int64{8, 10}, Region: 0, Bytes: 320}},
		Kernels:    []Kernel{{Name: "embed.f32", File: "000_embed_f32.zrt"}},
		Variants: []Variant{{Stage: StageDecode, Slots: 1, Rows: 1, Words: []uint32{pm4.Header(pm4.NOP, 1), 0},
			Relocs:   []pm4.Reloc{{Word: 1, Kind: pm4.RelocLo, Sym: pm4.Symbol{Space: pm4.SpaceRegion, Index: 1, Addend: 8}}},
			Liveness: []RegLive{{Name: "hidden", Bytes: 32, Def: 0, LastRead: 0, Physical: 0}}}},
	}
}

func TestGraphRoundTrip(t *testing.T) {
	enc := sampleGraph().Encode()
	g, err := DecodeGraph(enc)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(g.Encode(), enc) {
		t.Error("decode then encode changed the bytes")
	}
	if g.Variants[0].Relocs[0].Sym.Addend != 8 || g.Weights[0].Dims[1] != 10 || g.Hparams.Eps != 1e-5 {
		t.Errorf("round trip lost fields: %+v", g.Variants[0])
	}
}

func TestGraphRejectsEveryFlip(t *testing.T) {
	enc := sampleGraph().Encode()
	for i := range enc {
		c := append([]byte(nil), enc...)
		c[i] ^= 0x01
		if _, err := DecodeGraph(c); err == nil {
			t.Errorf("flipped byte %d accepted", i)
		} else if !errors.Is(err, ErrFormat) {
			t.Errorf("byte %d: %v does not wrap ErrFormat", i, err)
		}
	}
	for n := range enc {
		if _, err := DecodeGraph(enc[:n]); err == nil {
			t.Errorf("truncated to %d accepted", n)
		}
	}
}

func TestGraphVersionMessage(t *testing.T) {
	enc := sampleGraph().Encode()
	enc[4] = 3 // major 3
	_, err := DecodeGraph(enc)
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte(fmt.Sprintf("version 3.%d, this zrt reads 2.0", VersionMinor))) {
		t.Errorf("version error: %v", err)
	}
}

func FuzzDecodeGraph(f *testing.F) {
	f.Add(sampleGraph().Encode())
	f.Add(scheduledGraph().Encode())
	f.Fuzz(func(t *testing.T, b []byte) { DecodeGraph(b) })
}
