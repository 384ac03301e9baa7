package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/zrtdev/zrt/runtime/decode"
	"github.com/zrtdev/zrt/runtime/sequence"
	"github.com/zrtdev/zrt/runtime/spec"
)

// specGen generates gen tokens greedily after prompt through a request's
// decoder (end-of-generation tokens banned, so every run takes gen),
// speculating with mode (off: a decode step a token; draft: through the
// draft model). It returns the rate of the tokens fed after the prompt
// and what speculation did.
func specGen(ctx context.Context, e, model *sequence.Pool, prompt []int32, gen int, mode spec.Mode) (float64, spec.Stats, error) {
	seq, err := e.NewSequence()
	if err != nil {
		return 0, spec.Stats{}, err
	}
	defer seq.Release()
	d := decode.New(e.Tok, decode.Params{MaxTokens: gen, IgnoreEOS: true, ContextLength: e.Hparams.ContextLength})
	var sd *spec.Decoding
	if mode.On() {
		if mode.Kind != spec.Draft {
			model = nil
		}
		if sd, err = spec.NewWithDraft(e, model, seq, d, mode, gen); err != nil {
			return 0, spec.Stats{}, err
		}
		defer sd.Close()
	}
	if _, err := seq.Prefill(ctx, prompt); err != nil {
		return 0, spec.Stats{}, err
	}
	if sd != nil {
		if err := sd.Prime(ctx, prompt); err != nil { // the draft model's prefill, as the target's, before the clock
			return 0, spec.Stats{}, err
		}
	}
	t0 := time.Now()
	fed := 0
	st := d.NextFrom(seq, seq.Tokens, seq.Pos())
	for st.Finish == decode.Running {
		if sd == nil {
			if err := seq.Advance(ctx, st.Token); err != nil {
				return 0, spec.Stats{}, err
			}
			fed++
			st = d.NextFrom(seq, seq.Tokens, seq.Pos())
			continue
		}
		steps, err := sd.Step(ctx, st.Token)
		if err != nil {
			return 0, spec.Stats{}, err
		}
		fed += len(steps)
		st = steps[len(steps)-1]
	}
	rate := float64(fed) / time.Since(t0).Seconds()
	if sd == nil {
		return rate, spec.Stats{}, nil
	}
	return rate, sd.Stats, nil
}

// stepCosts times steps of 1 to rows rows of one sequence after prompt
// (each verified and rolled back), reps rounds of each row count in turn,
// and returns each one's median time (robust to other processes on a
// shared machine): cost[r] is a step of r rows.
func stepCosts(ctx context.Context, e *sequence.Pool, prompt []int32, rows, reps int) ([]time.Duration, error) {
	seq, err := e.NewSequence()
	if err != nil {
		return nil, err
	}
	defer seq.Release()
	if _, err := seq.Prefill(ctx, prompt); err != nil {
		return nil, err
	}
	start := seq.Pos()
	rows = min(rows, e.VerifyRows(), e.Hparams.ContextLength-start)
	toks := make([]int32, rows)
	for i := range toks {
		toks[i] = prompt[i%len(prompt)]
	}
	cost := make([]time.Duration, rows+1)
	ts := make([][]time.Duration, rows+1)
	// Every row count once a round, so that a busy spell of the machine
	// falls on all of them alike; the first round warms up.
	for i := -1; i < reps; i++ {
		for r := 1; r <= rows; r++ {
			t0 := time.Now()
			if _, err := seq.Verify(ctx, toks[:r]); err != nil {
				return nil, err
			}
			if i >= 0 {
				ts[r] = append(ts[r], time.Since(t0))
			}
			if err := seq.Truncate(start); err != nil {
				return nil, err
			}
		}
	}
	for r := 1; r <= rows; r++ {
		slices.Sort(ts[r])
		cost[r] = ts[r][reps/2]
	}
	return cost, nil
}

