package quant

import (
	"encoding/binary"
	"fmt"
)

// Q4_K interleaved in groups of eight weight rows, as ggml repacks it
// (block_q4_Kx8) so that its GEMM's order costs nothing: with one float
// lane per weight row, the kernel never sums integers across lanes, and
// the per-chunk FMAs of OrderGEMM are one vector FMA for eight outputs.
//
// A group holds, per super-block, Q4KInterleaveBlock bytes:
//
//	0     quants: for chunk c (64 elements), for p in 0..3, for row j,
//	      row j's quant bytes 32c+8p..32c+8p+7 (low nibbles sub-block 2c,
//	      high nibbles 2c+1)
//	1024  scales: for sub-block s, the eight rows' 6-bit scales, a byte each
//	1088  mins: the same of the mins
//	1152  d of the eight rows, float16 as in the rows
//	1168  dmin of the eight rows, float16
//
// It is as compact as the rows (1184 bytes for their 1152) so that
// building it costs little more than reading them. The layout is T-CPU's
// own, built at run time from the weights pack's Q4_K rows (the pack
// format does not change).

// Q4KInterleaveRows is the number of weight rows of an interleaved group.
const Q4KInterleaveRows = 8

// Q4KInterleaveBlock is the size of one super-block of an interleaved
// group.
const Q4KInterleaveBlock = 1184

const (
	k4iScales = 1024
	k4iMins   = 1088
	k4iD      = 1152
	k4iDmin   = 1168
)

// Q4KGroupBytes is the size of an interleaved group of rows of n elements.
func Q4KGroupBytes(n int) int { return n / qkK * Q4KInterleaveBlock }

// InterleaveQ4K writes the interleaved group of the eight Q4_K rows of n
// elements at w (row after row) into dst (Q4KGroupBytes(n) bytes).
func InterleaveQ4K(n int, w, dst []byte) error {
	if n <= 0 || n%qkK != 0 {
		return fmt.Errorf("quant: Q4_K interleave: row length %d is not a positive multiple of %d", n, qkK)
	}
	nb := n / qkK
	rb := nb * q4_KLen
	if len(w) < Q4KInterleaveRows*rb || len(dst) < nb*Q4KInterleaveBlock {
		return fmt.Errorf("quant: Q4_K interleave of rows of %d: %d weight bytes (want %d), %d destination bytes (want %d)",
			n, len(w), Q4KInterleaveRows*rb, len(dst), nb*Q4KInterleaveBlock)
	}
	le := binary.LittleEndian
	for b := 0; b < nb; b++ {
		d := (*[Q4KInterleaveBlock]byte)(dst[b*Q4KInterleaveBlock:])
		for j := 0; j < Q4KInterleaveRows; j++ {
			a := (*[q4_KLen]byte)(w[j*rb+b*q4_KLen:])
			qs := a[q4KQs:]
			for c := 0; c < 4; c++ {
				for p := 0; p < 4; p++ {
					le.PutUint64(d[256*c+64*p+8*j:], le.Uint64(qs[32*c+8*p:]))
				}
			}
			sc, mn := scaleMinK4((*[12]byte)(a[q4KScales:]))
			for s := 0; s < 8; s++ {
				d[k4iScales+8*s+j] = sc[s]
				d[k4iMins+8*s+j] = mn[s]
			}
			d[k4iD+2*j], d[k4iD+2*j+1] = a[q4KD], a[q4KD+1]
			d[k4iDmin+2*j], d[k4iDmin+2*j+1] = a[q4KDmin], a[q4KDmin+1]
		}
	}
	return nil
}

// dotQ4KInterleavedGo is the portable kernel on an interleaved group in
// order o (OrderGEMM or OrderGEMV): out[8r+j] is activation row r's
// product with weight row j, each dotQ4_KGEMM's (dotQ4_KGEMV's) float
// operations.
func dotQ4KInterleavedGo(o Order, n int, g, xq []byte, xStride, rows int, out []float32) {
	nb := n / qkK
	for r := 0; r < rows; r++ {
		x := xq[r*xStride:]
		for j := 0; j < Q4KInterleaveRows; j++ {
			var acc, accm float32
			for b := 0; b < nb; b++ {
				d := g[b*Q4KInterleaveBlock:]
				xd, y, bs := q8KHeader((*[q8_KLen]byte)(x[b*q8_KLen:]))
				dd := fp16(d[k4iD+2*j:]) * xd
				dm := fp16(d[k4iDmin+2*j:]) * xd
				var st, mt int32
				for c := 0; c < 4; c++ {
					var s, m int32
					for h := 0; h < 2; h++ {
						var p int32
						for e := 0; e < 32; e++ {
							q := int32(d[256*c+64*(e/8)+8*j+e%8] >> (4 * h) & 15)
							p += q * int32(int8(y[64*c+32*h+e]))
						}
						sb := 2*c + h
						s += int32(d[k4iScales+8*sb+j]) * p
						m += int32(d[k4iMins+8*sb+j]) * (bsum(bs, 2*sb) + bsum(bs, 2*sb+1))
					}
					if o == OrderGEMV {
						st += s
						mt += m
						continue
					}
					acc = fma32(float32(s), dd, acc)
					accm = fma32(float32(m), dm, accm)
				}
				if o == OrderGEMV {
					acc = fma32(float32(st), dd, acc)
					accm = fma32(float32(mt), dm, accm)
				}
			}
			out[8*r+j] = acc - accm
		}
	}
}

