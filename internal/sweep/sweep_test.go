package sweep

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/zrtdev/zrt/compiler/synth"
	"github.com/zrtdev/zrt/internal/reference"
)

var (
	refdump = flag.String("refdump", "", "llama.cpp reference tool (see docs/sweep.md); TestSweep runs only with it")
	only    = flag.String("only", "", "TestSweep: run the layouts whose family/name/type label matches this regexp")
	record  = flag.String("record", "", "TestSweep: write each layout that misses the criteria as a case into this folder (testdata/sweep)")
	threads = flag.Int("threads", 2, "T-CPU workers")
	adhoc   = flag.String("synth", "", "TestSweep: run this one synth command line (flags, --type included) instead of the layouts")
	prompt  = flag.Int("prompt", 0, "TestSweep with -synth: which of Prompts")
	name    = flag.String("name", "adhoc", "TestSweep with -synth: the case's name")
	always  = flag.Bool("record-all", false, "TestSweep with -record: write every layout run, within the criteria or not (a regression case for a fix)")
	long    = flag.Bool("long", false, "TestLongContext: also run the cases whose prompts are longer than longCI tokens")
)

// casesDir is the recorded cases' folder, from this package's directory.
const casesDir = "../../testdata/sweep"

// longDir holds the long-context cases: prompts of thousands of tokens
// on models built for a context of 131072, so that logits at positions
// 4k, 32k and beyond are held to llama.cpp's.
const longDir = "../../testdata/longctx"

// longCI is the longest prompt TestLongContext runs without -long: the
// CI machine's two cores prefill a 4k prompt of the tiny models in
// seconds, a 32k one in a minute and a 130k one in several.
const longCI = 8192

// TestCases replays every recorded case: the model from its synth command
// line, compared with its llama.cpp reference.
func TestCases(t *testing.T) { testCases(t, casesDir, 0) }

// TestLongContext replays the long-context cases (longDir) as TestCases
// does; those with prompts over longCI tokens only with -long:
//
//	go test ./internal/sweep -run TestLongContext -long -timeout 30m
func TestLongContext(t *testing.T) {
	limit := longCI
	if *long {
		limit = 0
	}
	testCases(t, longDir, limit)
}

// testCases replays the cases under dir, skipping those whose prompts
// are longer than limit tokens (0: none).
func testCases(t *testing.T, dir string, limit int) {
	cases, err := LoadCases(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) == 0 {
		t.Skipf("no cases under %s", dir)
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			if n := len(c.Reference.PromptTokens); limit > 0 && n > limit {
				t.Skipf("a prompt of %d tokens: run with -long", n)
			}
			dir := t.TempDir()
			model := filepath.Join(dir, "model.gguf")
			if err := WriteModel(c.Synth, model); err != nil {
				t.Fatalf("synth %s: %v", strings.Join(c.Synth, " "), err)
			}
			res, err := CompareContext(context.Background(), model, filepath.Join(dir, "bundle"), &c.Reference, *threads, cmp.Or(c.Context, ReferenceContext))
			if err != nil {
				t.Fatal(err)
			}
			if c.Tolerance > 0 {
				res.Tolerance, res.TopTolerance = c.Tolerance, c.Tolerance
			}
			switch {
			case c.Open != "" && !res.OK():
				t.Skipf("open: %s (%v)", c.Open, res)
			case c.Open != "":
				t.Errorf("marked open (%s) but within the criteria now (%v): drop the mark", c.Open, res)
			case !res.OK():
				t.Errorf("zrtc synth %s: %v", strings.Join(c.Synth, " "), res)
			default:
				t.Logf("%v", res)
			}
		})
	}
}

