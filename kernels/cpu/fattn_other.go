//go:build !amd64 || purego

package cpu

// Without the amd64 kernels flash attention runs the pure-Go code only.
const faSIMDOK = false

func faDotF16Keys(k *uint16, kstride int, q *float32, np, n int, out *float32, pf int, next *uint16) {
	panic("no SIMD")
}
func faMadF16(acc *uint16, v *uint16, vstride int, coef *float32, n, hd int) { panic("no SIMD") }
func faMadF16x2(acc *uint16, accStride int, v *uint16, vstride int, coef *float32, n, hd int) {
	panic("no SIMD")
}
func faMadF16x3(acc *uint16, accStride int, v *uint16, vstride int, coef *float32, n, hd int) {
	panic("no SIMD")
}
func faCvtRows(dst *float32, src *uint16, sstride, hd, n int) { panic("no SIMD") }
func expfs(x *float32, n int)                                 { panic("no SIMD") }
func faCoefs(sc, coef *float32, n int, st *[3]float32)        { panic("no SIMD") }
func faTransposeTile(dst, src *float32, hd int)               { panic("no SIMD") }
func faTileScores(q, kt *float32, hd int, scale float32, nvalid int, out *float32) float32 {
	panic("no SIMD")
}
func faTileAcc(kq *float32, m, ms float32, acc, vt *float32, hd, nvalid int) float64 {
	panic("no SIMD")
}
func faTileScores2(q0, q1, kt *float32, hd int, scale float32, nvalid int, out0, out1 *float32) (m0, m1 float32) {
	panic("no SIMD")
}
func faTileAcc2(kq0, kq1 *float32, m0, m1, ms0, ms1 float32, acc0, acc1, vt *float32, hd, nvalid int) (s0, s1 float64) {
	panic("no SIMD")
}
func faMadQ8(acc *float32, v *byte, vstride int, coef *float32, n, hd int) { panic("no SIMD") }
func faRotate(h *float32, n int, x, out *float32)                          { panic("no SIMD") }

// faDotKeysH has no kernels here.
var faDotKeysH [faDotMaxHeads]func(k *uint16, kstride int, q *float32, np, n int, out *float32, ostride, pf int, next *uint16, scratch *float32)