// specReport prints what speculation did beside the rates: the
// acceptance α and tokens a verify step (the text's), the step costs by
// rows relative to a decode step and the draft's (the engine's), the
// speedup the standard formula predicts from them — a draft of K tokens,
// each accepted with probability α once those before it were, yields
// (1 − α^(K+1)) / (1 − α) tokens for K draft tokens' cost and a verify
// step of K+1 rows — the speedup the run's own mix of steps predicts at
// those costs, and the speedup measured in each round (a round runs
// without and then with speculation, so that a busy machine's slow
// spells fall on both).
func specReport(w io.Writer, mode spec.Mode, s spec.Stats, cost []time.Duration, plain, on []float64) {
	a := s.PerToken()
	fmt.Fprintf(w, "\nspeculative %s: α = %.3f per token (%d accepted, %d rejected; %d of %d draft tokens accepted), %.2f tokens a verify step; %d verify steps, %d plain (no draft), %d tokens fed\n",
		mode, a, s.Accepted, s.Rejected, s.Accepted, s.Drafted, s.TokensPerStep(), s.Steps, s.Plain, s.Tokens())
	var by []string
	for r := 2; r < len(cost); r++ {
		by = append(by, fmt.Sprintf("%d rows %.2f×", r, float64(cost[r])/float64(cost[1])))
	}
	// An n-gram draft is a lookup a step; a model's, its draft time per
	// draft token.
	per, what := s.Steps+s.Plain, "a step's n-gram lookup"
	if mode.Kind == spec.Self || mode.Kind == spec.Draft {
		per, what = s.Drafted, "a draft token"
	}
	cd := float64(s.DraftTime) / float64(max(per, 1)) / float64(cost[1])
	extra := ""
	if s.DraftSteps > 0 {
		extra = fmt.Sprintf(" (%d draft model steps, %.3f× each)", s.DraftSteps, float64(s.DraftTime)/float64(s.DraftSteps)/float64(cost[1]))
	}
	fmt.Fprintf(w, "step cost relative to a decode step (%.3f ms): %s; %s %.3f×%s\n",
		float64(cost[1].Microseconds())/1000, strings.Join(by, ", "), what, cd, extra)
	k := min(mode.K, len(cost)-2)
	if k >= 1 {
		tokens := float64(k + 1)
		if a < 1 {
			tokens = (1 - math.Pow(a, float64(k+1))) / (1 - a)
		}
		draftCost := float64(k) * cd
		if mode.Kind == spec.NGram {
			draftCost = cd
		}
		formula := tokens / (draftCost + float64(cost[k+1])/float64(cost[1]))
		note := ""
		if !mode.Fixed {
			note = " (at K every step; the policy chose the run's lengths, so the run's own mix below is the prediction)"
		}
		fmt.Fprintf(w, "standard formula: α %.3f, K %d: %.2f tokens a step for %.2f draft + %.2f verify = predicted %.2f×%s\n",
			a, k, tokens, draftCost, float64(cost[k+1])/float64(cost[1]), formula, note)
	}
	// The run's steps at their measured costs, and the draft time,
	// against a decode step a token.
	var predicted time.Duration
	for r, n := range s.ByRows {
		if n > 0 && r < len(cost) {
			predicted += time.Duration(n) * cost[r]
		}
	}
	predicted += s.DraftTime
	if predicted <= 0 || len(plain) == 0 {
		return
	}
	pred := float64(s.Tokens()) * float64(cost[1]) / float64(predicted)
	var rounds []string
	for i := range min(len(plain), len(on)) {
		rounds = append(rounds, fmt.Sprintf("%.2f× (%.1f vs %.1f t/s)", on[i]/plain[i], on[i], plain[i]))
	}
	mp, mo := meanOf(plain), meanOf(on)
	fmt.Fprintf(w, "speedup: predicted %.2f× from the steps' rows and costs, measured %.2f× (%.1f vs %.1f t/s; %.0f%% of predicted); rounds: %s\n",
		pred, mo/mp, mo, mp, 100*mo/mp/pred, strings.Join(rounds, ", "))
}

func meanOf(x []float64) float64 {
	s := 0.0
	for _, v := range x {
		s += v
	}
	return s / float64(max(len(x), 1))
}

