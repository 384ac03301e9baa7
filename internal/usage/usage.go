// Package usage marks an error as a mistake in the call: an option, a
// flag value or a shape the caller has to change, rather than a failure
// of the work itself. The commands (cmd/internal/exitcode) exit with
// status 2 for an error whose chain has a Usage method that returns true,
// as Error's does; the libraries that report such mistakes (compiler/build,
// compiler/synth, bench) share this one type rather than each writing its
// own.
package usage

// Error is Err, reported as a mistake in the call.
type Error struct{ Err error }

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Usage marks the error as a mistake in the call (the commands' exit
// status 2).
func (e *Error) Usage() bool { return true }
