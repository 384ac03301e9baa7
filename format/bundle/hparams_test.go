package bundle

import (
	"errors"
	"strings"
	"testing"
)

func TestHparamsKeyValues(t *testing.T) {
	h := Hparams{Arch: "qwen3", NVocab: 151936, NEmbd: 1024, NLayer: 28, NHead: 16, NHeadKV: 8, HeadDim: 128, Eps: 1e-6, ContextLength: 4096}
	var e enc
	encodeHparams(&e, &h)
	var got Hparams
	d := newDec(e.b, tagHparams)
	if decodeHparams(d, &got); d.done() != nil || got != h {
		t.Fatalf("round trip: %+v, %v", got, d.done())
	}

	// entry builds a one-entry section followed by the encoded h.
	entry := func(key string, kind uint8, val func(*enc)) []byte {
		var x enc
		x.u32(1)
		x.str(key)
		x.u8(kind)
		val(&x)
		return x.b
	}
	decode := func(b []byte) (Hparams, error) {
		var h Hparams
		d := newDec(b, tagHparams)
		decodeHparams(d, &h)
		return h, d.done()
	}
	// A key this reader does not know (a newer zrtc's field) is skipped.
	if h, err := decode(entry("sliding_window", kvInt, func(x *enc) { x.i64(4096) })); err != nil || h != (Hparams{}) {
		t.Errorf("unknown key: %+v, %v", h, err)
	}
	for name, c := range map[string]struct {
		b    []byte
		want string
	}{
		"kind":      {entry("n_embd", kvString, func(x *enc) { x.str("wide") }), `"n_embd" has value kind 3, want 1`},
		"no kind":   {entry("n_embd", 9, func(x *enc) { x.i64(1) }), "value kind 9"},
		"range":     {entry("n_layer", kvInt, func(x *enc) { x.i64(-1) }), `"n_layer" = -1 out of range`},
		"truncated": {entry("n_layer", kvInt, func(x *enc) { x.u32(1) }), "truncated"},
		"twice": {append(append([]byte{2, 0, 0, 0}, entry("n_layer", kvInt, func(x *enc) { x.i64(1) })[4:]...),
			entry("n_layer", kvInt, func(x *enc) { x.i64(2) })[4:]...), `"n_layer" appears twice`},
	} {
		if _, err := decode(c.b); err == nil || !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want a malformed error containing %q", name, err, c.want)
		}
	}
}
