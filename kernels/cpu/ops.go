package cpu

import (
	"fmt"
	"math"
	"sync"

	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/kernels/quant"
)

// rowBytes is the size of an n-element row of t; n is known to be whole blocks.
func rowBytes(t ggml.Type, n int) int {
	b, err := t.RowBytes(int64(n))
	if err != nil {
		panic(err)
	}
	return int(b)
}

// embed copies (dequantizing) each row's token embedding into y.
func embed(t ggml.Type, a *Args) error {
	table, r, y := a.Bufs[0], req(a.Bufs[1]), f32s(a.Bufs[2])
	cols := int(a.Push[0])
	rb := rowBytes(t, cols)
	return a.Pool.For(r.rows(), 1, func(_, lo, hi int) {
		for i := lo; i < hi; i++ {
			tok := int(r.row(i, kernels.IORowToken))
			if err := quant.Dequantize(t, table[tok*rb:(tok+1)*rb], y[i*cols:(i+1)*cols]); err != nil {
				panic(err)
			}
		}
	})
}

// rmsNorm normalizes each group of cols.
func rmsNorm(a *Args) error {
	x, w, r, y := f32s(a.Bufs[0]), f32s(a.Bufs[1]), req(a.Bufs[2]), f32s(a.Bufs[3])
	cols, group := int(a.Push[0]), int(a.Push[1])
	eps := math.Float32frombits(a.Spec[0])
	return a.Pool.For(r.rows(), 1, func(_, lo, hi int) {
		for i := lo; i < hi; i++ {
			for g := i * cols; g < (i+1)*cols; g += group {
				normRow(x[g:g+group], y[g:g+group], w, eps)
			}
		}
	})
}

// normRow is ggml's RMS norm of one group: the sum of squares accumulated
// in float64, the scale 1.0f/sqrtf(mean+eps) in float32 (a float32 square
// root, then a float32 division: 1/sqrt in float64 rounded once differs by
// an ulp now and then, which flips the Q8 rounding of the next matmul's
// activations), and the weight applied after scaling (ggml's separate MUL
// op; none when w is nil). ys may alias xs.
func normRow(xs, ys, w []float32, eps float32) {
	sum := 0.0
	for _, v := range xs {
		sum += float64(v * v)
	}
	scale := 1 / sqrtf(float32(sum/float64(len(xs)))+eps)
	if w == nil {
		for j, v := range xs {
			ys[j] = v * scale
		}
		return
	}
	w = w[:len(xs)]
	for j, v := range xs {
		ys[j] = (v * scale) * w[j]
	}
}

// matmul computes y[r] = W·x[r] (+ bias) for the active rows. Activations
// are first quantized to the weight type's dot-product partner type, as
// ggml does, then each output feature is one VecDot per row; workers split
// the output features so each weight row is read once for all rows.
// The prompt rows of an F16 product go through tinyBLAS's arithmetic
// where ggml takes it (gemmPrompt).
func matmul(t ggml.Type, a *Args) error {
	x, w, b, r, y, k, n := matmulArgs(a)
	return gemmPrompt(a, t, x, w, r, k, n, quant.Repacked(t, n), func(i, j int) []float32 { return y[i*n+j : (i+1)*n] }, b)
}

// matmulArgs unpacks matmul's and matmul_residual's buffers (x, w, bias,
// the request table, y) and push constants (k, n); b is the bias's n
// floats, nil without one.
func matmulArgs(a *Args) (x []float32, w []byte, b []float32, r request, y []float32, k, n int) {
	x, w, r, y = f32s(a.Bufs[0]), a.Bufs[1], req(a.Bufs[3]), f32s(a.Bufs[4])
	k, n = int(a.Push[0]), int(a.Push[1])
	if bias := a.Bufs[2]; bias != nil {
		b = f32s(bias)[:n]
	}
	return x, w, b, r, y, k, n
}

// gemmPrompt is gemm over the rows of the request table r, with the
// prompt rows of an F16 product in tinyBLAS's arithmetic where ggml
// would take it (tinyBLASFits), and the product of a weight ggml repacks
// (repacked: quant.Repacked for each of the matrices w concatenates) in
// the repacked kernels' orders (gemmRepacked).
func gemmPrompt(a *Args, t ggml.Type, x []float32, w []byte, r request, k, n int, repacked bool, dst func(i, j int) []float32, b []float32) error {
	rows := r.rows()
	if repacked {
		return gemmRepacked(a, t, x, w, rows, k, n, dst, b, nil, func(i int) quant.Order {
			if r.row(i, kernels.IORowFlags)&(kernels.RowPrompt|kernels.RowPromptTail) == kernels.RowPrompt {
				return quant.OrderGEMM
			}
			return quant.OrderGEMV
		})
	}
	if !tinyBLASFits(t, rows, k, n) {
		return gemm(a, t, x, w, rows, k, n, dst, b, nil)
	}
	prompt := func(i int) bool { return r.row(i, kernels.IORowFlags)&kernels.RowPrompt != 0 }
	if err := gemmTinyBLAS(a, x, w, rows, k, n, dst, b, prompt); err != nil {
		return err
	}
	return gemm(a, t, x, w, rows, k, n, dst, b, func(i int) bool { return !prompt(i) })
}

