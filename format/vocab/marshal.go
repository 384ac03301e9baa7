package vocab

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/zrtdev/zrt/format/lebin"
)

// Serialized form (all integers little-endian):
//
//	magic "ZTOK", u32 version
//	str Model, str Pre, str Name, str ChatTemplate
//	u32 n, n × str Tokens
//	u8 hasScores, [n × f32]
//	u8 hasTypes, [n × i32]
//	u32 m, m × str Merges
//	15 × i32 special ids (BOS EOS EOT EOM UNK PAD SEP MASK NL FIMPre FIMSuf FIMMid FIMPad FIMRep FIMSep)
//	u8 flags (1 AddBOS, 2 AddEOS, 4 AddSpacePrefix)
//
// where str is u32 length + bytes. Nothing may follow.
const (
	marshalMagic   = "ZTOK"
	marshalVersion = 1
)

func (v *Vocab) specialIDs() []*int32 {
	return []*int32{&v.BOS, &v.EOS, &v.EOT, &v.EOM, &v.UNK, &v.PAD, &v.SEP, &v.MASK, &v.NL,
		&v.FIMPre, &v.FIMSuf, &v.FIMMid, &v.FIMPad, &v.FIMRep, &v.FIMSep}
}

// MarshalBinary encodes v deterministically for embedding in a bundle.
func (v *Vocab) MarshalBinary() ([]byte, error) {
	if err := v.Validate(); err != nil {
		return nil, err
	}
	b := []byte(marshalMagic)
	b = binary.LittleEndian.AppendUint32(b, marshalVersion)
	str := func(s string) {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
		b = append(b, s...)
	}
	for _, s := range []string{v.Model, v.Pre, v.Name, v.ChatTemplate} {
		str(s)
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(v.Tokens)))
	for _, s := range v.Tokens {
		str(s)
	}
	if v.Scores != nil {
		b = append(b, 1)
		for _, x := range v.Scores {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
		}
	} else {
		b = append(b, 0)
	}
	if v.Types != nil {
		b = append(b, 1)
		for _, x := range v.Types {
			b = binary.LittleEndian.AppendUint32(b, uint32(x))
		}
	} else {
		b = append(b, 0)
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(v.Merges)))
	for _, s := range v.Merges {
		str(s)
	}
	for _, p := range v.specialIDs() {
		b = binary.LittleEndian.AppendUint32(b, uint32(*p))
	}
	var flags byte
	if v.AddBOS {
		flags |= 1
	}
	if v.AddEOS {
		flags |= 2
	}
	if v.AddSpacePrefix {
		flags |= 4
	}
	return append(b, flags), nil
}

var errTruncated = errors.New("tokenizer: vocab data truncated")

// decoder is a bounds-checked cursor (lebin's; the first failure sticks).
type decoder struct{ lebin.Reader }

func newDecoder(b []byte) *decoder {
	return &decoder{lebin.Reader{B: b, Short: func(*lebin.Reader, int) error { return errTruncated }}}
}

func (d *decoder) str() string {
	n := d.U32()
	return string(d.Take(int(min(n, math.MaxInt32))))
}

// count reads an element count and checks that at least minSize bytes per
// element remain, so corrupt counts cannot trigger huge allocations.
func (d *decoder) count(minSize int) int {
	n := d.U32()
	if d.Err == nil && uint64(n)*uint64(minSize) > uint64(d.Left()) {
		d.Err = errTruncated
	}
	if d.Err != nil {
		return 0
	}
	return int(n)
}

// Unmarshal decodes data written by MarshalBinary. Truncated or corrupt
// data is an error.
func Unmarshal(data []byte) (*Vocab, error) {
	d := newDecoder(data)
	if string(d.Take(4)) != marshalMagic {
		if d.Err != nil {
			return nil, d.Err
		}
		return nil, errors.New("tokenizer: not a vocab (bad magic)")
	}
	if ver := d.U32(); d.Err == nil && ver != marshalVersion {
		return nil, fmt.Errorf("tokenizer: vocab version %d, want %d", ver, marshalVersion)
	}
	v := &Vocab{}
	v.Model, v.Pre, v.Name, v.ChatTemplate = d.str(), d.str(), d.str(), d.str()
	n := d.count(4)
	v.Tokens = make([]string, n)
	for i := range v.Tokens {
		v.Tokens[i] = d.str()
	}
	readArr := func(what string) []uint32 {
		switch d.U8() {
		case 0:
			return nil
		case 1:
			x := d.Take(4 * n)
			if x == nil {
				return nil
			}
			out := make([]uint32, n)
			for i := range out {
				out[i] = binary.LittleEndian.Uint32(x[4*i:])
			}
			return out
		}
		if d.Err == nil {
			d.Err = fmt.Errorf("tokenizer: corrupt vocab data (%s flag)", what)
		}
		return nil
	}
	if s := readArr("scores"); s != nil {
		v.Scores = make([]float32, n)
		for i, x := range s {
			v.Scores[i] = math.Float32frombits(x)
		}
	}
	if s := readArr("types"); s != nil {
		v.Types = make([]int32, n)
		for i, x := range s {
			v.Types[i] = int32(x)
		}
	}
	m := d.count(4)
	v.Merges = make([]string, m)
	for i := range v.Merges {
		v.Merges[i] = d.str()
	}
	if m == 0 {
		v.Merges = nil
	}
	for _, p := range v.specialIDs() {
		*p = int32(d.U32())
	}
	flags := d.U8()
	if d.Err != nil {
		return nil, d.Err
	}
	if flags&^7 != 0 {
		return nil, errors.New("tokenizer: corrupt vocab data (flags)")
	}
	v.AddBOS, v.AddEOS, v.AddSpacePrefix = flags&1 != 0, flags&2 != 0, flags&4 != 0
	if d.Left() != 0 {
		return nil, fmt.Errorf("tokenizer: %d trailing bytes after vocab data", d.Left())
	}
	if err := v.Validate(); err != nil {
		return nil, err
	}
	return v, nil
}
