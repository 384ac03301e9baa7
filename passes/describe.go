package passes

import (
	"fmt"
	"io"
)

// Describe prints the pipeline, a pass a line with its doc, and its
// ordering constraints with their reasons (zrtc passes).
func Describe(w io.Writer) error {
	for i, p := range Pipeline {
		fmt.Fprintf(w, "%2d  %-10s %s\n", i+1, p.Name, p.Doc)
	}
	fmt.Fprintln(w, "\nconstraints:")
	for _, c := range Constraints {
		if _, err := fmt.Fprintf(w, "  %s before %s: %s\n", c.Before, c.After, c.Why); err != nil {
			return err
		}
	}
	return nil
}
