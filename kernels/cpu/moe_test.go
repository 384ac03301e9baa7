package cpu

import (
	"encoding/binary"
	"math"
	"math/rand"
	"testing"

	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/kernels/quant"
)

// The MoE kernels group each expert's (row, slot) pairs to read its
// weight rows once for all of them; every output must still be the bits
// of VecDot on its own pair, summed in routing order.
func TestMoEGroupedDots(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	const k, f, n, nExpert, nUsed, rows = 256, 256, 48, 6, 2, 37
	for _, typ := range []ggml.Type{ggml.Q8_0, ggml.Q4_K, ggml.MXFP4} {
		// Random blocks with sane scales: F16 d (and dmin) at the start of
		// a Q8_0 or Q4_K block, an E8M0 exponent at an MXFP4 one's.
		info, _ := typ.Info()
		randW := func(cols, nrows int) []byte {
			w := make([]byte, nrows*rowBytes(typ, cols))
			rng.Read(w)
			for b := 0; b < len(w); b += info.BlockBytes {
				switch typ {
				case ggml.MXFP4:
					w[b] = byte(118 + rng.Intn(8))
				case ggml.Q4_K:
					binary.LittleEndian.PutUint16(w[b+2:], quant.F32ToF16(rng.Float32()*0.01))
					fallthrough
				default:
					binary.LittleEndian.PutUint16(w[b:], quant.F32ToF16(rng.Float32()*0.01))
				}
			}
			return w
		}
		wg, wu, wd := randW(k, f*nExpert), randW(k, f*nExpert), randW(f, n*nExpert)
		rt := make([]byte, 8*rows*nUsed)
		for p := range rows * nUsed {
			binary.LittleEndian.PutUint32(rt[8*p:], uint32(rng.Intn(nExpert)))
			binary.LittleEndian.PutUint32(rt[8*p+4:], math.Float32bits(rng.Float32()))
		}
		io := make([]uint32, 8)
		io[0] = rows
		x := make([]float32, rows*k)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		gate, up := make([]float32, rows*nUsed*f), make([]float32, rows*nUsed*f)
		y := make([]float32, rows*n)
		pool := NewPool(2)
		var work []byte
		if err := moeGateUp(typ, &Args{Bufs: [][]byte{f32bytes(x), wg, wu, rt, u32bytes(io), f32bytes(gate), f32bytes(up)},
			Spec: []uint32{k, f, nUsed}, Pool: pool, Work: &work}); err != nil {
			t.Fatal(err)
		}
		if err := moeDownAcc(typ, &Args{Bufs: [][]byte{f32bytes(gate), wd, nil, rt, u32bytes(io), f32bytes(y)},
			Push: []uint32{f, n, nUsed}, Pool: pool, Work: &work}); err != nil {
			t.Fatal(err)
		}
		pool.Close()
		routes := routes(rt)
		vt := quant.VecDotType(typ)
		quantize := func(v []float32) []byte {
			b := make([]byte, rowBytes(vt, len(v)))
			if err := quant.QuantizeRow(vt, v, b); err != nil {
				t.Fatal(err)
			}
			return b
		}
		for i := range rows {
			xq := quantize(x[i*k : (i+1)*k])
			for u := range nUsed {
				e := int(routes[i*nUsed+u].Expert)
				for j := range f {
					rb := rowBytes(typ, k)
					p := (i*nUsed+u)*f + j
					if g := quant.VecDotOrder(typ, moeOrder(typ, f), k, wg[(e*f+j)*rb:(e*f+j+1)*rb], xq); math.Float32bits(g) != math.Float32bits(gate[p]) {
						t.Fatalf("%s: gate[%d] = %v, want %v", typ, p, gate[p], g)
					}
					if v := quant.VecDotOrder(typ, moeOrder(typ, f), k, wu[(e*f+j)*rb:(e*f+j+1)*rb], xq); math.Float32bits(v) != math.Float32bits(up[p]) {
						t.Fatalf("%s: up[%d] = %v, want %v", typ, p, up[p], v)
					}
				}
			}
			for j := range n {
				sum := float32(0)
				for u := range nUsed {
					rr := routes[i*nUsed+u]
					rb := rowBytes(typ, f)
					hq := quantize(gate[(i*nUsed+u)*f : (i*nUsed+u+1)*f])
					sum += rr.Weight * quant.VecDotOrder(typ, moeOrder(typ, n), f, wd[(int(rr.Expert)*n+j)*rb:(int(rr.Expert)*n+j+1)*rb], hq)
				}
				if math.Float32bits(sum) != math.Float32bits(y[i*n+j]) {
					t.Fatalf("%s: y[%d] = %v, want %v", typ, i*n+j, y[i*n+j], sum)
				}
			}
		}
	}
}
