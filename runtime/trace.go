package runtime

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
)

// TraceTo returns an Options.Trace that prints the first values of each
// dispatch's output to w (zrt-run's ZRT_TRACE=1), for comparing layer by
// layer with llama.cpp's llama-eval-callback.
func TraceTo(w io.Writer) func(i int, kernel string, out []byte) {
	return func(i int, kernel string, out []byte) {
		n := min(len(out)/4, 8)
		fmt.Fprintf(w, "trace %4d %-18s", i, kernel)
		for j := 0; j < n; j++ {
			fmt.Fprintf(w, " %11.6f", math.Float32frombits(binary.LittleEndian.Uint32(out[4*j:])))
		}
		fmt.Fprintln(w)
	}
}
