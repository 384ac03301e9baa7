package main

import (
	"fmt"

	"github.com/spf13/cobra"
	"github.com/zrtdev/zrt/compiler/build"
	"github.com/zrtdev/zrt/compiler/dump"
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
			return dump.Packets(cmd.OutOrStdout(), args[0], variant)
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
			return dump.BlobFiles(cmd.OutOrStdout(), args)
		},
	}
}

func dumpGraphCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "graph BUNDLE",
		Short: "Print a bundle's graph file: version, sections, ident, hparams, regions, weights, kernels, variants, megakernel schedules",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return dump.Graph(cmd.OutOrStdout(), args[0])
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
			say := func(f string, a ...any) { cmd.PrintErrf("zrtc: "+f+"\n", a...) }
			if quiet {
				say = nil
			}
			if err := build.Verify(args[0], say); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "ok")
			return nil
		},
	}
	c.Flags().BoolVarP(&quiet, "quiet", "q", false, "print only ok")
	return c
}
