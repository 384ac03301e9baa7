package t1_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/asm/pm4"
	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/format/support"
	"github.com/zrtdev/zrt/internal/reference"
	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/runtime/amd/kfdsim"
	"github.com/zrtdev/zrt/runtime/amd/t1"
	"github.com/zrtdev/zrt/runtime/cpu"
)

// tier is what both tiers offer the test.
type tier interface {
	Region(i int) []byte
	Run(ctx context.Context, i int) error
	Close() error
}

// driver writes the request table the way runtime.Program does.
type driver struct {
	b                *bundle.Bundle
	t                tier
	table            kernels.RequestTable
	io, logits, toks int
	prefill, decode  int
}

func newDriver(t *testing.T, b *bundle.Bundle, tr tier) *driver {
	d := &driver{b: b, t: tr, prefill: -1, decode: -1}
	h := b.Graph.Hparams
	d.table = kernels.NewRequestTable(h.PrefillChunk, h.MaxSlots, h.MaxPages)
	g := b.Graph
	d.io, d.logits, d.toks = g.RegionIndex(kernels.RegionIO), g.RegionIndex(kernels.RegionLogits), g.RegionIndex(kernels.RegionTokens)
	for i, v := range b.Graph.Variants {
		if v.Stage == bundle.StagePrefill && d.prefill < 0 {
			d.prefill = i
		}
		if v.Stage == bundle.StageDecode && d.decode < 0 {
			d.decode = i
		}
	}
	if d.prefill < 0 || d.decode < 0 {
		t.Fatal("bundle lacks a prefill or decode variant")
	}
	w := d.words()
	w[kernels.IOWordMaxPages] = uint32(d.table.MaxPages)
	w[kernels.IOWordPageTable] = uint32(d.table.PageTable())
	pt := d.table.PageTable()
	for i := 0; i < d.table.MaxPages; i++ {
		w[pt+i] = uint32(i) // slot 0's pages
	}
	return d
}

