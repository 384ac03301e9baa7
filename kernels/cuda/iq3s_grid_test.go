package cuda

import (
	"os"
	"regexp"
	"slices"
	"testing"
)

// TestIQ3SGridMatchesQuant holds iq3s_grid.cuh, which nvcc cannot read
// from Go, to the codebook T-CPU decodes with (kernels/quant/iq3s_grid.go):
// a point copied wrong would make only the CUDA tier's IQ3_S rows wrong,
// and only on a GPU. (The AMD copy is generated from the same file.)
func TestIQ3SGridMatchesQuant(t *testing.T) {
	word := regexp.MustCompile(`0x[0-9a-fA-F]{8}`)
	read := func(path string) []string {
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return word.FindAllString(string(src), -1)
	}
	cuh, gosrc := read("iq3s_grid.cuh"), read("../quant/iq3s_grid.go")
	if len(gosrc) != 512 || !slices.Equal(cuh, gosrc) {
		t.Fatalf("iq3s_grid.cuh (%d points) differs from kernels/quant/iq3s_grid.go (%d points)", len(cuh), len(gosrc))
	}
}
