package runtime_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/asm/pm4"
	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/runtime"
	"github.com/zrtdev/zrt/runtime/sequence"
)

// mutateGraph changes one field of g, chosen by what and at (an index
// reduced modulo the field's length), to v. It returns a description, or
// "" when g has no such field. Checksums stay valid: the graph is
// re-encoded after, so only the loader's checks of meaning stand between
// the values and the kernels.
func mutateGraph(g *bundle.Graph, what uint8, at uint32, v int64) string {
	pick := func(n int) int { return int(at) % n }
	// setOne runs the setter sel picks (modulo their number) and returns
	// its index.
	setOne := func(sel uint32, set ...func()) uint32 {
		i := sel % uint32(len(set))
		set[i]()
		return i
	}
	switch what % 10 {
	case 0: // an integer hyperparameter
		h := reflect.ValueOf(&g.Hparams).Elem()
		var ints []int
		for i := range h.NumField() {
			if h.Field(i).Kind() == reflect.Int {
				ints = append(ints, i)
			}
		}
		f := ints[pick(len(ints))]
		h.Field(f).SetInt(v)
		return fmt.Sprintf("hparams.%s = %d", h.Type().Field(f).Name, v)
	case 1:
		g.Hparams.Eps = math.Float32frombits(uint32(v))
		return fmt.Sprintf("hparams.Eps = %v", g.Hparams.Eps)
	case 2:
		i := pick(len(g.Regions))
		g.Regions[i].Bytes = v
		return fmt.Sprintf("region %s bytes = %d", g.Regions[i].Name, v)
	case 3:
		i := pick(len(g.Variants))
		g.Variants[i].Slots = uint32(v)
		return fmt.Sprintf("variant %d slots = %d", i, uint32(v))
	case 4:
		i := pick(len(g.Variants))
		g.Variants[i].Rows = uint32(v)
		return fmt.Sprintf("variant %d rows = %d", i, uint32(v))
	case 5:
		vr := &g.Variants[pick(len(g.Variants))]
		j := int(at>>8) % len(vr.Words)
		vr.Words[j] = uint32(v)
		return fmt.Sprintf("stream word %d = %#x", j, uint32(v))
	case 6:
		vr := &g.Variants[pick(len(g.Variants))]
		r := &vr.Relocs[int(at>>8)%len(vr.Relocs)]
		f := setOne(at>>4, func() { r.Word = uint32(v) }, func() { r.Sym.Index = uint32(v) },
			func() { r.Sym.Addend = uint64(v) }, func() { r.Sym.Space = pm4.Space(uint8(v)) })
		return fmt.Sprintf("reloc field %d = %d", f, v)
	case 7:
		vr := &g.Variants[pick(len(g.Variants))]
		l := &vr.Liveness[int(at>>8)%len(vr.Liveness)]
		f := setOne(at>>4, func() { l.Offset = v }, func() { l.Bytes = v }, func() { l.Physical = int32(v) })
		return fmt.Sprintf("liveness %s field %d = %d", l.Name, f, v)
	case 8:
		i := pick(len(g.Variants))
		g.Variants[i].Stage = bundle.Stage(v)
		return fmt.Sprintf("variant %d stage = %d", i, uint8(v))
	case 9:
		w := &g.Weights[pick(len(g.Weights))]
		f := setOne(at>>8, func() { w.Dims[int(at>>4)%len(w.Dims)] = v }, func() { w.Offset = v }, func() { w.Bytes = v },
			func() { w.Type = uint32(v) })
		return fmt.Sprintf("weight %s field %d = %d", w.Buffer, f, v)
	}
	return ""
}

