package cpu

import (
	"math"
	"math/rand"
	"slices"
	"testing"

	"github.com/zrtdev/zrt/kernels"
)

// ropeCase runs rope (freq nil and attn 0) or rope_ext (with YaRN's
// ext_factor, corr_lo and corr_hi when given) on random heads at
// positions 0, 7, 300, … and returns the input and the rotated rows.
func ropeCase(t *testing.T, ext bool, freq []float32, attn float32, nHead, hd, nRot int, neox bool, yarn ...float32) (in, out []float32, pos []int) {
	t.Helper()
	rng := rand.New(rand.NewSource(3))
	pos = []int{0, 7, 300, 4095}
	rows := len(pos)
	table := kernels.RequestTable{Rows: rows, Slots: 1, MaxPages: 1}
	io := make([]uint32, table.Words())
	io[kernels.IOWordRows] = uint32(rows)
	for i, p := range pos {
		io[kernels.IOWordRowBase+i*kernels.IORowWords+kernels.IORowPos] = uint32(p)
	}
	in = make([]float32, rows*nHead*hd)
	for i := range in {
		in[i] = float32(rng.NormFloat64())
	}
	out = slices.Clone(in)
	n := uint32(0)
	if neox {
		n = 1
	}
	spec := []uint32{uint32(nRot), n, math.Float32bits(10000), math.Float32bits(0.5)}
	pool := NewPool(2)
	defer pool.Close()
	a := &Args{Push: []uint32{uint32(nHead), uint32(hd)}, Pool: pool}
	var err error
	if ext {
		var fb []byte
		if freq != nil {
			fb = f32bytes(freq)
		}
		a.Spec = append(spec, math.Float32bits(attn), 0, 0, 0)
		for i, v := range yarn { // ext_factor, corr_lo, corr_hi
			a.Spec[5+i] = math.Float32bits(v)
		}
		a.Bufs = [][]byte{f32bytes(out), fb, u32bytes(io)}
		err = ropeExt(a)
	} else {
		a.Bufs, a.Spec = [][]byte{f32bytes(out), u32bytes(io)}, spec
		err = rope(a)
	}
	if err != nil {
		t.Fatal(err)
	}
	return in, out, pos
}

// rope_ext without factors and with attention factor 1 is rope, to the
// bit; with them, each pair turns by pos·0.5·base^(-2i/n_rot)/freq[i] and
// is scaled by the attention factor, and dimensions past n_rot are left.
func TestRopeExt(t *testing.T) {
	const nHead, hd, nRot = 3, 16, 12
	for _, neox := range []bool{false, true} {
		_, plain, _ := ropeCase(t, false, nil, 0, nHead, hd, nRot, neox)
		_, ext, _ := ropeCase(t, true, nil, 1, nHead, hd, nRot, neox)
		if !slices.Equal(plain, ext) {
			t.Errorf("neox %v: rope_ext without factors differs from rope", neox)
		}
		freq := []float32{1, 1.5, 2, 4, 8, 16}
		const attn = 1.19
		in, out, pos := ropeCase(t, true, freq, attn, nHead, hd, nRot, neox)
		for r, p := range pos {
			for h := range nHead {
				x, y := in[(r*nHead+h)*hd:][:hd], out[(r*nHead+h)*hd:][:hd]
				for i := range nRot / 2 {
					i0, i1 := 2*i, 2*i+1
					if neox {
						i0, i1 = i, i+nRot/2
					}
					th := float64(p) * 0.5 * math.Pow(10000, -2*float64(i)/nRot) / float64(freq[i])
					c, s := attn*math.Cos(th), attn*math.Sin(th)
					w0 := float64(x[i0])*c - float64(x[i1])*s
					w1 := float64(x[i0])*s + float64(x[i1])*c
					if math.Abs(w0-float64(y[i0])) > 1e-3 || math.Abs(w1-float64(y[i1])) > 1e-3 {
						t.Fatalf("neox %v pos %d head %d pair %d: got (%v, %v), want (%v, %v)", neox, p, h, i, y[i0], y[i1], w0, w1)
					}
				}
				if !slices.Equal(x[nRot:], y[nRot:]) {
					t.Errorf("neox %v pos %d head %d: dimensions past n_rot changed", neox, p, h)
				}
			}
		}
	}
}

// With YaRN, pair i turns by a mix of the interpolated angle (scaled by
// freq_scale 0.5) and the extrapolated one, weighted by a ramp that is 1
// below corr_lo and 0 above corr_hi, and cos and sin carry the extra
// magnitude 1 + 0.1·ln 2 on top of the attention factor.
func TestRopeYaRN(t *testing.T) {
	const nHead, hd, nRot = 2, 32, 32
	const attn, lo, hi = 0.9, 3, 10
	in, out, pos := ropeCase(t, true, nil, attn, nHead, hd, nRot, false, 1, lo, hi)
	for r, p := range pos {
		for h := range nHead {
			x, y := in[(r*nHead+h)*hd:][:hd], out[(r*nHead+h)*hd:][:hd]
			for i := range nRot / 2 {
				extrap := float64(p) * math.Pow(10000, -2*float64(i)/nRot)
				ramp := 1 - math.Min(1, math.Max(0, (float64(i)-lo)/(hi-lo)))
				th := 0.5*extrap*(1-ramp) + extrap*ramp
				m := attn * (1 + 0.1*math.Log(2))
				c, s := m*math.Cos(th), m*math.Sin(th)
				w0 := float64(x[2*i])*c - float64(x[2*i+1])*s
				w1 := float64(x[2*i])*s + float64(x[2*i+1])*c
				if math.Abs(w0-float64(y[2*i])) > 2e-3 || math.Abs(w1-float64(y[2*i+1])) > 2e-3 {
					t.Fatalf("pos %d head %d pair %d: got (%v, %v), want (%v, %v)", p, h, i, y[2*i], y[2*i+1], w0, w1)
				}
			}
		}
	}
}