// gemm quantizes rows of x (k wide) and writes W_j·x_row (+ bias[j] when
// bias is set) for every active row and output feature j < n. dst(i, j)
// returns the destination of row i's outputs from feature j on, up to the
// end of the contiguous run that holds j (the caller's output may be
// split into several arrays); keep, when set, filters rows.
//
// A single active row (decode) is a matrix-vector product: each worker
// streams its share of the weight rows once through quant.MatVec, straight
// into the destination. Several active rows (prefill's, or a mixed
// step's rows that want logits) go through VecDotRows, which loads each
// weight row once for all of them and gives each row VecDot's bits.
func gemm(a *Args, t ggml.Type, x []float32, w []byte, rows, k, n int, dst func(i, j int) []float32, bias []float32, keep func(i int) bool) error {
	vt := quant.VecDotType(t)
	xb, wb := rowBytes(vt, k), rowBytes(t, k)
	// the work buffer also holds the prepared groups of prefill (below);
	// gemmWorkBytes is what it takes
	pg := quant.PrepGroupBytes(t, k)
	ngroups := rows / quant.PrepRows
	buf := a.work(rows*xb + ngroups*pg)
	xq := buf[:rows*xb]
	var active []int
	if keep != nil {
		active = make([]int, 0, rows)
		for i := 0; i < rows; i++ {
			if keep(i) {
				active = append(active, i)
			}
		}
	}
	nact := rows
	if keep != nil {
		nact = len(active)
	}
	row := func(ai int) int {
		if keep == nil {
			return ai
		}
		return active[ai]
	}
	// Active row ai's quants go to slot ai: the active rows of a filtered
	// product lie together, evenly strided, for the multi-row kernels.
	quantize := func(ai int) {
		i := row(ai)
		if err := quant.QuantizeRow(vt, x[i*k:(i+1)*k], xq[ai*xb:(ai+1)*xb]); err != nil {
			panic(err) // sizes come from the kernel's own arguments
		}
	}
	// With every row active and a prepared-group kernel for the type, each
	// full group of quant.PrepRows activation rows is prepared once (the
	// work its multi-row kernel would redo per weight row), by the chunk
	// that quantizes it: one loop and one wait, not two.
	var xp []byte
	if nact == rows && pg > 0 && ngroups > 0 {
		xp = buf[rows*xb:]
	}
	switch {
	case nact == 1:
		quantize(0) // one row: no dispatch
	case xp != nil:
		if err := a.Pool.For((rows+quant.PrepRows-1)/quant.PrepRows, 1, func(_, lo, hi int) {
			for g := lo; g < hi; g++ {
				for i := g * quant.PrepRows; i < min(rows, (g+1)*quant.PrepRows); i++ {
					quantize(i)
				}
				if g < ngroups {
					quant.PrepareRows(t, k, xq[g*quant.PrepRows*xb:], xb, xp[g*pg:(g+1)*pg])
				}
			}
		}); err != nil {
			return err
		}
	default:
		if err := a.Pool.For(nact, 4, func(_, lo, hi int) {
			for ai := lo; ai < hi; ai++ {
				quantize(ai)
			}
		}); err != nil {
			return err
		}
	}
	if nact == 0 {
		return nil
	}
	if nact == 1 {
		i := row(0)
		xi := xq[:xb]
		return a.Pool.For(n, 16, func(_, lo, hi int) {
			for j := lo; j < hi; {
				d := dst(i, j)
				m := min(len(d), hi-j)
				d = d[:m]
				quant.MatVec(t, k, w[j*wb:(j+m)*wb], xi, d)
				if bias != nil {
					for jj, bv := range bias[j : j+m] {
						d[jj] += bv
					}
				}
				j += m
			}
		})
	}
	// Several active rows (every row in prefill; those that want logits,
	// say, in a mixed step) lie evenly strided and the product is tiled:
	// each worker takes a share of the output features, and for each
	// block of gemmCols weight rows sweeps the activations in blocks of ib
	// rows that stay in L1 while the block's weight rows (in L1/L2) go
	// through VecDotRows, which loads and unpacks each weight row once per
	// group of rows. Every output is one VecDotRows result plus the bias:
	// the tiling changes no float order.
	// ib is a multiple of 8, the widest multi-row kernel's group (Q8_0);
	// which kernel computes a row then depends only on rows mod 4, as the
	// eight-row kernel's results equal the four-row kernel's.
	ib := max(8, min(gemmTileRows, gemmRowBytes/xb)) &^ 7
	if xp != nil {
		// Blocks of two prepared groups at least, so that wide rows (the
		// FFN's down projection) take the two-group kernels too: their
		// activations then come from L2, which costs less than
		// unpacking each weight block for eight rows at a time.
		ib = max(ib, 2*quant.PrepRows)
	}
	// The prepared groups (above) go through VecDotPrepared2 two at a time
	// and VecDotPrepared, bit-identical to VecDotRows on them; the rows
	// past the last full group go through VecDotRows. Where the level
	// prepares weight rows too and enough groups meet each one
	// (gemmPrepWeightGroups), each block's weight rows are prepared once
	// and each pair of groups meets them all in one VecDotPrepared2W, the
	// same bits.
	pwb := 0
	if xp != nil && ngroups >= gemmPrepWeightGroups {
		pwb = quant.PrepWeightBytes(t, k)
	}
	return a.Pool.For(n, 16, func(_, lo, hi int) {
		tp, _ := gemmTiles.Get().(*[gemmTileRows*gemmCols + 16]float32)
		if tp == nil {
			tp = new([gemmTileRows*gemmCols + 16]float32)
		}
		defer gemmTiles.Put(tp)
		var wp []byte
		if pwb > 0 {
			bp := pooledBytes(&gemmWeights, gemmCols*pwb)
			defer gemmWeights.Put(bp)
			wp = *bp
		}
		size := ib * gemmCols
		tile := tp[: size : size+16] // writeTile reads up to 16 floats past the end
		for j0 := lo; j0 < hi; j0 += gemmCols {
			jn := min(gemmCols, hi-j0)
			if wp != nil {
				quant.PrepareWeights(t, k, w[j0*wb:(j0+jn)*wb], jn, wp)
			}
			for i0 := 0; i0 < nact; i0 += ib {
				in := min(ib, nact-i0)
				xs := xq[i0*xb:]
				np := 0 // rows of this block taken from prepared groups
				if xp != nil {
					np = min(in, ngroups*quant.PrepRows-i0)
				}
				// With prepared weights, each pair of groups meets the
				// block's jn weight rows in one call.
				paired := 0
				if wp != nil {
					for ; paired+2*quant.PrepRows <= np; paired += 2 * quant.PrepRows {
						g := (i0 + paired) / quant.PrepRows
						quant.VecDotPrepared2W(t, k, wp[:jn*pwb], xp[g*pg:(g+2)*pg], jn, tile[paired:], ib)
					}
				}
				for jj := 0; jj < jn; jj++ {
					j := j0 + jj
					wr := w[j*wb : (j+1)*wb]
					r := paired
					for ; r+2*quant.PrepRows <= np; r += 2 * quant.PrepRows {
						g := (i0 + r) / quant.PrepRows
						quant.VecDotPrepared2(t, k, wr, xp[g*pg:(g+2)*pg], tile[jj*ib+r:jj*ib+r+2*quant.PrepRows])
					}
					for ; r < np; r += quant.PrepRows {
						g := (i0 + r) / quant.PrepRows
						quant.VecDotPrepared(t, k, wr, xp[g*pg:(g+1)*pg], tile[jj*ib+r:jj*ib+r+quant.PrepRows])
					}
					if np < in {
						quant.VecDotRows(t, k, wr, xs[np*xb:], xb, in-np, tile[jj*ib+np:jj*ib+in])
					}
				}
				var b []float32
				if bias != nil {
					b = bias[j0 : j0+jn]
				}
				writeTile(tile, ib, in, jn, func(ii, jj int) []float32 { return dst(row(i0+ii), j0+jj) }, b)
			}
		}
	})
}

