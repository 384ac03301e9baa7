package replay_test

import (
	"strings"
	"testing"

	"github.com/zrtdev/zrt/asm/pm4"
	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/internal/testmodel"
	"github.com/zrtdev/zrt/runtime/replay"
)

func open(t *testing.T) (*bundle.Bundle, *replay.Memory, int) {
	t.Helper()
	_, out := testmodel.Bundle(t, "", compiler.Options{})
	bb, err := bundle.Open(out, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bb.Close() })
	mem, fence := &replay.Memory{}, -1
	for i, r := range bb.Graph.Regions {
		mem.Base = append(mem.Base, uint64(i+1)<<32)
		mem.Size = append(mem.Size, uint64(r.Bytes))
		if r.Name == "fence" {
			fence = i
		}
	}
	return bb, mem, fence
}

func TestWalkResolvesEveryDispatch(t *testing.T) {
	b, mem, fence := open(t)
	for _, v := range b.Graph.Variants {
		s, err := replay.Walk(&v, b.Blobs, mem, fence)
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Dispatches) != int(v.Dispatches) || s.FenceValue != 1 {
			t.Fatalf("%d dispatches (graph file says %d), fence value %d", len(s.Dispatches), v.Dispatches, s.FenceValue)
		}
		for _, d := range s.Dispatches {
			if len(d.Bufs) != len(d.ABI.Bufs) || len(d.Push) != len(d.ABI.Push) || len(d.Spec) != len(d.ABI.Spec) || d.Grid[0] == 0 {
				t.Fatalf("%s: %d bufs, %d push, %d spec, grid %v", d.Name, len(d.Bufs), len(d.Push), len(d.Spec), d.Grid)
			}
		}
	}
}

func TestWalkRefusesBrokenStreams(t *testing.T) {
	b, mem, fence := open(t)
	good := b.Graph.Variants[1]
	cases := map[string]func(v *bundle.Variant){
		"without a fence": func(v *bundle.Variant) {
			v.Words = v.Words[:len(v.Words)-8] // drop the RELEASE_MEM packet
			v.Relocs = v.Relocs[:len(v.Relocs)-2]
		},
		"outside the memory plan": func(v *bundle.Variant) {
			v.Relocs = append([]pm4.Reloc(nil), v.Relocs...)
			v.Relocs[2].Sym.Addend = 1 << 31
		},
		"not a type-3 packet": func(v *bundle.Variant) {
			v.Words = append([]uint32{0x12345678}, v.Words...)
			v.Relocs = nil
		},
	}
	for want, mod := range cases {
		v := good
		v.Words = append([]uint32(nil), good.Words...)
		mod(&v)
		if _, err := replay.Walk(&v, b.Blobs, mem, fence); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v", want, err)
		}
	}
}
