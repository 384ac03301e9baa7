package runtime_test

import (
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
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
	{"asm", "", []string{"compiler", "passes", "runtime", "bench", "cmd"}, "the packet builder and checker are leaves"},
	{"format/", "", []string{"compiler", "passes", "kernels", "runtime", "bench", "cmd"}, "formats are files in and values out; a bundle holds packets (asm) but knows no stage that makes or runs them"},
	{"compiler", "", []string{"runtime", "bench", "cmd"}, "the compiler writes bundles; it never runs them"},
	{"passes", "", []string{"runtime", "bench", "cmd", "compiler/arch"}, "passes know opcodes, never model families or tiers"},
	{"kernels", "", []string{"compiler", "passes", "runtime", "bench", "cmd"}, "kernels are leaves that every tier and the compiler share"},
	{"runtime", "", []string{"compiler", "passes", "bench", "cmd"}, "the runtime loads bundles; it never compiles"},
	{"runtime", "runtime/server", []string{"@net/http"}, "the engine and the tiers know nothing of HTTP; the server sits on top"},
	{"runtime/server", "", []string{"runtime/cpu", "runtime/cuda", "runtime/sequence", "runtime/replay"}, "the server reaches no tier: it talks to the engine"},
	{"bench", "", []string{"compiler", "passes", "cmd"}, "bench measures bundles the compiler wrote; it never compiles"},
	{"bench", "bench/loadtest", []string{"@net/http"}, "bench drives the engine in process; only the load generator speaks HTTP"},
	{"bench/loadtest", "", []string{"runtime", "format", "kernels"}, "the load generator is an HTTP client of any OpenAI-compatible server: it knows no engine, bundle or kernel"},
}

// onlyRules say what a package may import below a prefix: nothing but
// the packages listed (exact paths).
var onlyRules = []struct {
	pkgs  string   // import-path prefix under the module
	below string   // the prefix (a folder) the rule covers
	allow []string // the imports below it that are allowed
	why   string
}{
	{"runtime/server", "runtime/",
		[]string{"runtime/engine", "runtime/decode", "runtime/sample", "runtime/chat", "runtime/chat/reply", "runtime/tokenizer", "runtime/grammar", "runtime/server/ledger"},
		"the engine's API is the server's only door: tenant policy, admission and finish reasons are the engine's (engine.TenantPolicy, engine.AdmitError, engine.Finish), " +
			"so the server needs neither the scheduler, the quotas, the page pool nor a tier; beside the engine it decodes, samples, renders chats, tokenizes, " +
			"compiles grammars and keeps its ledger"},
}

