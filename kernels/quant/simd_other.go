//go:build !amd64 || purego

package quant

// Without assembly there is only the pure-Go level.

const (
	simdNone = iota
	simdAVX2
	simdVNNI
)

var simdBest = simdNone

func simdKernels(level int) (tab simdTable) {
	return
}