// FuzzGraphMeaning loads a bundle whose graph file has one field changed
// to an arbitrary value, with valid checksums, and runs a prefill and a
// decode step: it must refuse the bundle or run it, never panic.
func FuzzGraphMeaning(f *testing.F) {
	for what := range uint8(10) {
		for _, v := range []int64{0, -1, 1, 3, 1 << 20, math.MaxInt32, math.MaxInt64, math.MinInt64} {
			f.Add(what, uint32(what)*7919, v)
		}
	}
	good := buildTiny(f)
	graph, err := os.ReadFile(filepath.Join(good, bundle.GraphFile))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, what uint8, at uint32, v int64) {
		g, err := bundle.DecodeGraph(graph)
		if err != nil {
			t.Fatal(err)
		}
		if what%10 == 2 && v > 1<<28 {
			// Allocating it is what the memory check governs (sysmem);
			// two fuzz workers doing so at once can exhaust the machine.
			t.Skip("a region this large tests the memory check, not meaning")
		}
		desc := mutateGraph(g, what, at, v)
		dir := linkBundle(t, good)
		if err := os.WriteFile(filepath.Join(dir, bundle.GraphFile), g.Encode(), 0o644); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("%s: panic: %v\n%s", desc, r, debug.Stack())
			}
		}()
		p, err := sequence.Open(dir, runtime.Options{Tier: "cpu", Threads: 1})
		if err != nil {
			return
		}
		defer p.Close()
		seq, err := p.NewSequence()
		if err != nil {
			return
		}
		if _, err := seq.Prefill(context.Background(), []int32{1, 300, 301}); err != nil {
			return
		}
		seq.Decode(context.Background(), 302)
	})
}

// linkBundle makes a bundle directory whose kernels and weights are hard
// links to src's (the graph file is the test's to write).
func linkBundle(t *testing.T, src string) string {
	dst := filepath.Join(t.TempDir(), "b")
	if err := os.MkdirAll(filepath.Join(dst, bundle.KernelDir), 0o755); err != nil {
		t.Fatal(err)
	}
	ks, _ := os.ReadDir(filepath.Join(src, bundle.KernelDir))
	for _, k := range ks {
		n := filepath.Join(bundle.KernelDir, k.Name())
		if err := os.Link(filepath.Join(src, n), filepath.Join(dst, n)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Link(filepath.Join(src, bundle.WeightsFile), filepath.Join(dst, bundle.WeightsFile)); err != nil {
		t.Fatal(err)
	}
	return dst
}

// TestEditedGraphRefused: a graph file with valid checksums whose numbers
// were edited is refused at open with an error naming the field.
func TestEditedGraphRefused(t *testing.T) {
	good := buildTiny(t)
	graph, err := os.ReadFile(filepath.Join(good, bundle.GraphFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		edit func(g *bundle.Graph)
		want string
	}{
		{func(g *bundle.Graph) { g.Hparams.NVocab *= 4 }, "has shape [64 320], n_vocab = 1280"},
		{func(g *bundle.Graph) { g.Hparams.MaxSlots = 64 }, "region io has"},
		{func(g *bundle.Graph) { g.Hparams.NHead = 0 }, "n_head = 0, must be at least 1"},
		{func(g *bundle.Graph) { g.Hparams.Eps = float32(math.NaN()) }, "rms_norm_eps = NaN is not finite"},
		{func(g *bundle.Graph) { g.Hparams.ContextLength *= 2 }, "max_pages"},
		{func(g *bundle.Graph) { g.Regions[len(g.Regions)-1].Bytes = -1 }, `region "scratch" has size -1`},
		{func(g *bundle.Graph) { g.Weights[0].Dims[0] *= 2 }, "shape"},
		{func(g *bundle.Graph) { g.Variants[0].Relocs[0].Sym.Index = 1 << 30 }, "relocation 0 names"},
		// Hyperparameters the execution does not read, but every tool
		// that reports the model does: held to the weights' shapes.
		{func(g *bundle.Graph) { g.Hparams.NEmbd *= 2 }, `weight "model.embed_table" has shape`},
		{func(g *bundle.Graph) { g.Hparams.NHead *= 2 }, "the widest layer's attention output takes"},
		{func(g *bundle.Graph) { g.Hparams.NLayer *= 2 }, "but layer 2 has no weights"},
		{func(g *bundle.Graph) { g.Hparams.NLayer-- }, "is of layer 1, n_layer = 1"},
		{func(g *bundle.Graph) { g.Hparams.HeadDim *= 2; g.Hparams.NRot = g.Hparams.HeadDim }, "the widest layer's attention output takes"},
		{func(g *bundle.Graph) { g.Hparams.NFF *= 2 }, "n_ff = "},
	} {
		g, err := bundle.DecodeGraph(graph)
		if err != nil {
			t.Fatal(err)
		}
		c.edit(g)
		dir := linkBundle(t, good)
		os.WriteFile(filepath.Join(dir, bundle.GraphFile), g.Encode(), 0o644)
		_, err = runtime.Open(dir, runtime.Options{Tier: "cpu", Threads: 1})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want an error containing %q", err, c.want)
		}
	}
}
