package grammar

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// Spec is one output constraint; exactly one field is set.
type Spec struct {
	JSONSchema json.RawMessage // JSON Schema (OpenAI strict subset and more)
	JSONObject bool            // any JSON object (response_format json_object)
	GBNF       string          // llama.cpp GBNF grammar text, root rule "root"
	Regex      string          // the whole output matches this regular expression
}

// Limits bound compilation. A zero field takes its default, so the zero
// value is a sane configuration for a server that compiles what clients
// send.
type Limits struct {
	// CompileTime bounds one compilation (default 2 s); the context of
	// Compile bounds it too.
	CompileTime time.Duration
	// SpecBytes bounds the text of a spec (default 1 MiB).
	SpecBytes int
	// GrammarSize bounds the positions of the compiled grammar, where
	// every byte of a literal and every repetition copy counts (default
	// 200000).
	GrammarSize int
	// SchemaDepth bounds the nesting of a JSON Schema (default 32).
	SchemaDepth int
	// Enum bounds the values of one enum (default 1024).
	Enum int
	// Repeat bounds the count of one bounded repetition {m,n} (default
	// 1000).
	Repeat int
	// StackDepth bounds the nesting of rules while matching (default
	// 4096); deeper parses are dropped, which caps the nesting of
	// generated JSON.
	StackDepth int
	// CacheEntries bounds the compiled grammars a Compiler keeps
	// (default 64).
	CacheEntries int
	// PositionCacheBytes bounds the memory one grammar spends on the
	// tokens cached per position (default 64 MiB); past it, positions
	// not yet cached are recomputed at each step instead.
	PositionCacheBytes int
}

// withDefaults fills the zero fields.
func (l Limits) withDefaults() Limits {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	if l.CompileTime <= 0 {
		l.CompileTime = 2 * time.Second
	}
	def(&l.SpecBytes, 1<<20)
	def(&l.GrammarSize, 200000)
	def(&l.SchemaDepth, 32)
	def(&l.Enum, 1024)
	def(&l.Repeat, 1000)
	def(&l.StackDepth, 4096)
	def(&l.CacheEntries, 64)
	def(&l.PositionCacheBytes, 64<<20)
	return l
}

// LimitError is a spec past one of the Limits.
type LimitError struct {
	Limit string // the Limits field, e.g. "GrammarSize"
	Bound int64  // its value
	What  string // what went past it
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("grammar: %s exceeds limit %s=%d", e.What, e.Limit, e.Bound)
}

// SyntaxError is a GBNF grammar or a regular expression that does not
// parse, or a grammar that cannot be matched (an undefined rule, left
// recursion).
type SyntaxError struct {
	Lang   string // "gbnf" or "regex"
	Offset int    // byte offset in the text, -1 when not about one place
	Msg    string
}

func (e *SyntaxError) Error() string {
	if e.Offset >= 0 {
		return fmt.Sprintf("grammar: %s: at offset %d: %s", e.Lang, e.Offset, e.Msg)
	}
	return fmt.Sprintf("grammar: %s: %s", e.Lang, e.Msg)
}

// SchemaError is a JSON Schema that is malformed or uses what the
// compiler cannot enforce.
type SchemaError struct {
	Path string // JSON pointer of the offending schema, "" for the root
	Msg  string
}

func (e *SchemaError) Error() string {
	p := e.Path
	if p == "" {
		p = "#"
	}
	return fmt.Sprintf("grammar: json schema %s: %s", p, e.Msg)
}

// budget tracks the compile-time bounds: deadline, context and size.
type budget struct {
	ctx   context.Context
	lim   Limits
	ticks int
}

// check returns the context's error every so often, so that the loops of
// compilation stop when asked without paying for a check per step.
func (b *budget) check() error {
	b.ticks++
	if b.ticks&1023 != 0 {
		return nil
	}
	if err := b.ctx.Err(); err != nil {
		if err == context.DeadlineExceeded {
			return &LimitError{Limit: "CompileTime", Bound: int64(b.lim.CompileTime / time.Millisecond), What: "compilation time (ms)"}
		}
		return err
	}
	return nil
}
