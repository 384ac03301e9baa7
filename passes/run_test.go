package passes

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
)

// Pass names appear in flags, dump file names and goldens.
func TestPassNamesAreStable(t *testing.T) {
	re := regexp.MustCompile(`^[a-z][a-z0-9]*(-[a-z0-9]+)*$`)
	for _, p := range Pipeline {
		if !re.MatchString(p.Name) || p.Name == "all" {
			t.Errorf("pass name %q is not lowercase-hyphenated (or is the reserved \"all\")", p.Name)
		}
	}
}

func TestRunWithDumpsStopsAndResumes(t *testing.T) {
	ctx := context.Background()
	var got []string
	dump := func(i int, name string, u *Unit) error {
		if Pipeline[i].Name != name {
			t.Errorf("dump index %d is %s, not %s", i, Pipeline[i].Name, name)
		}
		got = append(got, name)
		return nil
	}
	u := testUnit(small())
	times, err := RunWith(ctx, u, RunOptions{DumpAfter: []string{"all"}, Dump: dump, VerifyEach: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(times) != len(Pipeline) || len(got) != len(Pipeline) || u.Streams == nil {
		t.Fatalf("%d timings, dumps %v", len(times), got)
	}

	// Stop after regalloc, dumping only liveness.
	got = nil
	u = testUnit(small())
	times, err = RunWith(ctx, u, RunOptions{StopAfter: "regalloc", DumpAfter: []string{"liveness"}, Dump: dump})
	if err != nil {
		t.Fatal(err)
	}
	if times[len(times)-1].Pass != "regalloc" || u.Plan != nil || strings.Join(got, ",") != "liveness" {
		t.Fatalf("stop after regalloc: timings %v, dumps %v", times, got)
	}

	// Resuming after memplan recomputes the analyses and runs lower.
	got = nil
	u = testUnit(small())
	if _, err := RunWith(ctx, u, RunOptions{ResumeAfter: "memplan", DumpAfter: []string{"all"}, Dump: dump}); err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, p := range Pipeline {
		if !Transforms[p.Name] || p.Name == "lower" {
			want = append(want, p.Name)
		}
	}
	if strings.Join(got, ",") != strings.Join(want, ",") || u.Streams == nil {
		t.Fatalf("resume after memplan ran %v, want %v", got, want)
	}

	for _, c := range []struct {
		opt  RunOptions
		want string
	}{
		{RunOptions{StopAfter: "regalocc"}, `unknown pass "regalocc" (passes: verify`},
		{RunOptions{ResumeAfter: "memplan", StopAfter: "liveness"}, "leaves nothing to run"},
		{RunOptions{ResumeAfter: "lower"}, "leaves nothing to run"},
		{RunOptions{DumpAfter: []string{"verify"}}, "no dump function"},
		{RunOptions{DumpAfter: []string{"Verify"}, Dump: dump}, `unknown pass "Verify"`},
		{RunOptions{StopAfter: "verify", DumpAfter: []string{"memplan"}, Dump: dump}, "cannot dump after memplan: this run does not run it"},
	} {
		_, err := RunWith(ctx, testUnit(small()), c.opt)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: got %v, want %q", c.opt, err, c.want)
		}
	}
}

func TestTables(t *testing.T) {
	u := testUnit(small())
	if _, err := Run(context.Background(), u, "", false); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteLiveness(&b, u.Graphs[0], u.Liveness[0]); err != nil {
		t.Fatal(err)
	}
	if err := WritePhysical(&b, u.Graphs[0], u.Physical[0]); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"%y     32    1     2", "   2  %y", "peak live) 96 B", "scratch 768 B"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("tables lack %q:\n%s", want, b.String())
		}
	}
}
