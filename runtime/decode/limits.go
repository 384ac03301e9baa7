package decode

import (
	"fmt"
	"math"
	"slices"
	"strconv"
)

// Limit is the valid range of one request setting. The commands' flags
// and the server's request fields check against the same table, so the
// two cannot accept different values.
type Limit struct {
	// Field is the setting's name in requests (OpenAI's where it has one);
	// Flag is the command-line flag that sets it ("" where none does).
	Field, Flag string
	Min, Max    float64
	// MinOpen excludes Min itself (top_p must be above 0).
	MinOpen bool
}

// Limits are the request settings' ranges.
var Limits = []Limit{
	{Field: "max_tokens", Flag: "n", Min: 0, Max: 1 << 20},
	{Field: "temperature", Flag: "temp", Min: 0, Max: 2},
	{Field: "top_p", Flag: "top-p", Min: 0, Max: 1, MinOpen: true},
	{Field: "top_k", Flag: "top-k", Min: 0, Max: 1 << 20},
	{Field: "min_p", Flag: "min-p", Min: 0, Max: 1},
	{Field: "repeat_penalty", Flag: "repeat-penalty", Min: 0, Max: 10}, // 0 and 1 are off
	{Field: "repeat_last_n", Flag: "repeat-last-n", Min: 0, Max: 1 << 20},
	// OpenAI's ranges for the settings only the server takes.
	{Field: "presence_penalty", Min: -2, Max: 2},
	{Field: "frequency_penalty", Min: -2, Max: 2},
	{Field: "logit_bias", Min: -100, Max: 100}, // each token's bias
	{Field: "top_logprobs", Min: 0, Max: 20},   // the legacy completions' logprobs
}

// RangeError is a setting outside its Limit.
type RangeError struct {
	Limit
	Value float64
}

// FlagError is e for a command: the flag that set the value (-n,
// --temp) before the message, and marked a mistake in the call.
func (e *RangeError) FlagError() error {
	dash := "--"
	if len(e.Flag) == 1 {
		dash = "-"
	}
	return &flagError{fmt.Errorf("%s%s: %w", dash, e.Flag, e)}
}

// flagError is a RangeError under its flag's name.
type flagError struct{ error }

func (e *flagError) Unwrap() error { return e.error }

// Usage marks the error as a mistake in the call (the commands' exit
// status 2).
func (e *flagError) Usage() bool { return true }

func (e *RangeError) Error() string {
	open := "["
	if e.MinOpen {
		open = "("
	}
	f := func(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) }
	return fmt.Sprintf("%s %s out of range %s%s, %s]", e.Field, f(e.Value), open, f(e.Min), f(e.Max))
}

// Check returns a *RangeError when v is outside the range of the setting
// named field.
func Check(field string, v float64) error {
	for _, l := range Limits {
		if l.Field != field {
			continue
		}
		// NaN compares false with both bounds, so it is named: a flag
		// parses "NaN" as a number.
		if math.IsNaN(v) || v < l.Min || v > l.Max || (l.MinOpen && v == l.Min) {
			return &RangeError{Limit: l, Value: v}
		}
		return nil
	}
	panic("decode: no limit for " + field)
}

// Validate checks every setting of p against Limits: each logit bias
// (in token order, so the one named is always the same), but not its
// token, whose range is the model's vocabulary.
func (p Params) Validate() error {
	s := p.Sampling
	type setting struct {
		field string
		v     float64
	}
	all := []setting{{"max_tokens", float64(p.MaxTokens)}, {"temperature", s.Temperature}, {"top_p", s.TopP}, {"top_k", float64(s.TopK)},
		{"min_p", s.MinP}, {"repeat_penalty", s.RepeatPenalty}, {"repeat_last_n", float64(s.RepeatLastN)},
		{"presence_penalty", s.PresencePenalty}, {"frequency_penalty", s.FrequencyPenalty}, {"top_logprobs", float64(p.TopLogprobs)}}
	ids := make([]int32, 0, len(s.LogitBias))
	for id := range s.LogitBias {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		all = append(all, setting{"logit_bias", s.LogitBias[id]})
	}
	for _, c := range all {
		if err := Check(c.field, c.v); err != nil {
			return err
		}
	}
	return nil
}
