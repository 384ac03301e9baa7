package main

import (
	"github.com/spf13/cobra"
	"github.com/zrtdev/zrt/cmd/internal/exitcode"
	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/passes"
)

// phaseFlags are build's flags for stopping, resuming and dumping the
// pipeline at named passes.
type phaseFlags struct {
	dumpAfter, dumpDir, to, from string
}

func (p *phaseFlags) register(c *cobra.Command) {
	names := passes.PassNames()
	c.Flags().StringVar(&p.dumpAfter, "dump-after", "", "write the text IR (and tables) after these passes, comma-separated, or all ("+names+")")
	c.Flags().StringVar(&p.dumpDir, "dump-dir", "", "directory for --dump-after files: NN-pass.VARIANT.zir, .liveness.txt, .physical.txt, NN-memplan.json, .megakernel.txt")
	c.Flags().StringVar(&p.to, "compile-to", "", "stop after this pass and write text IR to -o, or stdout without -o ("+names+")")
	c.Flags().StringVar(&p.from, "compile-from", "", "resume after this pass from the text IR file given after MODEL.gguf")
}

// apply checks the positional arguments against the flags and fills opt.
// cacheOnly says a build cache is in use, so -o may be left out.
func (p *phaseFlags) apply(args []string, out string, cacheOnly bool, opt *compiler.Options) error {
	switch {
	case p.from != "" && len(args) != 2:
		return exitcode.Usagef("build: --compile-from=%s needs the text IR file after MODEL.gguf", p.from)
	case p.from == "" && len(args) == 2:
		return exitcode.Usagef("build: a second argument (%s) is text IR to resume from, which needs --compile-from=PHASE", args[1])
	case out == "" && p.to == "" && (!cacheOnly || p.from != ""):
		return exitcode.Usagef("build: -o OUT is required (or only --cache DIR, to add the bundle to the cache)")
	}
	opt.DumpAfter, opt.DumpDir, opt.CompileTo, opt.CompileFrom = p.dumpAfter, p.dumpDir, p.to, p.from
	if len(args) == 2 {
		opt.IRPath = args[1]
	}
	if err := opt.CheckPhases(); err != nil {
		return &exitcode.UsageError{Err: err}
	}
	return nil
}
