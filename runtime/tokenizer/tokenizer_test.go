package tokenizer

import (
	"github.com/zrtdev/zrt/format/vocab"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/zrtdev/zrt/format/gguf"
)

// TestRoundTrip checks Decode(Encode(text)) == text on the vector inputs.
// Exclusions, where llama.cpp does not round-trip either:
//   - bert-bge: WordPiece lowercases, strips accents and drops whitespace;
//   - vocabularies with clean_spaces (gpt-2 here): detokenize removes the
//     space before punctuation and contractions, so inputs containing
//     " ?", " !", " .", " ,", " '" are skipped for them;
//   - inputs that the vocabulary cannot represent: SPM encodes them with
//     byte fallback and they come back intact, but byte-level BPE drops
//     nothing either, so no exclusion is needed for that.
//
// SPM vocabularies add a leading space when encoding; Decode removes it
// again (detokenize's remove_space), so the comparison is direct.
func TestRoundTrip(t *testing.T) {
	for _, name := range vectorVocabs(t) {
		if name == "bert-bge" {
			continue
		}
		t.Run(name, func(t *testing.T) {
			tk := loadTok(t, name)
			cases := readVectors(t, filepath.Join(vocabDir, "ggml-vocab-"+name+".gguf"))
			checked := 0
			for _, c := range cases {
				if tk.cleanSpaces() && hasCleanable(c.text) {
					continue
				}
				got := tk.Decode(tk.Encode(c.text, false, false))
				if got != c.text {
					t.Errorf("round trip of %q gave %q", c.text, got)
				}
				checked++
			}
			t.Logf("%d/%d inputs checked", checked, len(cases))
		})
	}
}

func hasCleanable(s string) bool {
	for _, p := range []string{" ?", " !", " .", " ,", " '"} {
		if strings.Contains(s, p) {
			return true
		}
	}
	return false
}

func TestDecodeSPMLeadingSpace(t *testing.T) {
	tk := loadTok(t, "llama-spm")
	ids := tk.Encode("Hello world", true, false)
	if ids[0] != tk.Vocab().BOS {
		t.Fatalf("no BOS: %v", ids)
	}
	// llama.cpp strips the leading space from the first token only; when
	// that is the BOS (which prints nothing) the space after it stays.
	if got := tk.Decode(ids); got != " Hello world" {
		t.Errorf("Decode = %q", got)
	}
	if got := tk.Decode(ids[1:]); got != "Hello world" {
		t.Errorf("Decode without BOS = %q", got)
	}
	// With remove_special the BOS goes and the space after it stays too.
	if got := tk.Detokenize(ids, true, false); got != " Hello world" {
		t.Errorf("Detokenize(remove_special) = %q", got)
	}
	if got := tk.Detokenize(ids, false, true); got != "<s> Hello world" {
		t.Errorf("Detokenize(unparse_special) = %q", got)
	}
}

func TestStreamDecoderSplitChar(t *testing.T) {
	tk := loadTok(t, "llama-spm")
	// U+1F9D9 is not in the Llama-2 vocabulary: SPM falls back to its 4 bytes.
	ids := tk.Encode("a🧙b", false, false)
	var bytesTok int
	for _, id := range ids {
		if tk.Vocab().Types[id] == vocab.TypeByte {
			bytesTok++
		}
	}
	if bytesTok != 4 {
		t.Fatalf("want 4 byte tokens, got %v", ids)
	}
	d := tk.NewStreamDecoder()
	var parts []string
	for _, id := range ids {
		s := d.Add(id)
		if !utf8.ValidString(s) {
			t.Fatalf("Add returned invalid UTF-8 %q", s)
		}
		parts = append(parts, s)
	}
	parts = append(parts, d.Flush())
	if got := strings.Join(parts, ""); got != " a🧙b" {
		t.Errorf("stream gave %q (parts %q)", got, parts)
	}
	// The three leading byte tokens must produce nothing on their own.
	for i, id := range ids {
		if tk.Vocab().Types[id] == vocab.TypeByte && parts[i] != "" && !strings.Contains(parts[i], "🧙") {
			t.Errorf("part %d = %q before the character was complete", i, parts[i])
		}
	}
	// A dangling lead byte comes out of Flush.
	d = tk.NewStreamDecoder()
	id, _ := tk.TokenID("<0xF0>")
	if s := d.Add(id); s != "" {
		t.Errorf("Add(<0xF0>) = %q", s)
	}
	if s := d.Flush(); s != "\xf0" {
		t.Errorf("Flush = %q", s)
	}
	// An impossible byte is replaced at once.
	id, _ = tk.TokenID("<0xFF>")
	if s := d.Add(id); s != "\uFFFD" {
		t.Errorf("Add(<0xFF>) = %q", s)
	}
}

