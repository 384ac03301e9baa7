// Package validate compares a bundle with an oracle bundle built from the
// same GGUF for another target (zrt-run validate): it runs one prompt on
// both, stopping after every dispatch, and measures how far the residual
// stream after each layer, the final norm's output and the logits are
// from the oracle's. Fusion differs between targets, so values are found
// by their IR names (the variant's liveness table), not by dispatch.
package validate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/format/lebin"
	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/runtime"
	"github.com/zrtdev/zrt/runtime/sample"
)

// Point is one compared value of one step.
type Point struct {
	Name  string // "embd", "layer 3", "output norm", "logits"
	Layer int    // the layer of a "layer N" point, else -1
	// Row is the batch row holding the largest difference (for logits:
	// the row among those that asked for logits).
	Row int
	// MaxAbs is the largest |got − oracle| (+Inf when got has a NaN or
	// infinity the oracle does not); MaxRef the largest |oracle|.
	MaxAbs, MaxRef float64
	// RowAbs is each row's largest |got − oracle|: a wrong kernel moves
	// every row, a rounding flip amplified by a near tie one or a few.
	RowAbs []float64
}

// RowsPast counts the rows whose largest difference, relative to the
// oracle's scale (MaxRef), exceeds tol.
func (p Point) RowsPast(tol float64) int {
	n := 0
	for _, d := range p.RowAbs {
		if !(d/max(p.MaxRef, 1e-30) <= tol) {
			n++
		}
	}
	return n
}

// Rel is MaxAbs relative to the oracle's scale.
func (p Point) Rel() float64 {
	if p.MaxAbs == 0 {
		return 0
	}
	return p.MaxAbs / max(p.MaxRef, 1e-30)
}

// Step is the points of one replay: the prompt's prefill, then each
// decode step.
type Step struct {
	Name   string // "prefill", "decode 1", …
	Rows   int
	Points []Point
}

// Report is a whole comparison.
type Report struct {
	Prompt int // tokens
	Steps  []Step
	// Slots is how many slots each decode step batched.
	Slots int
	// Tokens are the oracle's greedy tokens slot 0 was fed after its
	// prompt.
	Tokens []int32
}

// First returns the first step and point (in step order, then layer
// order) that keep accepts (nil: every point) whose Rel exceeds tol, or
// false when none does.
func (r *Report) First(tol float64, keep func(Point) bool) (Step, Point, bool) {
	for _, s := range r.Steps {
		for _, p := range s.Points {
			if (keep == nil || keep(p)) && !(p.Rel() <= tol) {
				return s, p, true
			}
		}
	}
	return Step{}, Point{}, false
}

