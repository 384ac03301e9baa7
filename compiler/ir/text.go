package ir

// The text form of the IR (.zir). It exists so a graph can be read after
// any pass, edited by hand and fed back into the pipeline (zrtc build
// --compile-to / --compile-from), so Print and Parse must agree exactly:
// Print(Parse(Print(g))) == Print(g) for every graph Print accepts.
//
//	graph decode.s4.r4
//	buffer @request.table io
//	buffer @model.attn.q_weight[0] weight tensor=blk.0.attn_q.weight type=Q8_0 dims=64x64 layerclass=attn.q bytes=4352
//	buffer @model.attn.qkv_weight[0] weight source=blk.0.attn_q.weight source=blk.0.attn_k.weight … type=Q8_0 …
//	reg %hidden 4x64x4
//	reg %l0.q 4x64x4
//	   3  MATMUL x=%l0.attn_in w=@model.attn.q_weight[0] io=@request.table -> y=%l0.q {k=64 n=64} => matmul.Q8_0
//	   5  ROPE x=%l0.q io=@request.table -> x=%l0.q {…}
//
// An instruction lists its reads, then "->", then its writes, each as
// role=operand in the order the Inst holds them; a role on both sides is an
// in-place update, and any number of writes is allowed. A derived weight
// lists its GGUF source tensors in order, one source= field each.
// Registers are %name, buffers @name; a name that is not unique in its table is referenced by
// index instead (%#3), so duplicates survive the round trip. Names outside
// [A-Za-z0-9_.[]/:+-] are Go-quoted. Attributes print with strconv 'g' -1,
// the shortest text that parses back to the same float64. "=> kernel" is
// the kernel instance lowering chose. The leading instruction number is a
// reading aid (liveness tables count instructions the same way); the parser
// ignores it so lines can be deleted or inserted by hand. ";" starts a
// comment. Several graphs may follow each other in one file.

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Text returns the graphs in text form.
func Text(gs ...*Graph) string {
	var b bytes.Buffer
	Print(&b, gs...) // writes to a bytes.Buffer do not fail
	return b.String()
}

// Print writes the graphs in text form, separated by blank lines. It never
// fails on a malformed graph: out-of-range operands print as indices the
// parser will reject, so a broken graph can still be looked at.
func Print(w io.Writer, gs ...*Graph) error {
	bw := bufio.NewWriter(w)
	for i, g := range gs {
		if i > 0 {
			bw.WriteByte('\n')
		}
		printGraph(bw, g)
	}
	return bw.Flush()
}

func printGraph(w *bufio.Writer, g *Graph) {
	fmt.Fprintf(w, "graph %s\n", g.Key)
	bufRef := refNames(len(g.Buffers), func(i int) string { return g.Buffers[i].Name })
	regRef := refNames(len(g.Regs), func(i int) string { return g.Regs[i].Name })
	for i := range g.Buffers {
		b := &g.Buffers[i]
		fmt.Fprintf(w, "buffer @%s %s", quoteName(b.Name), b.Class)
		if b.Tensor != "" {
			fmt.Fprintf(w, " tensor=%s", quoteName(b.Tensor))
		}
		for _, src := range b.Sources {
			fmt.Fprintf(w, " source=%s", quoteName(src))
		}
		// ggml's F32 is type 0, so "no type" and F32 look alike: weights
		// always say their type, other buffers only when it is not zero.
		if b.Class == Weight || b.Type != 0 {
			if b.Type.Known() {
				fmt.Fprintf(w, " type=%s", b.Type)
			} else {
				fmt.Fprintf(w, " type=%d", uint32(b.Type))
			}
		}
		if len(b.Dims) > 0 {
			w.WriteString(" dims=")
			for j, d := range b.Dims {
				if j > 0 {
					w.WriteByte('x')
				}
				w.WriteString(strconv.FormatInt(d, 10))
			}
		}
		if b.LayerClass != "" {
			fmt.Fprintf(w, " layerclass=%s", quoteName(b.LayerClass))
		}
		if b.Bytes != 0 {
			fmt.Fprintf(w, " bytes=%d", b.Bytes)
		}
		w.WriteByte('\n')
	}
	for i := range g.Regs {
		r := &g.Regs[i]
		fmt.Fprintf(w, "reg %%%s %dx%dx%d\n", quoteName(r.Name), r.Rows, r.Cols, r.Elem)
	}
	operand := func(o Operand) string {
		switch o.Kind {
		case RegOperand:
			if o.ID >= 0 && o.ID < len(regRef) && regRef[o.ID] != "" {
				return "%" + regRef[o.ID]
			}
			return "%#" + strconv.Itoa(o.ID)
		case BufOperand:
			if o.ID >= 0 && o.ID < len(bufRef) && bufRef[o.ID] != "" {
				return "@" + bufRef[o.ID]
			}
			return "@#" + strconv.Itoa(o.ID)
		}
		return fmt.Sprintf("?kind%d#%d", o.Kind, o.ID)
	}
	for i := range g.Insts {
		in := &g.Insts[i]
		fmt.Fprintf(w, "%4d  %s", i, in.Op)
		for _, o := range in.Reads {
			fmt.Fprintf(w, " %s=%s", quoteName(o.Role), operand(o))
		}
		w.WriteString(" ->")
		for _, o := range in.Writes {
			fmt.Fprintf(w, " %s=%s", quoteName(o.Role), operand(o))
		}
		if len(in.Attrs) > 0 {
			w.WriteString(" {")
			for j, k := range in.Attrs.Keys() {
				if j > 0 {
					w.WriteByte(' ')
				}
				fmt.Fprintf(w, "%s=%s", quoteName(k), strconv.FormatFloat(in.Attrs[k], 'g', -1, 64))
			}
			w.WriteByte('}')
		}
		if in.Kernel != "" {
			fmt.Fprintf(w, " => %s", quoteName(in.Kernel))
		}
		w.WriteByte('\n')
	}
}

// refNames returns, per index, the quoted name operands use for it, or ""
// where the name is shared with another entry and the index must be used.
func refNames(n int, name func(int) string) []string {
	count := map[string]int{}
	for i := 0; i < n; i++ {
		count[name(i)]++
	}
	out := make([]string, n)
	for i := range out {
		if count[name(i)] == 1 {
			out[i] = quoteName(name(i))
		}
	}
	return out
}

// nameByte reports whether c may appear in an unquoted name or number.
func nameByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		strings.IndexByte("_.[]/:+-", c) >= 0
}

// quoteName returns s bare when the scanner reads it back as one word, and
// Go-quoted otherwise.
func quoteName(s string) string {
	if s == "" {
		return `""`
	}
	for i := 0; i < len(s); i++ {
		if !nameByte(s[i]) {
			return strconv.Quote(s)
		}
	}
	return s
}
