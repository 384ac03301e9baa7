// Package vocab reads a model's vocabulary from the tokenizer metadata of a
// GGUF file with llama.cpp's effective values (src/llama-vocab.cpp's load),
// and encodes it for a bundle's graph file. The compiler writes it; the
// runtime's tokenizer (runtime/tokenizer) is built from it. It computes
// nothing on text.
package vocab

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"

	"github.com/zrtdev/zrt/format/gguf"
	"github.com/zrtdev/zrt/format/support"
)

// Token types as stored in tokenizer.ggml.token_type (llama_token_type).
const (
	TypeUndefined   = 0
	TypeNormal      = 1
	TypeUnknown     = 2
	TypeControl     = 3
	TypeUserDefined = 4
	TypeUnused      = 5
	TypeByte        = 6
)

// GGUF metadata keys read by FromGGUF.
const (
	KeyModel        = "tokenizer.ggml.model"
	KeyPre          = "tokenizer.ggml.pre"
	KeyTokens       = "tokenizer.ggml.tokens"
	KeyScores       = "tokenizer.ggml.scores"
	KeyTokenType    = "tokenizer.ggml.token_type"
	KeyMerges       = "tokenizer.ggml.merges"
	KeyBOS          = "tokenizer.ggml.bos_token_id"
	KeyEOS          = "tokenizer.ggml.eos_token_id"
	KeyEOT          = "tokenizer.ggml.eot_token_id"
	KeyEOM          = "tokenizer.ggml.eom_token_id"
	KeyUNK          = "tokenizer.ggml.unknown_token_id"
	KeySEP          = "tokenizer.ggml.seperator_token_id" // sic, as llama.cpp spells it
	KeyPAD          = "tokenizer.ggml.padding_token_id"
	KeyMASK         = "tokenizer.ggml.mask_token_id"
	KeyFIMPre       = "tokenizer.ggml.fim_pre_token_id"
	KeyFIMSuf       = "tokenizer.ggml.fim_suf_token_id"
	KeyFIMMid       = "tokenizer.ggml.fim_mid_token_id"
	KeyFIMPad       = "tokenizer.ggml.fim_pad_token_id"
	KeyFIMRep       = "tokenizer.ggml.fim_rep_token_id"
	KeyFIMSep       = "tokenizer.ggml.fim_sep_token_id"
	KeyAddBOS       = "tokenizer.ggml.add_bos_token"
	KeyAddEOS       = "tokenizer.ggml.add_eos_token"
	KeyAddPrefix    = "tokenizer.ggml.add_space_prefix"
	KeyChatTemplate = "tokenizer.chat_template"
	KeyName         = "general.name"
)

// Vocab is everything needed to tokenize, independent of GGUF, so a compiled
// bundle can carry it. FromGGUF fills it with llama.cpp's effective
// values: defaults per model/pre-tokenizer, overrides from the file, and the
// special tokens llama.cpp infers from token text.
type Vocab struct {
	Model  string    // tokenizer.ggml.model: "llama" (SPM), "gpt2" (byte-level BPE), "bert" (WordPiece)
	Pre    string    // tokenizer.ggml.pre; "default" when absent
	Name   string    // general.name; llama.cpp keys some per-token attributes on it (phi-3)
	Tokens []string  // token texts, indexed by id
	Scores []float32 // SPM merge scores; may be nil
	// Types are the token types (1 normal, 2 unknown, 3 control, 4 user
	// defined, 5 unused, 6 byte); may be nil (all normal). Tokens that
	// llama.cpp forces to control because they look like end-of-turn or FIM
	// markers are already control here.
	Types  []int32
	Merges []string // BPE merges "a b", in rank order

	// Special token ids, -1 when absent.
	BOS, EOS, EOT, EOM, UNK, PAD, SEP, MASK, NL int32
	// Fill-in-the-middle token ids, -1 when absent.
	FIMPre, FIMSuf, FIMMid, FIMPad, FIMRep, FIMSep int32

	AddBOS, AddEOS, AddSpacePrefix bool
	ChatTemplate                   string // tokenizer.chat_template, "" if absent
}

