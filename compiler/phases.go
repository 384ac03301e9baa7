package compiler

// Stopping, resuming and dumping the pipeline at named passes, after
// IREE's --compile-to / --compile-from and Go's GOSSAFUNC: the IR between
// passes is text (compiler/ir's .zir form) that can be read, edited and fed
// back in.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"

	"github.com/zrtdev/zrt/compiler/ir"
	"github.com/zrtdev/zrt/format/publish"
	"github.com/zrtdev/zrt/passes"
)

// CheckPhases rejects phase options (DumpAfter, DumpDir, CompileTo,
// CompileFrom, IRPath) that name no pass or cannot mean anything together,
// in the flags' own words; Compile checks them too, but a command can ask
// first, to tell a mistake in its call from a failure.
func (o *Options) CheckPhases() error {
	if (o.DumpAfter == "") != (o.DumpDir == "") {
		return fmt.Errorf("--dump-after and --dump-dir go together")
	}
	for _, name := range o.dumpAfter() {
		if name != "all" {
			if err := passes.CheckPass(name); err != nil {
				return fmt.Errorf("--dump-after: %w", err)
			}
		}
	}
	if (o.CompileFrom == "") != (o.IRPath == "") {
		return fmt.Errorf("--compile-from=PHASE needs the text IR file to resume from, and an IR file needs --compile-from")
	}
	to, from := -1, -1
	if o.CompileTo != "" {
		if err := passes.CheckPass(o.CompileTo); err != nil {
			return fmt.Errorf("--compile-to: %w", err)
		}
		to, _ = passes.PassIndex(o.CompileTo)
	}
	if o.CompileFrom != "" {
		if err := passes.CheckPass(o.CompileFrom); err != nil {
			return fmt.Errorf("--compile-from: %w", err)
		}
		from, _ = passes.PassIndex(o.CompileFrom)
		if low, _ := passes.PassIndex("lower"); from >= low {
			return fmt.Errorf("--compile-from=%s: a bundle needs the packet streams of lower, which text IR does not carry: resume before lower", o.CompileFrom)
		}
	}
	if to >= 0 && from >= 0 && to <= from {
		return fmt.Errorf("--compile-to=%s stops at or before --compile-from=%s, where the pipeline resumes", o.CompileTo, o.CompileFrom)
	}
	return nil
}

func (o *Options) dumpAfter() []string {
	if o.DumpAfter == "" {
		return nil
	}
	return strings.Split(o.DumpAfter, ",")
}

// RunPasses runs the pipeline over the frontend's unit as opt says: from
// the text IR in opt.IRPath when opt.CompileFrom is set, up to
// opt.CompileTo, dumping after the passes in opt.DumpAfter.
func (fe *Frontend) RunPasses(ctx context.Context, opt Options) ([]passes.Timing, error) {
	if err := opt.CheckPhases(); err != nil {
		return nil, err
	}
	if opt.CompileFrom != "" {
		if err := fe.resume(opt.IRPath); err != nil {
			return nil, err
		}
	}
	ro := passes.RunOptions{StopAfter: opt.CompileTo, ResumeAfter: opt.CompileFrom, VerifyEach: opt.VerifyEach, DumpAfter: opt.dumpAfter()}
	if opt.DumpDir != "" {
		if err := os.MkdirAll(opt.DumpDir, 0o755); err != nil {
			return nil, err
		}
		ro.Dump = dumpFiles(opt.DumpDir)
	}
	return passes.RunWith(ctx, fe.Unit, ro)
}

// resume replaces the built graphs with the text IR in path. Weights and
// state sizes still come from the GGUF, so the text must describe the same
// model: the same variants, and weights that name the GGUF's tensors with
// their types, shapes and sizes.
func (fe *Frontend) resume(path string) error {
	src, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	gs, err := ir.Parse(src)
	if err != nil {
		return fmt.Errorf("%s:%w", path, err)
	}
	built := fe.Unit.Graphs
	if len(gs) != len(built) {
		return fmt.Errorf("%s has %d variants; the model's config builds %d", path, len(gs), len(built))
	}
	for i, g := range gs {
		if g.Key != built[i].Key {
			return fmt.Errorf("%s: variant %d is %s; the model's config builds %s", path, i, g.Key, built[i].Key)
		}
		for _, b := range g.Buffers {
			if b.Class != ir.Weight {
				continue
			}
			if len(b.Sources) > 0 {
				// A derived weight: its bytes are its sources', in order.
				total := int64(0)
				for _, src := range b.Sources {
					parts, err := sourceData(fe.GGUF, src)
					if err != nil {
						return fmt.Errorf("%s: %s: weight @%s: %w", path, g.Key, b.Name, err)
					}
					for _, p := range parts {
						total += int64(len(p))
					}
				}
				if total != b.Bytes {
					return fmt.Errorf("%s: %s: weight @%s says %d B; its sources hold %d B", path, g.Key, b.Name, b.Bytes, total)
				}
				continue
			}
			t, ok := fe.GGUF.Tensor(b.Tensor)
			if !ok {
				return fmt.Errorf("%s: %s: weight @%s names tensor %s, which the GGUF lacks", path, g.Key, b.Name, b.Tensor)
			}
			if t.Type != b.Type || t.Size != b.Bytes || !reflect.DeepEqual(t.Dims, b.Dims) {
				return fmt.Errorf("%s: %s: weight @%s says %s %v %d B; the GGUF's %s is %s %v %d B",
					path, g.Key, b.Name, b.Type, b.Dims, b.Bytes, t.Name, t.Type, t.Dims, t.Size)
			}
		}
	}
	fe.Unit.Graphs, fe.Model.Graphs = gs, gs
	return nil
}

