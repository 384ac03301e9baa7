package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/zrtdev/zrt/runtime/chat/reply"
	"github.com/zrtdev/zrt/runtime/decode"
	"github.com/zrtdev/zrt/runtime/grammar"
	"github.com/zrtdev/zrt/runtime/tokenizer"
)

// constraintFields are the request fields that constrain a reply's text,
// on both completion endpoints: OpenAI's response_format, llama-server's
// json_schema and grammar (GBNF), and regex (as vLLM's guided_regex).
type constraintFields struct {
	ResponseFormat json.RawMessage `json:"response_format"`
	JSONSchema     json.RawMessage `json:"json_schema"`
	Grammar        *string         `json:"grammar"`
	Regex          *string         `json:"regex"`
}

// set reports whether raw holds a JSON value other than null.
func set(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s != "" && s != "null"
}

// spec reads the fields into a grammar spec; field names the one that set
// it ("" with ok false when none constrains the reply: response_format
// text, or nothing). Two fields that both constrain are refused.
func (c *constraintFields) spec() (spec grammar.Spec, field string, ok bool, aerr *apiError) {
	var fields []string
	if set(c.ResponseFormat) {
		var rf struct {
			Type       string `json:"type"`
			JSONSchema *struct {
				Name   string          `json:"name"`
				Schema json.RawMessage `json:"schema"`
				Strict *bool           `json:"strict"`
			} `json:"json_schema"`
			// llama-server accepts the schema here too.
			Schema json.RawMessage `json:"schema"`
		}
		if err := json.Unmarshal(c.ResponseFormat, &rf); err != nil {
			return spec, "", false, badRequest("response_format", "response_format: %v", err)
		}
		switch rf.Type {
		case "text":
		case "json_object":
			spec.JSONObject, field = true, "response_format"
			fields = append(fields, field)
			if set(rf.Schema) {
				spec.JSONObject, spec.JSONSchema = false, rf.Schema
			}
		case "json_schema":
			field = "response_format"
			fields = append(fields, field)
			switch {
			case rf.JSONSchema != nil && set(rf.JSONSchema.Schema):
				spec.JSONSchema = rf.JSONSchema.Schema
			case rf.JSONSchema != nil:
				// OpenAI's default for a json_schema without a schema: any
				// JSON object.
				spec.JSONObject = true
			case set(rf.Schema):
				spec.JSONSchema = rf.Schema
			default:
				return spec, "", false, badRequest("response_format", "response_format of type json_schema needs json_schema.schema")
			}
		default:
			return spec, "", false, badRequest("response_format", "response_format type %q: want text, json_object or json_schema", rf.Type)
		}
	}
	if set(c.JSONSchema) {
		spec.JSONSchema, field = c.JSONSchema, "json_schema"
		fields = append(fields, field)
	}
	if c.Grammar != nil && *c.Grammar != "" {
		spec.GBNF, field = *c.Grammar, "grammar"
		fields = append(fields, field)
	}
	if c.Regex != nil && *c.Regex != "" {
		spec.Regex, field = *c.Regex, "regex"
		fields = append(fields, field)
	}
	if len(fields) > 1 {
		return grammar.Spec{}, "", false, badRequest(fields[1], "%s and %s both constrain the reply: give one", fields[0], fields[1])
	}
	return spec, field, len(fields) == 1, nil
}

// compile compiles spec for model m under the request's context (the
// compiler bounds its own time too, so a hostile spec costs its request
// at most the compile limit, and the server's other requests nothing),
// mapping what is wrong with it to a 400 on field.
func (s *Server) compile(ctx context.Context, m *Model, spec grammar.Spec, field string) (*grammar.Grammar, *apiError) {
	a := s.agent(m)
	a.once.Do(func() {
		a.compiler = grammar.NewCompiler(a.vocab, a.limits)
		if m.Engines[0].MasksOnDevice() {
			a.compiler.WarmInBackground()
		}
	})
	g, err := a.compiler.Compile(ctx, spec)
	if err == nil {
		return g, nil
	}
	var (
		lim *grammar.LimitError
		syn *grammar.SyntaxError
		sch *grammar.SchemaError
	)
	switch {
	case errors.As(err, &lim):
		code := "grammar_limit"
		e := badRequest(field, "%s: the constraint exceeds the server's %s limit (%d): %v", field, lim.Limit, lim.Bound, err)
		e.Code = &code
		return nil, e
	case errors.As(err, &syn), errors.As(err, &sch):
		return nil, badRequest(field, "%s: %v", field, err)
	case ctx.Err() != nil:
		return nil, &apiError{status: http.StatusRequestTimeout, Message: fmt.Sprintf("%s: compiling the constraint: %v", field, ctx.Err()), Type: "invalid_request_error"}
	}
	return nil, badRequest(field, "%s: %v", field, err)
}

// agent is what a model's constrained and parsed replies need, made on
// first use; its grammar compiler on the first constraint, since building
// one sorts the vocabulary, which a server that never constrains need not
// pay.
type agent struct {
	vocab    markerVocab
	limits   grammar.Limits
	once     sync.Once
	compiler *grammar.Compiler // made by compile's first call
	// keep are the special tokens of the template's reply format (its
	// markers) that chat replies show as text, so the reply parser and
	// grammars see them.
	keep []int32
}

// agent returns m's agent.
func (s *Server) agent(m *Model) *agent {
	s.agentsMu.Lock()
	defer s.agentsMu.Unlock()
	a := s.agents[m.Name]
	if a != nil {
		return a
	}
	v := markerVocab{Tokenizer: m.Tok, text: map[int32][]byte{}}
	var keep []int32
	for _, mk := range reply.Detect(m.Tok.Vocab().ChatTemplate).Markers() {
		if id, ok := m.Tok.TokenID(mk); ok && m.Tok.IsControl(id) {
			v.text[id] = []byte(mk)
			keep = append(keep, id)
		}
	}
	a = &agent{vocab: v, limits: s.grammarLimits, keep: keep}
	s.agents[m.Name] = a
	return a
}

// markerVocab is a tokenizer whose format markers read as their text
// (control tokens are otherwise empty pieces), so that a grammar can
// require them.
type markerVocab struct {
	*tokenizer.Tokenizer
	text map[int32][]byte
}

func (v markerVocab) Piece(id int32) []byte {
	if t, ok := v.text[id]; ok {
		return t
	}
	return v.Tokenizer.Piece(id)
}

// constrain compiles the request's constraint and gives each choice its
// own matcher of it.
func (s *Server) constrain(ctx context.Context, m *Model, spec grammar.Spec, field string, ps []decode.Params) *apiError {
	g, aerr := s.compile(ctx, m, spec, field)
	if aerr != nil {
		return aerr
	}
	obs := s.metrics.mask.WithLabelValues(m.Name)
	for i := range ps {
		ps[i].Constraint = timed(g.NewMatcher(), obs)
	}
	return nil
}
