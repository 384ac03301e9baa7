package cuda

import (
	"strings"
	"testing"

	kcuda "github.com/zrtdev/zrt/kernels/cuda"
)

// TestProfilerReport: each variant gets its own table, the one with the
// most GPU time first, with its steps, its time a step and its kernels'
// shares of it, so a decode variant's profile is not mixed with the
// prefill steps that came before it.
func TestProfilerReport(t *testing.T) {
	var out strings.Builder
	p := newProfiler(&out)
	for range 2 { // two prefill steps
		p.add("prefill.s64.r512", "flash_attn (tile)", 3)
		p.add("prefill.s64.r512", "matmul.q4_k (tile)", 1)
		p.runs["prefill.s64.r512"].steps++
	}
	for range 4 { // four decode steps
		p.add("decode.s16.r16", "flash_attn", 0.5)
		p.add("decode.s16.r16", "matmul.q4_k (tile16)", 1.5)
		p.add("decode.s16.r16", "matmul.q4_k (tile16)", 1.5)
		p.runs["decode.s16.r16"].steps++
	}
	p.report()
	want := `variant decode.s16.r16: 4 steps, 3.500 ms a step
kernel                                calls   total ms     avg µs  share
matmul.q4_k (tile16)                      8     12.000    1500.00  85.7%
flash_attn                                4      2.000     500.00  14.3%

variant prefill.s64.r512: 2 steps, 4.000 ms a step
kernel                                calls   total ms     avg µs  share
flash_attn (tile)                         2      6.000    3000.00  75.0%
matmul.q4_k (tile)                        2      2.000    1000.00  25.0%
`
	if out.String() != want {
		t.Errorf("report:\n%s\nwant:\n%s", out.String(), want)
	}
}

// TestProfilerLaunchList: a variant's launches in order, each with its
// entry, geometry and time a step, after its kernel table.
func TestProfilerLaunchList(t *testing.T) {
	var out strings.Builder
	p := newProfiler(&out)
	ls := []Launch{
		{Name: "rms_norm_matmul.q4_k", Shape: kcuda.Launch{Grid: [3]uint32{132, 1, 1}, Block: [3]uint32{32, 16, 1}, Shared: 4608}},
		{Name: "flash_attn", Shape: kcuda.Launch{Entry: kcuda.EntrySplit, Grid: [3]uint32{32, 1, 4}, Block: [3]uint32{512, 1, 1}, Shared: 36864}},
	}
	for range 2 {
		for i := range ls {
			p.add("decode.s1.r1", ls[i].Name, 0.004)
			p.addSeq("decode.s1.r1", i, len(ls), &ls[i], 0.004*float64(i+1))
		}
		p.runs["decode.s1.r1"].steps++
	}
	p.report()
	want := `launch list of decode.s1.r1 (2 launches), avg µs a step:
   0     4.00  rms_norm_matmul.q4_k               grid 132,1,1 block 32,16 shared 4608
   1     8.00  flash_attn_split                   grid 32,1,4 block 512,1 shared 36864
`
	if !strings.HasSuffix(out.String(), want) {
		t.Errorf("report:\n%s\nwant it to end:\n%s", out.String(), want)
	}
}
