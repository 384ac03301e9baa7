package engine

import (
	"time"

	"github.com/zrtdev/zrt/runtime"
)

// prefillStep is how a step treats the prompts that wait for their
// prefill while other requests decode (Config.PrefillHold).
type prefillStep struct {
	// budget is the step's query rows (sched.Input.Budget); ChunkCap
	// when it holds.
	budget int
	// hold: the step computes no prompt rows.
	hold bool
	// sized: the variants' measured costs chose budget (variantCosts.size),
	// and each waiting prompt ages a step towards PrefillHold.
	sized bool
}

// planPrefill decides how this step treats the waiting prompts — fresh
// requests' and the rest of those admitted before. A step that carries
// any prompt row runs a prefill variant, whose time depends more on the
// variant than on how many of its rows are used, so prompts that arrive
// one by one would otherwise make most steps a half-empty one.
//
// Once the variants' replay times are measured, the step's budget is the
// variant that computes the most prompt rows for the time it adds to a
// step without them, or none while that variant would be poorly filled
// (variantCosts.size). (On an H200, qwen3 0.6B shape, its full 512- and
// 1024-row variants add 7–9 µs a prompt row to a 64-row decode step, its
// 128-row one, which the decoding rows leave 64 rows of, 9–19.) A
// prompt that has waited PrefillHold steps goes whole, however it fits.
//
// Until then, or where nothing times the steps (a clock that stands
// still within a step), prompts wait while they and the decoding rows
// fill less than ChunkCap, each at most PrefillHold steps in all, for
// more to arrive: every step of the prefill variant is full. (A step
// that computed as much of the prompts as the budget allowed would
// otherwise leave a short rest that makes the next step one of the
// prefill variant too.)
func (e *Engine) planPrefill() prefillStep {
	free := prefillStep{budget: e.cfg.ChunkCap}
	if e.cfg.PrefillHold <= 0 {
		return free
	}
	decoding, prompt, due := 0, 0, 0
	for _, r := range e.reqs {
		left := 0
		switch {
		case r.waitsForLead():
			continue
		case r.prompting():
			left = len(r.Prompt) - r.done
		case r.slot >= 0 && r.replay > 0 && r.done < r.replay:
			return free // recomputing its tokens: let it go on
		case r.slot >= 0:
			decoding++
			continue
		case r.fresh():
			left = len(r.Prompt)
		default:
			return free // preempted: let it back in
		}
		prompt += left
		if r.held >= e.cfg.PrefillHold {
			due += left
		}
	}
	if prompt == 0 || decoding == 0 {
		return free
	}
	if e.pinned != nil {
		// A rerun: the logged plan, when costs made it.
		if p := e.pinned.Prefill; p != nil {
			return prefillStep{budget: p.Budget, hold: p.Hold, sized: true}
		}
	} else if b, hold, ok := e.vcost.size(e.m, e.prefillRows, decoding, prompt, due, e.cost.row); ok {
		if hold {
			b = e.cfg.ChunkCap
		}
		return prefillStep{budget: b, hold: hold, sized: true}
	}
	return prefillStep{budget: e.cfg.ChunkCap, hold: due == 0 && decoding+prompt < e.cfg.ChunkCap}
}

// prefillLadder is the row counts of m's prefill variants up to
// chunkCap (the last one cut to it), smallest first.
func prefillLadder(m Model, chunkCap int) []int {
	var rows []int
	for r := 1; r <= chunkCap; {
		k, ok := m.Key(runtime.Prefill, r)
		if !ok {
			break
		}
		rows = append(rows, min(k.Rows, chunkCap))
		r = k.Rows + 1
	}
	return rows
}

// variantCosts is each variant's replay time as a line in the rows a
// step uses (kernels skip some of the rows a variant has room for, not
// all), fitted to the steps timed by Config.Now (a clock that stands
// still within a step times none).
type variantCosts map[runtime.ShapeKey]*costLine

// costLine fits a line to (rows, seconds) by exponentially weighted sums,
// so that it follows a tier whose times drift (clocks, other work). A
// variant's first step is not counted (w stays 0 until the second): its
// first replay may do work once (T-CUDA instantiates its graph), and a
// variant judged by it might never run again to be judged better.
type costLine struct{ w, n, t, nn, nt float64 }

