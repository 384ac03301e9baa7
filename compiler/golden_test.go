package compiler_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/asm/pm4"
	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/format/gguf"
	"github.com/zrtdev/zrt/format/support"
	"github.com/zrtdev/zrt/internal/testmodel"
	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/passes"
)

// update rewrites the golden packet streams instead of comparing them:
//
//	go test ./compiler -run TestGolden -update
//
// (ZRT_UPDATE_GOLDEN=1 does the same, for `go test ./...`, where packages
// without this flag would refuse it.)
var update = flag.Bool("update", false, "rewrite testdata/golden/*.pkt from the current compiler")

// goldenDir is the repository's golden folder, from this package.
const goldenDir = "../testdata/golden"

// goldenOptions pins the settings the goldens were written with, so a
// change of zrtc's serving defaults leaves them alone: one slot, and the
// GGUF's trained context capped at 4096 tokens (the defaults before
// zrtc chose by target). The rest (prefill_rows [128], the KV pool of
// one whole context) is what those give.
func goldenOptions(t *testing.T, path string) compiler.Options {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	arch, err := f.String("general.architecture")
	if err != nil {
		t.Fatal(err)
	}
	ctx := uint64(4096)
	if n, err := f.Uint(arch + ".context_length"); err == nil && n > 0 {
		ctx = min(n, ctx)
	}
	return compiler.Options{ContextLength: int(ctx), Slots: 1}
}

