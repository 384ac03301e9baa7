// Package bytesize writes byte counts for people in binary units
// ("3.2 GiB") and reads sizes given that way ("16GiB", "512MiB"), for
// messages and flags.
package bytesize

import (
	"fmt"
	"strconv"
	"strings"
)

// Format formats n in binary units: "3.2 GiB".
func Format(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

var byteSuffixes = []struct {
	s     string
	shift uint
}{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}, {"T", 40}, {"G", 30}, {"M", 20}, {"K", 10}, {"B", 0}}

// Parse reads a size in bytes written with an optional binary
// suffix: 512MiB, 16GiB, 2TiB (K/M/G/T alone mean the same), as Format
// writes them for people and flags such as --memory-budget take them.
func Parse(s string) (int64, error) {
	num, shift := strings.TrimSpace(s), uint(0)
	for _, u := range byteSuffixes {
		if rest, ok := strings.CutSuffix(num, u.s); ok {
			num, shift = strings.TrimSpace(rest), u.shift
			break
		}
	}
	n, err := strconv.ParseFloat(num, 64)
	if err != nil || !(n >= 0) || n*float64(uint64(1)<<shift) > 1<<62 {
		return 0, fmt.Errorf("%q is not a size (e.g. 512MiB, 16GiB)", s)
	}
	return int64(n * float64(uint64(1)<<shift)), nil
}