// FromGGUF reads the tokenizer metadata of f. Malformed metadata (a gpt2
// vocabulary without merges, token types outside 0..6, special ids outside
// the vocabulary, scores or types whose length differs from the token list)
// is an error naming the key.
func FromGGUF(f *gguf.File) (*Vocab, error) {
	v := &Vocab{}
	var err error
	if v.Model, err = f.String(KeyModel); err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if _, ok := f.Lookup(KeyPre); ok {
		if v.Pre, err = f.String(KeyPre); err != nil {
			return nil, fmt.Errorf("tokenizer: %w", err)
		}
	}
	if v.Pre == "" {
		v.Pre = "default"
	}
	if _, ok := f.Lookup(KeyName); ok {
		v.Name, _ = f.String(KeyName)
	}
	if _, ok := f.Lookup(KeyChatTemplate); ok {
		if v.ChatTemplate, err = f.String(KeyChatTemplate); err != nil {
			return nil, fmt.Errorf("tokenizer: %w", err)
		}
	}

	tv, ok := f.Lookup(KeyTokens)
	if !ok {
		return nil, fmt.Errorf("tokenizer: missing key %q", KeyTokens)
	}
	if v.Tokens, err = tv.Strings(); err != nil {
		return nil, fmt.Errorf("tokenizer: key %q: %w", KeyTokens, err)
	}
	n := len(v.Tokens)
	if n == 0 {
		return nil, fmt.Errorf("tokenizer: key %q: empty vocabulary", KeyTokens)
	}
	if sv, ok := f.Lookup(KeyScores); ok {
		if v.Scores, err = sv.Float32s(); err != nil {
			return nil, fmt.Errorf("tokenizer: key %q: %w", KeyScores, err)
		}
		if len(v.Scores) != n {
			return nil, fmt.Errorf("tokenizer: key %q: %d scores for %d tokens", KeyScores, len(v.Scores), n)
		}
	}
	if tt, ok := f.Lookup(KeyTokenType); ok {
		ints, err := tt.Ints()
		if err != nil {
			return nil, fmt.Errorf("tokenizer: key %q: %w", KeyTokenType, err)
		}
		if len(ints) != n {
			return nil, fmt.Errorf("tokenizer: key %q: %d types for %d tokens", KeyTokenType, len(ints), n)
		}
		v.Types = make([]int32, n)
		for i, t := range ints {
			if t < TypeUndefined || t > TypeByte {
				return nil, fmt.Errorf("tokenizer: key %q: token %d has type %d, want 0..6", KeyTokenType, i, t)
			}
			v.Types[i] = int32(t)
		}
	}
	if mv, ok := f.Lookup(KeyMerges); ok {
		if v.Merges, err = mv.Strings(); err != nil {
			return nil, fmt.Errorf("tokenizer: key %q: %w", KeyMerges, err)
		}
	} else if v.Model == "gpt2" {
		return nil, fmt.Errorf("tokenizer: model gpt2 needs key %q", KeyMerges)
	}

	if err := v.applyDefaults(); err != nil {
		return nil, err
	}

	ids := []struct {
		key string
		dst *int32
	}{
		{KeyBOS, &v.BOS}, {KeyEOS, &v.EOS}, {KeyEOT, &v.EOT}, {KeyEOM, &v.EOM},
		{KeyUNK, &v.UNK}, {KeySEP, &v.SEP}, {KeyPAD, &v.PAD}, {KeyMASK, &v.MASK},
		{KeyFIMPre, &v.FIMPre}, {KeyFIMSuf, &v.FIMSuf}, {KeyFIMMid, &v.FIMMid},
		{KeyFIMPad, &v.FIMPad}, {KeyFIMRep, &v.FIMRep}, {KeyFIMSep, &v.FIMSep},
		// deprecated spellings of the FIM ids, read after the new ones as llama.cpp does
		{"tokenizer.ggml.prefix_token_id", &v.FIMPre},
		{"tokenizer.ggml.suffix_token_id", &v.FIMSuf},
		{"tokenizer.ggml.middle_token_id", &v.FIMMid},
	}
	for _, e := range ids {
		x, ok, err := optional(f, e.key, gguf.Value.Int)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		// Converters write 0xFFFFFFFF (or -1) for "no such token"; llama.cpp
		// warns and keeps its default there. Any other out-of-range id is a
		// broken file: llama.cpp would silently use a default, we refuse.
		if x == -1 || x == math.MaxUint32 {
			continue
		}
		if x < 0 || x >= int64(n) {
			return nil, fmt.Errorf("tokenizer: key %q: id %d outside vocabulary of %d", e.key, x, n)
		}
		*e.dst = int32(x)
	}
	for _, e := range []struct {
		key string
		dst *bool
	}{{KeyAddBOS, &v.AddBOS}, {KeyAddEOS, &v.AddEOS}, {KeyAddPrefix, &v.AddSpacePrefix}} {
		b, ok, err := optional(f, e.key, gguf.Value.BoolValue)
		if err != nil {
			return nil, err
		}
		if ok {
			*e.dst = b
		}
	}

	v.inferSpecial()
	v.NL = v.newlineToken()
	if err := v.Validate(); err != nil {
		return nil, err
	}
	return v, nil
}