// writeTile stores a tile of products, tile[jj*ib+ii] for in activation
// rows and jn weight rows, at dst(ii, jj), plus bias[jj] when bias is set.
// Where the CPU has transposeF32x16, each block of up to 16 rows whose
// outputs are runs of 16 goes through it (a partial block's other rows
// land in scratch: the transpose reads 16 floats a weight row, up to 16
// past the tile, which its capacity must cover); the rest is copied
// element by element.
func writeTile(tile []float32, ib, in, jn int, dst func(ii, jj int) []float32, bias []float32) {
	var rows [16]*float32
	var scratch [16]float32
	for i0 := 0; i0 < in; i0 += 16 {
		h := min(16, in-i0)
		whole := vecSIMDOK && jn == 16
		for r := 0; r < 16 && whole; r++ {
			rows[r] = &scratch[0]
			if r < h {
				d := dst(i0+r, 0)
				if whole = len(d) >= 16; whole {
					rows[r] = &d[0]
				}
			}
		}
		if whole {
			_ = tile[:cap(tile)][15*ib+i0+15]
			transposeF32x16(&rows, &tile[i0], ib)
			for r := 0; bias != nil && r < h; r++ {
				d := dst(i0+r, 0)[:16]
				for c, b := range bias {
					d[c] += b
				}
			}
			continue
		}
		for ii := i0; ii < i0+h; ii++ {
			for jj := 0; jj < jn; {
				d := dst(ii, jj)
				d = d[:min(len(d), jn-jj)]
				col := tile[jj*ib+ii:]
				for c := range d {
					d[c] = col[c*ib]
				}
				if bias != nil {
					for c, b := range bias[jj : jj+len(d)] {
						d[c] += b
					}
				}
				jj += len(d)
			}
		}
	}
}

// gemmWorkBytes is how many bytes at the start of the executor scratch
// gemm uses for rows activation rows of k elements against a weight of
// type t (quantized activations, then prepared groups), rounded up to 64;
// the fused kernels keep their own scratch after it.
func gemmWorkBytes(t ggml.Type, rows, k int) int {
	q := rows*rowBytes(quant.VecDotType(t), k) + rows/quant.PrepRows*quant.PrepGroupBytes(t, k)
	return (q + 63) &^ 63
}