func (c variantCosts) observe(k runtime.ShapeKey, rows int, d time.Duration) {
	const keep = 0.95
	t := d.Seconds()
	if t <= 0 {
		return
	}
	l := c[k]
	if l == nil {
		c[k] = &costLine{}
		return
	}
	if l.w > 0 {
		// One slow step (a collection, a page fault) counts as at most
		// twice the line's time.
		t = min(t, 2*l.at(rows, k.Rows, 0))
	}
	n := float64(rows)
	l.w, l.n, l.t = keep*l.w+1, keep*l.n+n, keep*l.t+t
	l.nn, l.nt = keep*l.nn+n*n, keep*l.nt+n*t
}

// at is the time of a step of n rows: on the fitted line, or where the
// steps timed used about the same rows, their mean time moved by slope
// a row (the engine's estimate over all variants, stepCost.row).
func (l *costLine) at(n, variantRows int, slope float64) float64 {
	mn, mt := l.n/l.w, l.t/l.w
	// Rows spread by a sixteenth of the variant's: enough for a slope
	// that is not mostly the clock's noise.
	if v := l.nn/l.w - mn*mn; v*256 > float64(variantRows*variantRows) {
		slope = max((l.nt/l.w-mn*mt)/v, 0)
	}
	return mt + slope*(float64(n)-mn)
}

// near is the time of a step of n rows of k's variant, or when that is
// not timed yet, of the timed one of its stage nearest in rows (a decode
// step's time changes little with its rows).
func (c variantCosts) near(k runtime.ShapeKey, n int, slope float64) (float64, bool) {
	best, found := runtime.ShapeKey{}, false
	for o, l := range c {
		if o.Stage != k.Stage || o.Slots != k.Slots || l.w == 0 {
			continue
		}
		d, bd := abs(o.Rows-k.Rows), abs(best.Rows-k.Rows)
		if !found || d < bd || d == bd && o.Rows < best.Rows {
			best, found = o, true
		}
	}
	if !found {
		return 0, false
	}
	return c[best].at(n, best.Rows, slope), true
}

func abs(x int) int { return max(x, -x) }

// The rules' constants (variantCosts.size): a step holds its prompts
// while the best variant is worth less than holdBelow of a full one, and
// takes, of the variants worth at least nearBest of the best, the one
// that computes the most prompt rows. On an H200 (qwen3 0.6B shape, 64
// clients) a hold below 0.8 and 0.9 measured the same throughput.
const (
	holdBelow = 0.9
	nearBest  = 0.9
)

// size plans a step with decoding rows and prompt rows waiting, due of
// which must go now. Each prefill variant (of ladder's row counts) is
// worth the prompt rows it would compute per second it adds to the step
// the decoding rows take alone. The step holds the prompts back (hold)
// when none is due and the best variant is worth less than holdBelow of
// what a full one of the timed variants would be: more arrivals will
// fill it. Otherwise its budget is, of the variants worth nearBest of
// the best, the one that computes the most prompt rows. A variant not yet
// timed counts as adding next to nothing, so each is tried. It is not ok
// until a decode step and some prefill variant have been timed. slope is
// the engine's time a prompt row (stepCost.row).
func (c variantCosts) size(m Model, ladder []int, decoding, prompt, due int, slope float64) (budget int, hold, ok bool) {
	dk, ok := m.Key(runtime.Decode, decoding)
	if !ok {
		dk, ok = m.Key(runtime.Prefill, decoding)
	}
	if !ok || len(ladder) == 0 {
		return 0, false, false
	}
	base, timed := c.near(dk, decoding, slope)
	if !timed {
		return 0, false, false
	}
	type option struct {
		rows, prompt int
		worth        float64 // prompt rows a second added
	}
	var opts []option
	best, full := 0.0, 0.0
	for _, v := range ladder {
		pk, _ := m.Key(runtime.Prefill, v)
		k := min(prompt, v-decoding)
		// A floor, so that noise (a variant timed below the decode step)
		// does not make one infinitely good.
		floor := 0.02 * base
		added := floor
		if l := c[pk]; l != nil && l.w > 0 {
			added = max(l.at(decoding+k, pk.Rows, slope)-base, floor)
			full = max(full, float64(v-decoding)/max(l.at(v, pk.Rows, slope)-base, floor))
		}
		if k <= 0 || k < min(due, ladder[len(ladder)-1]-decoding) {
			continue
		}
		o := option{v, k, float64(k) / added}
		best = max(best, o.worth)
		opts = append(opts, o)
	}
	if full == 0 || len(opts) == 0 {
		return 0, false, false
	}
	if due == 0 && best < holdBelow*full {
		return 0, true, true
	}
	pick := option{}
	for _, o := range opts {
		if o.worth >= nearBest*best && o.prompt > pick.prompt {
			pick = o
		}
	}
	return pick.rows, false, true
}