// optional reads the value of an optional key with get: ok is false where
// f lacks the key, and the error names the key where its value is not
// what get takes.
func optional[T any](f *gguf.File, key string, get func(gguf.Value) (T, error)) (x T, ok bool, err error) {
	val, ok := f.Lookup(key)
	if !ok {
		return x, false, nil
	}
	if x, err = get(val); err != nil {
		return x, false, fmt.Errorf("tokenizer: key %q: %w", key, err)
	}
	return x, true, nil
}

// applyDefaults sets llama.cpp's per-model defaults for the special ids and
// flags (llama_vocab::impl::load) before the file's own keys override them.
func (v *Vocab) applyDefaults() error {
	for _, p := range []*int32{&v.BOS, &v.EOS, &v.EOT, &v.EOM, &v.UNK, &v.PAD, &v.SEP, &v.MASK, &v.NL,
		&v.FIMPre, &v.FIMSuf, &v.FIMMid, &v.FIMPad, &v.FIMRep, &v.FIMSep} {
		*p = -1
	}
	switch v.Model {
	case "llama":
		v.BOS, v.EOS, v.UNK = 1, 2, 0
		v.AddSpacePrefix, v.AddBOS = true, true
	case "bert":
		v.BOS, v.UNK, v.SEP, v.PAD, v.MASK = 101, 100, 102, 0, 103
		v.AddBOS = true
	case "gpt2":
		v.BOS, v.EOS = 11, 11
		p, ok := preTokenizers[v.Pre]
		if !ok {
			return UnsupportedPre(v.Pre)
		}
		v.AddBOS = p == preAddBOS
		if p == preNoBOS {
			v.BOS = -1
		}
	default:
		return UnsupportedModel(v.Model)
	}
	// A default that does not fit a (tiny) vocabulary is treated as absent;
	// llama.cpp would keep it and fail when it is used.
	for _, p := range []*int32{&v.BOS, &v.EOS, &v.UNK, &v.PAD, &v.SEP, &v.MASK} {
		if int(*p) >= len(v.Tokens) {
			*p = -1
		}
	}
	return nil
}

// Token texts llama.cpp uses to infer special tokens that converters did not
// declare. Where several exist llama.cpp takes whichever its hash map yields
// first; we take the first in these lists, which is deterministic.
var (
	eotTexts    = []string{"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<EOT>", "<｜end▁of▁sentence｜>"}
	eomTexts    = []string{"<|eom_id|>"}
	fimPreTexts = []string{"<|fim_prefix|>", "<fim-prefix>", "<｜fim▁begin｜>", "<PRE>"}
	fimSufTexts = []string{"<|fim_suffix|>", "<fim-suffix>", "<｜fim▁hole｜>", "<SUF>"}
	fimMidTexts = []string{"<|fim_middle|>", "<fim-middle>", "<｜fim▁end｜>", "<MID>"}
	fimPadTexts = []string{"<|fim_pad|>", "<fim-pad>", "<PAD>"}
	fimRepTexts = []string{"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>"}
	fimSepTexts = []string{"<|file_sep|>"}
	// eogTexts are always end-of-generation, whatever the declared ids.
	eogTexts = []string{"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>"}
)

