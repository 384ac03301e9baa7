// Package obj embeds the AMD targets' kernels: one HSA code object v5 per
// catalog instance and processor (gfx1201/matmul_q4_k.co), built by
// `make amd` (kernels/amd/build_amd.sh) from kernels/amd/kernels.cl and
// committed. Only zrtc imports it: the code objects travel to the runtime
// inside the bundle's kernel blobs.
package obj

import (
	"embed"
	"fmt"

	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/kernels/amd"
)

//go:embed gfx1201/*.co gfx1100/*.co SOURCES
var files embed.FS

// Source returns the code object of a catalog instance (matmul.q4_k) for
// a processor (gfx1201).
func Source(gfx, instance string) ([]byte, error) {
	b, err := files.ReadFile(gfx + "/" + amd.Entry(instance) + ".co")
	if err != nil {
		return nil, fmt.Errorf("amd: no %s code object for kernel %s in this zrtc (the AMD targets implement %v; regenerate with make generate and make amd)", gfx, instance, amd.Families())
	}
	return b, nil
}

// WeightTypes lists, in id order, the weight types for which this zrtc
// embeds every typed AMD family's code object for gfx.
func WeightTypes(gfx string) []ggml.Type {
	return kernels.CompleteTypes(amd.Families(), func(instance string) bool {
		_, err := files.Open(gfx + "/" + amd.Entry(instance) + ".co")
		return err == nil
	})
}

// Sources is the SOURCES manifest: the source hash each object was built from.
func Sources() []byte {
	b, _ := files.ReadFile("SOURCES")
	return b
}
