package zrt

import (
	"errors"
	"strings"
	"testing"
)

func sampleBlob() *Blob {
	return &Blob{Name: "rope", Header: Header{ABIVersion: ABIVersion, Target: CPU, BufferCount: 2, PushConstBytes: 8, Workgroup: [3]uint32{1, 1, 1}},
		Code:  []byte("rope\x00\x00\x00\x00\xbe\xba\xfe\xca\xbe\xba\xfe\xca"),
		Slots: []Slot{{Name: "n_rot", CodeOffset: 8}, {Name: "freq_base", CodeOffset: 12}}}
}

func TestRoundTripAndPatch(t *testing.T) {
	b := sampleBlob()
	if err := b.CheckPatched(); err == nil {
		t.Fatal("unpatched blob passed CheckPatched")
	}
	if err := b.Patch("n_rot", 64); err != nil {
		t.Fatal(err)
	}
	if err := b.Patch("nope", 1); err == nil {
		t.Error("patched a slot that does not exist")
	}
	d, err := Decode(b.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != "rope" || len(d.Slots) != 2 || d.Header.BufferCount != 2 {
		t.Fatalf("decoded %+v", d)
	}
	if v, err := d.SlotValue("n_rot"); err != nil || v != 64 {
		t.Errorf("n_rot = %d, %v", v, err)
	}
	if _, err := d.SlotValue("freq_base"); err == nil {
		t.Error("read an unpatched slot")
	}
	if err := d.CheckPatched(); err == nil || !strings.Contains(err.Error(), "freq_base") {
		t.Errorf("CheckPatched: %v", err)
	}
}

func TestDecodeRejectsDamage(t *testing.T) {
	b := sampleBlob()
	b.Patch("n_rot", 1)
	b.Patch("freq_base", 2)
	enc := b.Encode()
	for n := 0; n < len(enc); n++ {
		if _, err := Decode(enc[:n]); err == nil {
			t.Errorf("truncated to %d: accepted", n)
		}
	}
	for i := 0; i < HeaderSize; i++ {
		c := append([]byte(nil), enc...)
		c[i] ^= 0xFF
		if _, err := Decode(c); err != nil && !errors.Is(err, ErrFormat) {
			t.Errorf("byte %d: %v does not wrap ErrFormat", i, err)
		}
	}
	c := append([]byte(nil), enc...)
	c[4] = 9
	if _, err := Decode(c); err == nil || !strings.Contains(err.Error(), "version 9") {
		t.Errorf("ABI version: %v", err)
	}
}

func FuzzDecode(f *testing.F) {
	b := sampleBlob()
	f.Add(b.Encode())
	f.Fuzz(func(t *testing.T, data []byte) {
		if blob, err := Decode(data); err == nil {
			blob.CheckPatched()
			for _, s := range blob.Slots {
				blob.SlotValue(s.Name)
			}
		}
	})
}

func TestTargets(t *testing.T) {
	for _, s := range []string{"cpu", "cuda:sm_90", "amd:gfx1201"} {
		tg, err := ParseTarget(s)
		if err != nil || tg.String() != s {
			t.Errorf("%s: %v %v", s, tg, err)
		}
	}
	if _, err := ParseTarget("tpu"); err == nil {
		t.Error("unknown target accepted")
	}
}