// inferSpecial finds EOT, EOM and FIM tokens by their text when the file does
// not name them, and marks them (and every EOG-looking token) as control, as
// llama.cpp does when it loads the vocabulary.
func (v *Vocab) inferSpecial() {
	index := make(map[string]int32, 64)
	for _, lists := range [][]string{eotTexts, eomTexts, fimPreTexts, fimSufTexts, fimMidTexts, fimPadTexts, fimRepTexts, fimSepTexts} {
		for _, s := range lists {
			index[s] = -1
		}
	}
	for i, t := range v.Tokens {
		if _, ok := index[t]; ok {
			index[t] = int32(i)
		}
	}
	forced := map[int32]bool{}
	find := func(dst *int32, texts []string) {
		if *dst != -1 {
			return
		}
		for _, s := range texts {
			if id := index[s]; id >= 0 {
				*dst = id
				forced[id] = true
				return
			}
		}
	}
	find(&v.EOT, eotTexts)
	find(&v.EOM, eomTexts)
	find(&v.FIMPre, fimPreTexts)
	find(&v.FIMSuf, fimSufTexts)
	find(&v.FIMMid, fimMidTexts)
	find(&v.FIMPad, fimPadTexts)
	find(&v.FIMRep, fimRepTexts)
	find(&v.FIMSep, fimSepTexts)
	for _, s := range eogTexts {
		if id := index[s]; id >= 0 {
			forced[id] = true
		}
	}
	for id := range forced {
		if v.Types == nil {
			v.Types = make([]int32, len(v.Tokens))
			for i := range v.Types {
				v.Types[i] = TypeNormal
			}
		}
		// llama.cpp ORs the control attribute in; with one type per token
		// here, control replaces the old type.
		v.Types[id] = TypeControl
	}
}

// newlineToken finds the id llama.cpp uses as linefeed: SPM's byte token
// for '\n' (or a "\n" token), WordPiece's pad, and for byte-level BPE what
// tokenizing "\n" gives, which is a user-defined "\n" token if there is one
// and otherwise the token for the byte-encoded newline ("Ċ"), else pad.
func (v *Vocab) newlineToken() int32 {
	find := func(s string) int32 {
		for i, t := range v.Tokens {
			if t == s {
				return int32(i)
			}
		}
		return -1
	}
	switch v.Model {
	case "llama":
		if id := find("<0x0A>"); id >= 0 {
			return id
		}
		if id := find("\n"); id >= 0 {
			return id
		}
	case "gpt2":
		if id := find("\n"); id >= 0 && v.Types != nil && v.Types[id] == TypeUserDefined {
			return id
		}
		if id := find(bpeNewline); id >= 0 {
			return id
		}
	}
	return v.PAD
}

// Validate checks the invariants a tokenizer relies on: lengths agree,
// types and special ids are in range.
func (v *Vocab) Validate() error {
	n := len(v.Tokens)
	if n == 0 {
		return errors.New("tokenizer: empty vocabulary")
	}
	if n > math.MaxInt32 {
		return errors.New("tokenizer: vocabulary too large")
	}
	if v.Scores != nil && len(v.Scores) != n {
		return fmt.Errorf("tokenizer: key %q: %d scores for %d tokens", KeyScores, len(v.Scores), n)
	}
	if v.Types != nil {
		if len(v.Types) != n {
			return fmt.Errorf("tokenizer: key %q: %d types for %d tokens", KeyTokenType, len(v.Types), n)
		}
		for i, t := range v.Types {
			if t < TypeUndefined || t > TypeByte {
				return fmt.Errorf("tokenizer: key %q: token %d has type %d, want 0..6", KeyTokenType, i, t)
			}
		}
	}
	seen := make(map[string]int, n)
	for i, s := range v.Tokens {
		if s == "" {
			continue // llama.cpp renames empty tokens apart ("[EMPTY_id]")
		}
		if j, dup := seen[s]; dup {
			// llama.cpp asserts that token texts are unique.
			return fmt.Errorf("tokenizer: key %q: token %d has the same text %q as token %d", KeyTokens, i, s, j)
		}
		seen[s] = i
	}
	if v.Model == "gpt2" && len(v.Merges) == 0 {
		return fmt.Errorf("tokenizer: model gpt2 needs key %q", KeyMerges)
	}
	for _, e := range []struct {
		key string
		id  int32
	}{
		{KeyBOS, v.BOS}, {KeyEOS, v.EOS}, {KeyEOT, v.EOT}, {KeyEOM, v.EOM}, {KeyUNK, v.UNK},
		{KeySEP, v.SEP}, {KeyPAD, v.PAD}, {KeyMASK, v.MASK}, {"newline token", v.NL},
		{KeyFIMPre, v.FIMPre}, {KeyFIMSuf, v.FIMSuf}, {KeyFIMMid, v.FIMMid},
		{KeyFIMPad, v.FIMPad}, {KeyFIMRep, v.FIMRep}, {KeyFIMSep, v.FIMSep},
	} {
		if e.id < -1 || int(e.id) >= n {
			return fmt.Errorf("tokenizer: key %q: id %d outside vocabulary of %d", e.key, e.id, n)
		}
	}
	if v.AddBOS && v.BOS < 0 && v.Model != "bert" {
		return fmt.Errorf("tokenizer: key %q is set but there is no BOS token", KeyAddBOS)
	}
	if v.AddEOS && v.EOS < 0 {
		return fmt.Errorf("tokenizer: key %q is set but there is no EOS token", KeyAddEOS)
	}
	return nil
}

