// Package stdout gives the commands a standard output that remembers its
// first write error, so that a command whose output was lost (a full
// disk, /dev/full, a closed pipe) exits non-zero instead of reporting
// success.
package stdout

import (
	"fmt"
	"io"
)

// Writer passes writes through until one fails; from then on every write
// fails with that error without reaching the file.
type Writer struct {
	w   io.Writer
	err error
}

// New wraps w.
func New(w io.Writer) *Writer { return &Writer{w: w} }

// Write implements io.Writer.
func (w *Writer) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	n, err := w.w.Write(p)
	if err != nil {
		w.err = err
	}
	return n, err
}

// Err returns the first write error, phrased for the user, or nil.
func (w *Writer) Err() error {
	if w.err == nil {
		return nil
	}
	return fmt.Errorf("writing standard output: %w", w.err)
}
