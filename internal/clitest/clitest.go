// Package clitest runs a command line of zrtc or zrt-run in-process for
// the commands' tests: a root command as the binary's main builds it
// (usage and errors left to the caller), the subcommands under test, and
// both output streams captured. It is test support (runtime's layering
// test holds that only tests import it), outside cmd/ so that cmd/ holds
// only the commands.
package clitest

import (
	"bytes"
	"testing"

	"github.com/spf13/cobra"
)

// Root returns a root command named name (zrtc, zrt-run) holding cmds,
// silent about usage and errors as the binaries' roots are.
func Root(name string, cmds ...*cobra.Command) *cobra.Command {
	root := &cobra.Command{Use: name, SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(cmds...)
	return root
}

// Exec runs args on root and returns its stdout, its stderr and the
// error Execute returned.
func Exec(root *cobra.Command, args ...string) (stdout, stderr string, err error) {
	var o, e bytes.Buffer
	root.SetOut(&o)
	root.SetErr(&e)
	root.SetArgs(args)
	err = root.Execute()
	return o.String(), e.String(), err
}

// Run is Exec of args on Root(name, cmds...).
func Run(name string, args []string, cmds ...*cobra.Command) (stdout, stderr string, err error) {
	return Exec(Root(name, cmds...), args...)
}

// Version returns what name --version prints, its root's version set up
// by set as the binary's main does it.
func Version(t testing.TB, name string, set func(root *cobra.Command)) string {
	t.Helper()
	root := Root(name)
	set(root)
	out, _, err := Exec(root, "--version")
	if err != nil {
		t.Fatal(err)
	}
	return out
}