func TestPieces(t *testing.T) {
	spm := loadTok(t, "llama-spm")
	for text, want := range map[string]string{"▁Hello": " Hello", "<0x0A>": "\n", "<s>": "", "<unk>": ""} {
		id, ok := spm.TokenID(text)
		if !ok {
			t.Fatalf("no token %q", text)
		}
		if got := string(spm.Piece(id)); got != want {
			t.Errorf("Piece(%q) = %q, want %q", text, got, want)
		}
	}
	if got := string(spm.TokenToPiece(1, true)); got != "<s>" {
		t.Errorf("TokenToPiece(BOS, special) = %q", got)
	}
	if spm.Piece(-1) != nil || spm.Piece(int32(spm.NVocab())) != nil {
		t.Error("out-of-range Piece not nil")
	}
	g := loadTok(t, "gpt-2")
	id, _ := g.TokenID("ĠHello")
	if got := string(g.Piece(id)); got != " Hello" {
		t.Errorf("gpt-2 Piece = %q", got)
	}
	if got := g.Decode(g.Encode("Hello , world !", false, false)); got != "Hello, world!" {
		t.Errorf("gpt-2 clean spaces: %q", got)
	}
}

func TestSpecialTokens(t *testing.T) {
	q := loadTok(t, "qwen2")
	v := q.Vocab()
	start, ok := q.TokenID("<|im_start|>")
	if !ok {
		t.Skip("no <|im_start|>")
	}
	end, _ := q.TokenID("<|im_end|>")
	text := "<|im_start|>user\nhi<|im_end|>"
	ids := q.Encode(text, false, true)
	if ids[0] != start || ids[len(ids)-1] != end {
		t.Errorf("parseSpecial: %v", ids)
	}
	plain := q.Encode(text, false, false)
	for _, id := range plain {
		if id == start || id == end {
			t.Errorf("control token produced from plain text: %v", plain)
		}
	}
	if q.Decode(ids) != "user\nhi" {
		t.Errorf("Decode drops control tokens: %q", q.Decode(ids))
	}
	if q.Detokenize(ids, false, true) != text {
		t.Errorf("Detokenize(unparse) = %q", q.Detokenize(ids, false, true))
	}
	if !q.IsEOG(end) || !q.IsEOG(v.EOS) || q.IsEOG(start) || q.IsEOG(-1) {
		t.Error("IsEOG wrong")
	}
	if v.EOT != end {
		t.Errorf("EOT = %d, want <|im_end|> %d", v.EOT, end)
	}

	l3 := loadTok(t, "llama-bpe")
	eot, _ := l3.TokenID("<|eot_id|>")
	if l3.Vocab().EOT != eot || !l3.IsEOG(eot) {
		t.Errorf("llama3 EOT = %d, want %d", l3.Vocab().EOT, eot)
	}
	ids = l3.Encode("hi", true, false)
	if len(ids) != 2 || ids[0] != l3.Vocab().BOS {
		t.Errorf("llama3 add BOS: %v", ids)
	}

	// Phi-3's special tokens swallow the whitespace after them (rstrip).
	p := loadTok(t, "phi-3")
	u, ok := p.TokenID("<|user|>")
	if !ok {
		t.Skip("no <|user|>")
	}
	a := p.Encode("<|user|>\nHi", false, true)
	b := p.Encode("<|user|>Hi", false, true)
	if a[0] != u || !reflect.DeepEqual(a, b) {
		t.Errorf("phi-3 rstrip: %v vs %v", a, b)
	}

	// WordPiece adds [CLS] ... [SEP].
	w := loadTok(t, "bert-bge")
	ids = w.Encode("Hello", true, false)
	if len(ids) < 3 || ids[0] != 101 || ids[len(ids)-1] != 102 {
		t.Errorf("bert special: %v", ids)
	}
}

func TestMarshalRoundTrip(t *testing.T) {
	for _, name := range []string{"llama-spm", "gpt-2", "bert-bge"} {
		tk := loadTok(t, name)
		b, err := tk.Vocab().MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		b2, _ := tk.Vocab().MarshalBinary()
		if string(b) != string(b2) {
			t.Fatal("MarshalBinary not deterministic")
		}
		v, err := vocab.Unmarshal(b)
		if err != nil {
			t.Fatal(name, err)
		}
		if !reflect.DeepEqual(v, tk.Vocab()) {
			t.Fatalf("%s: round trip differs", name)
		}
		// Truncation at a sample of lengths (every length is checked on
		// the small vocabulary below).
		for n := 0; n < len(b); n += 1 + n/7 {
			if _, err := vocab.Unmarshal(b[:n]); err == nil {
				t.Fatalf("%s: truncated to %d accepted", name, n)
			}
		}
	}
}

