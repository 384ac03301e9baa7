// Package dump prints zrtc's artifacts and stages for people: a GGUF's
// metadata and tensors with the build's verdict, kernel blobs, graph
// files, packet streams, bundle sets and packs (zrtc inspect and zrtc
// dump).
package dump

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"text/tabwriter"

	"github.com/zrtdev/zrt/asm/pm4"
	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/compiler/config"
	"github.com/zrtdev/zrt/compiler/ir"
	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/format/bundleset"
	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/format/gguf"
	"github.com/zrtdev/zrt/format/support"
	"github.com/zrtdev/zrt/format/zrt"
	"github.com/zrtdev/zrt/format/zrtp"
	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/passes"
)

// Blob prints kernel blob b, read from path (size bytes): its header,
// its specialization slots with their values, and its code's first bytes.
func Blob(w io.Writer, path string, size int, b *zrt.Blob) {
	h := b.Header
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "file\t%s (%d bytes)\n", path, size)
	fmt.Fprintf(tw, "name\t%s\n", b.Name)
	fmt.Fprintf(tw, "magic\t%#08x\n", h.Magic)
	fmt.Fprintf(tw, "abi_version\t%d\n", h.ABIVersion)
	fmt.Fprintf(tw, "target\t%s (%#x)\n", h.Target, uint16(h.Target))
	fmt.Fprintf(tw, "code_size\t%d\n", h.CodeSize)
	fmt.Fprintf(tw, "entry_offset\t%d\n", h.EntryOffset)
	fmt.Fprintf(tw, "buffer_count\t%d\n", h.BufferCount)
	fmt.Fprintf(tw, "push_const_bytes\t%d\n", h.PushConstBytes)
	fmt.Fprintf(tw, "subgroup_size\t%d\n", h.SubgroupSize)
	fmt.Fprintf(tw, "workgroup\t%d,%d,%d\n", h.Workgroup[0], h.Workgroup[1], h.Workgroup[2])
	fmt.Fprintf(tw, "lds_bytes\t%d\n", h.LDSBytes)
	fmt.Fprintf(tw, "vgpr_count\t%d\n", h.VGPRCount)
	fmt.Fprintf(tw, "sgpr_count\t%d\n", h.SGPRCount)
	fmt.Fprintf(tw, "occupancy_hint\t%d\n", h.OccupancyHint)
	fmt.Fprintf(tw, "name_offset\t%d\n", h.NameOffset)
	fmt.Fprintf(tw, "name_size\t%d\n", h.NameSize)
	tw.Flush()

	// The catalog says how each slot's dword is meant (u32 or f32); a blob
	// of a kernel this build does not know still prints, in hex.
	kinds := map[string]kernels.ParamKind{}
	abi, _, abiErr := kernels.SplitInstance(b.Name)
	if abiErr == nil {
		for _, p := range abi.Spec {
			kinds[p.Name] = p.Kind
		}
	}
	fmt.Fprintf(w, "slots (%d):\n", len(b.Slots))
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  name\tcode_offset\tpatched\tdword\tvalue")
	for _, s := range b.Slots {
		v := binary.LittleEndian.Uint32(b.Code[s.CodeOffset:])
		val := "-"
		switch k, known := kinds[s.Name]; {
		case !s.Patched:
			val = "(unpatched)"
		case !known:
			val = "(kind unknown)"
		case k == kernels.F32:
			val = fmt.Sprintf("%g (f32)", math.Float32frombits(v))
		default:
			val = fmt.Sprintf("%d (u32)", v)
		}
		fmt.Fprintf(tw, "  %s\t%d\t%v\t%#08x\t%s\n", s.Name, s.CodeOffset, s.Patched, v, val)
	}
	tw.Flush()
	if abiErr != nil {
		fmt.Fprintf(w, "; %v\n", abiErr)
	}
	fmt.Fprintf(w, "code (%d bytes):\n", len(b.Code))
	const most = 256
	d := hex.Dump(b.Code[:min(len(b.Code), most)])
	for _, l := range strings.SplitAfter(strings.TrimSuffix(d, "\n"), "\n") {
		io.WriteString(w, "  "+l)
	}
	if len(b.Code) > most {
		fmt.Fprintf(w, "\n  … %d more bytes", len(b.Code)-most)
	}
	fmt.Fprintln(w)
}