// Prefill tile sizes: gemmCols weight rows per block, and activation row
// blocks of about gemmRowBytes quantized bytes (L1-sized).
const (
	gemmCols     = 16
	gemmTileRows = 64 // the most activation rows a tile holds
	gemmRowBytes = 16 << 10
	// gemmPrepWeightGroups is the fewest prepared groups of activation
	// rows for which gemm prepares its weight rows (quant.PrepareWeights):
	// preparing a row costs about what one pass of it over a pair of
	// groups saves, so a prompt of 64 rows (four such passes) gains. On
	// a Zen 4 EPYC, 2 threads, the prepared weights alone took llama 110M
	// Q8_0 pp512 from 1 271 / 1 263 / 1 401 to 1 304 / 1 307 / 1 417
	// tok/s (zrt-run bench, alternating runs).
	gemmPrepWeightGroups = 8
)

// lmHead writes logits for the rows that ask for them, into their slot's
// row of the output.
func lmHead(t ggml.Type, a *Args) error {
	x, w, r, logits := f32s(a.Bufs[0]), a.Bufs[1], req(a.Bufs[2]), f32s(a.Bufs[3])
	k, nv := int(a.Push[0]), int(a.Push[1])
	dst := func(i, j int) []float32 {
		s := int(r.row(i, kernels.IORowSlot))
		return logits[s*nv+j : (s+1)*nv]
	}
	wants := func(i int) bool { return r.row(i, kernels.IORowFlags)&kernels.RowWantsLogits != 0 }
	if quant.Repacked(t, nv) {
		// llama.cpp's output product takes only the rows that want logits
		// (one per request): the repacked GEMV's.
		return gemmRepacked(a, t, x, w, r.rows(), k, nv, dst, nil, wants, func(int) quant.Order { return quant.OrderGEMV })
	}
	return gemm(a, t, x, w, r.rows(), k, nv, dst, nil, wants)
}

// argmax picks each logits row's largest entry (the first on ties).
func argmax(a *Args) error {
	logits, r, toks := f32s(a.Bufs[0]), req(a.Bufs[1]), u32s(a.Bufs[2])
	nv := int(a.Push[0])
	for i := 0; i < r.rows(); i++ {
		if r.row(i, kernels.IORowFlags)&kernels.RowWantsLogits == 0 {
			continue
		}
		s := int(r.row(i, kernels.IORowSlot))
		l := logits[s*nv : (s+1)*nv]
		best := 0
		for j, v := range l {
			if v > l[best] {
				best = j
			}
		}
		toks[s] = uint32(best)
	}
	return nil
}

// add accumulates y into x.
func add(a *Args) error {
	x, y, r := f32s(a.Bufs[0]), f32s(a.Bufs[1]), req(a.Bufs[2])
	n := r.rows() * int(a.Push[0])
	x, y = x[:n], y[:n]
	for i := range x {
		x[i] += y[i]
	}
	return nil
}

// addGated adds each row's y into its residual x scaled by sigmoid(g·w):
// the dot's float32 products summed in float64 (ggml sums them in float32,
// in another order), the sigmoid in float64, each rounded to float32.
func addGated(a *Args) error {
	x, y, g, w, r := f32s(a.Bufs[0]), f32s(a.Bufs[1]), f32s(a.Bufs[2]), f32s(a.Bufs[3]), req(a.Bufs[4])
	n, k := int(a.Push[0]), int(a.Push[1])
	w = w[:k]
	return a.Pool.For(r.rows(), 1, func(_, lo, hi int) {
		for i := lo; i < hi; i++ {
			s := 0.0
			for j, v := range g[i*k : (i+1)*k] {
				s += float64(v * w[j])
			}
			gate := float32(1 / (1 + math.Exp(-float64(float32(s)))))
			xs, ys := x[i*n:(i+1)*n], y[i*n:(i+1)*n]
			for j := range xs {
				xs[j] += gate * ys[j]
			}
		}
	})
}

// swiglu is silu(gate)·up row by row, with SiLU as ggml computes it
// (swigluRow): rows split over the workers, or, for a single row, blocks
// of 16 lanes (so the vector/tail split stays the row's).
func swiglu(a *Args) error {
	g, u, r, y := f32s(a.Bufs[0]), f32s(a.Bufs[1]), req(a.Bufs[2]), f32s(a.Bufs[3])
	n, rows := int(a.Push[0]), r.rows()
	if rows == 1 {
		nb := (n + 15) / 16
		return a.Pool.For(nb, 64, func(_, lo, hi int) {
			lo, hi = lo*16, min(hi*16, n)
			swigluRow(y[lo:hi], g[lo:hi], u[lo:hi])
		})
	}
	return a.Pool.For(rows, 1, func(_, lo, hi int) {
		for i := lo; i < hi; i++ {
			swigluRow(y[i*n:(i+1)*n], g[i*n:(i+1)*n], u[i*n:(i+1)*n])
		}
	})
}

