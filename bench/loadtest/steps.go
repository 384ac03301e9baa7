package loadtest

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"time"
)

// stepLine is a sample of zrt's engine step counters: steps by kind
// (zrt_steps_by_kind_total) and their seconds by kind and part
// (zrt_step_seconds_total), of the engines that sum them (zrt_engines),
// or of the tokens constraints forced (zrt_constraint_forced_tokens_total).
var stepLine = regexp.MustCompile(`^zrt_(steps_by_kind_total|step_seconds_total|engines|constraint_forced_tokens_total)\{(.*)\} (\S+)`)

var (
	kindLabel = regexp.MustCompile(`(?:^|,)kind="([^"]+)"`)
	partLabel = regexp.MustCompile(`(?:^|,)part="([^"]+)"`)
)

// stepCounters are the engine's step counters summed over models, keyed
// "KIND steps" and "KIND PART" (PART replay or host, in seconds), and
// "engines": how many engines those sums are over (a model's replicas
// each count; 0 from a server without the gauge, which has one a model),
// and "forced": the tokens constraints forced.
type stepCounters map[string]float64

// steps reads the step counters from GET /metrics; nil from a server
// without them (llama-server, or zrt before them).
func (lt *loadtest) steps(ctx context.Context) stepCounters {
	out := stepCounters{}
	ok := lt.scrapeMetrics(ctx, func(line string) {
		m := stepLine.FindStringSubmatch(line)
		if m == nil {
			return
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			return
		}
		switch m[1] {
		case "engines":
			out["engines"] += v
			return
		case "constraint_forced_tokens_total":
			out["forced"] += v
			return
		}
		kind := kindLabel.FindStringSubmatch(m[2])
		if kind == nil {
			return
		}
		if m[1] == "steps_by_kind_total" {
			out[kind[1]+" steps"] += v
			return
		}
		if part := partLabel.FindStringSubmatch(m[2]); part != nil {
			out[kind[1]+" "+part[1]] += v
		}
	})
	if !ok || len(out) == 0 {
		return nil
	}
	return out
}

// stepLines are the report's rows for where the server's steps went
// between two reads of the counters over a run of wall time: per kind of
// step (decode rows only, or prompt rows too) how many, and the device's
// (replay) and the engine's own (host) milliseconds a step; and the time
// the engine spent in no step (idle: waiting for requests), summed over
// the engines where a model runs several (replicas); and, for
// the run's tokens generated tokens, how many a step gave and how many a
// second of the steps' replay time (the rate were the engine's own work
// free: a constrained run that ends its replies early shows there how
// much of its rate it loses to their prompts' share of the steps rather
// than to host work), and the tokens constraints forced. "" when the
// server has no such counters or ran no step.
func stepLines(before, after stepCounters, wall time.Duration, tokens int) string {
	if after == nil {
		return ""
	}
	d := func(k string) float64 { return after[k] - before[k] }
	busy, replay, steps := 0.0, 0.0, 0.0
	s := ""
	for _, kind := range []string{"decode", "mixed"} {
		n := d(kind + " steps")
		busy += d(kind+" replay") + d(kind+" host")
		replay += d(kind + " replay")
		steps += n
		if n <= 0 {
			continue
		}
		s += fmt.Sprintf("| %s steps: count, replay / host ms a step | %.0f, %.3f / %.3f |\n", kind, n, 1e3*d(kind+" replay")/n, 1e3*d(kind+" host")/n)
	}
	if s == "" {
		return ""
	}
	if n := after["engines"]; n > 1 {
		s += fmt.Sprintf("| engine idle (wall time in no step, summed over %.0f engines) | %.2f s |\n", n, n*wall.Seconds()-busy)
	} else {
		s += fmt.Sprintf("| engine idle (wall time in no step) | %.2f s |\n", wall.Seconds()-busy)
	}
	if tokens > 0 && replay > 0 {
		s += fmt.Sprintf("| generated tokens a step; a second of replay | %.1f; %.1f |\n", float64(tokens)/steps, float64(tokens)/replay)
	}
	if f := d("forced"); f > 0 && tokens > 0 {
		s += fmt.Sprintf("| tokens constraints forced, taken ahead of the model | %.0f (%.1f%% of those generated) |\n", f, 100*f/float64(tokens))
	}
	return s
}
