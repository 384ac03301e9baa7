package tokenizer

import (
	"testing"

	"github.com/zrtdev/zrt/format/vocab"
)

func TestParseFormatIDs(t *testing.T) {
	tok, err := New(&vocab.Vocab{Model: "llama", Tokens: []string{"<unk>", "<s>", "</s>", "▁a"}, Scores: []float32{0, 0, 0, -1},
		Types: []int32{2, 3, 3, 1}, BOS: 1, EOS: 2, EOT: -1, UNK: 0, PAD: -1, SEP: -1, NL: -1,
		EOM: -1, MASK: -1, FIMPre: -1, FIMSuf: -1, FIMMid: -1, FIMPad: -1, FIMRep: -1, FIMSep: -1})
	if err != nil {
		t.Fatal(err)
	}
	ids, err := tok.ParseIDs(" 1,2\n3 ")
	if err != nil || len(ids) != 3 || ids[2] != 3 {
		t.Fatalf("ParseIDs: %v %v", ids, err)
	}
	if got := FormatIDs(ids); got != "1 2 3" {
		t.Errorf("FormatIDs: %q", got)
	}
	for _, bad := range []string{"4", "-1", "x", "1.5"} {
		if _, err := tok.ParseIDs(bad); err == nil {
			t.Errorf("ParseIDs(%q) accepted", bad)
		}
	}
}