// rope rotates the first n_rot dims of each head of each row in place.
func rope(a *Args) error {
	x, r := f32s(a.Bufs[0]), req(a.Bufs[1])
	nHead, hd := int(a.Push[0]), int(a.Push[1])
	rp := ropeParams(a.Spec[0:4])
	return rp.rows(a, x, r, nHead, hd)
}

// ropeExt is rope with per-pair frequency factors (when freq is bound),
// an attention factor on cos and sin, and YaRN's ramp between
// interpolated and extrapolated angles (when ext_factor is not 0).
func ropeExt(a *Args) error {
	x, freq, r := f32s(a.Bufs[0]), a.Bufs[1], req(a.Bufs[2])
	nHead, hd := int(a.Push[0]), int(a.Push[1])
	rp := ropeParams(a.Spec[0:4])
	rp.mscale = math.Float32frombits(a.Spec[4])
	rp.ext = math.Float32frombits(a.Spec[5])
	rp.corr = [2]float32{math.Float32frombits(a.Spec[6]), math.Float32frombits(a.Spec[7])}
	if rp.ext != 0 {
		rp.mscale *= fma32(0.1, float32(math.Log(float64(1/rp.scale))), 1)
	}
	if freq != nil {
		rp.freq = f32s(freq)[:rp.nRot/2]
	}
	return rp.rows(a, x, r, nHead, hd)
}

// rows rotates every head of every row of x in place, at the row's
// position, each worker building its own cos/sin table.
func (rp ropeSpec) rows(a *Args, x []float32, r request, nHead, hd int) error {
	return a.Pool.For(r.rows(), 1, func(_, lo, hi int) {
		cs := make([]float32, rp.nRot)
		for i := lo; i < hi; i++ {
			rp.table(cs, int(r.row(i, kernels.IORowPos)))
			for h := 0; h < nHead; h++ {
				rp.rotate(x[(i*nHead+h)*hd:(i*nHead+h+1)*hd], cs)
			}
		}
	})
}

// ropeSpec is RoPE's configuration from its specialization slots
// (n_rot, neox, freq_base, freq_scale), with rope_ext's frequency factors
// (nil for none) and attention factor (1 for none).
type ropeSpec struct {
	nRot              int
	neox              bool
	thetaScale, scale float32
	freq              []float32
	mscale            float32
	// YaRN: the extrapolation factor (0 for none) and the correction
	// dims between which its ramp falls from 1 to 0.
	ext  float32
	corr [2]float32
}

func ropeParams(spec []uint32) ropeSpec {
	nRot := int(spec[0])
	base := math.Float32frombits(spec[2])
	return ropeSpec{nRot: nRot, neox: spec[1] != 0, scale: math.Float32frombits(spec[3]),
		thetaScale: float32(math.Pow(float64(base), -2/float64(nRot))), mscale: 1}
}

// table fills cs with (cos, sin) pairs for position pos: θ_i =
// freq_scale·pos·base^(-2i/n_rot), built by repeated float32 multiplication
// as ggml builds its cache, and cos and sin by glibc's cosf and sinf
// (sincosf.go), so the rounding matches. With frequency
// factors θ_i is divided by freq[i] before the scale, and with an
// attention factor cos and sin are multiplied by it, both as ggml's
// rope_yarn does, and so is YaRN's mix of the interpolated angle
// (scaled) and the extrapolated one (not).
func (rp ropeSpec) table(cs []float32, pos int) {
	theta := float32(pos)
	for d := 0; d < rp.nRot; d += 2 {
		extrap := theta
		if rp.freq != nil {
			extrap /= rp.freq[d/2]
		}
		t := rp.scale * extrap
		if rp.ext != 0 {
			mix := yarnRamp(rp.corr[0], rp.corr[1], d) * rp.ext
			t = fma32(extrap, mix, t*(1-mix))
		}
		c, s := cosf(t), sinf(t) // glibc's, as ggml's cache takes them
		if rp.mscale != 1 {
			c, s = c*rp.mscale, s*rp.mscale
		}
		cs[d], cs[d+1] = c, s
		theta *= rp.thetaScale
	}
}

// yarnRamp is ggml's rope_yarn_ramp: 1 below the correction dim lo, 0
// above hi, linear between, for the pair starting at dim d.
func yarnRamp(lo, hi float32, d int) float32 {
	y := (float32(d/2) - lo) / max(0.001, hi-lo)
	return 1 - min(1, max(0, y))
}

// rotate applies the rotation to one head. neox pairs dim i with
// i+n_rot/2; otherwise pairs are adjacent. Dims past n_rot are untouched.
func (rp ropeSpec) rotate(v, cs []float32) {
	for d := 0; d < rp.nRot; d += 2 {
		c, s := cs[d], cs[d+1]
		i0, i1 := d, d+1
		if rp.neox {
			i0, i1 = d/2, d/2+rp.nRot/2
		}
		// ggml's rotate_pairs, as GCC compiles it for the FMA build: each
		// output one fused multiply-add over the other product.
		x0, x1 := v[i0], v[i1]
		v[i0] = fma32(x0, c, -(x1 * s))
		v[i1] = fma32(x0, s, x1*c)
	}
}