func (d *driver) words() []uint32 {
	b := d.t.Region(d.io)
	w := make([]uint32, len(b)/4)
	for i := range w {
		w[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return w
}

func (d *driver) put(i int, v uint32) { binary.LittleEndian.PutUint32(d.t.Region(d.io)[4*i:], v) }

// step runs rows of tokens at positions from pos in slot 0; the last row
// wants logits.
func (d *driver) step(t *testing.T, variant int, toks []int32, pos int) {
	pt := d.table.PageTable()
	d.put(kernels.IOWordMaxPages, uint32(d.table.MaxPages))
	d.put(kernels.IOWordPageTable, uint32(pt))
	for i := 0; i < d.table.MaxPages; i++ {
		d.put(pt+i, uint32(i))
	}
	for i, tok := range toks {
		r := kernels.IOWordRowBase + i*kernels.IORowWords
		d.put(r+kernels.IORowToken, uint32(tok))
		d.put(r+kernels.IORowPos, uint32(pos+i))
		d.put(r+kernels.IORowSlot, 0)
		f := uint32(0)
		if i == len(toks)-1 {
			f = kernels.RowWantsLogits
		}
		d.put(r+kernels.IORowFlags, f)
	}
	d.put(kernels.IOWordRows, uint32(len(toks)))
	if err := d.t.Run(context.Background(), variant); err != nil {
		t.Fatal(err)
	}
}

func (d *driver) greedy() int32 { return int32(binary.LittleEndian.Uint32(d.t.Region(d.toks))) }

// TestSimMatchesCPU runs the same prompt and greedy continuation through
// T-CPU and through T1 on the simulated device: the logits must be the
// same bytes at every step and so the tokens. A bundle for an AMD target
// goes through T1's hardware form (code objects loaded by segment,
// dispatch registers from their descriptors, kernarg segments), which the
// simulated device checks before it runs the T-CPU kernel; T-CPU runs the
// same bundle's kernels by name.
func TestSimMatchesCPU(t *testing.T) {
	for _, target := range []string{"cpu", "amd:gfx1201", "amd:gfx1100"} {
		t.Run(target, func(t *testing.T) {
			if _, ok := kernels.LookupTarget(target); !ok {
				t.Skipf("this zrtc has no target %s", target)
			}
			simMatchesCPU(t, t1.BuildTiny(t, target))
		})
	}
}

func simMatchesCPU(t *testing.T, b *bundle.Bundle) {
	ct, err := cpu.Load(b, cpu.Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer ct.Close()
	dev := kfdsim.New(2)
	tt, err := t1.Load(b, dev, t1.Options{CloseDevice: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tt.Close()
	dc, ds := newDriver(t, b, ct), newDriver(t, b, tt)
	nv := int32(b.Graph.Hparams.NVocab)
	prompt := []int32{1, 300 % nv, 301 % nv, 302 % nv, 17}
	dc.step(t, dc.prefill, prompt, 0)
	ds.step(t, ds.prefill, prompt, 0)
	var got []int32
	for i := 0; i < 8; i++ {
		if !bytes.Equal(dc.t.Region(dc.logits), ds.t.Region(ds.logits)) {
			t.Fatalf("step %d: logits differ between T-CPU and T1 on kfdsim", i)
		}
		tc, ts := dc.greedy(), ds.greedy()
		if tc != ts {
			t.Fatalf("step %d: T-CPU picked %d, T1 %d", i, tc, ts)
		}
		got = append(got, ts)
		dc.step(t, dc.decode, []int32{tc}, len(prompt)+i)
		ds.step(t, ds.decode, []int32{ts}, len(prompt)+i)
	}
	if dev.Dispatches == 0 {
		t.Fatal("the simulated device ran no dispatch")
	}
	t.Logf("tokens %v, %d dispatches on kfdsim (%s)", got, dev.Dispatches, tt.Device().Name)
}

// TestLoadRefusesBadRelocation: a relocation past its region's end is
// refused when T1 patches the stream.
func TestLoadRefusesBadRelocation(t *testing.T) {
	b := t1.BuildTiny(t, "cpu")
	v := &b.Graph.Variants[0]
	relocs := append([]pm4.Reloc(nil), v.Relocs...)
	for i := range relocs {
		if relocs[i].Sym.Space == pm4.SpaceRegion {
			relocs[i].Sym.Addend += uint64(b.Graph.Regions[relocs[i].Sym.Index].Bytes) + 4096
			break
		}
	}
	v.Relocs = relocs
	_, err := t1.Load(b, kfdsim.New(1), t1.Options{CloseDevice: true})
	if err == nil || !strings.Contains(err.Error(), "outside") {
		t.Fatalf("load of a stream with a relocation outside its region: %v", err)
	}
}

// TestSharedModels runs every shared model of the families the AMD
// targets cover (llama, qwen2, qwen3, qwen3moe) built for amd:gfx1201
// through T1 on the simulated device and through T-CPU (the same bundle's
// kernels by name): the logits must be the same bytes at every step.
func TestSharedModels(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	if _, ok := kernels.LookupTarget("amd:gfx1201"); !ok {
		t.Skip("this zrtc has no target amd:gfx1201")
	}
	dir := filepath.Join(reference.SharedDir(), "models")
	var models []string
	for _, pat := range []string{"stories260K.gguf", "TinyStories-656K.*.gguf", "synthetic/syn-llama-*.gguf", "synthetic/syn-qwen2-*.gguf", "synthetic/syn-qwen3-*.gguf", "synthetic/syn-qwen3moe-*.gguf"} {
		m, _ := filepath.Glob(filepath.Join(dir, pat))
		models = append(models, m...)
	}
	if len(models) == 0 {
		t.Skipf("no shared models under %s (set ZRT_SHARED)", dir)
	}
	for _, model := range models {
		t.Run(strings.TrimSuffix(filepath.Base(model), ".gguf"), func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "b")
			err := compiler.Compile(context.Background(), model, out, compiler.Options{Target: "amd:gfx1201"})
			if support.Is(err) {
				t.Skipf("unsupported: %v", err)
			}
			if err != nil {
				t.Fatal(err)
			}
			b, err := bundle.Open(out, false)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			simMatchesCPU(t, b)
		})
	}
}
