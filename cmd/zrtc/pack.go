package main

import (
	"fmt"
	"github.com/zrtdev/zrt/compiler/dump"
	"time"

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
			start := time.Now()
			if err := zrtp.Write(out, args[0]); err != nil {
				return err
			}
			r, err := zrtp.Open(out)
			if err != nil {
				return err
			}
			defer r.Close()
			packed, raw := r.Index().Sizes()
			fmt.Fprintf(cmd.ErrOrStderr(), "zrtc: packed %s into %s: %d members, %d B → %d B (%.3f), %s\n",
				args[0], out, len(r.Index().Members), raw, packed, dump.Ratio(packed, raw), time.Since(start).Round(time.Millisecond))
			return nil
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
			r, err := zrtp.Open(args[0])
			if err != nil {
				return err
			}
			defer r.Close()
			pr, start := newProgress(cmd.ErrOrStderr(), quiet), time.Now()
			r.Progress = func(file string, done, total int64) {
				pr.tick("unpack: %s of %s (%s)", size(done), size(total), file)
			}
			what, files, raw := "", 0, int64(0)
			if target == "" {
				_, raw = r.Index().Sizes()
				files = len(r.Index().Files)
				for _, m := range r.Index().Members {
					files += len(m.Files)
				}
				pr.say("unpacking %s (%s) into %s", args[0], size(raw), out)
				err = r.Unpack(out)
			} else {
				m, ok := r.Index().Member(target)
				if !ok {
					return usagef("unpack: --target %s: the pack holds %s", target, dump.Targets(r.Index()))
				}
				for _, f := range m.Files {
					raw += f.RawSize
				}
				what, files = " member "+target, len(m.Files)
				pr.say("unpacking%s of %s (%s) into %s", what, args[0], size(raw), out)
				err = r.UnpackMember(m, out)
			}
			if err != nil {
				return err
			}
			pr.say("unpacked%s into %s: %d files, %s in %s", what, out, files, size(raw), time.Since(start).Round(time.Millisecond))
			return nil
		},
	}
	c.Flags().StringVarP(&out, "out", "o", "", "the directory to write (atomically)")
	c.Flags().BoolVarP(&quiet, "quiet", "q", false, "print nothing on stderr on success")
	c.Flags().StringVar(&target, "target", "", "unpack only this member, as a bundle")
	return c
}

// usagef is an error in how zrtc was called: exit status 2.
func usagef(format string, a ...any) error { return exitcode.Usagef(format, a...) }