// TestLayouts holds the sweep's coverage: every family zrtc synth writes
// with at least 12 layouts, every quant type used, every layout a shape
// synth accepts, no two layouts alike.
func TestLayouts(t *testing.T) {
	ls, err := Layouts()
	if err != nil {
		t.Fatal(err)
	}
	perFamily, perType, seen := map[string]int{}, map[string]int{}, map[string]bool{}
	for _, l := range ls {
		perFamily[l.Family]++
		perType[l.Args[len(l.Args)-1]]++
		if _, err := synth.ParseArgs(l.Args); err != nil {
			t.Errorf("%s: %v", l.Label(), err)
		}
		key := strings.Join(l.Args[:len(l.Args)-4], " ") // the type and seed aside
		if seen[key] {
			t.Errorf("%s: the same shape as another layout", l.Label())
		}
		seen[key] = true
	}
	for _, a := range synth.Archs {
		if perFamily[a] < 12 {
			t.Errorf("%s: %d layouts, want at least 12", a, perFamily[a])
		}
	}
	for _, q := range QuantTypes {
		if perType[q] == 0 {
			t.Errorf("no layout at %s", q)
		}
	}
	t.Logf("%d layouts; by type %v", len(ls), perType)
}

// TestSweep is `make sweep`: every layout (or those -only selects) is
// written, run through llama.cpp by -refdump and compared; it prints a
// table and, with -record, writes the layouts that miss the criteria as
// cases.
func TestSweep(t *testing.T) {
	if *refdump == "" {
		t.Skip("no -refdump: the sweep needs llama.cpp (make sweep LLAMA_REFDUMP=…)")
	}
	ls, err := Layouts()
	if err != nil {
		t.Fatal(err)
	}
	if *adhoc != "" {
		args := strings.Fields(*adhoc)
		if len(args) < 2 || args[len(args)-2] != "--type" {
			t.Fatal("-synth: end the command line with --type TYPE")
		}
		ls = []Layout{{Family: "synth", Name: *name, Args: args, Prompt: Prompts[*prompt%len(Prompts)]}}
	}
	sel, err := regexp.Compile(*only)
	if err != nil {
		t.Fatalf("-only: %v", err)
	}
	ctx := context.Background()
	out := os.Stdout
	fmt.Fprintf(out, "%-34s %7s %9s %6s %8s  %s\n", "layout", "type", "step-0 Δ", "tol", "decisive", "verdict")
	failed, ran := 0, 0
	for _, l := range ls {
		if !sel.MatchString(l.Label()) {
			continue
		}
		ran++
		row, ok := sweepOne(ctx, t, l)
		fmt.Fprintln(out, row)
		if !ok {
			failed++
		}
	}
	fmt.Fprintf(out, "%d layouts, %d within the criteria, %d not\n", ran, ran-failed, failed)
	if failed > 0 {
		t.Errorf("%d of %d layouts miss the criteria", failed, ran)
	}
}

// sweepOne runs one layout and returns its table row.
func sweepOne(ctx context.Context, t *testing.T, l Layout) (string, bool) {
	dir := t.TempDir()
	model := filepath.Join(dir, "model.gguf")
	typ := l.Args[len(l.Args)-1]
	row := func(s string) string { return fmt.Sprintf("%-34s %7s %s", l.Family+"/"+l.Name, typ, s) }
	if err := WriteModel(l.Args, model); err != nil {
		return row("synth: " + err.Error()), false
	}
	refPath := filepath.Join(dir, "ref.json")
	cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, *refdump, model, "--prompt", l.Prompt, "-n", "32", "-t", "2", "-o", refPath)
	if b, err := cmd.CombinedOutput(); err != nil {
		return row(fmt.Sprintf("llama.cpp: %v: %s", err, strings.TrimSpace(string(b)))), false
	}
	b, err := os.ReadFile(refPath)
	if err != nil {
		return row(err.Error()), false
	}
	var ref reference.File
	if err := json.Unmarshal(b, &ref); err != nil {
		return row("llama.cpp's output: " + err.Error()), false
	}
	res, err := Compare(ctx, model, filepath.Join(dir, "bundle"), &ref, *threads)
	if err != nil {
		return row("zrt: " + err.Error()), false
	}
	verdict := "ok"
	if !res.OK() {
		verdict = "MISS"
		for _, f := range res.Flips {
			verdict += fmt.Sprintf(" step %d: %d≠%d (margin %.2f)", f.Step, f.Got, f.Want, f.Margin)
		}
	}
	if *record != "" && (!res.OK() || *always) {
		if err := recordCase(l, res, b); err != nil {
			t.Errorf("%s: %v", l.Label(), err)
		}
	}
	return row(fmt.Sprintf("%9.3g %6g %4d/%-3d  %s", res.Step0, res.Tolerance, res.Decisive-len(res.Flips), res.Decisive, verdict)), res.OK()
}