// q4kInterleavedKernel is the kernel of the current level on interleaved
// groups (nil: none faster than the one-row kernels).
type q4kInterleavedKernel func(o Order, n int, g, xq []byte, xStride, rows int, out []float32)

// q4kInterleavedMatVec is the kernel of the current level for one
// activation row against len(out)/8 consecutive interleaved groups in the
// repacked GEMV's order (arguments checked by MatVecQ4KInterleaved).
type q4kInterleavedMatVec func(n int, g, xq []byte, out []float32)

// MatVecQ4KInterleaved multiplies the interleaved groups at g (one after
// another, Q4KGroupBytes(n) bytes each; len(out)/8 of them) by the one
// Q8_K activation row xq in the repacked GEMV's order, as a decode step
// does: out[8i+j] is the product with group i's weight row j, bit-identical
// to VecDotQ4KInterleaved(OrderGEMV, ...) on each group.
func MatVecQ4KInterleaved(n int, g, xq []byte, out []float32) error {
	if len(out)%Q4KInterleaveRows != 0 {
		return fmt.Errorf("quant: Q4_K interleaved GEMV: %d outputs are not whole groups of %d", len(out), Q4KInterleaveRows)
	}
	ng := len(out) / Q4KInterleaveRows
	nb := n / qkK
	if nb == 0 || ng == 0 {
		clear(out)
		return nil
	}
	gb := nb * Q4KInterleaveBlock
	if len(g) < ng*gb || len(xq) < nb*q8_KLen {
		return fmt.Errorf("quant: Q4_K interleaved GEMV of %d groups of rows of %d: %d group bytes (want %d), %d activation bytes (want %d)",
			ng, n, len(g), ng*gb, len(xq), nb*q8_KLen)
	}
	if q4kInterleavedMV != nil {
		q4kInterleavedMV(n, g, xq, out)
		return nil
	}
	for i := 0; i < ng; i++ {
		if err := VecDotQ4KInterleaved(OrderGEMV, n, g[i*gb:(i+1)*gb], xq, len(xq), 1, out[i*Q4KInterleaveRows:(i+1)*Q4KInterleaveRows]); err != nil {
			return err
		}
	}
	return nil
}

// Q4KInterleavedFast reports whether this CPU has a kernel on interleaved
// Q4_K groups, which makes interleaving worth its cost.
func Q4KInterleavedFast() bool { return q4kInterleaved != nil }

// VecDotQ4KInterleaved multiplies the interleaved group g (rows of n
// elements, see InterleaveQ4K) by rows Q8_K activation rows at xq,
// xStride bytes apart, in order o, OrderGEMM or OrderGEMV (OrderDot is
// refused: ggml never interleaves for it): out[8r+j] is row r's product
// with weight row j, bit-identical to VecDotOrder(Q4_K, o, ...) on it.
func VecDotQ4KInterleaved(o Order, n int, g, xq []byte, xStride, rows int, out []float32) error {
	if o != OrderGEMM && o != OrderGEMV {
		return fmt.Errorf("quant: Q4_K interleaved product in order %d: only the repacked GEMM's and GEMV's", o)
	}
	nb := n / qkK
	if nb == 0 || rows <= 0 {
		clear(out[:max(0, rows)*Q4KInterleaveRows])
		return nil
	}
	_ = g[nb*Q4KInterleaveBlock-1]
	_ = xq[(rows-1)*xStride+nb*q8_KLen-1]
	_ = out[rows*Q4KInterleaveRows-1]
	if q4kInterleaved != nil {
		q4kInterleaved(o, n, g, xq, xStride, rows, out)
		return nil
	}
	dotQ4KInterleavedGo(o, n, g, xq, xStride, rows, out)
	return nil
}
