package support

import (
	"errors"
	"fmt"
	"testing"
)

func TestMessageAndMatch(t *testing.T) {
	cases := []struct {
		err  *Error
		want string
	}{
		{&Error{What: "tensor type", Value: "IQ4_XS (id 23)", Where: In("blk.0.ffn_down.weight")},
			"unsupported tensor type IQ4_XS (id 23) in blk.0.ffn_down.weight"},
		{&Error{What: "architecture", Value: `"gemma3"`}, `unsupported architecture "gemma3"`},
		{&Error{What: "rope scaling", Value: `"yarn"`, Where: Key("mistral3.rope.scaling.type"), Detail: "zrt computes none and linear"},
			`unsupported rope scaling "yarn" (mistral3.rope.scaling.type): zrt computes none and linear`},
	}
	for _, c := range cases {
		if got := c.err.Error(); got != c.want {
			t.Errorf("got %q, want %q", got, c.want)
		}
		wrapped := fmt.Errorf("compile m.gguf: %w", c.err)
		if !Is(wrapped) || !errors.Is(wrapped, ErrUnsupported) {
			t.Errorf("%v: not matched through wrapping", c.err)
		}
		var e *Error
		if !errors.As(wrapped, &e) || e != c.err {
			t.Errorf("%v: errors.As lost the details", c.err)
		}
	}
	if Is(errors.New("gguf: malformed file")) || Is(nil) {
		t.Error("a plain error matched ErrUnsupported")
	}
}