// kvOffset is the byte offset of (page, layer, k|v, token) in an F16 KV
// cache.
func kvOffset(page, layer, nLayer, kvDim, which, tok int) int {
	return kernels.KVLayout{Slots: nLayer, Width: kvDim, Types: kernels.F16KV}.Offset(page, layer, which, tok)
}

// kvWrite stores each row's K and V at its slot's position, in the
// cache's element types.
func kvWrite(c *kvCache, a *Args) error {
	k, v, r, kv := f32s(a.Bufs[0]), f32s(a.Bufs[1]), req(a.Bufs[2]), a.Bufs[3]
	layer, kvDim, nLayer := int(a.Push[0]), int(a.Push[1]), int(a.Spec[0])
	if err := checkKVWidth(c.t, kvDim); err != nil {
		return err
	}
	for i := 0; i < r.rows(); i++ {
		storeKV(c, r, kv, i, layer, nLayer, kvDim, k[i*kvDim:(i+1)*kvDim], v[i*kvDim:(i+1)*kvDim])
	}
	return nil
}

// checkKVWidth refuses a head or row width that a quantized cache cannot
// hold in whole blocks or whole rotated runs (the compiler refuses such a
// model; a kernel called directly says so rather than misplacing rows).
func checkKVWidth(kt kernels.KVTypes, width int) error {
	for _, t := range []ggml.Type{kt.K, kt.V} {
		if err := kernels.CheckKVWidth(t, width); err != nil {
			return fmt.Errorf("cpu: %w", err)
		}
	}
	if width%max(1, kt.RotK) != 0 || width%max(1, kt.RotV) != 0 {
		return fmt.Errorf("cpu: rows of %d are no whole runs of the cache's rotations (%d, %d)", width, kt.RotK, kt.RotV)
	}
	return nil
}

// rotScratch recycles storeKV's copies of rows it rotates.
var rotScratch sync.Pool

// storeKV writes row i's K and V into its slot's page in the cache's
// element types: rounded to F16, or quantized to Q8_0 blocks as ggml's
// set_rows does (its from_float: quantize_row_q8_0, the same quantizer
// as activations before a Q8_0 product), row by row over the KV heads.
func storeKV(c *kvCache, r request, kv []byte, i, layer, nLayer, kvDim int, k, v []float32) {
	kt := c.t
	if c.hk != nil || c.hv != nil {
		// Rotated rows (see fattn_quant.go) go through a copy: the
		// caller's K and V stay as they were.
		buf, _ := rotScratch.Get().(*[]float32)
		if buf == nil || len(*buf) < 2*kvDim+max(kt.RotK, kt.RotV) {
			b := make([]float32, 2*kvDim+max(kt.RotK, kt.RotV))
			buf = &b
		}
		defer rotScratch.Put(buf)
		tmp := (*buf)[2*kvDim:]
		if c.hk != nil {
			k = append((*buf)[:0:kvDim], k[:kvDim]...)
			rotate(c.hk, kt.RotK, k, tmp)
		}
		if c.hv != nil {
			v = append((*buf)[kvDim:kvDim:2*kvDim], v[:kvDim]...)
			rotate(c.hv, kt.RotV, v, tmp)
		}
	}
	slot, pos := int(r.row(i, kernels.IORowSlot)), int(r.row(i, kernels.IORowPos))
	page := r.page(slot, pos)
	l := kernels.KVLayout{Slots: nLayer, Width: kvDim, Types: kt}
	for which, src := range [2][]float32{k, v} {
		t := kt.K
		if which == 1 {
			t = kt.V
		}
		off := l.Offset(page, layer, which, pos%kernels.KVPageTokens)
		// Through the quantizer table: SIMD where the CPU has it, the
		// same bits as the Go code everywhere.
		dst := kv[off : off+kernels.KVRowBytes(t, kvDim)]
		var err error
		if t == kernels.FP8E4M3 {
			err = quant.QuantizeFP8Row(src[:kvDim], dst) // per block of a head: scale amax/448
		} else {
			err = quant.QuantizeRow(t, src[:kvDim], dst)
		}
		if err != nil {
			panic(err) // sizes come from the kernel's own arguments, widths checked
		}
	}
}

// gemmTiles recycles the tiles of gemm's chunks (a loop has several per
// thread), so that a step allocates none.
var gemmTiles sync.Pool

// pooledBytes is a buffer of n bytes from p (a pool of *[]byte), grown
// where the one it holds is smaller; the caller puts it back.
func pooledBytes(p *sync.Pool, n int) *[]byte {
	b, _ := p.Get().(*[]byte)
	if b == nil {
		b = new([]byte)
	}
	if cap(*b) < n {
		*b = make([]byte, n)
	}
	*b = (*b)[:n]
	return b
}

// gemmWeights recycles gemm's prepared weight rows (a block of gemmCols
// of them per chunk).
var gemmWeights sync.Pool

// q4kInterleaveMinRows is the fewest activation rows for which
// gemmRepacked interleaves Q4_K weight rows: interleaving a block costs
// about what four rows' products on it do.
const q4kInterleaveMinRows = 4