// UnsupportedModel and UnsupportedPre are the errors for a vocabulary whose
// tokenizer llama.cpp knows and zrt does not implement.
func UnsupportedModel(model string) error {
	return &support.Error{What: "tokenizer model", Value: strconv.Quote(model), Where: support.Key(KeyModel),
		Detail: "zrt tokenizes llama (SentencePiece), gpt2 (byte-level BPE) and bert (WordPiece)"}
}

// UnsupportedPre: see UnsupportedModel.
func UnsupportedPre(pre string) error {
	return &support.Error{What: "pre-tokenizer", Value: strconv.Quote(pre), Where: support.Key(KeyPre)}
}

// bpeNewline is '\n' under GPT-2's byte-to-character mapping, which moves
// the bytes 0..32 to U+0100.. so that every byte has a printable token text.
const bpeNewline = "\u010a"

// A preBOS is llama.cpp's add_bos default for a byte-level BPE
// pre-tokenizer.
type preBOS int

const (
	preDefaultBOS preBOS = iota // BOS exists, not added by default
	preAddBOS                   // BOS added by default (Llama 3 and kin)
	preNoBOS                    // the model has no BOS token (chatglm)
)

// preTokenizers lists every tokenizer.ggml.pre that runtime/tokenizer
// implements (a test there holds its split table to the same names), with
// llama.cpp's BOS default for it (the pre_type switch of
// llama_vocab::impl::load).
var preTokenizers = map[string]preBOS{
	"default": preDefaultBOS,
	"llama3":  preAddBOS, "llama-v3": preAddBOS, "llama-bpe": preAddBOS, "falcon3": preAddBOS,
	"tekken": preAddBOS, "chameleon": preAddBOS,
	"chatglm-bpe":  preNoBOS,
	"deepseek-llm": preDefaultBOS, "deepseek-coder": preDefaultBOS, "deepseek-v3": preDefaultBOS,
	"falcon": preDefaultBOS,
	"mpt":    preDefaultBOS, "gpt-2": preDefaultBOS, "phi-2": preDefaultBOS, "jina-es": preDefaultBOS,
	"jina-de": preDefaultBOS, "gigachat": preDefaultBOS, "jina-v1-en": preDefaultBOS, "jina-v2-es": preDefaultBOS,
	"jina-v2-de": preDefaultBOS, "jina-v2-code": preDefaultBOS, "roberta-bpe": preDefaultBOS, "olmo": preDefaultBOS,
	"jais":      preDefaultBOS,
	"starcoder": preDefaultBOS, "refact": preDefaultBOS, "codeshell": preDefaultBOS, "exaone": preDefaultBOS,
	"minerva-7b": preDefaultBOS, "command-r": preDefaultBOS, "smollm": preDefaultBOS,
	"qwen2": preDefaultBOS, "deepseek-r1-qwen": preDefaultBOS, "megrez": preDefaultBOS, "stablelm2": preDefaultBOS,
	"qwen35": preDefaultBOS, "dbrx": preDefaultBOS, "smaug-bpe": preDefaultBOS, "poro-chat": preDefaultBOS,
	"bloom": preDefaultBOS, "gpt3-finnish": preDefaultBOS, "viking": preDefaultBOS,
}

// PreTokenizers lists, sorted, the tokenizer.ggml.pre values a gpt2
// vocabulary may name.
func PreTokenizers() []string {
	return slices.Sorted(maps.Keys(preTokenizers))
}

// EOGTokens lists the end-of-generation ids as llama.cpp collects them:
// EOS, EOT, EOM, the FIM pad/repo/separator tokens, and every token whose
// text is one of the end-of-turn markers, whatever the declared ids.
func (v *Vocab) EOGTokens() []int32 {
	var out []int32
	for _, id := range []int32{v.FIMPad, v.FIMRep, v.FIMSep, v.EOS, v.EOT, v.EOM} {
		if id >= 0 {
			out = append(out, id)
		}
	}
	for i, t := range v.Tokens {
		if slices.Contains(eogTexts, t) {
			out = append(out, int32(i))
		}
	}
	return out
}
