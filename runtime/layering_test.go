package runtime_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The layering rules of the tree (README, "Layout"). The data flows GGUF →
// IR → passes → artifacts → loader → tier; a package may use what comes
// before it, never what comes after, and only the commands touch the
// process environment.
var layerRules = []struct {
	pkgs   string   // import-path prefix under the module
	unless string   // a prefix the rule does not cover
	forbid []string // import-path prefixes it must not import
	why    string
}{
	{"asm", "", []string{"compiler", "passes", "runtime", "cmd"}, "the packet builder and checker are leaves"},
	{"format/", "", []string{"compiler", "passes", "kernels", "runtime", "cmd"}, "formats are files in and values out; a bundle holds packets (asm) but knows no stage that makes or runs them"},
	{"compiler", "", []string{"runtime", "cmd"}, "the compiler writes bundles; it never runs them"},
	{"passes", "", []string{"runtime", "cmd", "compiler/arch"}, "passes know opcodes, never model families or tiers"},
	{"kernels", "", []string{"compiler", "passes", "runtime", "cmd"}, "kernels are leaves that every tier and the compiler share"},
	{"runtime", "", []string{"compiler", "passes", "cmd"}, "the runtime loads bundles; it never compiles"},
	{"runtime", "runtime/server", []string{"@net/http"}, "the engine and the tiers know nothing of HTTP; the server sits on top"},
	{"runtime/server", "", []string{"runtime/cpu", "runtime/cuda", "runtime/sequence", "runtime/replay"}, "the server reaches no tier: it talks to the engine"},
}

// testSupport are packages that only tests import (the test checks that):
// they may build bundles with the compiler and read the environment to
// find ../shared, as tests do.
var testSupport = []string{"runtime/internal/conformance", "runtime/internal/reference"}

const module = "github.com/zrtdev/zrt/"

func TestLayering(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{.Dir}} {{join .Imports \",\"}} {{join .GoFiles \",\"}}", module+"...").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, " ")
		if len(f) < 4 || !strings.HasPrefix(f[0], module) {
			continue
		}
		pkg, dir := strings.TrimPrefix(f[0], module), f[1]
		imports := strings.Split(f[2], ",")
		for _, imp := range imports {
			if slices.Contains(testSupport, strings.TrimPrefix(imp, module)) && !slices.Contains(testSupport, pkg) {
				t.Errorf("%s imports %s, which is test support", pkg, imp)
			}
		}
		if slices.Contains(testSupport, pkg) {
			continue
		}
		for _, r := range layerRules {
			if !strings.HasPrefix(pkg, r.pkgs) || (r.unless != "" && strings.HasPrefix(pkg, r.unless)) {
				continue
			}
			for _, imp := range imports {
				for _, bad := range r.forbid {
					std, isStd := strings.CutPrefix(bad, "@")
					if (isStd && imp == std) || (!isStd && strings.HasPrefix(imp, module+bad)) {
						t.Errorf("%s imports %s: %s", pkg, imp, r.why)
					}
				}
			}
		}
		if strings.HasPrefix(pkg, "cmd/") {
			continue
		}
		for _, name := range strings.Split(f[3], ",") {
			if name != "" {
				checkNoEnv(t, filepath.Join(dir, name), pkg)
			}
		}
	}
}

// checkNoEnv fails on a call of os.Getenv, os.LookupEnv or os.Environ:
// library settings come in options values, so one process can hold two
// engines configured differently.
func checkNoEnv(t *testing.T, path, pkg string) {
	file, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	ast.Inspect(file, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if id, ok := sel.X.(*ast.Ident); ok && id.Name == "os" && (sel.Sel.Name == "Getenv" || sel.Sel.Name == "LookupEnv" || sel.Sel.Name == "Environ") {
			t.Errorf("%s: %s reads the environment (os.%s); take the setting in an options value and let cmd read the variable", pkg, filepath.Base(path), sel.Sel.Name)
		}
		return true
	})
}