// Run compares got with oracle over prompt and then decode steps of the
// oracle's greedy tokens. With slots ≤ 1 all of it runs in slot 0. With
// more, slot s evaluates the prompt's first n − s mod n tokens (so the
// slots sit at different positions), only slot 0's prefill is compared,
// and each decode step is one batch of a row per slot, each fed its own
// slot's greedy token: the batched decode variants against the oracle.
// The two bundles must come from the same GGUF; got's tier must be able
// to stop between dispatches (T-CPU and T-CUDA can).
func Run(ctx context.Context, got, oracle *runtime.Program, prompt []int32, decode, slots int) (*Report, error) {
	if err := sameModel(got, oracle); err != nil {
		return nil, err
	}
	n := len(prompt)
	if n == 0 {
		return nil, fmt.Errorf("validate: empty prompt")
	}
	slots = max(slots, 1)
	pages := (n + decode + kernels.KVPageTokens - 1) / kernels.KVPageTokens
	for _, p := range []*runtime.Program{got, oracle} {
		target := p.Bundle.Graph.Ident.Target
		if pages > p.MaxPages() || slots*pages > p.KVPages() {
			return nil, fmt.Errorf("validate: %d slots of %d prompt + %d decode tokens need %d KV pages each, %s has %d per slot and %d in all", slots, n, decode, pages, target, p.MaxPages(), p.KVPages())
		}
		if slots > p.Slots() {
			return nil, fmt.Errorf("validate: %d slots, %s has %d", slots, target, p.Slots())
		}
		if _, ok := p.Key(runtime.Decode, slots); !ok && decode > 0 {
			return nil, fmt.Errorf("validate: %s has no decode variant of %d rows", target, slots)
		}
	}
	table := make([]runtime.SlotPages, slots)
	for s := range table {
		table[s] = runtime.SlotPages{Slot: s, Pages: make([]uint32, pages)}
		for i := range table[s].Pages {
			table[s].Pages[i] = uint32(s*pages + i)
		}
	}
	// Prompts go in chunks of the rows both bundles' largest prefill
	// variants hold.
	chunk := n
	for _, p := range []*runtime.Program{got, oracle} {
		k, ok := p.Largest(runtime.Prefill)
		if !ok {
			return nil, fmt.Errorf("validate: %s has no prefill variant", p.Bundle.Graph.Ident.Target)
		}
		chunk = min(chunk, k.Rows)
	}
	rep := &Report{Prompt: n, Slots: slots}
	lens, next := make([]int, slots), make([]int32, slots)
	for s := range slots {
		lens[s] = n - s%n
		for from := 0; from < lens[s]; from += chunk {
			to := min(from+chunk, lens[s])
			var rows []runtime.Row
			for i := from; i < to; i++ {
				rows = append(rows, runtime.Row{Slot: s, Pos: i, Token: prompt[i], Logits: i == to-1, Prompt: lens[s]})
			}
			b := runtime.Batch{Rows: rows, Pages: table[s : s+1]}
			var err error
			if s > 0 {
				next[s], err = stepBoth(ctx, got, oracle, runtime.Prefill, b)
				if err != nil {
					return nil, fmt.Errorf("validate: prefill of slot %d: %w", s, err)
				}
				continue
			}
			name := "prefill"
			if chunk < n {
				name = fmt.Sprintf("prefill %d-%d", from, to-1)
			}
			if next[s], err = rep.step(ctx, got, oracle, runtime.Prefill, name, b); err != nil {
				return nil, err
			}
		}
	}
	for step := 1; step <= decode; step++ {
		rep.Tokens = append(rep.Tokens, next[0])
		rows := make([]runtime.Row, slots)
		for s := range rows {
			rows[s] = runtime.Row{Slot: s, Pos: lens[s] + step - 1, Token: next[s], Logits: true}
		}
		st, greedy, err := compare(ctx, got, oracle, runtime.Decode, runtime.Batch{Rows: rows, Pages: table})
		if err != nil {
			return nil, fmt.Errorf("validate: decode %d: %w", step, err)
		}
		st.Name = fmt.Sprintf("decode %d", step)
		rep.Steps = append(rep.Steps, st)
		next = greedy
	}
	return rep, nil
}

// stepBoth runs b on both programs without comparing them and returns the
// oracle's greedy token after b's last row.
func stepBoth(ctx context.Context, got, oracle *runtime.Program, stage runtime.Stage, b runtime.Batch) (int32, error) {
	for _, p := range []*runtime.Program{got, oracle} {
		key, ok := p.Key(stage, len(b.Rows))
		if !ok {
			return 0, fmt.Errorf("%s has no %s variant of %d rows", p.Bundle.Graph.Ident.Target, stage, len(b.Rows))
		}
		b.Key = key
		if err := p.Step(ctx, b); err != nil {
			return 0, fmt.Errorf("%s on tier %s: %w", p.Bundle.Graph.Ident.Target, p.TierName(), err)
		}
	}
	return sample.Argmax(oracle.Logits(b.Rows[len(b.Rows)-1].Slot, nil)), nil
}

// step compares one batch and adds it to the report, returning the
// oracle's greedy token after it.
func (r *Report) step(ctx context.Context, got, oracle *runtime.Program, stage runtime.Stage, name string, b runtime.Batch) (int32, error) {
	s, next, err := compare(ctx, got, oracle, stage, b)
	if err != nil {
		return 0, fmt.Errorf("validate: %s: %w", name, err)
	}
	s.Name = name
	r.Steps = append(r.Steps, s)
	return next[len(next)-1], nil
}

// sameModel refuses bundles of different models.
func sameModel(got, oracle *runtime.Program) error {
	g, o := got.Bundle.Graph.Ident, oracle.Bundle.Graph.Ident
	if g.SourceHash != o.SourceHash {
		return fmt.Errorf("validate: the bundles come from different GGUF files (%s, SHA-256 %x…; %s, %x…)", g.SourceName, g.SourceHash[:6], o.SourceName, o.SourceHash[:6])
	}
	if got.Hparams.NLayer != oracle.Hparams.NLayer || got.Hparams.NEmbd != oracle.Hparams.NEmbd || got.Hparams.NVocab != oracle.Hparams.NVocab {
		return fmt.Errorf("validate: the bundles' shapes differ (their model configs do)")
	}
	return nil
}