// smallVocab is a hand-made SPM vocabulary for format tests.
func smallVocab() *vocab.Vocab {
	return &vocab.Vocab{
		Model: "llama", Pre: "default",
		Tokens: []string{"<unk>", "<s>", "</s>", "<0x0A>", "▁", "a", "b", "▁a", "ab"},
		Scores: []float32{0, 0, 0, 0, -1, -2, -2, -1.5, -0.5},
		Types:  []int32{2, 3, 3, 6, 1, 1, 1, 1, 1},
		BOS:    1, EOS: 2, EOT: -1, EOM: -1, UNK: 0, PAD: -1, SEP: -1, MASK: -1, NL: 3,
		FIMPre: -1, FIMSuf: -1, FIMMid: -1, FIMPad: -1, FIMRep: -1, FIMSep: -1,
		AddBOS: true, AddSpacePrefix: true, ChatTemplate: "{{ x }}",
	}
}

func TestUnmarshalTruncatedEveryLength(t *testing.T) {
	b, err := smallVocab().MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	for n := 0; n < len(b); n++ {
		if _, err := vocab.Unmarshal(b[:n]); err == nil {
			t.Fatalf("truncated to %d accepted", n)
		}
	}
	if _, err := vocab.Unmarshal(append(b, 0)); err == nil {
		t.Fatal("trailing byte accepted")
	}
	// Corrupting any single byte must not panic.
	for i := range b {
		c := append([]byte(nil), b...)
		c[i] ^= 0xff
		_, _ = vocab.Unmarshal(c)
	}
	v, err := vocab.Unmarshal(b)
	if err != nil {
		t.Fatal(err)
	}
	tk, err := New(v)
	if err != nil {
		t.Fatal(err)
	}
	if got := tk.Encode("ab a\n", true, false); !reflect.DeepEqual(got, []int32{1, 4, 8, 7, 3}) {
		t.Errorf("small vocab encode: %v", got)
	}
}

