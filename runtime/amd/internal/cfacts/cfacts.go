// Package cfacts holds a Go mirror of a Linux uapi header to the header
// itself, for the tests of the AMD driver packages (kfd, amdgpu): a C
// program compiled against the installed header prints each size,
// offset, ioctl number and flag the package mirrors, and each must be the
// value Go has.
package cfacts

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Fact is one C expression and the value Go has for it. A fact with a
// Guard is printed only where the header defines that macro (newer uapi
// an older header lacks); elsewhere it is unchecked.
type Fact struct {
	C     string
	Go    uint64
	Guard string
}

// Check compiles a program including headers (with gcc's extra args, such
// as -I), runs it and compares every fact, failing t on a difference. It
// skips t without gcc and returns how many facts were checked and how
// many the header left unchecked.
func Check(t *testing.T, headers []string, args []string, facts []Fact) (checked, unchecked int) {
	t.Helper()
	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("skipping: gcc is not installed; the layout check needs a C compiler")
	}
	var src strings.Builder
	for _, h := range append([]string{"stdio.h", "stddef.h"}, headers...) {
		fmt.Fprintf(&src, "#include <%s>\n", h)
	}
	src.WriteString("int main(void) {\n")
	for _, f := range facts {
		if f.Guard != "" {
			fmt.Fprintf(&src, "#ifdef %s\n", f.Guard)
		}
		fmt.Fprintf(&src, "\tprintf(\"%%llu\\n\", (unsigned long long)(%s));\n", f.C)
		if f.Guard != "" {
			src.WriteString("#else\n\tputs(\"-\");\n#endif\n")
		}
	}
	src.WriteString("\treturn 0;\n}\n")
	dir := t.TempDir()
	c, bin := filepath.Join(dir, "layout.c"), filepath.Join(dir, "layout")
	if err := os.WriteFile(c, []byte(src.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, append(args, "-o", bin, c)...).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Fields(string(out))
	if len(lines) != len(facts) {
		t.Fatalf("C program printed %d values for %d facts", len(lines), len(facts))
	}
	for i, f := range facts {
		if lines[i] == "-" {
			unchecked++
			continue
		}
		checked++
		if want := fmt.Sprint(f.Go); lines[i] != want {
			t.Errorf("%s: C says %s, Go has %s", f.C, lines[i], want)
		}
	}
	return checked, unchecked
}
