package tokenizer

import (
	"bytes"
	"fmt"
	"testing"
	"unicode/utf8"
)

// decodeByteLevelMap is decodeByteLevel through unicodeByte, the map
// runeByte stands in for.
func decodeByteLevelMap(s string) []byte {
	var out, buf []byte
	for _, c := range decodeCpts(s, nil) {
		buf = appendCpt(buf[:0], c)
		if b, ok := unicodeByte[string(buf)]; ok {
			out = append(out, b)
			continue
		}
		out = append(out, "[UNK_BYTE_0x"...)
		for _, x := range buf {
			out = fmt.Appendf(out, "%02x", x)
		}
		out = append(out, s...)
		out = append(out, ']')
	}
	return out
}

// TestDecodeByteLevelTable: the table gives what the map gives for every
// character, each GPT-2 byte character among them, and for invalid UTF-8.
func TestDecodeByteLevelTable(t *testing.T) {
	var all []byte
	for c := rune(0); c <= utf8.MaxRune; c++ {
		if c >= 0xd800 && c <= 0xdfff {
			continue
		}
		s := string(c) + "a"
		if got, want := decodeByteLevel(s), decodeByteLevelMap(s); !bytes.Equal(got, want) {
			t.Fatalf("%q: %q, the map gives %q", s, got, want)
		}
		if c < 0x200 {
			all = append(all, s...)
		}
	}
	for _, s := range []string{string(all), "\xff", "a\xc4", "\xe2\x82", "Ġhello", ""} {
		if got, want := decodeByteLevel(s), decodeByteLevelMap(s); !bytes.Equal(got, want) {
			t.Errorf("%q: %q, the map gives %q", s, got, want)
		}
	}
	for b := range 256 {
		if got := decodeByteLevel(byteUnicode[b]); !bytes.Equal(got, []byte{byte(b)}) {
			t.Errorf("byte %#x: %q", b, got)
		}
	}
}
