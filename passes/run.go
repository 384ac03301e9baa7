package passes

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// RunOptions control one run of the pipeline.
type RunOptions struct {
	// StopAfter ends the run after the named pass; "" runs every pass.
	StopAfter string
	// ResumeAfter says the Unit's graphs are IR as it stood after the named
	// pass (text IR read back by --compile-from). Passes up to it that
	// transform the graphs are skipped, since the text already holds their
	// effect; the others only derive tables, which text IR does not carry,
	// so they run again on the given graphs. verify is one of them, so IR
	// edited by hand is checked before anything uses it.
	ResumeAfter string
	// VerifyEach re-runs verify after every pass.
	VerifyEach bool
	// DumpAfter names the passes after which Dump is called; "all" selects
	// every pass that runs.
	DumpAfter []string
	// Dump is handed the Unit after each selected pass, with the pass's
	// position in Pipeline (from 0) so dump files sort in pipeline order.
	Dump func(index int, pass string, u *Unit) error
}

// Transforms names the passes that rewrite the graphs rather than derive
// tables from them. A pass missing here is re-run when resuming after it:
// re-running a rewrite on its own output finds nothing more to do, while
// skipping an analysis would leave later passes without their input.
var Transforms = map[string]bool{
	"shard": true,
	"fuse":  true,
	"lower": true, // its streams are not in the text, so resuming after it is refused
}

// PassIndex returns the position of the named pass in Pipeline.
func PassIndex(name string) (int, bool) {
	for i, p := range Pipeline {
		if p.Name == name {
			return i, true
		}
	}
	return -1, false
}

// PassNames lists the pipeline's pass names in order, for error messages.
func PassNames() string {
	names := make([]string, len(Pipeline))
	for i, p := range Pipeline {
		names[i] = p.Name
	}
	return strings.Join(names, ", ")
}

// CheckPass fails unless name is a pipeline pass, naming the passes.
func CheckPass(name string) error {
	if _, ok := PassIndex(name); !ok {
		return fmt.Errorf("unknown pass %q (passes: %s)", name, PassNames())
	}
	return nil
}

// RunWith runs the pipeline as opt says and returns each pass's wall time.
func RunWith(ctx context.Context, u *Unit, opt RunOptions) ([]Timing, error) {
	stop, resume := len(Pipeline)-1, -1
	if opt.StopAfter != "" {
		if err := CheckPass(opt.StopAfter); err != nil {
			return nil, err
		}
		stop, _ = PassIndex(opt.StopAfter)
	}
	if opt.ResumeAfter != "" {
		if err := CheckPass(opt.ResumeAfter); err != nil {
			return nil, err
		}
		resume, _ = PassIndex(opt.ResumeAfter)
		if low, _ := PassIndex("lower"); resume >= low {
			return nil, fmt.Errorf("resuming after %s leaves nothing to run: the passes from lower on need the packet streams, which text IR does not carry", opt.ResumeAfter)
		}
		if stop <= resume {
			return nil, fmt.Errorf("stopping after %s leaves nothing to run when resuming after %s", Pipeline[stop].Name, opt.ResumeAfter)
		}
	}
	runs := func(i int) bool { return i <= stop && (i > resume || !Transforms[Pipeline[i].Name]) }
	dump := map[string]bool{}
	for _, name := range opt.DumpAfter {
		if name != "all" {
			if err := CheckPass(name); err != nil {
				return nil, err
			}
			// Asking for a dump that cannot happen is a mistake worth
			// saying, not an empty directory.
			if i, _ := PassIndex(name); !runs(i) {
				return nil, fmt.Errorf("cannot dump after %s: this run does not run it (stop after %s, resume after %q)", name, Pipeline[stop].Name, opt.ResumeAfter)
			}
		}
		dump[name] = true
	}
	if len(dump) > 0 && opt.Dump == nil {
		return nil, fmt.Errorf("passes to dump after, but no dump function")
	}
	var times []Timing
	for i, p := range Pipeline[:stop+1] {
		if err := ctx.Err(); err != nil {
			return times, err
		}
		if !runs(i) {
			continue
		}
		t0 := time.Now()
		if err := p.Run(ctx, u); err != nil {
			return times, fmt.Errorf("pass %s: %w", p.Name, err)
		}
		times = append(times, Timing{p.Name, time.Since(t0)})
		if opt.VerifyEach && p.Name != "verify" {
			if err := verifyUnit(ctx, u); err != nil {
				return times, fmt.Errorf("verify after %s: %w", p.Name, err)
			}
		}
		if dump["all"] || dump[p.Name] {
			if err := opt.Dump(i, p.Name, u); err != nil {
				return times, fmt.Errorf("dump after %s: %w", p.Name, err)
			}
		}
	}
	return times, nil
}
