package amd

import (
	"encoding/binary"
	"fmt"
	"math"
)

// decodeMsgpack decodes one MessagePack value (the AMDGPU metadata note's
// encoding) into map[string]any, []any, string, int64, uint64, float64,
// bool, []byte or nil. It reads what the AMDGPU backend writes; extension
// types are refused.
func decodeMsgpack(b []byte) (any, error) {
	d := &mpDecoder{b: b}
	v, err := d.value(0)
	if err != nil {
		return nil, err
	}
	if d.i != len(d.b) {
		return nil, fmt.Errorf("msgpack: %d trailing bytes", len(d.b)-d.i)
	}
	return v, nil
}

type mpDecoder struct {
	b []byte
	i int
}

func (d *mpDecoder) take(n int) ([]byte, error) {
	if n < 0 || d.i+n > len(d.b) {
		return nil, fmt.Errorf("msgpack: truncated at byte %d", d.i)
	}
	s := d.b[d.i : d.i+n]
	d.i += n
	return s, nil
}

func (d *mpDecoder) uint(n int) (uint64, error) {
	s, err := d.take(n)
	if err != nil {
		return 0, err
	}
	switch n {
	case 1:
		return uint64(s[0]), nil
	case 2:
		return uint64(binary.BigEndian.Uint16(s)), nil
	case 4:
		return uint64(binary.BigEndian.Uint32(s)), nil
	}
	return binary.BigEndian.Uint64(s), nil
}

func (d *mpDecoder) value(depth int) (any, error) {
	if depth > 32 {
		return nil, fmt.Errorf("msgpack: nested too deep")
	}
	s, err := d.take(1)
	if err != nil {
		return nil, err
	}
	c := s[0]
	switch {
	case c <= 0x7f:
		return int64(c), nil
	case c >= 0xe0:
		return int64(int8(c)), nil
	case c&0xf0 == 0x80:
		return d.mapOf(int(c&0x0f), depth)
	case c&0xf0 == 0x90:
		return d.arrayOf(int(c&0x0f), depth)
	case c&0xe0 == 0xa0:
		return d.str(int(c & 0x1f))
	}
	switch c {
	case 0xc0:
		return nil, nil
	case 0xc2, 0xc3:
		return c == 0xc3, nil
	case 0xc4, 0xc5, 0xc6: // bin 8/16/32
		n, err := d.uint(1 << (c - 0xc4))
		if err != nil {
			return nil, err
		}
		return d.take(int(n))
	case 0xca:
		u, err := d.uint(4)
		return float64(math.Float32frombits(uint32(u))), err
	case 0xcb:
		u, err := d.uint(8)
		return math.Float64frombits(u), err
	case 0xcc, 0xcd, 0xce, 0xcf:
		return d.uint(1 << (c - 0xcc))
	case 0xd0, 0xd1, 0xd2, 0xd3:
		n := 1 << (c - 0xd0)
		u, err := d.uint(n)
		shift := 64 - 8*n
		return int64(u<<shift) >> shift, err
	case 0xd9, 0xda, 0xdb:
		n, err := d.uint(1 << (c - 0xd9))
		if err != nil {
			return nil, err
		}
		return d.str(int(n))
	case 0xdc, 0xdd:
		n, err := d.uint(2 << (c - 0xdc))
		if err != nil {
			return nil, err
		}
		return d.arrayOf(int(n), depth)
	case 0xde, 0xdf:
		n, err := d.uint(2 << (c - 0xde))
		if err != nil {
			return nil, err
		}
		return d.mapOf(int(n), depth)
	}
	return nil, fmt.Errorf("msgpack: unsupported type byte %#x at %d", c, d.i-1)
}

func (d *mpDecoder) str(n int) (any, error) {
	s, err := d.take(n)
	return string(s), err
}

func (d *mpDecoder) arrayOf(n int, depth int) (any, error) {
	if n > len(d.b) {
		return nil, fmt.Errorf("msgpack: array of %d longer than the input", n)
	}
	out := make([]any, n)
	for k := range out {
		v, err := d.value(depth + 1)
		if err != nil {
			return nil, err
		}
		out[k] = v
	}
	return out, nil
}

func (d *mpDecoder) mapOf(n int, depth int) (any, error) {
	if n > len(d.b) {
		return nil, fmt.Errorf("msgpack: map of %d longer than the input", n)
	}
	out := make(map[string]any, n)
	for k := 0; k < n; k++ {
		key, err := d.value(depth + 1)
		if err != nil {
			return nil, err
		}
		ks, ok := key.(string)
		if !ok {
			return nil, fmt.Errorf("msgpack: map key %v is not a string", key)
		}
		v, err := d.value(depth + 1)
		if err != nil {
			return nil, err
		}
		out[ks] = v
	}
	return out, nil
}