// recordCase writes l as a case under -record, with llama.cpp's reference
// (its model path reduced to the base name).
func recordCase(l Layout, res Result, ref []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(ref, &raw); err != nil {
		return err
	}
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "").Replace(l.Label()))
	if l.Family == "synth" {
		name = l.Name
	}
	raw["model"], _ = json.Marshal(name + ".gguf")
	// One line per field, and per step of the reference: small diffs,
	// no line of megabytes.
	var buf strings.Builder
	line := func(indent, key string, v any, last bool) error {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		sep := ","
		if last {
			sep = ""
		}
		fmt.Fprintf(&buf, "%s%q: %s%s\n", indent, key, b, sep)
		return nil
	}
	buf.WriteString("{\n")
	if err := line(" ", "synth", l.Args, false); err != nil {
		return err
	}
	if err := line(" ", "note", "recorded by the sweep: "+res.String(), false); err != nil {
		return err
	}
	buf.WriteString(" \"reference\": {\n")
	keys := slices.Sorted(maps.Keys(raw))
	for i, k := range keys {
		if k != "steps" {
			if err := line("  ", k, raw[k], i == len(keys)-1); err != nil {
				return err
			}
			continue
		}
		var steps []json.RawMessage
		if err := json.Unmarshal(raw[k], &steps); err != nil {
			return err
		}
		buf.WriteString("  \"steps\": [\n")
		for j, st := range steps {
			var c bytes.Buffer
			if err := json.Compact(&c, st); err != nil {
				return err
			}
			sep := ","
			if j == len(steps)-1 {
				sep = ""
			}
			fmt.Fprintf(&buf, "   %s%s\n", c.Bytes(), sep)
		}
		if i == len(keys)-1 {
			buf.WriteString("  ]\n")
		} else {
			buf.WriteString("  ],\n")
		}
	}
	buf.WriteString(" }\n}\n")
	b := []byte(buf.String())
	var check Case
	if err := json.Unmarshal(b, &check); err != nil {
		return fmt.Errorf("the case written: %w", err)
	}
	if err := os.MkdirAll(*record, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(*record, name+".json"), b, 0o644)
}

// TestStream holds a generated prompt to its definition: the same ids
// for the same stream, each in [First, Vocab), a longer stream extending
// a shorter one (the 130000-token case's prompt is the 131072-token
// stream's start), and a stream that cannot be drawn refused.
func TestStream(t *testing.T) {
	a, err := (&Stream{N: 1000, Seed: 1, First: 3, Vocab: 320}).Tokens()
	if err != nil {
		t.Fatal(err)
	}
	b, err := (&Stream{N: 2000, Seed: 1, First: 3, Vocab: 320}).Tokens()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a, b[:1000]) {
		t.Error("a longer stream does not extend the shorter one")
	}
	seen := map[int32]bool{}
	for _, x := range b {
		if x < 3 || x >= 320 {
			t.Fatalf("token %d outside [3, 320)", x)
		}
		seen[x] = true
	}
	if len(seen) < 300 {
		t.Errorf("only %d distinct tokens in 2000", len(seen))
	}
	if c, _ := (&Stream{N: 1000, Seed: 2, First: 3, Vocab: 320}).Tokens(); slices.Equal(a, c) {
		t.Error("another seed gives the same tokens")
	}
	for _, s := range []Stream{{N: 0, Vocab: 10}, {N: 5, First: 10, Vocab: 10}, {N: 5, First: -1, Vocab: 10}} {
		if _, err := s.Tokens(); err == nil {
			t.Errorf("%+v: no error", s)
		}
	}
}
