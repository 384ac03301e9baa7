package loadtest

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
)

// maskBucketLine is a bucket of zrt's zrt_constraint_mask_seconds
// histogram in Prometheus' text format: its labels and its cumulative
// count.
var maskBucketLine = regexp.MustCompile(`^zrt_constraint_mask_seconds_bucket\{(.*)\} (\S+)`)

var leLabel = regexp.MustCompile(`(?:^|,)le="([^"]+)"`)

// maskBuckets reads the server's mask histogram from GET /metrics: the
// cumulative count at each upper bound, summed over models. A server that
// has no such histogram (llama-server, or zrt before it) gives none.
func (lt *loadtest) maskBuckets(ctx context.Context) map[float64]float64 {
	out := map[float64]float64{}
	ok := lt.scrapeMetrics(ctx, func(line string) {
		m := maskBucketLine.FindStringSubmatch(line)
		if m == nil {
			return
		}
		le := leLabel.FindStringSubmatch(m[1])
		if le == nil {
			return
		}
		bound, err1 := strconv.ParseFloat(le[1], 64) // "+Inf" parses as +Inf
		n, err2 := strconv.ParseFloat(m[2], 64)
		if err1 == nil && err2 == nil {
			out[bound] += n
		}
	})
	if !ok {
		return nil
	}
	return out
}

// maskQuantiles are quantiles qs of the masks observed between two reads
// of the histogram (before, after), interpolated linearly within a bucket
// as Prometheus' histogram_quantile does, and how many masks there were.
func maskQuantiles(before, after map[float64]float64, qs ...float64) ([]float64, float64) {
	var bounds []float64
	for b := range after {
		bounds = append(bounds, b)
	}
	sort.Float64s(bounds)
	counts := make([]float64, len(bounds))
	for i, b := range bounds {
		counts[i] = after[b] - before[b]
	}
	if len(counts) == 0 || counts[len(counts)-1] <= 0 {
		return nil, 0
	}
	total := counts[len(counts)-1]
	out := make([]float64, len(qs))
	for k, q := range qs {
		rank := q * total
		i := sort.Search(len(counts), func(i int) bool { return counts[i] >= rank })
		lo, below := 0.0, 0.0
		if i > 0 {
			lo, below = bounds[i-1], counts[i-1]
		}
		hi := bounds[i]
		if math.IsInf(hi, 1) { // past the last finite bound: say that bound
			out[k] = lo
			continue
		}
		if in := counts[i] - below; in > 0 {
			out[k] = lo + (hi-lo)*(rank-below)/in
		} else {
			out[k] = hi
		}
	}
	return out, total
}

// maskLine is the report's row for the run's mask cost, or "" when the
// server timed no masks in it.
func maskLine(before, after map[float64]float64) string {
	q, n := maskQuantiles(before, after, 0.5, 0.99)
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("| constraint mask per token p50 / p99 µs | %.1f / %.1f (%.0f masks, the server's zrt_constraint_mask_seconds) |\n", q[0]*1e6, q[1]*1e6, n)
}
