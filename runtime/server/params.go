package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/zrtdev/zrt/runtime/decode"
	"github.com/zrtdev/zrt/runtime/sample"
)

// samplingFields are the sampling fields of every generating endpoint,
// /v1/responses among them.
type samplingFields struct {
	Temperature *float64 `json:"temperature"`
	TopP        *float64 `json:"top_p"`
	TopK        *int     `json:"top_k"`
	MinP        *float64 `json:"min_p"`
	Seed        *int64   `json:"seed"`
}

// genParams are the sampling fields both completion endpoints share.
type genParams struct {
	Model         string `json:"model"`
	MaxTokens     *int   `json:"max_tokens"`
	MaxCompletion *int   `json:"max_completion_tokens"`
	samplingFields
	Stop          json.RawMessage `json:"stop"`
	Stream        bool            `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	IgnoreEOS        bool     `json:"ignore_eos"`
	N                *int     `json:"n"`
	PresencePenalty  *float64 `json:"presence_penalty"`
	FrequencyPenalty *float64 `json:"frequency_penalty"`
	RepeatPenalty    *float64 `json:"repeat_penalty"`
	// LogitBias is keyed by token id as a string, as JSON objects are.
	LogitBias map[string]float64 `json:"logit_bias"`
	// Logprobs is an integer for completions (the alternatives per token)
	// and a boolean for chat, whose alternatives are TopLogprobs.
	Logprobs    json.RawMessage `json:"logprobs"`
	TopLogprobs *int            `json:"top_logprobs"`
	constraintFields
}

// decodeParams validates the shared fields into the engine's terms; chat
// says which endpoint's logprobs fields to read.
func (g *genParams) decodeParams(m *Model, chat bool) (decode.Params, *apiError) {
	// Every penalty counts the sequence's last 64 tokens: llama-server's
	// default repeat_last_n.
	p := decode.Params{MaxTokens: 16, IgnoreEOS: g.IgnoreEOS, Sampling: sample.Params{Temperature: 1, TopP: 1, RepeatLastN: 64}}
	switch {
	case g.MaxCompletion != nil:
		p.MaxTokens = *g.MaxCompletion
		if p.MaxTokens < 1 || p.MaxTokens > m.ContextLength {
			return p, maxTokensError("max_completion_tokens", m)
		}
	case g.MaxTokens != nil:
		p.MaxTokens = *g.MaxTokens
		if p.MaxTokens < 1 || p.MaxTokens > m.ContextLength {
			return p, maxTokensError("max_tokens", m)
		}
	}
	if g.Temperature != nil {
		p.Sampling.Temperature = *g.Temperature
	}
	if g.TopP != nil {
		p.Sampling.TopP = *g.TopP
	}
	if g.TopK != nil {
		p.Sampling.TopK = *g.TopK
	}
	if g.MinP != nil {
		p.Sampling.MinP = *g.MinP
	}
	if g.RepeatPenalty != nil {
		p.Sampling.RepeatPenalty = *g.RepeatPenalty
	}
	if g.PresencePenalty != nil {
		p.Sampling.PresencePenalty = *g.PresencePenalty
	}
	if g.FrequencyPenalty != nil {
		p.Sampling.FrequencyPenalty = *g.FrequencyPenalty
	}
	bias, aerr := logitBias(g.LogitBias, m.Tok.NVocab())
	if aerr != nil {
		return p, aerr
	}
	p.Sampling.LogitBias = bias
	if aerr := g.logprobs(&p, chat); aerr != nil {
		return p, aerr
	}
	var re *decode.RangeError
	if err := p.Validate(); errors.As(err, &re) {
		return p, badRequest(re.Field, "%v", err)
	}
	if g.Seed != nil {
		p.Sampling.Seed = uint64(*g.Seed)
	} else {
		p.Sampling.Seed = uint64(time.Now().UnixNano())
	}
	stops, err := stringOrList(g.Stop)
	if err != nil || len(stops) > 4 {
		return p, badRequest("stop", "stop must be a string or a list of at most 4 strings")
	}
	p.Stops = stops
	return p, nil
}

// maxChoices bounds n: each choice is a request of its own in the engine.
const maxChoices = 16

// choices are the decoding parameters of the request's n choices: p's,
// choice i seeded with p's seed + i, so that it samples what a request of
// one choice with that seed would.
func (g *genParams) choices(p decode.Params) ([]decode.Params, *apiError) {
	n := 1
	if g.N != nil {
		n = *g.N
	}
	if n < 1 || n > maxChoices {
		return nil, badRequest("n", "n = %d must be in [1, %d]", n, maxChoices)
	}
	ps := make([]decode.Params, n)
	for i := range ps {
		ps[i] = p
		ps[i].Sampling.Seed = p.Sampling.Seed + uint64(i)
	}
	return ps, nil
}

// maxTokensError answers a max_tokens or max_completion_tokens (field)
// that is not an integer in [1, m's context], whatever its JSON type.
func maxTokensError(field string, m *Model) *apiError {
	return badRequest(field, "%s must be an integer in [1, %d]: at least one token, and at most the model's context of %d tokens, which the prompt shares",
		field, m.ContextLength, m.ContextLength)
}

// logitBias reads OpenAI's logit_bias: token ids, as decimal strings,
// mapped to a bias in the range the decode limits give.
func logitBias(in map[string]float64, nVocab int) (map[int32]float64, *apiError) {
	if len(in) == 0 {
		return nil, nil
	}
	out := make(map[int32]float64, len(in))
	// In key order, so a request with several bad entries always names
	// the same one.
	for _, k := range slices.Sorted(maps.Keys(in)) {
		id, err := strconv.Atoi(k)
		// Only the canonical spelling: "05" and "5" would be one token
		// biased twice.
		if err != nil || id < 0 || id >= nVocab || strconv.Itoa(id) != k {
			return nil, badRequest("logit_bias", "logit_bias key %q is not a token id of this model (0 to %d)", k, nVocab-1)
		}
		if err := decode.Check("logit_bias", in[k]); err != nil {
			return nil, badRequest("logit_bias", "logit_bias of token %d: %v", id, err)
		}
		out[int32(id)] = in[k]
	}
	return out, nil
}

// logprobs reads the endpoint's logprobs fields into p: for completions
// the legacy integer logprobs, the alternatives to report per token; for
// chat the boolean logprobs and top_logprobs.
func (g *genParams) logprobs(p *decode.Params, chat bool) *apiError {
	set := len(g.Logprobs) > 0 && string(g.Logprobs) != "null"
	if !chat {
		if !set || string(g.Logprobs) == "false" { // false: as before logprobs were supported
			return nil
		}
		var n int
		if err := json.Unmarshal(g.Logprobs, &n); err != nil {
			return badRequest("logprobs", "logprobs must be an integer, the alternatives to report per token: %v", err)
		}
		var re *decode.RangeError
		if err := decode.Check("top_logprobs", float64(n)); errors.As(err, &re) {
			re.Field = "logprobs" // the same setting, under this endpoint's name
			return badRequest("logprobs", "%v", re)
		}
		p.Logprobs, p.TopLogprobs = true, n
		return nil
	}
	on := false
	if set {
		if err := json.Unmarshal(g.Logprobs, &on); err != nil {
			return badRequest("logprobs", "logprobs must be true or false (the alternatives are top_logprobs): %v", err)
		}
	}
	if g.TopLogprobs != nil {
		if err := decode.Check("top_logprobs", float64(*g.TopLogprobs)); err != nil {
			return badRequest("top_logprobs", "%v", err)
		}
		if *g.TopLogprobs > 0 && !on {
			return badRequest("top_logprobs", "top_logprobs needs logprobs: true")
		}
		p.TopLogprobs = *g.TopLogprobs
	}
	p.Logprobs = on
	return nil
}

func stringOrList(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return []string{one}, nil
	}
	var many []string
	err := json.Unmarshal(raw, &many)
	return many, err
}

// decodeBody reads a JSON body into v, naming what is wrong.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) *apiError {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	if err := dec.Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return &apiError{status: http.StatusRequestEntityTooLarge, Message: fmt.Sprintf("request body exceeds %d bytes", maxBody), Type: "invalid_request_error"}
		}
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			// The shared fields are those of the embedded field groups:
			// name them as the request does.
			field := typeErr.Field
			for _, group := range []string{"genParams.", "samplingFields.", "constraintFields."} {
				field = strings.TrimPrefix(field, group)
			}
			return badRequest(field, "%s must be %s, not %s", field, jsonKind(typeErr.Type), typeErr.Value)
		}
		return badRequest("", "malformed JSON body: %v", err)
	}
	return nil
}

// jsonKind names the JSON value a Go type reads, for errors that speak
// the request's language rather than Go's.
func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return "an object"
}