// TestGolden compiles every shared model in memory and holds each
// variant's packet stream to its golden listing in both directions, so the
// disassembler and the assembler cannot agree on the same bug:
//   - bytes → text: the disassembly equals the golden file;
//   - text → bytes: assembling the golden's mnemonics and fields gives the
//     compiler's dwords and relocations, and so do the raw dwords recorded
//     after "//";
//   - the stream passes pm4.Check against the model's memory plan and ABIs.
func TestGolden(t *testing.T) {
	models := testmodel.SharedModels()
	if len(models) == 0 {
		t.Skip("no shared models under ../shared/models beside the repository")
	}
	rewrite := *update || os.Getenv("ZRT_UPDATE_GOLDEN") == "1"
	if rewrite {
		if err := os.MkdirAll(goldenDir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	written := map[string]bool{}
	for _, path := range models {
		model := strings.TrimSuffix(filepath.Base(path), ".gguf")
		t.Run(model, func(t *testing.T) {
			fe, err := compiler.Load(path, goldenOptions(t, path))
			if support.Is(err) {
				t.Skipf("%s: %v", filepath.Base(path), err)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer fe.Close()
			u := fe.Unit
			if _, err := passes.Run(context.Background(), u, "", false); err != nil {
				t.Fatal(err)
			}
			syms, env := symbols(t, u)
			for _, s := range u.Streams {
				name := fmt.Sprintf("%s.%s.pkt", model, s.Key)
				written[name] = true
				file := filepath.Join(goldenDir, name)
				got, err := pm4.Disassemble(s.Words, s.Relocs, syms)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				got = fmt.Sprintf("; %s variant %s: %d dispatches, %d barriers, %d dwords, %d relocations\n; regenerate: go test ./compiler -run TestGolden -update\n",
					filepath.Base(path), s.Key, s.Dispatches, s.Barriers, len(s.Words), len(s.Relocs)) + got
				if st, err := pm4.Check(s.Words, s.Relocs, env); err != nil {
					t.Errorf("%s: stream check: %v", name, err)
				} else if st.Dispatches != s.Dispatches || st.Barriers != s.Barriers {
					t.Errorf("%s: checker counted %d dispatches and %d barriers, lower %d and %d", name, st.Dispatches, st.Barriers, s.Dispatches, s.Barriers)
				}
				if rewrite {
					if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
						t.Fatal(err)
					}
					continue
				}
				raw, err := os.ReadFile(file)
				if err != nil {
					t.Errorf("%s: %v (run go test ./compiler -run TestGolden -update)", name, err)
					continue
				}
				want := string(raw)
				if got != want {
					// The golden describes another compiler: its symbols
					// need not even resolve, so the diff is the report.
					t.Errorf("%s: disassembly differs from the golden (bytes → text); if the change is intended, run go test ./compiler -run TestGolden -update\n%s", name, lineDiff(want, got))
					continue
				}
				// text → bytes, from the golden alone.
				words, relocs, err := pm4.Assemble(want, syms)
				if err != nil {
					t.Errorf("%s: assemble: %v", name, err)
					continue
				}
				if i := firstDiff(words, s.Words); i >= 0 {
					t.Errorf("%s: assembled stream differs from the compiler's at dword %#x (text → bytes)", name, i)
				}
				if !slices.Equal(relocs, s.Relocs) {
					t.Errorf("%s: assembled relocations differ from the compiler's", name)
				}
				rawWords, err := pm4.RawWords(want)
				if err != nil {
					t.Errorf("%s: %v", name, err)
				} else if i := firstDiff(words, rawWords); i >= 0 {
					t.Errorf("%s: assembled stream differs from the golden's raw dwords at dword %#x", name, i)
				}
			}
		})
	}
	// A golden of a model that ran but no longer produces it is stale (a
	// renamed or removed variant). Goldens of models absent here are left
	// alone.
	files, _ := filepath.Glob(filepath.Join(goldenDir, "*.pkt"))
	for _, f := range files {
		base := filepath.Base(f)
		ran := slices.ContainsFunc(models, func(m string) bool {
			return strings.HasPrefix(base, strings.TrimSuffix(filepath.Base(m), ".gguf")+".")
		})
		if written[base] || !ran {
			continue
		}
		if rewrite {
			os.Remove(f)
		} else {
			t.Errorf("%s: no shared model produces this stream any more (run go test ./compiler -run TestGolden -update)", f)
		}
	}
}

// symbols names a unit's regions and kernels, and builds the checker's
// environment from its memory plan and kernel catalog.
func symbols(t *testing.T, u *passes.Unit) (*pm4.SymbolTable, pm4.Env) {
	t.Helper()
	syms := &pm4.SymbolTable{}
	var sizes []int64
	for _, r := range u.Plan.Regions {
		syms.Regions = append(syms.Regions, r.Name)
		sizes = append(sizes, r.Bytes)
	}
	for _, k := range u.Kernels {
		syms.Kernels = append(syms.Kernels, k.Name)
	}
	env, err := kernels.StreamEnv(syms.Regions, sizes, syms.Kernels)
	if err != nil {
		t.Fatal(err)
	}
	return syms, env
}

// firstDiff returns the first index where a and b differ, or -1.
func firstDiff(a, b []uint32) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

// lineDiff is a unified-style diff of two texts (-golden +now), from a
// longest-common-subsequence alignment of their lines, showing the first
// hunks with two lines of context. Only run on failure, so the quadratic
// table is fine for listings of a few thousand lines.
func lineDiff(want, got string) string {
	a, b := strings.Split(want, "\n"), strings.Split(got, "\n")
	if len(a)*len(b) > 1<<25 {
		return fmt.Sprintf("(listings of %d and %d lines: too long to diff)", len(a), len(b))
	}
	// lcs[i][j] is the LCS length of a[i:] and b[j:].
	lcs := make([][]int32, len(a)+1)
	for i := range lcs {
		lcs[i] = make([]int32, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	type op struct {
		kind byte // ' ', '-', '+'
		line string
		at   int // line number in the golden
	}
	var ops []op
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case i < len(a) && j < len(b) && a[i] == b[j]:
			ops = append(ops, op{' ', a[i], i + 1})
			i++
			j++
		case i < len(a) && (j == len(b) || lcs[i+1][j] >= lcs[i][j+1]):
			ops = append(ops, op{'-', a[i], i + 1})
			i++
		default:
			ops = append(ops, op{'+', b[j], i + 1})
			j++
		}
	}
	var sb strings.Builder
	const context, most = 2, 40
	shown, last := 0, -1
	for k, o := range ops {
		if o.kind == ' ' {
			continue
		}
		from := max(k-context, last+1)
		if from > last+1 || last < 0 {
			fmt.Fprintf(&sb, "@@ golden line %d @@\n", ops[from].at)
		}
		for c := from; c <= k; c++ {
			sb.WriteString(string(ops[c].kind) + " " + ops[c].line + "\n")
			shown++
		}
		last = k
		// Trailing context, unless the next change is close.
		for c := k + 1; c < len(ops) && c <= k+context && ops[c].kind == ' '; c++ {
			if next := nextChange(ops[c:], func(x op) bool { return x.kind != ' ' }); next >= 0 && next <= context {
				break
			}
			sb.WriteString("  " + ops[c].line + "\n")
			shown++
			last = c
		}
		if shown >= most {
			sb.WriteString("… (more differences)\n")
			break
		}
	}
	return sb.String()
}

// nextChange returns the index of the first element of s for which changed
// holds, or -1.
func nextChange[T any](s []T, changed func(T) bool) int {
	for i, x := range s {
		if changed(x) {
			return i
		}
	}
	return -1
}
