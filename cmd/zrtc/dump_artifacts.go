package main

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"os"
	"reflect"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/zrtdev/zrt/asm/pm4"
	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/format/bundleset"
	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/format/zrt"
	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/passes"
)

// withArtifactDumps adds the dumps of built artifacts to `zrtc dump`, beside
// its dumps of compilation stages: every file zrtc writes can be printed.
// They read only the file they print, so a bundle whose other files are
// missing or corrupt can still be inspected.
func withArtifactDumps(dump *cobra.Command) *cobra.Command {
	dump.AddCommand(dumpPktCmd(), dumpZrtCmd(), dumpGraphCmd(), dumpSetCmd())
	return dump
}

func dumpPktCmd() *cobra.Command {
	variant := -1
	c := &cobra.Command{
		Use:   "pkt BUNDLE",
		Short: "Disassemble a bundle's packet streams, with relocations (BUNDLE: directory or graph file)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			g, _, err := bundle.ReadGraph(args[0])
			if err != nil {
				return err
			}
			if variant >= len(g.Variants) {
				return fmt.Errorf("dump pkt: --variant %d, the bundle has %d variants (0..%d)", variant, len(g.Variants), len(g.Variants)-1)
			}
			w := cmd.OutOrStdout()
			syms := graphSymbols(g)
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
		},
	}
	c.Flags().IntVar(&variant, "variant", -1, "print only this variant (index, as `zrtc dump graph` lists them)")
	return c
}

func dumpZrtCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "zrt FILE.zrt...",
		Short: "Print kernel blobs: header fields, and specialization slots with their values",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			for i, path := range args {
				raw, err := os.ReadFile(path)
				if err != nil {
					return err
				}
				b, err := zrt.Decode(raw)
				if err != nil {
					return fmt.Errorf("%s: %w", path, err)
				}
				if i > 0 {
					fmt.Fprintln(cmd.OutOrStdout())
				}
				printBlob(cmd.OutOrStdout(), path, len(raw), b)
			}
			return nil
		},
	}
}

func printBlob(w io.Writer, path string, size int, b *zrt.Blob) {
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

func dumpGraphCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "graph BUNDLE",
		Short: "Print a bundle's graph file: version, sections, ident, hparams, regions, weights, kernels, variants",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			g, raw, err := bundle.ReadGraph(args[0])
			if err != nil {
				return err
			}
			_, _, secs, err := bundle.Sections(raw)
			if err != nil {
				return err
			}
			printGraph(cmd.OutOrStdout(), len(raw), secs, g)
			return nil
		},
	}
}

func printGraph(w io.Writer, size int, secs []bundle.Section, g *bundle.Graph) {
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
}

// graphSymbols names a bundle's regions and kernels for the disassembler.
func graphSymbols(g *bundle.Graph) *pm4.SymbolTable {
	syms := &pm4.SymbolTable{}
	for _, r := range g.Regions {
		syms.Regions = append(syms.Regions, r.Name)
	}
	for _, k := range g.Kernels {
		syms.Kernels = append(syms.Kernels, k.Name)
	}
	return syms
}

func verifyCmd() *cobra.Command {
	var quiet bool
	c := &cobra.Command{
		Use:   "verify BUNDLE",
		Short: "Check a bundle fully: files, checksums, hashes, blobs, and every packet stream against its memory plan and kernel ABIs",
		Long: `verify opens the bundle with the full check (graph file checksums and
tables, kernel blobs against their recorded hashes and all slots patched,
the weights pack against the memory plan and its data hash), then walks
every variant's packet stream with the PM4 checker: program and user data
set for every dispatch as its kernel's ABI requires, every address a
relocation inside its region, a barrier and the fence at the end.
Given a bundle set, it checks the index, that every member is the build
the index names, and every member as above.
It prints "ok", or the first problem and exits 1.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dirs := []string{args[0]}
			if bundleset.IsSet(args[0]) {
				// A set: the index, each member against it, and each
				// member in full.
				x, err := bundleset.Read(args[0])
				if err != nil {
					return err
				}
				dirs = nil
				for _, m := range x.Bundles {
					if err := bundleset.VerifyMember(args[0], m); err != nil {
						return err
					}
					dirs = append(dirs, m.Path(args[0]))
				}
			}
			for _, dir := range dirs {
				if err := verifyBundle(cmd, dir, quiet); err != nil {
					return err
				}
			}
			fmt.Fprintln(cmd.OutOrStdout(), "ok")
			return nil
		},
	}
	c.Flags().BoolVarP(&quiet, "quiet", "q", false, "print only ok")
	return c
}

// verifyBundle checks one bundle fully, saying what it checked on stderr
// unless quiet.
func verifyBundle(cmd *cobra.Command, dir string, quiet bool) error {
	b, err := bundle.Open(dir, true)
	if err != nil {
		return err
	}
	defer b.Close()
	g := b.Graph
	dispatches, err := kernels.CheckBundle(g)
	if err != nil {
		return fmt.Errorf("bundle %s: %w", dir, err)
	}
	if !quiet {
		fmt.Fprintf(cmd.ErrOrStderr(), "zrtc: %s: %d variants (%d dispatches), %d kernels, %d regions, weights hash verified\n",
			dir, len(g.Variants), dispatches, len(g.Kernels), len(g.Regions))
	}
	return nil
}