// compare runs one batch on both programs and measures each point; next
// holds the oracle's greedy token after each row that asks for logits.
func compare(ctx context.Context, got, oracle *runtime.Program, stage runtime.Stage, b runtime.Batch) (Step, []int32, error) {
	var vals [2]map[string][]float32
	for i, p := range []*runtime.Program{got, oracle} {
		key, ok := p.Key(stage, len(b.Rows))
		if !ok {
			return Step{}, nil, fmt.Errorf("%s has no %s variant of %d rows", p.Bundle.Graph.Ident.Target, stage, len(b.Rows))
		}
		b.Key = key
		v, err := capture(ctx, p, b)
		if err != nil {
			return Step{}, nil, fmt.Errorf("%s on tier %s: %w", p.Bundle.Graph.Ident.Target, p.TierName(), err)
		}
		for _, r := range b.Rows {
			if r.Logits {
				v["logits"] = append(v["logits"], p.Logits(r.Slot, nil)...)
			}
		}
		vals[i] = v
	}
	s := Step{Rows: len(b.Rows)}
	for _, pt := range points(got.Hparams.NLayer) {
		g, o := vals[0][pt.Name], vals[1][pt.Name]
		if len(o) == 0 || len(g) != len(o) {
			pt.MaxAbs, pt.MaxRef = diff(g, o)
			s.Points = append(s.Points, pt)
			continue
		}
		rows := len(b.Rows)
		if pt.Name == "logits" {
			rows = len(o) / got.Hparams.NVocab
		}
		w := len(o) / rows
		for r := range rows {
			d, ref := diff(g[r*w:(r+1)*w], o[r*w:(r+1)*w])
			pt.RowAbs = append(pt.RowAbs, d)
			pt.MaxRef = max(pt.MaxRef, ref)
			if d > pt.MaxAbs {
				pt.MaxAbs, pt.Row = d, r
			}
		}
		s.Points = append(s.Points, pt)
	}
	var next []int32
	nv := got.Hparams.NVocab
	for l := vals[1]["logits"]; len(l) >= nv; l = l[nv:] {
		next = append(next, sample.Argmax(l[:nv]))
	}
	return s, next, nil
}

// points lists what is compared, in model order.
func points(layers int) []Point {
	ps := []Point{{Name: "embd", Layer: -1}}
	for l := range layers {
		ps = append(ps, Point{Name: "layer " + strconv.Itoa(l), Layer: l})
	}
	return append(ps, Point{Name: "output norm", Layer: -1}, Point{Name: "logits", Layer: -1})
}

var layerValue = regexp.MustCompile(`^%?l(\d+)\.`)