// testSupport are packages that only tests import (the test checks that):
// they may build bundles with the compiler and read the environment to
// find ../shared, as tests do.
var testSupport = []string{"internal/conformance", "internal/reference", "internal/sweep", "internal/testmodel", "internal/clitest"}

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
		for _, r := range onlyRules {
			if !strings.HasPrefix(pkg, r.pkgs) {
				continue
			}
			for _, imp := range imports {
				if rest, ok := strings.CutPrefix(imp, module); ok && strings.HasPrefix(rest, r.below) && !slices.Contains(r.allow, rest) {
					t.Errorf("%s imports %s: %s", pkg, imp, r.why)
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

// TestTierLayering holds the tier table's rules. A tier is any package
// with a type that implements the Tier interface (read from runtime/tiers,
// so the rule follows the interface), or that returns such a type from an
// exported function (T2 loads T1 over another device); the packages only
// tiers import (their devices, the replay walker) are the tiers' own.
// Only the tier table (runtime/tiers) imports a tier, so the runtime,
// pick and the commands reach every tier through its row, and a new tier
// is a row there and its package; nothing under cmd/ (its tests
// included) and no server imports a tier or a tier's own package; and
// every tier is in the table.
func TestTierLayering(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{.Dir}} {{join .Imports \",\"}} {{join .GoFiles \",\"}} {{join .TestImports \",\"}},{{join .XTestImports \",\"}}", module+"...").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	type pkg struct {
		dir     string
		imports []string // under the module, without its prefix
		files   []string
		// tests are its tests' imports: a command's tests, too, reach the
		// tiers through the table.
		tests []string
	}
	pkgs := map[string]*pkg{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, " ")
		if len(f) < 5 || !strings.HasPrefix(f[0], module) {
			continue
		}
		p := &pkg{dir: f[1]}
		for _, imp := range strings.Split(f[4], ",") {
			if rest, ok := strings.CutPrefix(imp, module); ok {
				p.tests = append(p.tests, rest)
			}
		}
		for _, imp := range strings.Split(f[2], ",") {
			if rest, ok := strings.CutPrefix(imp, module); ok {
				p.imports = append(p.imports, rest)
			}
		}
		for _, name := range strings.Split(f[3], ",") {
			if name != "" {
				p.files = append(p.files, filepath.Join(f[1], name))
			}
		}
		pkgs[strings.TrimPrefix(f[0], module)] = p
	}
	const table = "runtime/tiers"
	if pkgs[table] == nil {
		t.Fatalf("no package %s", table)
	}
	want := interfaceMethods(t, pkgs[table].files, "Tier")
	if len(want) == 0 {
		t.Fatalf("%s declares no Tier interface", table)
	}
	tier := map[string]bool{}
	impl := map[string][]string{} // implementer → its types that implement Tier
	for path, p := range pkgs {
		if types := implementers(t, p.files, want); len(types) > 0 {
			tier[path], impl[path] = true, types
		}
	}
	for path, p := range pkgs {
		// A package that loads an implementer's tier over a device of its
		// own, returning it, is a tier too (T2).
		if path != table && returnsTier(t, p.files, impl) {
			tier[path] = true
		}
	}
	for _, must := range []string{"runtime/cpu", "runtime/cuda", "runtime/amd/t1", "runtime/amd/t2"} {
		if !tier[must] {
			t.Errorf("%s is not found to be a tier: the rule's detection is broken", must)
		}
	}
	// own: packages that only tiers, their own packages and the table
	// import (the commands' imports are what is being checked).
	own := map[string]bool{}
	for changed := true; changed; {
		changed = false
		for cand := range pkgs {
			if tier[cand] || own[cand] || cand == table {
				continue
			}
			importers := 0
			ok := true
			for path, p := range pkgs {
				if !slices.Contains(p.imports, cand) || strings.HasPrefix(path, "cmd/") || slices.Contains(testSupport, path) {
					continue
				}
				importers++
				if !tier[path] && !own[path] && path != table {
					ok = false
				}
			}
			if ok && importers > 0 {
				own[cand], changed = true, true
			}
		}
	}
	for path, p := range pkgs {
		imports := p.imports
		if strings.HasPrefix(path, "cmd/") {
			imports = append(slices.Clip(imports), p.tests...)
		}
		for _, imp := range imports {
			switch {
			case tier[imp] && !tier[path] && path != table:
				t.Errorf("%s imports the tier %s: only the tier table (%s) imports a tier; reach it through its row", path, imp, table)
			case own[imp] && (strings.HasPrefix(path, "cmd/") || strings.HasPrefix(path, "runtime/server")):
				t.Errorf("%s imports %s, which only the tiers use: ask the tier table (%s)", path, imp, table)
			}
		}
	}
	for path := range tier {
		if !slices.Contains(pkgs[table].imports, path) {
			t.Errorf("the tier %s has no row in the tier table (%s does not import it)", path, table)
		}
	}
}

// interfaceMethods reads the methods of the interface type name declared
// in files, each rendered as its name and signature.
func interfaceMethods(t *testing.T, files []string, name string) []string {
	var methods []string
	for _, path := range files {
		file := parseFile(t, path)
		ast.Inspect(file, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok || ts.Name.Name != name {
				return true
			}
			if it, ok := ts.Type.(*ast.InterfaceType); ok {
				for _, m := range it.Methods.List {
					if ft, ok := m.Type.(*ast.FuncType); ok && len(m.Names) == 1 {
						methods = append(methods, m.Names[0].Name+signature(ft))
					}
				}
			}
			return false
		})
	}
	return methods
}

// implementers names the types declared in files that have every method
// of want (as interfaceMethods renders them).
func implementers(t *testing.T, files []string, want []string) []string {
	methods := map[string][]string{} // receiver type → methods
	for _, path := range files {
		for _, d := range parseFile(t, path).Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil || len(fd.Recv.List) != 1 {
				continue
			}
			recv := fd.Recv.List[0].Type
			if star, ok := recv.(*ast.StarExpr); ok {
				recv = star.X
			}
			if id, ok := recv.(*ast.Ident); ok {
				methods[id.Name] = append(methods[id.Name], fd.Name.Name+signature(fd.Type))
			}
		}
	}
	var types []string
	for name, ms := range methods {
		if !slices.ContainsFunc(want, func(w string) bool { return !slices.Contains(ms, w) }) {
			types = append(types, name)
		}
	}
	return types
}

