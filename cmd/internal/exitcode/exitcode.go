// Package exitcode maps a command's error to the exit status zrtc and
// zrt-run document, so a CI system can tell a mistake in its own call
// from a model zrt does not handle, a damaged file, and anything else:
//
//	0  success
//	1  any other failure (I/O, a device, an internal error)
//	2  usage error: an unknown command or flag, a bad argument or flag value
//	3  unsupported input: valid, but zrt does not handle it yet (format/support)
//	4  malformed input: a file that breaks its format (a corrupt GGUF,
//	   bundle, kernel blob, bundle set or pack)
package exitcode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/zrtdev/zrt/cmd/internal/stdout"
	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/format/bundleset"
	"github.com/zrtdev/zrt/format/gguf"
	"github.com/zrtdev/zrt/format/support"
	"github.com/zrtdev/zrt/format/zrt"
	"github.com/zrtdev/zrt/format/zrtp"
)

// The exit statuses.
const (
	OK          = 0
	Failure     = 1
	Usage       = 2
	Unsupported = 3
	Malformed   = 4
)

// Help documents the statuses for a command's --help.
const Help = `Exit status:
  0  success
  1  any other failure (I/O, a device, an internal error)
  2  usage error: an unknown command or flag, a bad argument
  3  unsupported input: valid, but zrt does not handle it yet
  4  malformed input: a corrupt GGUF, bundle, kernel blob, bundle set or pack`

// UsageError marks an error in how the command was called.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Usagef returns a usage error.
func Usagef(format string, a ...any) error {
	return &UsageError{fmt.Errorf(format, a...)}
}

// malformed are the errors of files that break their format.
var malformed = []error{gguf.ErrFormat, bundle.ErrFormat, zrt.ErrFormat, zrtp.ErrFormat, bundleset.ErrFormat}

// Code is the exit status for err. An error from another zrt tool run
// as a subprocess (zrt-run running zrtc) that carries one of the
// documented statuses through ExitStatus() keeps it. A library's error
// that says it is a mistake in the call (a Usage method returning true,
// as an options value it cannot take) is a usage error: libraries cannot
// import this package.
func Code(err error) int {
	var ue *UsageError
	var tool interface{ ExitStatus() int }
	var lib interface{ Usage() bool }
	switch {
	case err == nil:
		return OK
	case errors.As(err, &ue), errors.As(err, &lib) && lib.Usage():
		return Usage
	case support.Is(err):
		return Unsupported
	case errors.As(err, &tool) && tool.ExitStatus() >= Usage && tool.ExitStatus() <= Malformed:
		return tool.ExitStatus()
	}
	for _, m := range malformed {
		if errors.Is(err, m) {
			return Malformed
		}
	}
	return Failure
}

// Wire makes every usage error cobra finds under root a *UsageError:
// bad flags, and arguments each command's Args refuses. It also appends
// Help to root's long help.
func Wire(root *cobra.Command) {
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &UsageError{err} })
	if root.Long != "" {
		root.Long += "\n\n" + Help
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if args := c.Args; args != nil {
			c.Args = func(cmd *cobra.Command, a []string) error {
				if err := args(cmd, a); err != nil {
					return &UsageError{err}
				}
				return nil
			}
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
}

// Classify turns an error cobra returned before any command ran into a
// usage error (cobra reports unknown commands in plain errors).
func Classify(err error) error {
	if err != nil && strings.HasPrefix(err.Error(), "unknown command ") {
		return &UsageError{err}
	}
	return err
}

// Main runs root as the process: cancelled by SIGINT or SIGTERM, wired
// (Wire), its standard output through a stdout.Writer so a lost write
// fails the run, done (if any) called once it returns, and a failure
// printed as "NAME: error" before exiting with its status (Code).
func Main(root *cobra.Command, done func()) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	Wire(root)
	out := stdout.New(os.Stdout)
	root.SetOut(out)
	err := Classify(root.ExecuteContext(ctx))
	if done != nil {
		done()
	}
	if err == nil {
		err = out.Err()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, root.Name()+":", err)
		stop()
		os.Exit(Code(err))
	}
}
