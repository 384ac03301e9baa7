package grammar

import (
	"context"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// threadCPU is the calling thread's CPU time: on a loaded machine it
// leaves out the time other processes hold the core.
func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// maskTimes drives a matcher with random allowed tokens (as randomRun
// does) and returns the time of every Mask after the first visit of each
// grammar position is cached (warm), and of the first pass (cold).
func maskTimes(tb testing.TB, v Vocab, g *Grammar, seed int64, steps int) (warm, cold []time.Duration) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	m := g.NewMatcher()
	n := v.NVocab()
	mask := make([]uint64, (n+63)/64)
	rng := rand.New(rand.NewSource(seed))
	var allowed, punct []int32
	punctTok := punctTokens(g)
	for step := 0; step < steps && !m.Done(); step++ {
		t0 := threadCPU()
		m.Mask(mask)
		cold = append(cold, threadCPU()-t0)
		t0 = threadCPU()
		m.Mask(mask)
		warm = append(warm, threadCPU()-t0)
		allowed, punct = allowed[:0], punct[:0]
		for id := 0; id < n; id++ {
			if mask[id/64]&(1<<(id%64)) != 0 && !v.IsEOG(int32(id)) {
				allowed = append(allowed, int32(id))
				if punctTok[id] {
					punct = append(punct, int32(id))
				}
			}
		}
		if len(allowed) == 0 {
			break
		}
		pick := allowed
		if len(punct) > 0 && rng.Intn(2) == 0 {
			pick = punct
		}
		if err := m.Accept(pick[rng.Intn(len(pick))]); err != nil {
			tb.Fatal(err)
		}
	}
	return warm, cold
}

func quantile(ds []time.Duration, q float64) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	if len(s) == 0 {
		return 0
	}
	return s[int(q*float64(len(s)-1))]
}

// BenchmarkMask times Mask (thread CPU time) on the Qwen vocabulary for
// a few schemas along random runs, reporting the median and p99 per step
// with the position caches warm (every later request of the same
// grammar), and for the first visits, which fill the caches (cold).
func BenchmarkMask(b *testing.B) {
	tok, comp := qwen(b)
	for _, name := range []string{"01_person.json", "03_nested_arrays.json", "07_numbers.json", "10_openai_tool.json", "12_open_object.json"} {
		raw, err := os.ReadFile(filepath.Join("testdata/schemas", name))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) {
			var warm, cold []time.Duration
			for i := 0; i < b.N; i++ {
				// A fresh compiler per iteration, so cold times are cold.
				c := NewCompiler(tok, Limits{})
				_ = comp
				g, err := c.Compile(context.Background(), Spec{JSONSchema: raw})
				if err != nil {
					b.Fatal(err)
				}
				w, cd := maskTimes(b, tok, g, int64(i), 300)
				warm, cold = append(warm, w...), append(cold, cd...)
			}
			us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
			b.ReportMetric(us(quantile(warm, 0.5)), "median-µs/mask")
			b.ReportMetric(us(quantile(warm, 0.99)), "p99-µs/mask")
			b.ReportMetric(us(quantile(cold, 0.5)), "cold-median-µs/mask")
			b.ReportMetric(us(quantile(cold, 0.99)), "cold-p99-µs/mask")
			b.ReportMetric(float64(len(warm))/float64(b.N), "steps/run")
		})
	}
}

// BenchmarkAccept times a token's Accept (thread CPU time) on the Qwen
// vocabulary along random runs of a few schemas, the position caches
// warm: the serving engine accepts each constrained row's token on its
// own goroutine, one row after another, so this is per-row host time of
// every step.
func BenchmarkAccept(b *testing.B) {
	tok, _ := qwen(b)
	c := NewCompiler(tok, Limits{})
	for _, name := range []string{"01_person.json", "03_nested_arrays.json", "10_openai_tool.json", "12_open_object.json"} {
		g := schemaGrammar(b, c, name)
		maskTimes(b, tok, g, 0, 300) // warm the position caches
		for _, release := range []bool{true, false} {
			name := name
			if release {
				// Each matcher released at its end (as the engine does
				// when a request finishes), so the next one starts
				// with its machine's memoized states.
				name += "/released"
			}
			b.Run(name, func(b *testing.B) {
				var accept, mask []time.Duration
				for i := 0; i < b.N; i++ {
					a, m := acceptTimes(b, tok, g, int64(i), 300, release)
					accept, mask = append(accept, a...), append(mask, m...)
				}
				us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
				mean := func(ds []time.Duration) float64 {
					var t time.Duration
					for _, d := range ds {
						t += d
					}
					return us(t) / float64(max(len(ds), 1))
				}
				b.ReportMetric(mean(accept), "mean-µs/accept")
				b.ReportMetric(us(quantile(accept, 0.99)), "p99-µs/accept")
				b.ReportMetric(mean(mask), "mean-µs/mask")
			})
		}
	}
}