// span is a block of the quantized activation rows of gemmRepacked, all
// in order o.
type span struct {
	lo, hi int
	o      quant.Order
}

// gemmPacked is gemmRepacked on a Q4_K matrix of n rows of k elements
// held interleaved (g, see Packs): each worker takes a share of the
// groups of eight weight rows and, two groups at a time (gemmCols rows),
// sweeps the spans of quantized rows xq (xb bytes apart, row p the
// product's row idx[p]).
func gemmPacked(a *Args, g []byte, k, n int, xq []byte, xb int, idx []int, spans []span, dst func(i, j int) []float32, bias []float32) error {
	const per = gemmCols / quant.Q4KInterleaveRows
	gb := quant.Q4KGroupBytes(k)
	outs := a.Packs.results(a.Pool.Threads())
	if len(spans) == 1 && spans[0].hi-spans[0].lo == 1 && spans[0].o == quant.OrderGEMV {
		// A decode step's one row: the GEMV over each worker's run of
		// groups in one call (up to mvGroups at a time).
		const mvGroups = gemmTileRows
		return a.Pool.For(n/quant.Q4KInterleaveRows, per, func(worker, lo, hi int) {
			out := outs[worker]
			for g0 := lo; g0 < hi; g0 += mvGroups {
				m := min(mvGroups, hi-g0)
				res := out[:m*quant.Q4KInterleaveRows]
				if err := quant.MatVecQ4KInterleaved(k, g[g0*gb:(g0+m)*gb], xq[spans[0].lo*xb:], res); err != nil {
					panic(err) // sizes come from the kernel's own arguments
				}
				putRun(dst, idx[spans[0].lo], g0*quant.Q4KInterleaveRows, res, bias)
			}
		})
	}
	return a.Pool.For(n/quant.Q4KInterleaveRows, per, func(worker, lo, hi int) {
		out8 := outs[worker]
		for g0 := lo; g0 < hi; g0 += per {
			for _, sp := range spans {
				nr := sp.hi - sp.lo
				res := out8[:nr*quant.Q4KInterleaveRows]
				for gi := g0; gi < min(hi, g0+per); gi++ {
					if err := quant.VecDotQ4KInterleaved(sp.o, k, g[gi*gb:(gi+1)*gb], xq[sp.lo*xb:], xb, nr, res); err != nil {
						panic(err) // the orders are the repacked ones
					}
					putGroups(dst, idx[sp.lo:sp.hi], gi*quant.Q4KInterleaveRows, res, bias)
				}
			}
		}
	})
}

// putRun writes row i's products with weight rows j onwards, res, through
// dst, adding bias: as many at a time as dst's slice holds.
func putRun(dst func(i, j int) []float32, i, j int, res, bias []float32) {
	for len(res) > 0 {
		d := dst(i, j)
		m := min(len(d), len(res))
		d = d[:m]
		copy(d, res[:m])
		if bias != nil {
			for jj, bv := range bias[j : j+m] {
				d[jj] += bv
			}
		}
		res, j = res[m:], j+m
	}
}

// putGroups writes the products of an interleaved group, weight rows j
// to j+7, with rows (res[8p:8p+8] is row rows[p]'s) through dst, adding
// bias.
func putGroups(dst func(i, j int) []float32, rows []int, j int, res, bias []float32) {
	for p, i := range rows {
		r8 := res[p*quant.Q4KInterleaveRows : (p+1)*quant.Q4KInterleaveRows]
		// dst's slice may end within the eight (the outputs of fused
		// products are several buffers): then feature by feature.
		if d := dst(i, j); len(d) >= len(r8) {
			// A loop of eight, not copy or an array assignment: the
			// compiler makes both a call to memmove (the arrays may
			// overlap), which took 1.6% of a CPU server's profile.
			d, r := (*[quant.Q4KInterleaveRows]float32)(d), (*[quant.Q4KInterleaveRows]float32)(r8)
			if bias == nil {
				for jj := range d {
					d[jj] = r[jj]
				}
			} else {
				b := (*[quant.Q4KInterleaveRows]float32)(bias[j:])
				for jj := range d {
					d[jj] = r[jj] + b[jj]
				}
			}
			continue
		}
		for jj, v := range r8 {
			if bias != nil {
				v += bias[j+jj]
			}
			dst(i, j+jj)[0] = v
		}
	}
}

// q4kGroups recycles gemmRepacked's interleaved Q4_K groups (one block of
// gemmCols weight rows per worker).
var q4kGroups sync.Pool

