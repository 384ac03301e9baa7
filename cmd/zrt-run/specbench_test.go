package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"github.com/zrtdev/zrt/runtime/sequence"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/internal/clitest"
	"github.com/zrtdev/zrt/internal/testmodel"
)

// runCmd runs zrt-run with args and returns its stdout and stderr.
func runCmd(t *testing.T, args ...string) (string, string) {
	t.Helper()
	stdout, stderr, err := clitest.Run("zrt-run", args, generateCmd(), benchCmd())
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return stdout, stderr
}

// TestGenerateSpeculative: generate prints the same text with
// --speculative as without, says when the bundle's verify steps cut the
// draft length, and reports the drafts in its JSON metrics; a bad mode is
// refused naming the flag.
func TestGenerateSpeculative(t *testing.T) {
	_, bundle := batchedBundle(t) // decode variants of 1 and 2 rows
	gen := func(mode string) (string, string) {
		return runCmd(t, "generate", bundle, "--tokens", "1,5,9", "-n", "150", "--threads", "1", "--temp", "0", "--json", "--speculative", mode)
	}
	off, _ := gen("off")
	for _, mode := range []string{"ngram:4:fixed", "ngram"} {
		on, stderr := gen(mode)
		if on != off {
			t.Errorf("--speculative %s printed other text:\n%q\nwithout:\n%q", mode, on, off)
		}
		if !strings.Contains(stderr, "hold 2 rows") {
			t.Errorf("--speculative %s on a bundle whose verify steps hold 2 rows: no note on stderr %q", mode, stderr)
		}
		var m sequence.Metrics
		if err := json.Unmarshal([]byte(stderr[strings.LastIndexByte(stderr[:len(stderr)-1], '\n')+1:]), &m); err != nil {
			t.Fatalf("metrics line: %v in %q", err, stderr)
		}
		if m.Speculative != mode && !(mode == "ngram" && m.Speculative == "ngram:4") {
			t.Errorf("metrics say speculative %q, want %q", m.Speculative, mode)
		}
		if mode == "ngram:4:fixed" && (m.VerifySteps == 0 || m.DraftTokens != m.VerifySteps) {
			t.Errorf("drafts of one token (2 rows): %d verify steps of %d draft tokens", m.VerifySteps, m.DraftTokens)
		}
	}
	if _, _, err := execGenerate(bundle, "-p", "hi", "--speculative", "ngram:0"); err == nil || !strings.Contains(err.Error(), "--speculative") {
		t.Errorf("--speculative ngram:0: %v", err)
	}
}

// TestBenchSpeculative: bench --speculative adds the two generation tests
// and the report of acceptance, step costs and speedups; --prompt
// repeated measures each prompt and reports the speedup over all.
func TestBenchSpeculative(t *testing.T) {
	_, bundle := batchedBundle(t)
	out, _ := runCmd(t, "bench", bundle, "-p", "0", "-n", "40", "-r", "1", "--threads", "1", "--speculative", "ngram:1:fixed", "--prompt", "a b a b a b")
	for _, want := range []string{"| tg40 off |", "| tg40 ngram:1:fixed |", "speculative ngram:1:fixed: α = ", "2 rows ", "speedup: predicted "} {
		if !strings.Contains(out, want) {
			t.Errorf("bench output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "over 1 prompts") {
		t.Errorf("one prompt reported as a set:\n%s", out)
	}
	out, _ = runCmd(t, "bench", bundle, "-p", "0", "-n", "20", "-r", "1", "--threads", "1", "--speculative", "ngram:1:fixed", "--prompt", "a b a b a b", "--prompt", "c d c d")
	for _, want := range []string{`prompt "a b a b a b"`, `prompt "c d c d"`, "over 2 prompts: α = ", "by prompt: "} {
		if !strings.Contains(out, want) {
			t.Errorf("bench with two prompts: output lacks %q:\n%s", want, out)
		}
	}
}

// TestGenerateSelfFromGGUF: given a GGUF, the default build has draft
// variants (of a quarter of its layers) and --draft-layers N builds them
// of N layers: either way --speculative self prints what plain decoding
// prints; --draft-layers 0 builds none (a build of its own in the cache),
// and self is refused then before any output.
func TestGenerateSelfFromGGUF(t *testing.T) {
	model := testmodel.Shared(t, "stories260K.gguf")
	bin := filepath.Join(buildTools(t), "zrt-run")
	cache := t.TempDir()
	run := func(args ...string) (string, error) {
		cmd := exec.Command(bin, append([]string{"generate", model, "--cache", cache, "-p", "Once upon a time", "-n", "60", "--temp", "0", "--threads", "1", "--no-echo"}, args...)...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		if err != nil {
			err = fmt.Errorf("%v: %s", err, errb.String())
		}
		return out.String(), err
	}
	off, err := run()
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"--speculative", "self"}, {"--draft-layers", "2", "--speculative", "self:3:fixed"}} {
		on, err := run(args...)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if on != off {
			t.Errorf("%v printed\n%q\nplain decoding\n%q", args, on, off)
		}
	}
	if out, err := run("--draft-layers", "0", "--speculative", "self"); err == nil || !strings.Contains(err.Error(), "--draft-layers") || out != "" {
		t.Errorf("self without a draft variant: %v, output %q", err, out)
	}
	if _, err := run("--draft-layers", "-1"); err == nil || !strings.Contains(err.Error(), "want 0 or more") {
		t.Errorf("--draft-layers -1: %v", err)
	}
}

// TestDraftModelFlags: generate and bench take a draft model with
// --draft (here the bundle itself, which agrees with every token):
// generate prints the text plain decoding prints, --draft alone meaning
// --speculative draft:4, and bench reports the draft's α and the
// standard formula's prediction; --draft with another kind is refused.
func TestDraftModelFlags(t *testing.T) {
	_, bundle := batchedBundle(t)
	gen := func(args ...string) (string, string) {
		return runCmd(t, append([]string{"generate", bundle, "--tokens", "1,5,9", "-n", "40", "--threads", "1", "--temp", "0", "--json"}, args...)...)
	}
	off, _ := gen()
	on, stderr := gen("--draft", bundle)
	if on != off {
		t.Errorf("--draft printed other text:\n%q\nwithout:\n%q", on, off)
	}
	var m sequence.Metrics
	if err := json.Unmarshal([]byte(stderr[strings.LastIndexByte(stderr[:len(stderr)-1], '\n')+1:]), &m); err != nil {
		t.Fatalf("metrics line: %v in %q", err, stderr)
	}
	if m.Speculative != "draft:4" || m.Accepted == 0 {
		t.Errorf("--draft alone: speculative %q, %d draft tokens accepted; want draft:4 accepting its own tokens", m.Speculative, m.Accepted)
	}
	out, _ := runCmd(t, "bench", bundle, "-p", "0", "-n", "30", "-r", "2", "--threads", "1", "--speculative", "draft:1:fixed", "--draft", bundle)
	for _, want := range []string{"| tg30 draft:1:fixed |", "α = 1.000 per token", "standard formula: α 1.000, K 1", "a draft token ", "rounds: "} {
		if !strings.Contains(out, want) {
			t.Errorf("bench --draft output lacks %q:\n%s", want, out)
		}
	}
	if _, _, err := execGenerate(bundle, "--tokens", "1", "--speculative", "ngram", "--draft", bundle); err == nil || !strings.Contains(err.Error(), "--draft goes with") {
		t.Errorf("--speculative ngram with --draft: %v", err)
	}
}
