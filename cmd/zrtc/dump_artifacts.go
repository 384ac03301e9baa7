package main

import (
	"fmt"
	"github.com/zrtdev/zrt/compiler/dump"
	"os"

	"github.com/spf13/cobra"
	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/format/bundleset"
	"github.com/zrtdev/zrt/format/zrt"
	"github.com/zrtdev/zrt/kernels"
)

// withArtifactDumps adds the dumps of built artifacts to `zrtc dump`, beside
// its dumps of compilation stages: every file zrtc writes can be printed.
// They read only the file they print, so a bundle whose other files are
// missing or corrupt can still be inspected.
func withArtifactDumps(dump *cobra.Command) *cobra.Command {
	dump.AddCommand(dumpPktCmd(), dumpZrtCmd(), dumpGraphCmd(), dumpSetCmd())
	return dump
}

func dumpPktCmd() *cobra.Command {
	variant := -1
	c := &cobra.Command{
		Use:   "pkt BUNDLE",
		Short: "Disassemble a bundle's packet streams, with relocations (BUNDLE: directory or graph file)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			g, _, err := bundle.ReadGraph(args[0])
			if err != nil {
				return err
			}
			if variant >= len(g.Variants) {
				return fmt.Errorf("dump pkt: --variant %d, the bundle has %d variants (0..%d)", variant, len(g.Variants), len(g.Variants)-1)
			}
			return dump.Packets(cmd.OutOrStdout(), g, variant)
		},
	}
	c.Flags().IntVar(&variant, "variant", -1, "print only this variant (index, as `zrtc dump graph` lists them)")
	return c
}

func dumpZrtCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "zrt FILE.zrt...",
		Short: "Print kernel blobs: header fields, and specialization slots with their values",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			for i, path := range args {
				raw, err := os.ReadFile(path)
				if err != nil {
					return err
				}
				b, err := zrt.Decode(raw)
				if err != nil {
					return fmt.Errorf("%s: %w", path, err)
				}
				if i > 0 {
					fmt.Fprintln(cmd.OutOrStdout())
				}
				dump.Blob(cmd.OutOrStdout(), path, len(raw), b)
			}
			return nil
		},
	}
}

func dumpGraphCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "graph BUNDLE",
		Short: "Print a bundle's graph file: version, sections, ident, hparams, regions, weights, kernels, variants",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			g, raw, err := bundle.ReadGraph(args[0])
			if err != nil {
				return err
			}
			_, _, secs, err := bundle.Sections(raw)
			if err != nil {
				return err
			}
			dump.Graph(cmd.OutOrStdout(), len(raw), secs, g)
			return nil
		},
	}
}

func verifyCmd() *cobra.Command {
	var quiet bool
	c := &cobra.Command{
		Use:   "verify BUNDLE",
		Short: "Check a bundle fully: files, checksums, hashes, blobs, and every packet stream against its memory plan and kernel ABIs",
		Long: `verify opens the bundle with the full check (graph file checksums and
tables, kernel blobs against their recorded hashes and all slots patched,
the weights pack against the memory plan and its data hash), then walks
every variant's packet stream with the PM4 checker: program and user data
set for every dispatch as its kernel's ABI requires, every address a
relocation inside its region, a barrier and the fence at the end.
Given a bundle set, it checks the index, that every member is the build
the index names, and every member as above.
It prints "ok", or the first problem and exits 1.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dirs := []string{args[0]}
			if bundleset.IsSet(args[0]) {
				// A set: the index, each member against it, and each
				// member in full.
				x, err := bundleset.Read(args[0])
				if err != nil {
					return err
				}
				dirs = nil
				for _, m := range x.Bundles {
					if err := bundleset.VerifyMember(args[0], m); err != nil {
						return err
					}
					dirs = append(dirs, m.Path(args[0]))
				}
			}
			for _, dir := range dirs {
				if err := verifyBundle(cmd, dir, quiet); err != nil {
					return err
				}
			}
			fmt.Fprintln(cmd.OutOrStdout(), "ok")
			return nil
		},
	}
	c.Flags().BoolVarP(&quiet, "quiet", "q", false, "print only ok")
	return c
}

// verifyBundle checks one bundle fully, saying what it checked on stderr
// unless quiet.
func verifyBundle(cmd *cobra.Command, dir string, quiet bool) error {
	b, err := bundle.Open(dir, true)
	if err != nil {
		return err
	}
	defer b.Close()
	g := b.Graph
	dispatches, err := kernels.CheckBundle(g)
	if err != nil {
		return fmt.Errorf("bundle %s: %w", dir, err)
	}
	if !quiet {
		fmt.Fprintf(cmd.ErrOrStderr(), "zrtc: %s: %d variants (%d dispatches), %d kernels, %d regions, weights hash verified\n",
			dir, len(g.Variants), dispatches, len(g.Kernels), len(g.Regions))
	}
	return nil
}
