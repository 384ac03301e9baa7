//go:build amd64 && !purego

package cpu

import "golang.org/x/sys/cpu"

// faSIMDOK says whether this CPU runs the AVX-512 flash-attention kernels
// of fattn_amd64.s (AVX-512 F/VL for the arithmetic, F16C and FMA for the
// conversions ggml's path uses).
var faSIMDOK = cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512BW &&
	cpu.X86.HasF16C && cpu.X86.HasFMA && cpu.X86.HasAVX2

// Assembly kernels (ABI0); fattn_amd64.s describes each. Sizes are the
// callers' to check: hd and np as documented, n and nvalid at least 1.

//go:noescape
func faDotF16Keys(k *uint16, kstride int, q *float32, np, n int, out *float32, pf int, next *uint16)

//go:noescape
func faDotF16KeysH1(k *uint16, kstride int, q *float32, np, n int, out *float32, ostride, pf int, next *uint16, scratch *float32)

//go:noescape
func faDotF16KeysH2(k *uint16, kstride int, q *float32, np, n int, out *float32, ostride, pf int, next *uint16, scratch *float32)

//go:noescape
func faDotF16KeysH3(k *uint16, kstride int, q *float32, np, n int, out *float32, ostride, pf int, next *uint16, scratch *float32)

//go:noescape
func faDotF16KeysH4(k *uint16, kstride int, q *float32, np, n int, out *float32, ostride, pf int, next *uint16, scratch *float32)

//go:noescape
func faDotF16KeysH5(k *uint16, kstride int, q *float32, np, n int, out *float32, ostride, pf int, next *uint16, scratch *float32)

//go:noescape
func faDotF16KeysH6(k *uint16, kstride int, q *float32, np, n int, out *float32, ostride, pf int, next *uint16, scratch *float32)

//go:noescape
func faMadF16(acc *uint16, v *uint16, vstride int, coef *float32, n, hd int)

//go:noescape
func faMadF16x2(acc *uint16, accStride int, v *uint16, vstride int, coef *float32, n, hd int)

//go:noescape
func faMadF16x3(acc *uint16, accStride int, v *uint16, vstride int, coef *float32, n, hd int)

//go:noescape
func faCvtRows(dst *float32, src *uint16, sstride, hd, n int)

//go:noescape
func faTransposeTile(dst, src *float32, hd int)

//go:noescape
func faTileScores(q, kt *float32, hd int, scale float32, nvalid int, out *float32) float32

//go:noescape
func faTileAcc(kq *float32, m, ms float32, acc, vt *float32, hd, nvalid int) float64

//go:noescape
func faTileScores2(q0, q1, kt *float32, hd int, scale float32, nvalid int, out0, out1 *float32) (m0, m1 float32)

//go:noescape
func faTileAcc2(kq0, kq1 *float32, m0, m1, ms0, ms1 float32, acc0, acc1, vt *float32, hd, nvalid int) (s0, s1 float64)

//go:noescape
func expfs(x *float32, n int)

//go:noescape
func faCoefs(sc, coef *float32, n int, st *[3]float32)

//go:noescape
func faMadQ8(acc *float32, v *byte, vstride int, coef *float32, n, hd int)

//go:noescape
func faRotate(h *float32, n int, x, out *float32)

// faDotKeysH is faDotF16KeysH1..H6 by their head count less one.
var faDotKeysH = [faDotMaxHeads]func(k *uint16, kstride int, q *float32, np, n int, out *float32, ostride, pf int, next *uint16, scratch *float32){
	faDotF16KeysH1, faDotF16KeysH2, faDotF16KeysH3, faDotF16KeysH4, faDotF16KeysH5, faDotF16KeysH6,
}