// capture runs b on p, stopping after each dispatch, and returns the
// points' values over b's rows. The residual stream (register "hidden")
// is updated in place, so it is read at layer boundaries: after the first
// dispatch that defines a value of layer L+1 (the next layer's input
// norm, fused on some targets with layer L's last residual add), layer L
// is complete; the last layer is complete once the output norm ("out_in")
// is defined.
func capture(ctx context.Context, p *runtime.Program, b runtime.Batch) (map[string][]float32, error) {
	g := p.Bundle.Graph
	v := &g.Variants[p.VariantIndex(b.Key)]
	scratch := g.RegionIndex(kernels.RegionScratch)
	regs := map[string]bundle.RegLive{}
	first := map[int]int{} // layer → first defining dispatch
	for _, r := range v.Liveness {
		if r.Def < 0 {
			continue // fused away: never stored
		}
		name := strings.TrimPrefix(r.Name, "%")
		regs[name] = r
		if m := layerValue.FindStringSubmatch(r.Name); m != nil {
			l, _ := strconv.Atoi(m[1])
			if d, ok := first[l]; !ok || int(r.Def) < d {
				first[l] = int(r.Def)
			}
		}
	}
	hidden, okH := regs["hidden"]
	out, okO := regs["out_in"]
	if scratch < 0 || !okH || !okO {
		return nil, fmt.Errorf("variant %s lacks the scratch region, or register hidden or out_in", b.Key)
	}
	reads := map[int][]string{} // dispatch → points read after it
	reads[int(out.Def)] = append(reads[int(out.Def)], "output norm")
	layers := p.Hparams.NLayer
	for l := 0; l <= layers; l++ {
		at, ok := first[l]
		if l == layers {
			at, ok = int(out.Def), true
		}
		if !ok {
			return nil, fmt.Errorf("variant %s defines no value of layer %d", b.Key, l)
		}
		name := "embd"
		if l > 0 {
			name = "layer " + strconv.Itoa(l-1)
		}
		reads[at] = append(reads[at], name)
	}
	rows := len(b.Rows)
	vals := map[string][]float32{}
	err := p.Inspect(ctx, b, func(d int, read func(region int, off, n int64) ([]byte, error)) error {
		for _, name := range reads[d] {
			r := hidden
			if name == "output norm" {
				r = out
			}
			rowBytes := r.Bytes / int64(b.Key.Rows)
			raw, err := read(scratch, r.Offset, int64(rows)*rowBytes)
			if err != nil {
				return fmt.Errorf("reading %s after dispatch %d: %w", name, d, err)
			}
			vals[name] = lebin.Float32s(raw)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, names := range reads {
		for _, name := range names {
			if vals[name] == nil {
				return nil, fmt.Errorf("variant %s: %s was never read", b.Key, name)
			}
		}
	}
	return vals, nil
}

// diff is the largest |a−b| and the largest |b|; a value that is not
// finite in a where b's is makes the difference infinite.
func diff(a, b []float32) (maxAbs, maxRef float64) {
	if len(a) != len(b) {
		return math.Inf(1), 0
	}
	for i := range a {
		x, y := float64(a[i]), float64(b[i])
		if math.IsNaN(x) || math.IsInf(x, 0) {
			if x != y {
				maxAbs = math.Inf(1)
			}
			continue
		}
		if d := math.Abs(x - y); d > maxAbs { // a NaN in b alone is not counted
			maxAbs = d
		}
		if !math.IsInf(y, 0) && !math.IsNaN(y) {
			maxRef = max(maxRef, math.Abs(y))
		}
	}
	return maxAbs, maxRef
}

// Write prints the report as a table, a row per point whose layer layers
// chooses (the points outside layers always show) and a column pair per
// step: the largest absolute difference and that over the oracle's
// largest magnitude. It returns an error naming the first point past tol,
// else says that every point is within it.
func (r *Report) Write(w io.Writer, tol float64, layers func(int) bool) error {
	shown := func(p Point) bool { return p.Layer < 0 || layers(p.Layer) }
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "point\t")
	for _, s := range r.Steps {
		fmt.Fprintf(tw, "%s max|Δ|\trel\t", s.Name)
	}
	fmt.Fprintln(tw)
	for i, p := range r.Steps[0].Points {
		if !shown(p) {
			continue
		}
		fmt.Fprintf(tw, "%s\t", p.Name)
		for _, s := range r.Steps {
			q := s.Points[i]
			fmt.Fprintf(tw, "%.3g\t%.3g\t", q.MaxAbs, q.Rel())
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	if s, p, bad := r.First(tol, shown); bad {
		return fmt.Errorf("validate: first past tolerance %g: %s at %s, row %d (rel %.3g, max|Δ| %.3g; %d of %d rows past it)",
			tol, p.Name, s.Name, p.Row, p.Rel(), p.MaxAbs, p.RowsPast(tol), len(p.RowAbs))
	}
	_, err := fmt.Fprintf(w, "every point within tolerance %g\n", tol)
	return err
}

// ParseLayers reads "all" or a comma list of layers and ranges such as
// 0,3,8-11 (zrt-run validate --layers) into a choice of layers.
func ParseLayers(s string) (func(int) bool, error) {
	if s == "all" || s == "" {
		return func(int) bool { return true }, nil
	}
	set := map[int]bool{}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err := strconv.Atoi(lo)
		b := a
		if err == nil && isRange {
			b, err = strconv.Atoi(hi)
		}
		if err != nil || a < 0 || b < a || b-a > 1<<16 {
			return nil, errors.New("want all, or layer numbers and ranges such as 0,3,8-11")
		}
		for l := a; l <= b; l++ {
			set[l] = true
		}
	}
	return func(l int) bool { return set[l] }, nil
}