// gemmRepacked is gemm for a weight ggml repacks (quant.Repacked): row i
// (of those keep passes, all when keep is nil) in order(i), the repacked
// GEMM's or GEMV's arithmetic. The rows are quantized GEMM rows first, so
// that each order's rows are evenly strided for VecDotRowsOrder.
func gemmRepacked(a *Args, t ggml.Type, x []float32, w []byte, rows, k, n int, dst func(i, j int) []float32, bias []float32, keep func(i int) bool, order func(i int) quant.Order) error {
	vt := quant.VecDotType(t)
	xb, wb := rowBytes(vt, k), rowBytes(t, k)
	idx := make([]int, 0, rows)
	for _, o := range []quant.Order{quant.OrderGEMM, quant.OrderGEMV} {
		for i := 0; i < rows; i++ {
			if (keep == nil || keep(i)) && order(i) == o {
				idx = append(idx, i)
			}
		}
	}
	ng := 0
	for ng < len(idx) && order(idx[ng]) == quant.OrderGEMM {
		ng++
	}
	if len(idx) == 0 {
		return nil
	}
	xq := a.work(len(idx) * xb)[:len(idx)*xb]
	quantize := func(p int) {
		i := idx[p]
		if err := quant.QuantizeRow(vt, x[i*k:(i+1)*k], xq[p*xb:(p+1)*xb]); err != nil {
			panic(err) // sizes come from the kernel's own arguments
		}
	}
	// Where the tier holds the matrix interleaved (Packs), every row,
	// a decode step's one included, takes the kernels on the groups.
	g, err := a.Packs.q4kGroups(a, t, w, k, n)
	if err != nil {
		return err
	}
	if g == nil && len(idx) == 1 {
		quantize(0)
		i, o := idx[0], order(idx[0])
		return a.Pool.For(n, 16, func(_, lo, hi int) {
			for j := lo; j < hi; {
				d := dst(i, j)
				m := min(len(d), hi-j)
				d = d[:m]
				quant.MatVecOrder(t, o, k, w[j*wb:(j+m)*wb], xq, d)
				if bias != nil {
					for jj, bv := range bias[j : j+m] {
						d[jj] += bv
					}
				}
				j += m
			}
		})
	}
	if err := a.Pool.For(len(idx), 4, func(_, lo, hi int) {
		for p := lo; p < hi; p++ {
			quantize(p)
		}
	}); err != nil {
		return err
	}
	// Tiled as gemm's prefill: each worker takes a share of the output
	// features, and for each block of gemmCols weight rows sweeps the
	// activations in blocks of ib rows that stay in L1, GEMM rows apart
	// from GEMV rows (each block in one order).
	ib := max(8, min(gemmTileRows, gemmRowBytes/xb)) &^ 7
	var spans []span
	for _, s := range []span{{0, ng, quant.OrderGEMM}, {ng, len(idx), quant.OrderGEMV}} {
		for i0 := s.lo; i0 < s.hi; i0 += ib {
			spans = append(spans, span{i0, min(s.hi, i0+ib), s.o})
		}
	}
	if g != nil {
		return gemmPacked(a, g, k, n, xq, xb, idx, spans, dst, bias)
	}
	// Q4_K's rows take the kernels on interleaved groups of eight weight
	// rows where the CPU has them (quant.Q4KInterleavedFast) and there are
	// enough rows to share the interleaving: each block of gemmCols
	// weight rows is interleaved once per call (ggml repacks at load),
	// then serves every activation row, in either order.
	inter := t == ggml.Q4_K && len(idx) >= q4kInterleaveMinRows && quant.Q4KInterleavedFast()
	gb := quant.Q4KGroupBytes(k)
	return a.Pool.For(n, 16, func(_, lo, hi int) {
		var out [gemmTileRows]float32
		var grp []byte
		if inter {
			gp := pooledBytes(&q4kGroups, gemmCols/quant.Q4KInterleaveRows*gb)
			defer q4kGroups.Put(gp)
			grp = *gp
		}
		var out8 [gemmTileRows * quant.Q4KInterleaveRows]float32
		for j0 := lo; j0 < hi; j0 += gemmCols {
			// jg: the end of the interleaved rows of this block.
			jg := j0
			if inter {
				for ; jg+quant.Q4KInterleaveRows <= min(hi, j0+gemmCols); jg += quant.Q4KInterleaveRows {
					g := grp[(jg-j0)/quant.Q4KInterleaveRows*gb:][:gb]
					if err := quant.InterleaveQ4K(k, w[jg*wb:(jg+quant.Q4KInterleaveRows)*wb], g); err != nil {
						panic(err) // sizes come from the kernel's own arguments
					}
				}
			}
			for _, sp := range spans {
				j := j0
				if inter {
					for ; j < jg; j += quant.Q4KInterleaveRows {
						nr := sp.hi - sp.lo
						res := out8[:nr*quant.Q4KInterleaveRows]
						if err := quant.VecDotQ4KInterleaved(sp.o, k, grp[(j-j0)/quant.Q4KInterleaveRows*gb:][:gb], xq[sp.lo*xb:], xb, nr, res); err != nil {
							panic(err) // the orders are the repacked ones
						}
						putGroups(dst, idx[sp.lo:sp.hi], j, res, bias)
					}
				}
				for ; j < min(hi, j0+gemmCols); j++ {
					res := out[:sp.hi-sp.lo]
					quant.VecDotRowsOrder(t, sp.o, k, w[j*wb:(j+1)*wb], xq[sp.lo*xb:], xb, len(res), res)
					for p, v := range res {
						if bias != nil {
							v += bias[j]
						}
						dst(idx[sp.lo+p], j)[0] = v
					}
				}
			}
		}
	})
}
