package main

import (
	"github.com/spf13/cobra"
	"github.com/zrtdev/zrt/cmd/internal/exitcode"
	"github.com/zrtdev/zrt/format/zrtp"
)

func packCmd() *cobra.Command {
	var out string
	c := &cobra.Command{
		Use:   "pack OUT -o MODEL.zrtp",
		Short: "Pack a bundle or a bundle set into one file (.zrtp), zstd-compressed, index first",
		Long: `pack turns a bundle or a bundle set (zrtc build -o OUT) into one file for
artifact stores and scp: the index first, then every file compressed with
zstd and checked by its SHA-256. The same input always gives the same
bytes. zrt-run runs a pack as it runs a bundle, unpacking only the member
for its machine; zrtc unpack unpacks it explicitly.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return usagef("pack: -o MODEL.zrtp is required")
			}
			return zrtp.Pack(args[0], out, func(f string, a ...any) { cmd.PrintErrf("zrtc: "+f+"\n", a...) })
		},
	}
	c.Flags().StringVarP(&out, "out", "o", "", "the pack to write (atomically)")
	return c
}

func unpackCmd() *cobra.Command {
	var out, target string
	var quiet bool
	c := &cobra.Command{
		Use:   "unpack MODEL.zrtp -o DIR",
		Short: "Unpack a pack: the whole set or bundle, or one member with --target",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return usagef("unpack: -o DIR is required")
			}
			say := func(f string, a ...any) { cmd.PrintErrf("zrtc: "+f+"\n", a...) }
			if quiet {
				say = nil
			}
			return zrtp.Extract(args[0], target, out, say)
		},
	}
	c.Flags().StringVarP(&out, "out", "o", "", "the directory to write (atomically)")
	c.Flags().BoolVarP(&quiet, "quiet", "q", false, "print nothing on stderr on success")
	c.Flags().StringVar(&target, "target", "", "unpack only this member, as a bundle")
	return c
}

// usagef is an error in how zrtc was called: exit status 2.
func usagef(format string, a ...any) error { return exitcode.Usagef(format, a...) }
