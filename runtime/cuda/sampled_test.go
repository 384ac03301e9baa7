package cuda_test

import (
	"context"
	"flag"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/zrtdev/zrt/compiler/synth"
	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/runtime"
	"github.com/zrtdev/zrt/runtime/cuda/driver"
	"github.com/zrtdev/zrt/runtime/sample"
)

// TestSampledDraw: the device's draw of a sampled row (Row.Sample, argmax's
// _sampled entry) is the host sampler's (sample.Sampler.DrawWith) for the
// same logits and uniform draw, token for token, over temperatures from
// peaked to flat, draws at the ends of [0, 1) and banned tokens.
func TestSampledDraw(t *testing.T) {
	p := slotsProgram(t, 4, 11)
	if !p.SamplesOnDevice() {
		t.Fatal("T-CUDA does not sample on the device")
	}
	key, _ := p.Key(runtime.Decode, 4)
	rng := rand.New(rand.NewPCG(5, 6))
	temps := []float64{0.05, 0.3, 1, 2.5, 20}
	us := []float64{0, 0.5, math.Nextafter(1, 0)}
	for trial := range 40 {
		b := runtime.Batch{Key: key}
		temp := make([]float64, 4)
		for s := range 4 {
			temp[s] = temps[(trial+s)%len(temps)]
			u := rng.Float64()
			if trial < len(us) {
				u = us[trial]
			}
			var ban []int32
			for range rng.IntN(runtime.MaxSampleBans + 1) {
				ban = append(ban, int32(rng.IntN(p.Hparams.NVocab)))
			}
			b.Rows = append(b.Rows, runtime.Row{Slot: s, Pos: trial % 8, Token: int32(200 + 13*s + trial), Logits: true,
				Sample: &runtime.RowSample{Inv: 1 / temp[s], U: u, Ban: ban}})
			b.Pages = append(b.Pages, runtime.SlotPages{Slot: s, Pages: []uint32{uint32(s)}})
		}
		if err := p.Step(context.Background(), b); err != nil {
			t.Fatal(err)
		}
		for s, r := range b.Rows {
			logits := p.Logits(s, nil)
			for _, id := range r.Sample.Ban {
				logits[id] = float32(math.Inf(-1))
			}
			want := sample.New(sample.Params{Temperature: temp[s]}).DrawWith(logits, r.Sample.U)
			if got := p.Greedy(s); got != want {
				t.Errorf("trial %d, slot %d (T %v, u %v, banned %v): the device drew %d, the host %d", trial, s, temp[s], r.Sample.U, r.Sample.Ban, got, want)
			}
		}
	}
}

var drawSpeed = flag.Bool("drawspeed", false, "TestSampledDrawSpeed: time decode steps with and without device draws")

// TestSampledDrawSpeed (with -drawspeed) times a decode step of 1 and 64
// rows with every row drawn on the device against the same step greedy,
// on vocabularies of 32 000 and 151 936 tokens: what the draw adds to a
// step, and whether that grows with the rows (the kernel's blocks run
// side by side) or stays (a launch's fixed cost).
func TestSampledDrawSpeed(t *testing.T) {
	if !*drawSpeed {
		t.Skip("-drawspeed times the device draw")
	}
	if _, err := driver.Probe(); err != nil {
		t.Skipf("no GPU: %v", err)
	}
	for _, vocab := range []int{32000, 151936} {
		shape := synth.Shape{Arch: "llama", Layers: 2, Embd: 256, Heads: 4, HeadsKV: 4, FF: 512, Vocab: vocab, Context: 256, Type: ggml.Q8_0, Seed: 3}
		p, err := runtime.Open(compileSynth(t, shape, "cuda:sm_90", "max_slots = 64\ndecode_slots = [1, 64]\nkv_pages = 128\n"), runtime.Options{Tier: "cuda"})
		if err != nil {
			t.Fatal(err)
		}
		for _, rows := range []int{1, 64} {
			key, _ := p.Key(runtime.Decode, rows)
			var us [2]float64
			for k, draw := range []bool{false, true} {
				b := runtime.Batch{Key: key}
				for s := range rows {
					r := runtime.Row{Slot: s, Pos: 3, Token: int32(100 + s), Logits: true}
					if draw {
						r.Sample = &runtime.RowSample{Inv: 1, U: 0.37}
					}
					b.Rows = append(b.Rows, r)
					b.Pages = append(b.Pages, runtime.SlotPages{Slot: s, Pages: []uint32{uint32(s)}})
				}
				const n = 200
				for range 20 { // warm: the graph's capture, the clocks
					if err := p.Step(context.Background(), b); err != nil {
						t.Fatal(err)
					}
				}
				t0 := time.Now()
				for range n {
					if err := p.Step(context.Background(), b); err != nil {
						t.Fatal(err)
					}
				}
				us[k] = float64(time.Since(t0).Microseconds()) / n
			}
			t.Logf("vocabulary %d, %d rows: greedy %.1f µs a step, drawn %.1f (+%.1f)", vocab, rows, us[0], us[1], us[1]-us[0])
		}
		p.Close()
	}
}
