package tiers

import (
	"fmt"
	"io"
	"strings"

	"github.com/zrtdev/zrt/kernels"
)

// WriteProbe prints what each row's probe found on this machine (zrt-run
// probe): every device it looked for, available or missing and why; then
// each bundle target with the tiers, as ZRT_TIER spells them, that run it.
func WriteProbe(w io.Writer, rows []Row) error {
	for _, row := range rows {
		for _, r := range row.Probe() {
			state := "missing"
			if r.Available {
				state = "available"
			}
			fmt.Fprintf(w, "%-6s %-9s  %s\n", r.Name, state, r.Detail)
		}
	}
	fmt.Fprintln(w, "\nbundle targets and the tier that runs them:")
	for _, t := range kernels.Targets() {
		// The AMD kind's run on T1 and T2 alike.
		if _, err := fmt.Fprintf(w, "  %-12s %s\n", t.Name, strings.Join(OfKind(rows, t.Tier), ",")); err != nil {
			return err
		}
	}
	return nil
}
