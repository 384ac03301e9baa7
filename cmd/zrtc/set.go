package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/compiler/config"
	"github.com/zrtdev/zrt/format/bundleset"
	"github.com/zrtdev/zrt/format/gguf"
	"github.com/zrtdev/zrt/format/zrtp"
	"github.com/zrtdev/zrt/kernels"
)

// buildSet builds one bundle per target into a bundle set at out, written
// as one directory (format/bundleset), each bundle from the cache when it
// holds its key.
func (b *builder) buildSet(ctx context.Context, targets []string, out string, sum *summary) error {
	x := &bundleset.Index{Producer: compiler.Version}
	for _, t := range targets {
		req, err := requirementsFor(t)
		if err != nil {
			return err
		}
		x.Bundles = append(x.Bundles, bundleset.Member{Target: t, Dir: bundleset.SanitizeTarget(t), Requires: req})
	}
	cfgSum, err := sharedConfig(b.model, b.opt)
	if err != nil {
		return err
	}
	say, progress := b.say, b.opt.Progress
	defer func() { b.say, b.opt.Progress = say, progress }()
	return bundleset.Write(out, x, func(tmp string) error {
		for i := range x.Bundles {
			m := &x.Bundles[i]
			// Each line of progress says which member it is about.
			prefix := "[" + m.Target + "] "
			b.say = func(f string, a ...any) { say(prefix+f, a...) }
			if progress != nil {
				b.opt.Progress = func(f string, a ...any) { progress(prefix+f, a...) }
			}
			o, err := b.build(ctx, m.Target, dest{path: m.Path(out), into: m.Path(tmp)})
			if err != nil {
				return fmt.Errorf("target %s: %w", m.Target, err)
			}
			sum.Outputs = append(sum.Outputs, o)
			m.Key = o.Key
			id := o.graph.Ident
			x.Model = bundleset.Model{Source: id.SourceName, SHA256: hex.EncodeToString(id.SourceHash[:]),
				Architecture: o.graph.Hparams.Arch, ConfigSHA256: cfgSum}
		}
		return nil
	})
}

// requirementsFor says what a machine needs to run a target's bundles,
// for the set's index: the tier, for CUDA the compute capability its PTX
// targets (cuda:sm_90 → 9.0; the driver JIT-compiles PTX for that
// architecture or a later one), for AMD the gfx processor its code
// objects are for.
func requirementsFor(target string) (bundleset.Requires, error) {
	t, ok := kernels.LookupTarget(target)
	if !ok {
		return bundleset.Requires{}, fmt.Errorf("target %s: not in the target registry (%s)", target, strings.Join(kernels.TargetNames(), ", "))
	}
	req := bundleset.Requires{Tier: string(t.Tier)}
	if t.Tier == kernels.TierCUDA {
		major, minor, ok := t.ComputeCapability()
		if !ok {
			return req, fmt.Errorf("target %s: cannot read its compute capability (want cuda:sm_NN)", target)
		}
		req.CUDAComputeCapability = fmt.Sprintf("%d.%d", major, minor)
	}
	if t.Tier == kernels.TierAMD {
		req.AMDGfx = strings.TrimPrefix(target, "amd:")
	}
	return req, nil
}

// sharedConfig is the digest of the effective model config with the
// target left out: what every member of a set shares. It is resolved for
// the config's own target (no --target), so it is one value for the set;
// the defaults that depend on the target (slots, variants) are in each
// member's graph file.
func sharedConfig(model string, opt compiler.Options) (string, error) {
	f, err := gguf.OpenModel(model)
	if err != nil {
		return "", err
	}
	defer f.Close()
	o := opt.Overrides()
	o.Target = ""
	c, err := config.Load(f, opt.ConfigPath, o)
	if err != nil {
		return "", err
	}
	c.Target = ""
	sum := sha256.Sum256([]byte(c.TOML()))
	return hex.EncodeToString(sum[:]), nil
}

func dumpSetCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "set SET|MODEL.zrtp",
		Short: "Print a bundle set's index: the model, and each bundle's target, directory, requirements and key (of a pack: its index)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if zrtp.Is(args[0]) {
				return listPack(cmd.OutOrStdout(), args[0])
			}
			x, err := bundleset.Read(args[0])
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "bundle set %s: %s version %d, written by %s\n", args[0], x.Format, x.Version, x.Producer)
			fmt.Fprintf(w, "model: %s (%s), sha256 %s\nconfig (target aside): sha256 %s\n\n", x.Model.Source, x.Model.Architecture, x.Model.SHA256, x.Model.ConfigSHA256)
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "target\tdir\ttier\trequires\tkey\tgraph_sha256\tstatus")
			for _, m := range x.Bundles {
				req := "any machine"
				if cc := m.Requires.CUDAComputeCapability; cc != "" {
					req = "CUDA compute capability >= " + cc
				}
				status := "ok"
				if err := bundleset.VerifyMember(args[0], m); err != nil {
					status = err.Error()
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", m.Target, m.Dir, m.Requires.Tier, req, short(m.Key), short(m.GraphSHA256), status)
			}
			return tw.Flush()
		},
	}
}

// short abbreviates a hex digest for a table.
func short(h string) string {
	if len(h) > 16 {
		return h[:16]
	}
	return h
}
