package cpu

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand"
	"testing"

	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/kernels/quant"
)

// rms_norm_matmul, the oracle of the fuse pass's norm with one or two
// projections: with two outputs of f features it computes what
// rms_norm_gate_up does on the same weight, and with one what rms_norm
// then matmul (the unfused sequence) compute, bit for bit, and its first
// output equals the two-output run's.
func TestRMSNormMatmul(t *testing.T) {
	const k, f = 512, 24
	rng := rand.New(rand.NewSource(44))
	w := make([]byte, 2*f*rowBytes(ggml.Q4_K, k))
	rng.Read(w)
	for b := 0; b < len(w); b += 144 {
		binary.LittleEndian.PutUint16(w[b:], quant.F32ToF16(rng.Float32()*0.01))
		binary.LittleEndian.PutUint16(w[b+2:], quant.F32ToF16(rng.Float32()*0.01))
	}
	eps := math.Float32bits(1e-5)
	pool := NewPool(2)
	defer pool.Close()
	for _, rows := range []int{1, 3} {
		x, wn := normals(rng, rows*k), normals(rng, k)
		io := make([]uint32, kernels.IOWordRowBase+rows*kernels.IORowWords)
		io[kernels.IOWordRows] = uint32(rows)
		var work []byte
		run := func(fn func(ggml.Type, *Args) error, bufs [][]byte, push, spec []uint32) {
			t.Helper()
			if err := fn(ggml.Q4_K, &Args{Bufs: bufs, Push: push, Spec: spec, Pool: pool, Work: &work}); err != nil {
				t.Fatal(err)
			}
		}
		y, y2 := make([]float32, rows*f), make([]float32, rows*f)
		run(rmsNormMatmul, [][]byte{f32bytes(x), f32bytes(wn), w, u32bytes(io), f32bytes(y), f32bytes(y2)}, nil, []uint32{k, f, f, eps})
		gate, up := make([]float32, rows*f), make([]float32, rows*f)
		run(rmsNormGateUp, [][]byte{f32bytes(x), f32bytes(wn), w, u32bytes(io), f32bytes(gate), f32bytes(up)}, nil, []uint32{k, f, eps})
		if !bytes.Equal(f32bytes(y), f32bytes(gate)) || !bytes.Equal(f32bytes(y2), f32bytes(up)) {
			t.Fatalf("%d rows: two outputs differ from rms_norm_gate_up's", rows)
		}
		one := make([]float32, rows*f)
		run(rmsNormMatmul, [][]byte{f32bytes(x), f32bytes(wn), w[:len(w)/2], u32bytes(io), f32bytes(one), nil}, nil, []uint32{k, f, 0, eps})
		if !bytes.Equal(f32bytes(one), f32bytes(y)) {
			t.Fatalf("%d rows: one output differs from the two-output run's first", rows)
		}
		n := make([]float32, rows*k)
		if err := rmsNorm(&Args{Bufs: [][]byte{f32bytes(x), f32bytes(wn), u32bytes(io), f32bytes(n)}, Push: []uint32{k, k}, Spec: []uint32{eps}, Pool: pool}); err != nil {
			t.Fatal(err)
		}
		ref := make([]float32, rows*f)
		run(matmul, [][]byte{f32bytes(n), w[:len(w)/2], nil, u32bytes(io), f32bytes(ref)}, []uint32{k, f}, nil)
		if !bytes.Equal(f32bytes(one), f32bytes(ref)) {
			t.Fatalf("%d rows: one output differs from rms_norm then matmul", rows)
		}
	}
}

// rms_norm_gate_up_swiglu computes rms_norm_gate_up then swiglu, bit for
// bit.
func TestRMSNormGateUpSwiGLU(t *testing.T) {
	const k, f = 512, 40
	rng := rand.New(rand.NewSource(45))
	w := make([]byte, 2*f*rowBytes(ggml.Q4_K, k))
	rng.Read(w)
	for b := 0; b < len(w); b += 144 {
		binary.LittleEndian.PutUint16(w[b:], quant.F32ToF16(rng.Float32()*0.01))
		binary.LittleEndian.PutUint16(w[b+2:], quant.F32ToF16(rng.Float32()*0.01))
	}
	eps := math.Float32bits(1e-5)
	pool := NewPool(2)
	defer pool.Close()
	for _, rows := range []int{1, 2} {
		x, wn := normals(rng, rows*k), normals(rng, k)
		io := make([]uint32, kernels.IOWordRowBase+rows*kernels.IORowWords)
		io[kernels.IOWordRows] = uint32(rows)
		var work []byte
		y := make([]float32, rows*f)
		if err := rmsNormGateUpSwiGLU(ggml.Q4_K, &Args{Bufs: [][]byte{f32bytes(x), f32bytes(wn), w, u32bytes(io), f32bytes(y)},
			Spec: []uint32{k, f, eps}, Pool: pool, Work: &work}); err != nil {
			t.Fatal(err)
		}
		gate, up, ref := make([]float32, rows*f), make([]float32, rows*f), make([]float32, rows*f)
		if err := rmsNormGateUp(ggml.Q4_K, &Args{Bufs: [][]byte{f32bytes(x), f32bytes(wn), w, u32bytes(io), f32bytes(gate), f32bytes(up)},
			Spec: []uint32{k, f, eps}, Pool: pool, Work: &work}); err != nil {
			t.Fatal(err)
		}
		if err := swiglu(&Args{Bufs: [][]byte{f32bytes(gate), f32bytes(up), u32bytes(io), f32bytes(ref)}, Push: []uint32{f}, Pool: pool}); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(f32bytes(y), f32bytes(ref)) {
			t.Fatalf("%d rows: differs from rms_norm_gate_up then swiglu", rows)
		}
		if y[0] == 0 && y[1] == 0 {
			t.Fatal("no output")
		}
	}
}