// acceptTimes drives a matcher with random allowed tokens and returns the
// time of each Accept and each Mask; release releases the matcher at the
// end.
func acceptTimes(tb testing.TB, v Vocab, g *Grammar, seed int64, steps int, release bool) (accept, masks []time.Duration) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	m := g.NewMatcher()
	if release {
		defer m.Release()
	}
	n := v.NVocab()
	mask := make([]uint64, (n+63)/64)
	rng := rand.New(rand.NewSource(seed))
	var allowed []int32
	for step := 0; step < steps && !m.Done(); step++ {
		t0 := threadCPU()
		m.Mask(mask)
		masks = append(masks, threadCPU()-t0)
		allowed = allowedIDs(allowed[:0], mask, v)
		if len(allowed) == 0 {
			break
		}
		t0 = threadCPU()
		err := m.Accept(allowed[rng.Intn(len(allowed))])
		accept = append(accept, threadCPU()-t0)
		if err != nil {
			tb.Fatal(err)
		}
	}
	return accept, masks
}

// BenchmarkAcceptRun times the Accepts of whole outputs (wall time over
// each output, a thread clock read per token costing as much as an
// Accept): outputs drawn once by random runs, then accepted by fresh
// matchers (cold: every transition computed) or by matchers on a
// released machine of earlier outputs (released: the engine's case).
func BenchmarkAcceptRun(b *testing.B) {
	tok, _ := qwen(b)
	c := NewCompiler(tok, Limits{})
	for _, name := range []string{"01_person.json", "10_openai_tool.json"} {
		g := schemaGrammar(b, c, name)
		var outputs [][]int32
		for seed := range int64(64) {
			outputs = append(outputs, randomOutput(b, tok, g, seed, 200))
		}
		for _, release := range []bool{false, true} {
			mode := "cold"
			if release {
				mode = "released"
			}
			b.Run(name+"/"+mode, func(b *testing.B) {
				n := 0
				t0 := time.Now()
				for i := 0; i < b.N; i++ {
					for _, out := range outputs {
						m := g.NewMatcher()
						for _, t := range out {
							if err := m.Accept(t); err != nil {
								b.Fatal(err)
							}
						}
						n += len(out)
						if release {
							m.Release()
						}
					}
				}
				b.ReportMetric(float64(time.Since(t0).Nanoseconds())/1e3/float64(n), "µs/accept")
			})
		}
	}
}

// randomOutput is the tokens of a random run of g (random allowed
// tokens), at most steps.
func randomOutput(tb testing.TB, v Vocab, g *Grammar, seed int64, steps int) []int32 {
	m := g.NewMatcher()
	n := v.NVocab()
	mask := make([]uint64, (n+63)/64)
	rng := rand.New(rand.NewSource(seed))
	var out, allowed []int32
	for step := 0; step < steps && !m.Done(); step++ {
		m.Mask(mask)
		allowed = allowedIDs(allowed[:0], mask, v)
		if len(allowed) == 0 {
			break
		}
		t := allowed[rng.Intn(len(allowed))]
		if err := m.Accept(t); err != nil {
			tb.Fatal(err)
		}
		out = append(out, t)
	}
	return out
}

// allowedIDs appends to allowed the ids of v that mask allows, less its
// end-of-generation tokens.
func allowedIDs(allowed []int32, mask []uint64, v Vocab) []int32 {
	for id := range v.NVocab() {
		if mask[id/64]&(1<<(id%64)) != 0 && !v.IsEOG(int32(id)) {
			allowed = append(allowed, int32(id))
		}
	}
	return allowed
}

// schemaGrammar compiles testdata/schemas' file name with c.
func schemaGrammar(b *testing.B, c *Compiler, name string) *Grammar {
	b.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata/schemas", name))
	if err != nil {
		b.Fatal(err)
	}
	g, err := c.Compile(context.Background(), Spec{JSONSchema: raw})
	if err != nil {
		b.Fatal(err)
	}
	return g
}