// Graph prints the graph file of the bundle at path (a directory or the
// file): version, sections, ident, hparams, config, regions, weights,
// kernels, variants, megakernel schedules.
func Graph(w io.Writer, path string) error {
	g, raw, err := bundle.ReadGraph(path)
	if err != nil {
		return err
	}
	_, _, secs, err := bundle.Sections(raw)
	if err != nil {
		return err
	}
	graph(w, len(raw), secs, g)
	return nil
}

// graph prints graph file g (size bytes, of sections secs).
func graph(w io.Writer, size int, secs []bundle.Section, g *bundle.Graph) {
	table := func(head string, rows func(tw *tabwriter.Writer)) {
		fmt.Fprintln(w, head)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		rows(tw)
		tw.Flush()
	}
	fmt.Fprintf(w, "graph file version %d.%d, %d bytes\n\n", g.Major, g.Minor, size)
	table(fmt.Sprintf("sections (%d):", len(secs)), func(tw *tabwriter.Writer) {
		fmt.Fprintln(tw, "  tag\toffset\tsize\tcrc32c\tflags")
		for _, s := range secs {
			fmt.Fprintf(tw, "  %s\t%d\t%d\t%08x\t%#x\n", s.Tag, s.Offset, s.Size, s.CRC, s.Flags)
		}
	})
	id := g.Ident
	table("\nident:", func(tw *tabwriter.Writer) {
		fmt.Fprintf(tw, "  producer\t%s\n  flags\t%s\n  target\t%s\n  source\t%s\n  source_sha256\t%x\n  weights_sha256\t%x\n",
			id.Producer, id.Flags, id.Target, id.SourceName, id.SourceHash, id.WeightsHash)
	})
	// Every hyperparameter by its field name, so a field added to the
	// format shows up here without an edit.
	table("\nhparams:", func(tw *tabwriter.Writer) {
		v := reflect.ValueOf(g.Hparams)
		for i := range v.NumField() {
			fmt.Fprintf(tw, "  %s\t%v\n", v.Type().Field(i).Name, v.Field(i).Interface())
		}
	})
	fmt.Fprintf(w, "\nconfig: %d bytes of TOML\n", len(g.ConfigTOML))
	for _, l := range strings.Split(strings.TrimRight(g.ConfigTOML, "\n"), "\n") {
		fmt.Fprintln(w, strings.TrimRight("  "+l, " "))
	}
	fmt.Fprintf(w, "vocab: %d bytes\n", len(g.Vocab))
	table(fmt.Sprintf("\nregions (%d):", len(g.Regions)), func(tw *tabwriter.Writer) {
		fmt.Fprintln(tw, "  #\tname\theap\tbytes\talign")
		for i, r := range g.Regions {
			heap := passes.Heap(r.Heap).String()
			if heap == "" {
				heap = fmt.Sprintf("heap(%d)", r.Heap)
			}
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%d\t%d\n", i, r.Name, heap, r.Bytes, r.Align)
		}
	})
	table(fmt.Sprintf("\nweights (%d):", len(g.Weights)), func(tw *tabwriter.Writer) {
		fmt.Fprintln(tw, "  buffer\ttensor\ttype\tdims\tregion\toffset\tbytes")
		for _, wt := range g.Weights {
			region := fmt.Sprint(wt.Region)
			if int(wt.Region) < len(g.Regions) {
				region = g.Regions[wt.Region].Name
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%v\t%s\t%d\t%d\n", wt.Buffer, wt.Tensor, ggml.Type(wt.Type), wt.Dims, region, wt.Offset, wt.Bytes)
		}
	})
	table(fmt.Sprintf("\nkernels (%d):", len(g.Kernels)), func(tw *tabwriter.Writer) {
		fmt.Fprintln(tw, "  #\tname\tfile\tsha256")
		for i, k := range g.Kernels {
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%x\n", i, k.Name, k.File, k.Hash)
		}
	})
	table(fmt.Sprintf("\nvariants (%d):", len(g.Variants)), func(tw *tabwriter.Writer) {
		fmt.Fprintln(tw, "  #\tkey\tdispatches\tdwords\trelocs\tscratch_bytes\tpeak_bytes\tregisters")
		for i, v := range g.Variants {
			fmt.Fprintf(tw, "  %d\t%s\t%d\t%d\t%d\t%d\t%d\t%d\n", i, v.Key(), v.Dispatches, len(v.Words), len(v.Relocs), v.ScratchBytes, v.PeakBytes, len(v.Liveness))
		}
	})
	Schedules(w, g)
}

// Schedules prints g's megakernel schedules, each whole: its
// multiprocessors' loads, its counters and every task (format/bundle's
// Schedule.WriteText), the tasks named by their dispatches' kernels.
func Schedules(w io.Writer, g *bundle.Graph) {
	fmt.Fprintf(w, "\nmegakernel schedules (%d)", len(g.Schedules))
	if len(g.Schedules) == 0 {
		fmt.Fprintln(w, ": the variants replay their streams")
		return
	}
	fmt.Fprintln(w, ":")
	for _, s := range g.Schedules {
		v := &g.Variants[s.Variant]
		ops, err := dispatchKernels(g, v)
		if err != nil {
			fmt.Fprintf(w, "  %s: %v\n", v.Key(), err)
		}
		fmt.Fprintln(w)
		s.WriteText(w, v.Key(), ops)
	}
}

// dispatchKernels names each dispatch of v's stream by its kernel.
func dispatchKernels(g *bundle.Graph, v *bundle.Variant) ([]string, error) {
	pkts, err := pm4.Decode(v.Words)
	if err != nil {
		return nil, err
	}
	pgm := map[uint32]uint32{} // dword of a PGM_LO value → kernel
	for _, r := range v.Relocs {
		if r.Sym.Space == pm4.SpaceKernel && r.Kind == pm4.RelocLo {
			pgm[r.Word] = r.Sym.Index
		}
	}
	var out []string
	kernel := -1
	for _, p := range pkts {
		switch p.Op {
		case pm4.SET_SH_REG:
			if p.Body[0] == pm4.COMPUTE_PGM_LO {
				if k, ok := pgm[uint32(p.Offset+2)]; ok && int(k) < len(g.Kernels) {
					kernel = int(k)
				}
			}
		case pm4.DISPATCH_DIRECT:
			name := "?"
			if kernel >= 0 {
				name = g.Kernels[kernel].Name
			}
			out = append(out, name)
			kernel = -1
		}
	}
	return out, nil
}

// Symbols names a bundle's regions and kernels for the disassembler.
func Symbols(g *bundle.Graph) *pm4.SymbolTable {
	syms := &pm4.SymbolTable{}
	for _, r := range g.Regions {
		syms.Regions = append(syms.Regions, r.Name)
	}
	for _, k := range g.Kernels {
		syms.Kernels = append(syms.Kernels, k.Name)
	}
	return syms
}

// GGUF writes the file's header, metadata and tensor table.
func GGUF(w io.Writer, f *gguf.File, target string) {
	fmt.Fprintf(w, "GGUF v%d, %d metadata keys, %d tensors, alignment %d, data at byte %d\n\n",
		f.Version, len(f.KV), len(f.Tensors), f.Alignment, f.DataOffset)
	fmt.Fprintln(w, "metadata:")
	for _, kv := range f.KV {
		fmt.Fprintf(w, "  %-48s %s\n", kv.Key, kv.Value)
	}
	fmt.Fprintf(w, "\ntensors (support for target %s):\n", target)
	byType := map[ggml.Type]int64{}
	var order []ggml.Type
	for i := range f.Tensors {
		t := &f.Tensors[i]
		mark := ""
		if compiler.RefusesWeightType(target, t.Type) {
			mark = "  unsupported"
		}
		fmt.Fprintf(w, "  %-40s %-8s %-22s %12d B%s\n", t.Name, t.Type, fmt.Sprint(t.Dims), t.Size, mark)
		if _, seen := byType[t.Type]; !seen {
			order = append(order, t.Type)
		}
		byType[t.Type] += t.Size
	}
	fmt.Fprintln(w, "\ntensor bytes by type:")
	for _, t := range order {
		note := ""
		if compiler.RefusesWeightType(target, t) {
			note = "  unsupported on " + target
			if ti, _ := t.Info(); ti.Removed != "" {
				note += " (removed from ggml: " + ti.Removed + ")"
			}
		}
		fmt.Fprintf(w, "  %-16s %14d B%s\n", t.Describe(), byType[t], note)
	}
}

// Verdict runs the build's front end (no passes, nothing written) and says
// whether it would succeed.
func Verdict(w io.Writer, path string, opt compiler.Options) {
	fe, err := compiler.Load(path, opt)
	switch {
	case err == nil:
		fe.Close()
		fmt.Fprintf(w, "\nbuild for %s: supported\n", opt.Target)
	case support.Is(err):
		fmt.Fprintf(w, "\nbuild for %s: refused: %v\n", opt.Target, err)
	default:
		fmt.Fprintf(w, "\nbuild for %s: fails: %v\n", opt.Target, err)
	}
}

// Pack prints a pack's index: its kind, the set's model, and every
// member's files with their sizes. It reads the index only.
func Pack(w io.Writer, path string) error {
	r, err := zrtp.Open(path)
	if err != nil {
		return err
	}
	defer r.Close()
	x := r.Index()
	packed, raw := x.Sizes()
	fmt.Fprintf(w, "pack %s: %s version %d, a %s of %d members, index sha256 %s\n", path, x.Format, x.Version, x.Kind, len(x.Members), r.Digest())
	fmt.Fprintf(w, "data: %d B packed, %d B unpacked (ratio %.3f)\n", packed, raw, zrtp.Ratio(packed, raw))
	if s := x.Set; s != nil {
		fmt.Fprintf(w, "set written by %s\nmodel: %s (%s), sha256 %s\nconfig (target aside): sha256 %s\n", s.Producer, s.Model.Source, s.Model.Architecture, s.Model.SHA256, s.Model.ConfigSHA256)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\ntarget\tfile\tpacked\tunpacked\tsha256")
	for _, f := range x.Files {
		fmt.Fprintf(tw, "(set)\t%s\t%d\t%d\t%s\n", f.Path, f.Size, f.RawSize, Short(f.SHA256))
	}
	for _, m := range x.Members {
		for _, f := range m.Files {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", m.Target, filepath.ToSlash(filepath.Join(m.Dir, f.Path)), f.Size, f.RawSize, Short(f.SHA256))
		}
	}
	return tw.Flush()
}

// Short abbreviates a hex digest for a table.
func Short(h string) string {
	if len(h) > 16 {
		return h[:16]
	}
	return h
}

// Packets disassembles the packet streams of the bundle at path (a
// directory or its graph file) with their relocations: every variant's,
// or only variant's when it is not negative.
func Packets(w io.Writer, path string, variant int) error {
	g, _, err := bundle.ReadGraph(path)
	if err != nil {
		return err
	}
	if variant >= len(g.Variants) {
		return fmt.Errorf("dump pkt: --variant %d, the bundle has %d variants (0..%d)", variant, len(g.Variants), len(g.Variants)-1)
	}
	syms := Symbols(g)
	for i, v := range g.Variants {
		if variant >= 0 && i != variant {
			continue
		}
		fmt.Fprintf(w, "; variant %d %s: %d dispatches, %d dwords, %d relocations\n", i, v.Key(), v.Dispatches, len(v.Words), len(v.Relocs))
		text, err := pm4.Disassemble(v.Words, v.Relocs, syms)
		io.WriteString(w, text)
		if err != nil {
			return fmt.Errorf("variant %d: %w", i, err)
		}
	}
	return nil
}

// Index prints the index of the bundle set or the pack at path (Set,
// Pack).
func Index(w io.Writer, path string) error {
	if zrtp.Is(path) {
		return Pack(w, path)
	}
	x, err := bundleset.Read(path)
	if err != nil {
		return err
	}
	return Set(w, path, x)
}

// Set prints bundle set x's index, read from path: the model, and each
// member's target, directory, requirements, key and whether it is the
// build the index names.
func Set(w io.Writer, path string, x *bundleset.Index) error {
	fmt.Fprintf(w, "bundle set %s: %s version %d, written by %s\n", path, x.Format, x.Version, x.Producer)
	fmt.Fprintf(w, "model: %s (%s), sha256 %s\nconfig (target aside): sha256 %s\n\n", x.Model.Source, x.Model.Architecture, x.Model.SHA256, x.Model.ConfigSHA256)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "target\tdir\ttier\trequires\tkey\tgraph_sha256\tstatus")
	for _, m := range x.Bundles {
		req := "any machine"
		if cc := m.Requires.CUDAComputeCapability; cc != "" {
			req = "CUDA compute capability >= " + cc
		}
		status := "ok"
		if err := bundleset.VerifyMember(path, m); err != nil {
			status = err.Error()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", m.Target, m.Dir, m.Requires.Tier, req, Short(m.Key), Short(m.GraphSHA256), status)
	}
	return tw.Flush()
}

// Liveness prints each variant's registers with their sizes, live
// ranges and the physical buffers the plan gave them.
func Liveness(w io.Writer, u *passes.Unit) {
	for i, g := range u.Graphs {
		lv, pm := u.Liveness[i], u.Physical[i]
		fmt.Fprintf(w, "variant %s: %d registers, %d instructions\n", g.Key, len(g.Regs), len(g.Insts))
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "value\tbytes\tdef\tlast\tphys\toffset\t")
		for r, reg := range g.Regs {
			p := pm.RegisterToPhysical[r]
			if p < 0 {
				continue // fused away: never written
			}
			fmt.Fprintf(tw, "%%%s\t%d\t%d\t%d\t%d\t%d\t\n", reg.Name, reg.Bytes(), lv.Def[r], lv.RegisterLastRead[r], p, pm.PhysicalOffsets[p])
		}
		tw.Flush()
		fmt.Fprintf(w, "planned %d B in %d physical buffers; lower bound (peak live) %d B; one buffer per value %d B\n\n",
			pm.ScratchBytes, len(pm.PhysicalSizes), lv.PeakBytes, lv.NaiveBytes)
	}
}

// BlobFiles prints the kernel blobs at paths (Blob), a blank line
// between two.
func BlobFiles(w io.Writer, paths []string) error {
	for i, path := range paths {
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		b, err := zrt.Decode(raw)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if i > 0 {
			fmt.Fprintln(w)
		}
		Blob(w, path, len(raw), b)
	}
	return nil
}

// Stage compiles model (with the config at cfg, "" for none) in memory
// and prints one stage's result (zrtc dump): "ir", the text IR as built
// or after the pass after; "memplan", the memory plan as JSON;
// "liveness", each variant's registers and buffers (Liveness). A tp of
// more than one rank compiles that rank of a tensor-parallel set.
func Stage(ctx context.Context, w io.Writer, stage, model, cfg, after string, tp passes.TP) error {
	fe, err := compiler.Load(model, compiler.Options{ConfigPath: cfg, TP: tp})
	if err != nil {
		return err
	}
	defer fe.Close()
	if stage == "ir" {
		if after != "" {
			if _, err := passes.RunWith(ctx, fe.Unit, passes.RunOptions{StopAfter: after}); err != nil {
				return err
			}
		}
		return ir.Print(w, fe.Unit.Graphs...)
	}
	if _, err := passes.Run(ctx, fe.Unit, "", false); err != nil {
		return err
	}
	switch stage {
	case "memplan":
		b, err := fe.Unit.Plan.JSON()
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(w, string(b))
		return err
	case "liveness":
		Liveness(w, fe.Unit)
		return nil
	}
	return fmt.Errorf("dump: unknown stage %q: want liveness, memplan or ir", stage)
}

// Inspect prints the GGUF at path (GGUF) for target, by default the
// target of its effective config (cfg: the config file, "" for none),
// and the build's verdict (Verdict).
func Inspect(w io.Writer, path, cfg, target string) error {
	f, err := gguf.OpenModel(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if target == "" {
		target = config.DefaultTarget
		if c, err := config.Load(f, cfg, config.Overrides{}); err == nil {
			target = c.Target
		}
	}
	bw := bufio.NewWriter(w)
	GGUF(bw, f, target)
	Verdict(bw, path, compiler.Options{ConfigPath: cfg, Target: target})
	return bw.Flush()
}
