package optflag_test

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"github.com/zrtdev/zrt/internal/optflag"
)

// TestInt: the value stays nil until the flag is given, takes 0 as a
// count of its own, refuses negative and non-numeric counts, and shows
// no default in the help.
func TestInt(t *testing.T) {
	parse := func(args ...string) (*int, error) {
		var p *int
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		fs.Var(optflag.Int{P: &p}, "n", "a count")
		return p, fs.Parse(args)
	}
	if p, err := parse(); p != nil || err != nil {
		t.Errorf("left out: %v, %v; want nil", p, err)
	}
	for _, c := range []struct {
		arg  string
		want int
	}{{"--n=0", 0}, {"--n=3", 3}} {
		if p, err := parse(c.arg); err != nil || p == nil || *p != c.want {
			t.Errorf("%s: %v, %v; want %d", c.arg, p, err, c.want)
		}
	}
	for _, arg := range []string{"--n=-1", "--n=x"} {
		if _, err := parse(arg); err == nil {
			t.Errorf("%s accepted", arg)
		}
	}
	var p *int
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	fs.Var(optflag.Int{P: &p}, "n", "a count")
	if u := fs.FlagUsages(); strings.Contains(u, "default") || !strings.Contains(u, "--n int") {
		t.Errorf("help %q: want --n int and no default", u)
	}
}