// speculative measures Options.Speculative's tests: for each of
// opt.SpecPrompts, a greedy generation of opt.Gen tokens after it
// without speculation and with the mode, opt.Reps rounds of each in
// turn, and the step costs by rows. It returns the table's rows with the
// two tests added (over every prompt's rounds), and the report to print
// after the table (in the markdown output; in JSON the rows carry α and
// the tokens a verify step): each prompt's, then with several prompts
// the speedup over all of them.
func speculative(ctx context.Context, e *sequence.Pool, rows []Result, opt Options) ([]Result, func(), error) {
	mode, gen, reps := opt.Speculative, opt.Gen, opt.Reps
	type run struct {
		text   string
		prompt []int32
		stats  spec.Stats
		cost   []time.Duration
		rates  [2][]float64 // off, on
	}
	var runs []*run
	for _, text := range opt.SpecPrompts {
		prompt := e.Tok.Encode(text, true, false)
		if len(prompt) == 0 {
			return nil, nil, optionErrorf("--prompt %q has no tokens", text)
		}
		if n := len(prompt) + gen; n > e.Hparams.ContextLength {
			return nil, nil, optionErrorf("--prompt of %d tokens and -n %d exceed the bundle's context of %d", len(prompt), gen, e.Hparams.ContextLength)
		}
		if mode.Kind == spec.Draft && opt.Draft != nil && len(prompt)+gen+mode.K > opt.Draft.Hparams.ContextLength {
			return nil, nil, optionErrorf("--prompt of %d tokens and -n %d exceed the draft model's context of %d", len(prompt), gen, opt.Draft.Hparams.ContextLength)
		}
		runs = append(runs, &run{text: text, prompt: prompt})
	}
	if len(runs) == 0 {
		return nil, nil, optionErrorf("--speculative needs a --prompt to generate from")
	}
	size, params, _ := weightStats(e)
	modes := []spec.Mode{{Kind: spec.Off}, mode}
	for _, m := range modes {
		if _, _, err := specGen(ctx, e, opt.Draft, runs[0].prompt, min(gen, 8), m); err != nil { // warm up
			return nil, nil, err
		}
	}
	var all [2][]float64
	var stats spec.Stats
	for _, r := range runs {
		for range reps {
			for i, m := range modes {
				v, s, err := specGen(ctx, e, opt.Draft, r.prompt, gen, m)
				if err != nil {
					return nil, nil, err
				}
				r.rates[i] = append(r.rates[i], v)
				all[i] = append(all[i], v)
				if i == 1 {
					r.stats = s
				}
			}
		}
		stats = addStats(stats, r.stats)
		var err error
		if r.cost, err = stepCosts(ctx, e, r.prompt, mode.K+1, max(20, 4*reps)); err != nil {
			return nil, nil, err
		}
	}
	for i, m := range modes {
		res := Result{Model: e.Hparams.Arch, SizeBytes: size, Params: params, Backend: e.TierName(), Test: fmt.Sprintf("tg%d %s", gen, m)}
		if e.TierName() == "cpu" {
			res.Threads = opt.Threads
		}
		res.TokS, res.StdDev = meanSD(all[i])
		if i == 1 {
			res.Acceptance, res.TokensPerStep = stats.Acceptance(), stats.TokensPerStep()
		}
		rows = append(rows, res)
		if warn := noiseWarning(res, reps); warn != "" {
			opt.Warn("%s", warn)
		}
	}
	report := func() {
		for _, r := range runs {
			fmt.Fprintf(opt.Out, "\nprompt %q (%d tokens)", r.text, len(r.prompt))
			specReport(opt.Out, mode, r.stats, r.cost, r.rates[0], r.rates[1])
		}
		if len(runs) > 1 {
			var each []string
			for _, r := range runs {
				each = append(each, fmt.Sprintf("%.2f×", meanOf(r.rates[1])/meanOf(r.rates[0])))
			}
			mp, mo := meanOf(all[0]), meanOf(all[1])
			fmt.Fprintf(opt.Out, "\nover %d prompts: α = %.3f per token, measured %.2f× (%.1f vs %.1f t/s, the mean of every round); by prompt: %s\n",
				len(runs), stats.PerToken(), mo/mp, mo, mp, strings.Join(each, ", "))
		}
	}
	return rows, report, nil
}

// addStats is the counts of two generations' speculation together.
func addStats(a, b spec.Stats) spec.Stats {
	a.Steps += b.Steps
	a.Plain += b.Plain
	a.Drafted += b.Drafted
	a.Accepted += b.Accepted
	a.Rejected += b.Rejected
	a.DraftTime += b.DraftTime
	a.DraftSteps += b.DraftSteps
	for len(a.ByRows) < len(b.ByRows) {
		a.ByRows = append(a.ByRows, 0)
	}
	for r, n := range b.ByRows {
		a.ByRows[r] += n
	}
	return a
}