// returnsTier reports whether an exported function declared in files
// returns one of impl's types (a package path → its implementing types).
func returnsTier(t *testing.T, files []string, impl map[string][]string) bool {
	for _, path := range files {
		file := parseFile(t, path)
		names := map[string]string{} // import name → path under the module
		for _, is := range file.Imports {
			p, _ := strconv.Unquote(is.Path.Value)
			rest, ok := strings.CutPrefix(p, module)
			if !ok {
				continue
			}
			name := filepath.Base(rest)
			if is.Name != nil {
				name = is.Name.Name
			}
			names[name] = rest
		}
		for _, d := range file.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv != nil || !fd.Name.IsExported() || fd.Type.Results == nil {
				continue
			}
			for _, r := range fd.Type.Results.List {
				typ := r.Type
				if star, ok := typ.(*ast.StarExpr); ok {
					typ = star.X
				}
				sel, ok := typ.(*ast.SelectorExpr)
				if !ok {
					continue
				}
				if x, ok := sel.X.(*ast.Ident); ok && slices.Contains(impl[names[x.Name]], sel.Sel.Name) {
					return true
				}
			}
		}
	}
	return false
}

// signature renders a function type's parameter and result types,
// without their names: "(context.Context, int) error".
func signature(ft *ast.FuncType) string {
	list := func(fl *ast.FieldList) string {
		if fl == nil {
			return ""
		}
		var types []string
		for _, f := range fl.List {
			var b strings.Builder
			printer.Fprint(&b, token.NewFileSet(), f.Type)
			for range max(1, len(f.Names)) {
				types = append(types, b.String())
			}
		}
		return strings.Join(types, ", ")
	}
	return "(" + list(ft.Params) + ") " + list(ft.Results)
}

func parseFile(t *testing.T, path string) *ast.File {
	t.Helper()
	file, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	return file
}

// TestLayoutTable: every package of the module is named in the README's
// Layout table, so a reader finds any stage from it.
func TestLayoutTable(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}", module+"...").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, _ := strings.Cut(string(readme), "## Layout")
	table, _, _ = strings.Cut(table, "\n## ")
	for _, p := range strings.Fields(string(out)) {
		pkg := strings.TrimPrefix(p, module)
		if pkg == p || strings.HasPrefix(pkg, "cmd/zrt") {
			continue // the commands are named as such
		}
		if !strings.Contains(table, "`"+pkg+"`") {
			t.Errorf("README's Layout table does not name %s", pkg)
		}
	}
}

// maxCommandLines bounds the non-test Go under cmd/: a command is flags,
// an options value and one call into the library that does the work
// (issue 37), so a new flag costs a line or two there and new behaviour
// goes into a package, where it can be tested and reused.
const maxCommandLines = 2000

// TestCommandSize holds cmd/ under maxCommandLines lines of non-test Go.
func TestCommandSize(t *testing.T) {
	total := 0
	var files []string
	err := filepath.WalkDir(filepath.Join("..", "cmd"), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		n := strings.Count(string(b), "\n")
		total += n
		files = append(files, strconv.Itoa(n)+" "+path)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if total == 0 {
		t.Fatal("found no Go under ../cmd: the walk is broken")
	}
	if total > maxCommandLines {
		t.Errorf("cmd/ holds %d lines of non-test Go, more than %d: move the logic behind its flags into a library package\n%s",
			total, maxCommandLines, strings.Join(files, "\n"))
	}
	t.Logf("cmd/: %d lines of non-test Go (limit %d)", total, maxCommandLines)
}

// TestSeedCitations: every "seed 000 §N" in the tree's Go and Markdown
// names a section that docs/design/seed-000.md has, so a citation can be
// followed.
func TestSeedCitations(t *testing.T) {
	design, err := os.ReadFile(filepath.Join("..", "docs", "design", "seed-000.md"))
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]bool{}
	for _, line := range strings.Split(string(design), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " "); ok && strings.HasPrefix(line, "#") {
			num, _, _ := strings.Cut(rest, " ")
			sections[strings.TrimSuffix(num, ".")] = true
		}
	}
	cite := regexp.MustCompile(`seed 000[^§\n]{0,12}§\s?([0-9]+(?:\.[0-9]+)*)`)
	n := 0
	err = filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") && path != "..":
			return filepath.SkipDir
		case d.IsDir() || !(strings.HasSuffix(path, ".go") || strings.HasSuffix(path, ".md")):
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range cite.FindAllStringSubmatch(string(b), -1) {
			n++
			if !sections[strings.TrimSuffix(m[1], ".")] {
				t.Errorf("%s cites seed 000 §%s, which docs/design/seed-000.md has no section for", path, m[1])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Error("no citation of seed 000 found: the test reads nothing")
	}
}