// dumpFiles writes, after a pass, DIR/NN-pass.VARIANT.zir for every variant
// (NN numbers passes from 1, as `zrtc passes` lists them) and the tables
// the pass made: .liveness.txt after liveness, .physical.txt after
// regalloc and memplan, NN-memplan.json after memplan, and a
// .megakernel.txt per scheduled variant after megakernel.
func dumpFiles(dir string) func(int, string, *passes.Unit) error {
	return func(i int, pass string, u *passes.Unit) error {
		prefix := filepath.Join(dir, fmt.Sprintf("%02d-%s", i+1, pass))
		write := func(name string, fill func(w io.Writer) error) error {
			var b bytes.Buffer
			if err := fill(&b); err != nil {
				return err
			}
			return os.WriteFile(prefix+name, b.Bytes(), 0o644)
		}
		for gi, g := range u.Graphs {
			v := "." + g.Key.String()
			if err := write(v+".zir", func(w io.Writer) error { return ir.Print(w, g) }); err != nil {
				return err
			}
			var err error
			switch {
			case pass == "liveness" && gi < len(u.Liveness):
				err = write(v+".liveness.txt", func(w io.Writer) error { return passes.WriteLiveness(w, g, u.Liveness[gi]) })
			case (pass == "regalloc" || pass == "memplan") && gi < len(u.Physical):
				err = write(v+".physical.txt", func(w io.Writer) error { return passes.WritePhysical(w, g, u.Physical[gi]) })
			}
			if err != nil {
				return err
			}
		}
		if pass == "megakernel" {
			for _, sc := range u.Schedules {
				g := u.Graphs[sc.Variant]
				err := write("."+g.Key.String()+".megakernel.txt", func(w io.Writer) error {
					return sc.WriteText(w, g.Key.String(), instKernels(u, int(sc.Variant)))
				})
				if err != nil {
					return err
				}
			}
		}
		if pass == "memplan" && u.Plan != nil {
			return write(".json", func(w io.Writer) error {
				b, err := u.Plan.JSON()
				if err == nil {
					_, err = w.Write(append(b, '\n'))
				}
				return err
			})
		}
		return nil
	}
}

// instKernels names each instruction of graph gi by its kernel instance.
func instKernels(u *passes.Unit, gi int) []string {
	var out []string
	for _, ki := range u.InstKernel[gi] {
		out = append(out, u.Kernels[ki].Name)
	}
	return out
}

// CompileIR loads the model, runs the pipeline through opt.CompileTo (or
// from opt.CompileFrom) and writes the text IR of every variant to w
// instead of a bundle.
func CompileIR(ctx context.Context, path string, w io.Writer, opt Options) error {
	if opt.CompileTo == "" {
		return fmt.Errorf("writing text IR needs --compile-to=PHASE (passes: %s)", passes.PassNames())
	}
	fe, err := Load(path, opt)
	if err != nil {
		return err
	}
	defer fe.Close()
	times, err := fe.RunPasses(ctx, opt)
	if err != nil {
		return err
	}
	reportTimes(opt, times)
	return ir.Print(w, fe.Unit.Graphs...)
}

// compileToFile is Compile with opt.CompileTo set: the text IR goes to the
// file out, written only when every pass succeeded.
func compileToFile(ctx context.Context, path, out string, opt Options) error {
	var b bytes.Buffer
	if err := CompileIR(ctx, path, &b, opt); err != nil {
		return err
	}
	return publish.File(publish.OS{}, out, isTextIR, b.Bytes())
}

// isTextIR accepts a file that starts like text IR, the only kind
// compileToFile may replace.
func isTextIR(path string, fi fs.FileInfo) error {
	b := make([]byte, len("graph "))
	f, err := os.Open(path)
	if err == nil {
		_, err = io.ReadFull(f, b)
		f.Close()
	}
	if !fi.Mode().IsRegular() || err != nil || string(b) != "graph " {
		return fmt.Errorf("it is not a text IR file")
	}
	return nil
}

func reportTimes(opt Options, times []passes.Timing) {
	if opt.Progress == nil {
		return
	}
	for _, t := range times {
		opt.Progress("pass %-9s %v", t.Pass, t.Dur.Round(1000))
	}
}
