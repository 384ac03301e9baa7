package tokcmd

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/zrtdev/zrt/internal/testmodel"
	"github.com/zrtdev/zrt/runtime/tokenizer"
)

// run executes the command built by New over the tiny model with stdin in
// and reports its stdout and how many times the release function ran.
func run(t *testing.T, reverse bool, in string, args ...string) (string, int, error) {
	t.Helper()
	tok, err := tokenizer.FromGGUF(testmodel.Tiny(t))
	if err != nil {
		t.Fatal(err)
	}
	released := 0
	c := New(reverse, "M", func(_ *cobra.Command, path string) (*tokenizer.Tokenizer, func() error, error) {
		if path != "model" {
			return nil, nil, errors.New("no model " + path)
		}
		return tok, func() error { released++; return nil }, nil
	})
	var out bytes.Buffer
	c.SetIn(strings.NewReader(in))
	c.SetOut(&out)
	c.SetErr(&bytes.Buffer{})
	c.SetArgs(args)
	err = c.Execute()
	return out.String(), released, err
}

func TestRoundTrip(t *testing.T) {
	ids, released, err := run(t, false, "hello world", "model")
	if err != nil || released != 1 || strings.TrimSpace(ids) == "" {
		t.Fatalf("tokenize: %q, released %d times, %v", ids, released, err)
	}
	text, released, err := run(t, true, ids, "model")
	if err != nil || released != 1 || text != "hello world" {
		t.Fatalf("detokenize %q: %q, released %d times, %v", ids, text, released, err)
	}
}

func TestUsageAndFlags(t *testing.T) {
	open := func(*cobra.Command, string) (*tokenizer.Tokenizer, func() error, error) { return nil, nil, nil }
	tok, detok := New(false, "BUNDLE", open), New(true, "BUNDLE", open)
	if tok.Use != "tokenize BUNDLE" || detok.Use != "detokenize BUNDLE" {
		t.Errorf("usage lines %q, %q", tok.Use, detok.Use)
	}
	for _, f := range []string{"bos", "parse-special"} {
		if tok.Flags().Lookup(f) == nil || detok.Flags().Lookup(f) != nil {
			t.Errorf("--%s belongs to tokenize only", f)
		}
	}
}

func TestOpenError(t *testing.T) {
	if _, released, err := run(t, false, "x", "elsewhere"); err == nil || !strings.Contains(err.Error(), "no model elsewhere") || released != 0 {
		t.Fatalf("open error: %v, released %d times", err, released)
	}
}
