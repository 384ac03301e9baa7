// Package asmgen is the writer shared by the generators of zrt's amd64
// SIMD kernels (kernels/quant/gen, kernels/cpu/gen): a File collects the
// text of one Go assembly file, the generators produce the unrolled and
// per-variant parts from their tables with loops, and Bytes lays the
// result out the one way gofmt-minded readers expect (each run of
// instructions with its operands in one column), behind Go's
// generated-code header.
//
// It knows nothing of the kernels themselves; it only removes what every
// generator would otherwise repeat: the file header, the alignment, the
// DATA tables and the argument loads of a TEXT symbol.
package asmgen

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// File is one .s file being written.
type File struct {
	generator string
	buf       bytes.Buffer
}

// NewFile starts a file written by generator (its path in the module, as
// the header names it).
func NewFile(generator string) *File {
	return &File{generator: generator}
}

// P writes one line, formatted as by fmt.Sprintf.
func (f *File) P(format string, args ...any) {
	fmt.Fprintf(&f.buf, format, args...)
	f.buf.WriteByte('\n')
}

// Raw writes text as it is, adding a final newline when it lacks one. The
// generators keep their prose and the kernels' straight-line parts in raw
// strings: a leading newline (after the opening backquote) is dropped
// before instructions (a tab-indented first line) and kept, as a blank
// line, before anything else.
func (f *File) Raw(text string) {
	if strings.HasPrefix(text, "\n\t") {
		text = text[1:]
	}
	f.buf.WriteString(text)
	if !strings.HasSuffix(text, "\n") {
		f.buf.WriteByte('\n')
	}
}

// Ins writes the instruction op with its operands, one tab in.
func (f *File) Ins(op string, operands ...string) {
	if len(operands) == 0 {
		f.P("\t%s", op)
		return
	}
	f.P("\t%s %s", op, strings.Join(operands, ", "))
}

// Fold reduces the four lanes of the XMM register x, after first folding
// in the high half of y (x is y's low half, t scratch), to its low lane
// with op (VADDPS, VMAXPS): high 128 bits onto low, then quadwords, then
// dwords (VPSHUFD $0x4e, $0xb1). This is ggml's hsum_float_8 order, and
// the kernels' final reductions all take it.
func (f *File) Fold(op, y, x, t string) {
	f.Ins("VEXTRACTF128", "$1", y, t)
	f.Ins(op, t, x, x)
	for _, imm := range []string{"$0x4e", "$0xb1"} {
		f.Ins("VPSHUFD", imm, x, t)
		f.Ins(op, t, x, x)
	}
}

// Zero clears each register r with op r, r, r (VXORPS, VPXORD, ...).
func (f *File) Zero(op string, regs ...string) {
	for _, r := range regs {
		f.Ins(op, r, r, r)
	}
}

// Reg is the register of kind k ("X", "Y", "Z", "K", "R") and number n.
func Reg(k string, n int) string { return fmt.Sprintf("%s%d", k, n) }

// Regs returns n registers of kind k, numbered from, from+step, ...
func Regs(k string, from, step, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = Reg(k, from+i*step)
	}
	return out
}

// Mem is the memory operand off(base), written (base) at offset 0.
func Mem(off int, base string) string {
	if off == 0 {
		return "(" + base + ")"
	}
	return fmt.Sprintf("%d(%s)", off, base)
}

// Define writes a #define of name (with its parameter list, if any: "HSUM(Y,
// X, T)") whose body is what body writes: each of its lines is continued
// with a backslash.
func (f *File) Define(name string, body func(f *File)) {
	sub := &File{generator: f.generator}
	body(sub)
	lines := strings.Split(strings.TrimRight(sub.buf.String(), "\n"), "\n")
	f.P("#define %s \\", name)
	for i, l := range lines {
		if i < len(lines)-1 {
			l += " \\"
		}
		f.P("%s", l)
	}
}

// Arg is one argument of a TEXT symbol: its name in the Go declaration
// (asmdecl checks the names) and the register it is loaded into; an
// empty register leaves it in memory.
type Arg struct {
	Name string
	Reg  string
}

// Args loads args, 8-byte words in declaration order from 0(FP), into their
// registers.
func (f *File) Args(args ...Arg) {
	for i, a := range args {
		if a.Reg != "" {
			f.Ins("MOVQ", fmt.Sprintf("%s+%d(FP)", a.Name, 8*i), a.Reg)
		}
	}
}

