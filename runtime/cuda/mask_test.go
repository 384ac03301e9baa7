package cuda_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/zrtdev/zrt/compiler/synth"
	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/runtime"
	"github.com/zrtdev/zrt/runtime/cuda/driver"
	"github.com/zrtdev/zrt/runtime/sample"
)

// TestMaskedGreedy: rows with a token mask take, on the device, exactly
// the token the host's masked argmax takes from the same logits (the
// first largest allowed logit, -1 under an empty mask), beside rows
// without one, which keep the plain argmax; across steps of 1 and 4
// rows and a vocabulary that is no multiple of 4 (the kernel's scalar
// tail) or of 64 (a partial last mask word).
func TestMaskedGreedy(t *testing.T) {
	p := openMasked(t, 1)
	defer p.Close()
	maskedGreedy(t, p)
}

// TestMaskedGreedyTP is TestMaskedGreedy and TestMaskedGreedyLate on a
// tensor-parallel set of 2 ranks: rank 0 holds the whole logits after
// their gather and takes the masked rows' tokens on its device, which
// the host reads for the set.
func TestMaskedGreedyTP(t *testing.T) {
	needGPUs(t, 2)
	p := openMasked(t, 2)
	defer p.Close()
	t.Run("early", func(t *testing.T) { maskedGreedy(t, p) })
	t.Run("late", func(t *testing.T) { maskedGreedyLate(t, p) })
}

func maskedGreedy(t *testing.T, p *runtime.Program) {
	nv := p.Hparams.NVocab
	rng := rand.New(rand.NewPCG(1, 2))
	ctx := context.Background()
	for step := range 12 {
		rows := 1 + 3*(step%2)
		key, _ := p.Key(runtime.Decode, rows)
		b := runtime.Batch{Key: key}
		for s := range rows {
			r := decodeRow(&b, s, step, int32(rng.IntN(nv)))
			switch (step + s) % 4 {
			case 1: // a sparse mask
				r.Mask = make([]uint64, (nv+63)/64)
				for range 20 {
					tok := rng.IntN(nv)
					r.Mask[tok/64] |= 1 << (tok % 64)
				}
			case 2: // a dense mask, short of the last word
				r.Mask = make([]uint64, (nv+63)/64-1)
				for i := range r.Mask {
					r.Mask[i] = rng.Uint64()
				}
			case 3:
				if step == 3 {
					r.Mask = make([]uint64, (nv+63)/64) // nothing allowed
				}
			}
			b.Rows = append(b.Rows, r)
		}
		if err := p.Step(ctx, b); err != nil {
			t.Fatal(err)
		}
		checkGreedy(t, p, b, step)
	}
}

// TestMaskedGreedyLate: masks that are still being computed when Step
// starts (Batch.MasksReady waits for them, as the engine's are while the
// device runs the step) are read only after MasksReady, which Step calls
// once; the device takes the same tokens as the host's masked argmax.
func TestMaskedGreedyLate(t *testing.T) {
	p := openMasked(t, 1)
	defer p.Close()
	maskedGreedyLate(t, p)
}

func maskedGreedyLate(t *testing.T, p *runtime.Program) {
	nv := p.Hparams.NVocab
	rng := rand.New(rand.NewPCG(3, 4))
	ctx := context.Background()
	for step := range 8 {
		key, _ := p.Key(runtime.Decode, 4)
		b := runtime.Batch{Key: key}
		want := make([][]uint64, 4) // each row's mask as it will be
		for s := range 4 {
			r := decodeRow(&b, s, step, int32(rng.IntN(nv)))
			if (step+s)%3 != 0 {
				r.Mask = make([]uint64, (nv+63)/64) // clear until written
				want[s] = make([]uint64, len(r.Mask))
				for range 50 {
					tok := rng.IntN(nv)
					want[s][tok/64] |= 1 << (tok % 64)
				}
			}
			b.Rows = append(b.Rows, r)
		}
		written := make(chan struct{})
		go func() {
			time.Sleep(2 * time.Millisecond) // past the graph's launch
			for s, r := range b.Rows {
				if r.Mask != nil {
					copy(r.Mask, want[s])
				}
			}
			close(written)
		}()
		calls := 0
		b.MasksReady = func() { calls++; <-written }
		if err := p.Step(ctx, b); err != nil {
			t.Fatal(err)
		}
		if calls != 1 {
			t.Errorf("step %d: MasksReady called %d times, want 1", step, calls)
		}
		checkGreedy(t, p, b, step)
	}
}

// decodeRow gives slot s of b its own page and returns the slot's decode
// row at pos, taking tok and wanting logits.
func decodeRow(b *runtime.Batch, s, pos int, tok int32) runtime.Row {
	b.Pages = append(b.Pages, runtime.SlotPages{Slot: s, Pages: []uint32{uint32(s)}})
	return runtime.Row{Slot: s, Pos: pos, Token: tok, Logits: true}
}

// checkGreedy holds the device's greedy token of every row of step b to
// the host's argmax of the row's logits, masked where the row has a mask.
func checkGreedy(t *testing.T, p *runtime.Program, b runtime.Batch, step int) {
	t.Helper()
	for _, r := range b.Rows {
		logits := p.Logits(r.Slot, nil)
		want := sample.Argmax(logits)
		if r.Mask != nil {
			want = sample.MaskedArgmax(logits, r.Mask)
		}
		if got := p.Greedy(r.Slot); got != want {
			t.Errorf("step %d slot %d (mask %v): greedy %d, want %d", step, r.Slot, r.Mask != nil, got, want)
		}
	}
}

// openMasked opens, on T-CUDA, a model whose vocabulary is no multiple of
// 4 (the masked argmax's scalar tail) or of 64 (a partial last mask
// word), with decode steps of 1 and 4 rows, as one bundle (tp 1) or a
// tensor-parallel set of tp ranks; it skips without a GPU.
func openMasked(t *testing.T, tp int) *runtime.Program {
	t.Helper()
	if _, err := driver.Probe(); err != nil {
		t.Skipf("no GPU: %v", err)
	}
	shape := synth.Shape{Arch: "llama", Layers: 2, Embd: 128, Heads: 4, HeadsKV: 4, FF: 256, Vocab: 5003, Context: 128, Type: ggml.Q8_0, Seed: 4}
	config := "max_slots = 4\ndecode_slots = [1, 4]\nkv_pages = 16\n"
	dir := ""
	if tp > 1 {
		dir = compileSynthTP(t, shape, "cuda:sm_90", config, tp)
	} else {
		dir = compileSynth(t, shape, "cuda:sm_90", config)
	}
	p, err := runtime.Open(dir, runtime.Options{Tier: "cuda"})
	if err != nil {
		t.Fatal(err)
	}
	if !p.MasksOnDevice() {
		p.Close()
		t.Fatal("the bundle's argmax has no masked entry")
	}
	return p
}
