package megakernel_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/format/support"
	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/runtime/megakernel"
)

// The seeded simulation: every shared model built for cuda:sm_90 (whose
// decode variants carry megakernel schedules), each decode variant run
// for a few steps both ways — its stream replayed in order, its schedule
// in a seeded random order of the tasks whose counters are reached — and
// every region but the fence compared bit for bit after each step. A
// failure names the seed; rerun it alone with
//
//	go test ./runtime/megakernel -run TestSchedules/MODEL -seed N
var (
	seedFlag = flag.Int64("seed", -1, "run only this seed")
	seeds    = flag.Int("seeds", 8, "seeds per variant")
)

// steps is the decode steps each run takes, so attention reads KV that
// earlier steps wrote.
const steps = 3

func sharedModels() []string {
	var out []string
	for _, pat := range []string{"../../../shared/models/*.gguf", "../../../shared/models/synthetic/*.gguf"} {
		m, _ := filepath.Glob(pat)
		out = append(out, m...)
	}
	return out
}

// build compiles model for cuda:sm_90 with three slots (decode variants
// of one to three rows) and a short context.
func build(t *testing.T, model string) *bundle.Bundle {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "b")
	err := compiler.Compile(context.Background(), model, dir, compiler.Options{Target: "cuda:sm_90", Slots: 3, ContextLength: 64})
	if support.Is(err) {
		t.Skipf("%s: %v", filepath.Base(model), err)
	}
	if err != nil {
		t.Fatal(err)
	}
	b, err := bundle.Open(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// step writes the request table (and the window ring's) for decode step
// n of variant v: row i is slot i at position n, every row wants logits,
// slot i's pages are pages i·per …, the ring's as zrt-run maps them. The
// second step leaves the variant's last row out (a step of fewer rows
// than the variant's, as the engine runs them).
func step(t *testing.T, m *megakernel.Machine, g *bundle.Graph, v *bundle.Variant, n int) {
	t.Helper()
	h := &g.Hparams
	table := kernels.NewRequestTable(h.PrefillChunk, h.MaxSlots, h.MaxPages)
	per := (steps + kernels.KVPageTokens - 1) / kernels.KVPageTokens
	for ri, r := range g.Regions {
		if r.Name != kernels.RegionIO && r.Name != kernels.RegionIOWindow {
			continue
		}
		b := m.Region(ri)
		put := func(word int, x uint32) { binary.LittleEndian.PutUint32(b[4*word:], x) }
		rows := int(v.Rows)
		if n == 1 && rows > 1 {
			rows--
		}
		put(kernels.IOWordRows, uint32(rows))
		put(kernels.IOWordMaxPages, uint32(table.MaxPages))
		put(kernels.IOWordPageTable, uint32(table.PageTable()))
		for i := 0; i < rows; i++ {
			rec := kernels.IOWordRowBase + i*kernels.IORowWords
			put(rec+kernels.IORowToken, uint32((7*i+13*n+1)%h.NVocab))
			put(rec+kernels.IORowPos, uint32(n))
			put(rec+kernels.IORowSlot, uint32(i))
			put(rec+kernels.IORowFlags, kernels.RowWantsLogits)
			for p := 0; p < per; p++ {
				page := uint32(i*per + p)
				if r.Name == kernels.RegionIOWindow {
					page = uint32(i*h.KVWindowRing + p%h.KVWindowRing)
				}
				put(table.PageTable()+i*table.MaxPages+p, page)
			}
		}
	}
}

// diff names the first region that differs between a and b.
func diff(g *bundle.Graph, a, b *megakernel.Machine) string {
	for i, r := range g.Regions {
		if r.Name == kernels.RegionFence {
			continue
		}
		x, y := a.Region(i), b.Region(i)
		if !bytes.Equal(x, y) {
			for j := range x {
				if x[j] != y[j] {
					return fmt.Sprintf("region %s differs first at byte %d", r.Name, j)
				}
			}
		}
	}
	return ""
}

// simulate runs schedule s against its stream for steps steps with the
// given order, on fresh machines.
func simulate(t *testing.T, b *bundle.Bundle, s *bundle.Schedule, o megakernel.Order) string {
	t.Helper()
	ctx := context.Background()
	want, err := megakernel.New(b, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer want.Close()
	got, err := megakernel.New(b, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	g := b.Graph
	v := &g.Variants[s.Variant]
	for n := 0; n < steps; n++ {
		step(t, want, g, v, n)
		step(t, got, g, v, n)
		if err := want.Replay(ctx, int(s.Variant)); err != nil {
			t.Fatal(err)
		}
		if err := got.Run(ctx, s, o); err != nil {
			return err.Error()
		}
		if d := diff(g, want, got); d != "" {
			return fmt.Sprintf("step %d: %s", n, d)
		}
	}
	// The step did something: logits to compare.
	for i, r := range g.Regions {
		if r.Name == kernels.RegionLogits && bytes.Count(want.Region(i), []byte{0}) == len(want.Region(i)) {
			t.Fatalf("%s: the stream wrote no logits", v.Key())
		}
	}
	return ""
}

func TestSchedules(t *testing.T) {
	models := sharedModels()
	if len(models) == 0 {
		t.Skip("no shared models under ../../../shared/models (../shared beside the repository)")
	}
	for _, model := range models {
		name := strings.TrimSuffix(filepath.Base(model), ".gguf")
		t.Run(name, func(t *testing.T) {
			b := build(t, model)
			if len(b.Graph.Schedules) == 0 {
				t.Fatal("a cuda:sm_90 bundle without megakernel schedules")
			}
			for i := range b.Graph.Schedules {
				s := &b.Graph.Schedules[i]
				key := b.Graph.Variants[s.Variant].Key()
				t.Logf("%s: %d tasks, %d counters, %d waits", key, len(s.Tasks), len(s.Counters), len(s.Waits))
				for seed := 0; seed < *seeds; seed++ {
					if *seedFlag >= 0 && int64(seed) != *seedFlag {
						continue
					}
					// Odd seeds run the queues in order, as the GPU
					// would; even ones any task whose counters are met.
					o := megakernel.Order{Seed: uint64(seed), Queues: seed%2 == 1}
					if d := simulate(t, b, s, o); d != "" {
						t.Errorf("%s: seed %d (queues %v): %s; rerun: go test ./runtime/megakernel -run 'TestSchedules/%s$' -seed %d",
							key, seed, o.Queues, d, name, seed)
					}
				}
			}
		})
	}
}

// TestDroppedWaitIsCaught holds the simulation to its job: a schedule
// with one needed wait removed must give other bits for some seed.
func TestDroppedWaitIsCaught(t *testing.T) {
	model := "../../../shared/models/synthetic/syn-qwen3-q5km.gguf"
	if m, _ := filepath.Glob(model); len(m) == 0 {
		t.Skip("no shared model", model)
	}
	b := build(t, model)
	var s *bundle.Schedule
	for i := range b.Graph.Schedules {
		if sc := &b.Graph.Schedules[i]; b.Graph.Variants[sc.Variant].Rows > 1 {
			s = sc
		}
	}
	if s == nil {
		t.Fatal("no decode schedule of several rows")
	}
	// The first task of the output projection of layer 0 (after
	// attention): without its waits it may run before attention wrote
	// what it reads.
	var victim = -1
	for i, tk := range s.Tasks {
		if tk.Kind == bundle.TaskTile && i > 0 && s.Tasks[i-1].Kind == bundle.TaskHeads {
			victim = i
			break
		}
	}
	if victim < 0 {
		t.Fatal("no tile after attention")
	}
	broken := *s
	broken.Tasks = append([]bundle.Task(nil), s.Tasks...)
	broken.Tasks[victim].WaitLen = 0
	for seed := 0; seed < 16; seed++ {
		if d := simulate(t, b, &broken, megakernel.Order{Seed: uint64(seed)}); d != "" {
			return
		}
	}
	t.Errorf("task %d without its waits gave the stream's bits in 16 seeds", victim)
}