// Text opens the TEXT symbol ·name, NOSPLIT, with frame bytes of locals and
// argBytes of arguments and results.
func (f *File) Text(name string, frame, argBytes int) {
	f.P("TEXT ·%s(SB), NOSPLIT, $%d-%d", name, frame, argBytes)
}

// Quads writes the read-only symbol name<> holding the little-endian
// quadwords q.
func (f *File) Quads(name string, q ...uint64) {
	for i, v := range q {
		f.P("DATA %s<>+%d(SB)/8, $0x%016x", name, 8*i, v)
	}
	f.P("GLOBL %s<>(SB), RODATA|NOPTR, $%d", name, 8*len(q))
}

// Splat writes the read-only symbol name<> of n bytes, every byte b.
func (f *File) Splat(name string, b byte, n int) {
	f.Quads(name, Repeat(uint64(b), 1, n)...)
}

// Repeat returns the quadwords of count values v of size bytes each (1, 2
// or 4), packed little-endian: Repeat(0x0f, 1, 32) is 32 bytes of 0x0f.
func Repeat(v uint64, size, count int) []uint64 {
	var q []uint64
	var cur uint64
	shift := 0
	for i := 0; i < count; i++ {
		cur |= v << shift
		shift += 8 * size
		if shift == 64 {
			q, cur, shift = append(q, cur), 0, 0
		}
	}
	if shift != 0 {
		q = append(q, cur)
	}
	return q
}

// Words returns the quadwords of the 16-bit values w, packed little-endian.
func Words(w ...uint16) []uint64 {
	var q []uint64
	for i := 0; i < len(w); i += 4 {
		var v uint64
		for j := 0; j < 4 && i+j < len(w); j++ {
			v |= uint64(w[i+j]) << (16 * j)
		}
		q = append(q, v)
	}
	return q
}

// Dwords returns the quadwords of the 32-bit values d, packed little-endian.
func Dwords(d ...uint32) []uint64 {
	var q []uint64
	for i := 0; i < len(d); i += 2 {
		v := uint64(d[i])
		if i+1 < len(d) {
			v |= uint64(d[i+1]) << 32
		}
		q = append(q, v)
	}
	return q
}

// Bytes returns the finished file: the generated-code header, the build
// constraint and textflag.h, then the body with its instruction runs
// aligned (see Format) and runs of blank lines made one.
func (f *File) Bytes() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "// Code generated by %s; DO NOT EDIT.\n\n", f.generator)
	b.WriteString("//go:build amd64 && !purego\n\n#include \"textflag.h\"\n\n")
	body := strings.Trim(f.buf.String(), "\n")
	for strings.Contains(body, "\n\n\n") {
		body = strings.ReplaceAll(body, "\n\n\n", "\n\n")
	}
	b.WriteString(Format(body))
	b.WriteByte('\n')
	return b.Bytes()
}

// Format aligns Go assembly: in each run of consecutive instruction lines
// (tab-indented, neither labels nor comments; a #define's continued lines
// count too, their backslashes kept), the operands start one column after
// the run's longest mnemonic, and trailing // comments one column after
// its longest instruction. Macro invocations (a first word with a
// parenthesis) keep their text and do not widen the column. Every other
// line is left as it is.
func Format(src string) string {
	lines := strings.Split(src, "\n")
	out := make([]string, len(lines))
	copy(out, lines)
	for i := 0; i < len(lines); {
		if _, ok := parseIns(lines[i]); !ok {
			i++
			continue
		}
		j := i
		var run []ins
		for j < len(lines) {
			in, ok := parseIns(lines[j])
			if !ok {
				break
			}
			run = append(run, in)
			j++
		}
		opW, textW := 0, 0
		for _, in := range run {
			if !in.macro && in.operands != "" {
				opW = max(opW, len(in.op))
			}
		}
		texts := make([]string, len(run))
		for k, in := range run {
			t := in.op
			if in.operands != "" {
				pad := opW - len(in.op)
				if in.macro || pad < 0 {
					pad = 0
				}
				t += strings.Repeat(" ", pad) + " " + in.operands
			}
			texts[k] = t
			if in.comment != "" {
				textW = max(textW, len(t))
			}
		}
		for k, in := range run {
			t := texts[k]
			if in.comment != "" {
				t += strings.Repeat(" ", textW-len(t)) + " " + in.comment
			}
			if in.cont {
				t += " \\"
			}
			out[i+k] = "\t" + t
		}
		i = j
	}
	return strings.Join(out, "\n")
}

