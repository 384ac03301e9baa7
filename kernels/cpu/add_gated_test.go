package cpu

import (
	"math"
	"math/rand"
	"slices"
	"testing"

	"github.com/zrtdev/zrt/kernels"
)

// add_gated adds each active row's y into x scaled by sigmoid(g·w) and
// leaves the rows past the active ones alone.
func TestAddGated(t *testing.T) {
	const rows, active, cols, k = 4, 3, 40, 24
	rng := rand.New(rand.NewSource(5))
	vec := func(n int) []float32 { return normals(rng, n) }
	x, y, g, w := vec(rows*cols), vec(rows*cols), vec(rows*k), vec(k)
	x0 := slices.Clone(x)
	table := kernels.RequestTable{Rows: rows, Slots: 1, MaxPages: 1}
	io := make([]uint32, table.Words())
	io[kernels.IOWordRows] = active
	pool := NewPool(2)
	defer pool.Close()
	a := &Args{Bufs: [][]byte{f32bytes(x), f32bytes(y), f32bytes(g), f32bytes(w), u32bytes(io)}, Push: []uint32{cols, k}, Pool: pool}
	if err := addGated(a); err != nil {
		t.Fatal(err)
	}
	for r := range rows {
		z := 0.0
		for j := range k {
			z += float64(g[r*k+j]) * float64(w[j])
		}
		s := 1 / (1 + math.Exp(-z))
		for j := range cols {
			want := float64(x0[r*cols+j])
			if r < active {
				want += s * float64(y[r*cols+j])
			}
			if d := math.Abs(want - float64(x[r*cols+j])); d > 1e-5 {
				t.Fatalf("row %d col %d: got %v, want %v", r, j, x[r*cols+j], want)
			}
		}
	}
}