// ggufVocab builds a GGUF file with the given tokenizer keys.
func ggufVocab(t *testing.T, set func(w *gguf.Writer)) (*vocab.Vocab, error) {
	t.Helper()
	w := gguf.NewWriter()
	set(w)
	f, err := gguf.Parse(w.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return vocab.FromGGUF(f)
}

func TestMalformedMetadata(t *testing.T) {
	// meta returns a writer setter for a small gpt2 vocabulary with the
	// given keys replaced (a nil value removes the key).
	meta := func(over map[string]*gguf.Value) func(w *gguf.Writer) {
		return func(w *gguf.Writer) {
			kv := []struct {
				k string
				v gguf.Value
			}{
				{vocab.KeyModel, gguf.Str("gpt2")},
				{vocab.KeyPre, gguf.Str("gpt-2")},
				{vocab.KeyTokens, gguf.Strs([]string{"a", "b", "ab", "Ġ"})},
				{vocab.KeyTokenType, gguf.I32s([]int32{1, 1, 1, 1})},
				{vocab.KeyMerges, gguf.Strs([]string{"a b"})},
			}
			done := map[string]bool{}
			for _, e := range kv {
				v := e.v
				if o, ok := over[e.k]; ok {
					done[e.k] = true
					if o == nil {
						continue
					}
					v = *o
				}
				w.Set(e.k, v)
			}
			for k, o := range over {
				if !done[k] && o != nil {
					w.Set(k, *o)
				}
			}
		}
	}
	val := func(v gguf.Value) *gguf.Value { return &v }
	withMerges := meta(nil)
	if v, err := ggufVocab(t, withMerges); err != nil {
		t.Fatalf("good vocab rejected: %v", err)
	} else if tk, err := New(v); err != nil {
		t.Fatal(err)
	} else if got := tk.Encode("ab", false, false); !reflect.DeepEqual(got, []int32{2}) {
		t.Errorf("encode = %v", got)
	}
	for _, tc := range []struct {
		name, key string
		set       func(w *gguf.Writer)
	}{
		{"gpt2 without merges", vocab.KeyMerges, meta(map[string]*gguf.Value{vocab.KeyMerges: nil})},
		{"token type 99", vocab.KeyTokenType, meta(map[string]*gguf.Value{vocab.KeyTokenType: val(gguf.I32s([]int32{1, 99, 1, 1}))})},
		{"BOS out of range", vocab.KeyBOS, meta(map[string]*gguf.Value{vocab.KeyBOS: val(gguf.U32(4))})},
		{"scores length", vocab.KeyScores, meta(map[string]*gguf.Value{vocab.KeyScores: val(gguf.F32s([]float32{0, 0}))})},
		{"types length", vocab.KeyTokenType, meta(map[string]*gguf.Value{vocab.KeyTokenType: val(gguf.I32s([]int32{1}))})},
		{"unknown pre", vocab.KeyPre, meta(map[string]*gguf.Value{vocab.KeyPre: val(gguf.Str("no-such-pre"))})},
		{"unknown model", vocab.KeyModel, meta(map[string]*gguf.Value{vocab.KeyModel: val(gguf.Str("rwkv"))})},
		{"no tokens", vocab.KeyTokens, meta(map[string]*gguf.Value{vocab.KeyTokens: nil})},
		{"tokens not strings", vocab.KeyTokens, meta(map[string]*gguf.Value{vocab.KeyTokens: val(gguf.F32s([]float32{1}))})},
		{"add_bos not bool", vocab.KeyAddBOS, meta(map[string]*gguf.Value{vocab.KeyAddBOS: val(gguf.U32(1))})},
	} {
		_, err := ggufVocab(t, tc.set)
		if err == nil {
			t.Errorf("%s: accepted", tc.name)
			continue
		}
		if !strings.Contains(err.Error(), tc.key) {
			t.Errorf("%s: error %q does not name %q", tc.name, err, tc.key)
		}
	}
	// 0xFFFFFFFF means "none" (stories260K writes it for sep/pad).
	v, err := ggufVocab(t, meta(map[string]*gguf.Value{vocab.KeyPAD: val(gguf.U32(0xFFFFFFFF))}))
	if err != nil || v.PAD != -1 {
		t.Errorf("0xFFFFFFFF pad: %v %v", v, err)
	}
	// New rejects what it cannot run.
	if _, err := New(&vocab.Vocab{Model: "t5", Tokens: []string{"a"}}); err == nil {
		t.Error("New accepted t5")
	}
	bad := smallVocab()
	bad.BOS = 99
	if _, err := New(bad); err == nil {
		t.Error("New accepted BOS out of range")
	}
	if _, err := New(nil); err == nil {
		t.Error("New(nil) accepted")
	}
}

func TestTrainedModelVocabs(t *testing.T) {
	// The stories models carry 0xFFFFFFFF ids; they must load.
	for _, name := range []string{"stories260K.gguf", "TinyStories-656K.F16.gguf"} {
		path := filepath.Join(vocabDir, "..", name)
		f, err := gguf.Open(path)
		if err != nil {
			t.Skip(err)
		}
		v, err := vocab.FromGGUF(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		tk, err := New(v)
		if err != nil {
			t.Fatal(err)
		}
		ids := tk.Encode("Once upon a time", true, false)
		if ids[0] != v.BOS {
			t.Errorf("%s: no BOS in %v", name, ids)
		}
		if got := tk.Decode(ids[1:]); got != "Once upon a time" {
			t.Errorf("%s: %v -> %q", name, ids, got)
		}
	}
}

func TestEncodeSpeed(t *testing.T) {
	for _, name := range []string{"llama-spm", "llama-bpe", "qwen2", "gpt-2", "bert-bge"} {
		tk := loadTok(t, name)
		text := strings.Repeat("The quick brown fox jumps over the lazy dog; 12345 naïve café — 你好世界!\n", 100) // ~7 KB
		start := time.Now()
		ids := tk.Encode(text, true, true)
		d := time.Since(start)
		t.Logf("%s: %d bytes -> %d tokens in %v", name, len(text), len(ids), d)
		if d > 500*time.Millisecond {
			t.Errorf("%s: encoding 7 KB took %v", name, d)
		}
	}
	// A long run without pre-tokenizer breaks must not be quadratic.
	tk := loadTok(t, "llama-spm")
	long := strings.Repeat("a", 20000)
	start := time.Now()
	tk.Encode(long, false, false)
	if d := time.Since(start); d > time.Second {
		t.Errorf("20000 x 'a' took %v", d)
	}
}

func BenchmarkEncode(b *testing.B) {
	for _, name := range []string{"llama-spm", "llama-bpe"} {
		b.Run(name, func(b *testing.B) {
			tk := loadTok(b, name)
			text := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 100)
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				tk.Encode(text, false, false)
			}
		})
	}
}

// TestEOGTokens: the tokenizer's end-of-generation list is the
// vocabulary's, and a caller that changes it changes no other's.
func TestEOGTokens(t *testing.T) {
	for _, name := range []string{"llama-bpe", "qwen2"} {
		tk := loadTok(t, name)
		want := tk.Vocab().EOGTokens()
		got := tk.EOGTokens()
		if !reflect.DeepEqual(got, want) || len(want) == 0 {
			t.Fatalf("%s: %v, the vocabulary says %v", name, got, want)
		}
		got[0] = -7
		if again := tk.EOGTokens(); !reflect.DeepEqual(again, want) {
			t.Errorf("%s: after a caller's change %v", name, again)
		}
		for _, id := range want {
			if !tk.IsEOG(id) {
				t.Errorf("%s: %d listed but not IsEOG", name, id)
			}
		}
	}
}