// ins is an instruction line taken apart by parseIns.
type ins struct {
	op, operands, comment string
	macro, cont           bool
}

// parseIns splits an instruction line into its mnemonic, operands,
// trailing comment and continuation; ok is false for any other line.
func parseIns(line string) (in ins, ok bool) {
	if !strings.HasPrefix(line, "\t") {
		return in, false
	}
	s := strings.TrimSpace(line)
	if s == "" || strings.HasPrefix(s, "//") || strings.HasSuffix(s, ":") {
		return in, false
	}
	if rest, found := strings.CutSuffix(s, "\\"); found {
		in.cont = true
		s = strings.TrimSpace(rest)
	}
	if k := strings.Index(s, "//"); k >= 0 {
		in.comment = s[k:]
		s = strings.TrimSpace(s[:k])
	}
	in.op, in.operands, _ = strings.Cut(s, " ")
	in.operands = strings.TrimSpace(in.operands)
	in.macro = strings.Contains(in.op, "(")
	if in.macro {
		// A macro's arguments may hold spaces: keep the invocation whole.
		in.op, in.operands = s, ""
	}
	return in, true
}

// Render is a generator's output: its files by base name, or why it
// could not make them (a table that does not check out).
type Render func() (map[string][]byte, error)

// Main is a generator's main: it writes render's files into -dir (the
// package its go:generate line sits in, by default), saying what went
// wrong and exiting 1 on a failure. pkg names that package in -help.
func Main(pkg string, render Render) {
	dir := flag.String("dir", ".", "the "+pkg+" directory to write")
	flag.Parse()
	files, err := render()
	if err == nil {
		err = Write(*dir, files)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

// CheckFresh is a generator's test, run from its directory (pkg/gen):
// every committed file of pkg is what render writes from the current
// tables (else run make generate; CI checks the same on a clean clone,
// this says so sooner), and render writes the same twice (output that
// varied would make make generate dirty a clean tree). It returns the
// files, for a generator's further checks.
func CheckFresh(t testing.TB, pkg string, render Render) map[string][]byte {
	t.Helper()
	files, err := render()
	if err != nil {
		t.Fatal(err)
	}
	stale, err := Stale("..", files)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range stale {
		t.Errorf("%s/%s differs from the generator's output: run make generate", pkg, name)
	}
	again, err := render()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range sortedNames(files) {
		if !bytes.Equal(files[name], again[name]) {
			t.Errorf("%s differs between two runs", name)
		}
	}
	return files
}

// Write writes the generated files (by base name) into dir, only those
// whose content differs, so that an unchanged tree keeps its timestamps.
func Write(dir string, files map[string][]byte) error {
	stale, err := Stale(dir, files)
	if err != nil {
		return err
	}
	for _, name := range stale {
		if err := os.WriteFile(filepath.Join(dir, name), files[name], 0o644); err != nil {
			return err
		}
	}
	return nil
}

// WordRows writes words eight to a row, each row indented three spaces
// and each word formatted by cell (" %#08x," for a C array, say): a
// table of constants in a generated C, CUDA or OpenCL source.
func WordRows(b *bytes.Buffer, words []uint32, cell string) {
	for i, w := range words {
		if i%8 == 0 {
			b.WriteString("   ")
		}
		fmt.Fprintf(b, cell, w)
		if i%8 == 7 {
			b.WriteString("\n")
		}
	}
}

// Stale returns the names of the files that differ from, or are missing
// in, dir: what make generate would change. The generators' tests report
// them, so that go test says so before CI's clean-clone check does.
func Stale(dir string, files map[string][]byte) ([]string, error) {
	var stale []string
	for _, name := range sortedNames(files) {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil && !os.IsNotExist(err) {
			return nil, err
		}
		if !bytes.Equal(got, files[name]) {
			stale = append(stale, name)
		}
	}
	return stale, nil
}

// sortedNames returns the keys of files in order, so that writes and
// reports do not depend on map order.
func sortedNames(files map[string][]byte) []string {
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}
