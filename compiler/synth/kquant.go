package synth

import (
	"encoding/binary"
	"math"

	"github.com/zrtdev/zrt/kernels/quant"
)

// Weight encoders for the k-quants. They produce valid blocks with simple
// min/max scaling, not llama-quantize's search for the best scales: the
// values only have to decode sensibly, since synthetic models exist to
// exercise formats and measure speed.

const qk = 256

func f16(x float32) uint16 { return quant.F32ToF16(x) }

func roundClamp(x float64, lo, hi int) int {
	v := int(math.Round(x))
	return min(max(v, lo), hi)
}

// encodeQ4K encodes x (a multiple of 256 elements) as Q4_K: per 32-element
// sub-block a 6-bit scale and min relative to the block's d and dmin.
func encodeQ4K(x []float32) []byte { return encodeQ45K(x, false) }

// encodeQ5K encodes x as Q5_K: Q4_K's scales and nibbles, and each
// element's fifth bit in qh (bit e/32 of qh[e%32]).
func encodeQ5K(x []float32) []byte { return encodeQ45K(x, true) }

func encodeQ45K(x []float32, five bool) []byte {
	levels, bb := 15, 144
	if five {
		levels, bb = 31, 176
	}
	out := make([]byte, 0, len(x)/qk*bb)
	for b := 0; b < len(x); b += qk {
		blk := x[b : b+qk]
		var scale, mval [8]float64
		maxScale, maxMin := 0.0, 0.0
		for j := 0; j < 8; j++ {
			lo, hi := 0.0, 0.0
			for _, v := range blk[32*j : 32*j+32] {
				lo, hi = math.Min(lo, float64(v)), math.Max(hi, float64(v))
			}
			scale[j], mval[j] = (hi-lo)/float64(levels), -lo
			maxScale, maxMin = math.Max(maxScale, scale[j]), math.Max(maxMin, mval[j])
		}
		d, dmin := quant.F16ToF32(f16(float32(maxScale/63))), quant.F16ToF32(f16(float32(maxMin/63)))
		var sc, m [8]int
		for j := range sc {
			if d > 0 {
				sc[j] = roundClamp(scale[j]/float64(d), 0, 63)
			}
			if dmin > 0 {
				m[j] = roundClamp(mval[j]/float64(dmin), 0, 63)
			}
		}
		var hdr [16]byte
		binary.LittleEndian.PutUint16(hdr[0:], f16(d))
		binary.LittleEndian.PutUint16(hdr[2:], f16(dmin))
		s := hdr[4:16]
		for j := 0; j < 4; j++ {
			s[j] = byte(sc[j]) | byte(sc[j+4]>>4)<<6
			s[j+4] = byte(m[j]) | byte(m[j+4]>>4)<<6
			s[j+8] = byte(sc[j+4]&0xF) | byte(m[j+4]&0xF)<<4
		}
		out = append(out, hdr[:]...)
		var qh [32]byte
		var qs [128]byte
		for e, v := range blk {
			j := e / 32
			q := 0
			if step := float64(d) * float64(sc[j]); step > 0 {
				q = roundClamp((float64(v)+float64(dmin)*float64(m[j]))/step, 0, levels)
			}
			qh[e%32] |= byte(q>>4) << (e / 32)
			chunk, l := e/64, e%64
			if l < 32 {
				qs[32*chunk+l] |= byte(q & 0xF)
			} else {
				qs[32*chunk+l-32] |= byte(q&0xF) << 4
			}
		}
		if five {
			out = append(out, qh[:]...)
		}
		out = append(out, qs[:]...)
	}
	return out
}

// kvaluesIQ4NL are the 16 levels of ggml's IQ4_NL and IQ4_XS.
var kvaluesIQ4NL = [16]float64{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}

// subScales returns, for each sub-block of n elements of blk, the scale
// that puts its largest magnitude at level top, and the largest of them.
func subScales(blk []float32, n int, top float64) ([]float64, float64) {
	scale := make([]float64, len(blk)/n)
	maxScale := 0.0
	for j := range scale {
		for _, v := range blk[n*j : n*j+n] {
			scale[j] = math.Max(scale[j], math.Abs(float64(v))/top)
		}
		maxScale = math.Max(maxScale, scale[j])
	}
	return scale, maxScale
}

// encodeIQ4XS encodes x as IQ4_XS: per 32-element sub-block a 6-bit
// scale (biased by 32) relative to the block's d, and per element the
// nearest of the 16 non-linear levels.
func encodeIQ4XS(x []float32) []byte {
	out := make([]byte, 0, len(x)/qk*136)
	for b := 0; b < len(x); b += qk {
		blk := x[b : b+qk]
		scale, maxScale := subScales(blk, 32, 113)
		d := quant.F16ToF32(f16(float32(maxScale / 31)))
		var blkOut [136]byte
		binary.LittleEndian.PutUint16(blkOut[0:], f16(d))
		var sh uint16
		for j := range scale {
			ls := 32
			if d > 0 {
				ls = roundClamp(scale[j]/float64(d), 0, 31) + 32
			}
			sh |= uint16(ls>>4) << (2 * j)
			blkOut[4+j/2] |= byte(ls&0xF) << (4 * (j % 2))
			dl := float64(float32(float64(d) * float64(ls-32)))
			for e, v := range blk[32*j : 32*j+32] {
				best := 0
				if dl != 0 {
					for k, lv := range kvaluesIQ4NL {
						if math.Abs(float64(v)-dl*lv) < math.Abs(float64(v)-dl*kvaluesIQ4NL[best]) {
							best = k
						}
					}
				} else {
					best = 8 // level 1: closest to zero
				}
				if e < 16 {
					blkOut[8+16*j+e] |= byte(best)
				} else {
					blkOut[8+16*j+e-16] |= byte(best) << 4
				}
			}
		}
		binary.LittleEndian.PutUint16(blkOut[2:], sh)
		out = append(out, blkOut[:]...)
	}
	return out
}

// encodeQ6K encodes x as Q6_K: 6-bit values around 32 with an int8 scale
// per 16-element sub-block relative to the block's d.
func encodeQ6K(x []float32) []byte {
	out := make([]byte, 0, len(x)/qk*210)
	for b := 0; b < len(x); b += qk {
		blk := x[b : b+qk]
		scale, maxScale := subScales(blk, 16, 31)
		d := quant.F16ToF32(f16(float32(maxScale / 127)))
		var sc [16]int
		for i := range sc {
			if d > 0 {
				sc[i] = roundClamp(scale[i]/float64(d), -128, 127)
			}
		}
		var ql [128]byte
		var qh [64]byte
		for e, v := range blk {
			q := 32
			if step := float64(d) * float64(sc[e/16]); step != 0 {
				q = roundClamp(float64(v)/step, -32, 31) + 32
			}
			h, p := e/128, e%128
			g, l := p/32, p%32
			lo, hi := byte(q&0xF), byte(q>>4)
			switch g {
			case 0:
				ql[64*h+l] |= lo
			case 1:
				ql[64*h+l+32] |= lo
			case 2:
				ql[64*h+l] |= lo << 4
			case 3:
				ql[64*h+l+32] |= lo << 4
			}
			qh[32*h+l] |= hi << (2 * g)
		}
		out = append(out, ql[:]...)
		out = append(out, qh[:]...)
		for _, s := range sc {
			out = append(out, byte(int8(s)))
		}
		out = binary.LittleEndian.AppendUint16(out, f16(d))
	}
	return out
}
