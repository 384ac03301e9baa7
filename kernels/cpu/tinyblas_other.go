//go:build !amd64 || purego

package cpu

// Without the amd64 kernels the F16 prompt products run in Go only.
func tinyBLASSets() []*tinyBLASKernels { return nil }
