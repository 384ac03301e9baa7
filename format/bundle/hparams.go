package bundle

import (
	"fmt"
	"math"
	"reflect"
	"strings"
)

// Hparams are a model's hyperparameters: the one definition that the graph
// builders fill, the graph file records and the runtime sizes its state
// from. The graph file stores them like GGUF metadata, as key/value
// entries named by each field's kv tag, so a new family's field is one
// line here and no format change: a reader fills the fields it knows,
// ignores keys it does not (a newer zrtc's), and leaves absent ones zero.
// A field tagged omitempty is written only when it is not zero.
type Hparams struct {
	Arch        string  `kv:"arch"`
	NVocab      int     `kv:"n_vocab"`
	NEmbd       int     `kv:"n_embd"`
	NLayer      int     `kv:"n_layer"`
	NHead       int     `kv:"n_head"`
	NHeadKV     int     `kv:"n_head_kv"`
	HeadDim     int     `kv:"head_dim"`
	NFF         int     `kv:"n_ff"`
	NRot        int     `kv:"n_rot"`
	NExpert     int     `kv:"n_expert"`
	NExpertUsed int     `kv:"n_expert_used"`
	NFFExpert   int     `kv:"n_ff_expert"`
	Eps         float32 `kv:"rms_norm_eps"`
	// MaxPages is the KV pages one full-length sequence occupies:
	// ContextLength / 16, rounded up.
	MaxPages int `kv:"max_pages"`
	// MaxSlots, PrefillChunk and ContextLength come from the model config:
	// the slots the page table covers, the rows of the largest prefill
	// variant, and the longest sequence.
	MaxSlots      int `kv:"max_slots"`
	PrefillChunk  int `kv:"prefill_chunk"`
	ContextLength int `kv:"context_length"`
	// RecurrentBytes is one slot's state of the recurrent layers (0 for
	// models without any); the recurrent region holds MaxSlots of them.
	RecurrentBytes int `kv:"recurrent_slot_bytes"`
	// KVPageBytes is one KV page: 16 tokens of K and V of every layer
	// that owns a cache, where the compiler placed them (0 in bundles
	// older than the field: n_layer regions of n_head_kv × head_dim).
	KVPageBytes int `kv:"kv_page_bytes"`
	// KVWindowRing, when not 0, is the pages of each slot's ring that
	// holds the ringed sliding-window layers' K and V (position p on ring
	// page p/16 mod KVWindowRing), and KVWindowPageBytes one such page.
	KVWindowRing      int `kv:"kv_window_ring"`
	KVWindowPageBytes int `kv:"kv_window_page_bytes"`
	// CacheTypeK and CacheTypeV are the KV cache's element types by
	// llama.cpp's names ("q8_0"); empty is F16. They are written only
	// when set, so a bundle with an F16 cache has the bytes it had
	// before the option existed.
	CacheTypeK string `kv:"cache_type_k,omitempty"`
	CacheTypeV string `kv:"cache_type_v,omitempty"`
	// CacheRotK and CacheRotV, when not 0, are the runs of K and V values
	// a quantized cache stores rotated by a Walsh-Hadamard matrix, as
	// llama.cpp stores them (kernels.KVTypes).
	CacheRotK int `kv:"cache_rot_k,omitempty"`
	CacheRotV int `kv:"cache_rot_v,omitempty"`
	// TPRanks, when above 1, says the bundle is rank TPRank of a
	// tensor-parallel set of TPRanks bundles (zrtc build --tp), each
	// holding its share of the heads, FFN columns and vocabulary; it runs
	// only with every other rank of its set. The other fields describe
	// the whole model but the KV page sizes, which are the rank's.
	TPRanks int `kv:"tp_ranks,omitempty"`
	TPRank  int `kv:"tp_rank,omitempty"`
}

// KVDim is the width of one token's K (or V) across the KV heads.
func (h *Hparams) KVDim() int { return h.NHeadKV * h.HeadDim }

// Value kinds of a key/value entry.
const (
	kvInt    = 1 // i64
	kvFloat  = 2 // f32
	kvString = 3 // u32 length + bytes
)

// hparamKey returns a field's key and whether it is omitted when zero.
func hparamKey(f reflect.StructField) (string, bool) {
	key, opt, _ := strings.Cut(f.Tag.Get("kv"), ",")
	return key, opt == "omitempty"
}

// hparamFields maps each kv key to its field index and kind; it is built
// once from the struct, so the struct is the only list of keys.
var hparamFields = func() map[string][2]int {
	m := map[string][2]int{}
	t := reflect.TypeOf(Hparams{})
	for i := range t.NumField() {
		f := t.Field(i)
		kind := map[reflect.Kind]int{reflect.Int: kvInt, reflect.Float32: kvFloat, reflect.String: kvString}[f.Type.Kind()]
		key, _ := hparamKey(f)
		if key == "" || kind == 0 {
			panic(fmt.Sprintf("bundle: Hparams.%s needs a kv tag and an int, float32 or string type", f.Name))
		}
		m[key] = [2]int{i, kind}
	}
	return m
}()

// encodeHparams writes every field as a key/value entry, in field order,
// but for omitempty fields left zero.
func encodeHparams(e *enc, h *Hparams) {
	v := reflect.ValueOf(h).Elem()
	var fields []int
	for i := range v.NumField() {
		if _, omit := hparamKey(v.Type().Field(i)); !omit || !v.Field(i).IsZero() {
			fields = append(fields, i)
		}
	}
	e.u32(uint32(len(fields)))
	for _, i := range fields {
		key, _ := hparamKey(v.Type().Field(i))
		kind := hparamFields[key][1]
		e.str(key)
		e.u8(uint8(kind))
		switch kind {
		case kvInt:
			e.i64(v.Field(i).Int())
		case kvFloat:
			e.f32(float32(v.Field(i).Float()))
		case kvString:
			e.str(v.Field(i).String())
		}
	}
}

// decodeHparams reads the entries into h. A known key with another kind,
// a repeated key or an integer outside [0, 2^31) is malformed.
func decodeHparams(d *dec, h *Hparams) {
	v := reflect.ValueOf(h).Elem()
	seen := map[string]bool{}
	n := d.count(6)
	for range n {
		key, kind := d.str(), int(d.u8())
		var i int64
		var f float32
		var s string
		switch kind {
		case kvInt:
			i = d.i64()
		case kvFloat:
			f = d.f32()
		case kvString:
			s = d.str()
		default:
			d.fail(fmt.Sprintf("hyperparameter %q has value kind %d", key, kind))
		}
		if d.err != nil {
			return
		}
		if seen[key] {
			d.fail(fmt.Sprintf("hyperparameter %q appears twice", key))
			return
		}
		seen[key] = true
		fk, known := hparamFields[key]
		if !known {
			continue // a newer zrtc's field: not needed by this reader
		}
		if fk[1] != kind {
			d.fail(fmt.Sprintf("hyperparameter %q has value kind %d, want %d", key, kind, fk[1]))
			return
		}
		field := v.Field(fk[0])
		switch kind {
		case kvInt:
			if i < 0 || i > math.MaxInt32 {
				d.fail(fmt.Sprintf("hyperparameter %q = %d out of range", key, i))
				return
			}
			field.SetInt(i)
		case kvFloat:
			field.SetFloat(float64(f))
		case kvString:
			field.SetString(s)
		}
	}
}
