// Package runtime is zrt-run's mechanism layer: Open maps a bundle, picks
// a tier and returns a Program — the compiled variants by ShapeKey and the
// memory plan's regions — whose Step replays one variant over a batch
// given as a plain value. Slots, sequences, scheduling and sampling are
// policy and live above it (runtime/sequence for one-shot use,
// runtime/decode for one request's tokens). It never imports the compiler.
package runtime

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"time"
	"unsafe"

	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/format/bundleset"
	"github.com/zrtdev/zrt/format/vocab"
	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/runtime/sample"
	"github.com/zrtdev/zrt/runtime/sysmem"
	"github.com/zrtdev/zrt/runtime/tiers"
	"github.com/zrtdev/zrt/runtime/tokenizer"
)

// Tier is what a program needs of an execution tier: host views of the
// request table and the outputs, and replay of a variant to its fence. It
// is defined beside the tier table (runtime/tiers), whose rows load one.
type Tier = tiers.Tier

// A Fetcher is a tier whose host view of some regions is brought up to
// date only on request (T-CUDA's logits): Fetch copies bytes [off, off+n)
// of region i from the device.
type Fetcher interface {
	Fetch(i int, off, n int64) error
}

// RegionCopier is a tier whose regions the host can copy to and from
// between replays: the prefix cache's host tier moves KV pages through it
// (Program.ReadKVPage, WriteKVPage). T-CPU copies within memory; T-CUDA
// queues its copies on its stream, so a write lands before the next
// replay and a read sees the last one's bytes.
type RegionCopier interface {
	CopyFromRegion(i int, off int64, dst []byte) error
	CopyToRegion(i int, off int64, src []byte) error
}

// Options configure Open. Every setting is here: the runtime reads no
// environment variables (the commands map ZRT_* onto these fields), so
// one process can hold programs with different settings.
type Options struct {
	Tier    string // auto (default) or a row of the tier table: cpu, cuda, t1, t2, metal
	Threads int    // T-CPU workers (default: all CPUs)
	// Verify hashes the weights pack against the graph file before
	// anything runs (it reads every byte; Log hears its progress). Without
	// it a load checks every table, hash link and kernel blob, but trusts
	// the weight bytes, which a multi-GB model would take seconds to hash.
	Verify bool
	// Log receives notes such as a tier fallback.
	Log func(format string, args ...any)
	// Trace is passed to T-CPU (see cpu.Options.Trace).
	Trace func(i int, kernel string, out []byte)
	// MapWeights keeps T-CPU's weights in the mapped pack rather than
	// copying them into huge-page memory (see cpu.Options.MapWeights).
	MapWeights bool
	// CUDA configures T-CUDA when it is the tier.
	CUDA tiers.CUDAOptions
	// KFD picks T1's device: "" or "kfd" the real /dev/kfd, "sim" the
	// simulated device of runtime/amd/kfdsim (T-CPU kernels behind the
	// whole T1 path: ring, doorbell, packets, relocations, fences).
	KFD string
	// Beside, when set, is a program this one runs beside, one step at a
	// time (a draft model beside its target): on T-CPU the two share
	// Beside's worker pool, so neither's idle workers spin while the
	// other's run.
	Beside *Program
	// Table is the tier table to choose from; nil is runtime/tiers.Table.
	// Tests give their own rows (T1 on the simulated KFD standing in for
	// a kind it does not run).
	Table []tiers.Row
}

// Stage is the kind of step a variant was compiled for (format/bundle's
// definition, which the compiler shares).
type Stage = bundle.Stage

// The stages, numbered as in the graph file.
const (
	Prefill = bundle.StagePrefill // batched prompt rows (GEMM, batched attention)
	Decode  = bundle.StageDecode  // one row per slot
	// Draft is a decode step through the model's first layers and its
	// output head (self-speculation's draft), in bundles built with
	// draft_layers.
	Draft = bundle.StageDraft
)

// ShapeKey names a compiled variant: its stage, the slots its page table
// covers and the query rows one replay evaluates at most.
type ShapeKey = bundle.ShapeKey

// Row is one query row of a step: the token at position Pos of the
// sequence in slot Slot. Logits asks for that slot's logits after the step
// (rows that are not a sequence's last in the step rarely need them).
type Row struct {
	Slot   int
	Pos    int
	Token  int32
	Logits bool
	// Prompt is the number of prompt tokens the row's request evaluates
	// in its prefill (0 for a decode row): a property of the request,
	// which tiers may use to pick a path (kernels.RowLongPrompt).
	Prompt int `json:",omitempty"`
	// Mask, when set, restricts the row's greedy choice (Greedy after the
	// step) to the tokens whose bit it sets: bit t%64 of word t/64 for
	// token t (words past the slice clear, bits past n_vocab ignored).
	// Only a row that wants logits may have one. A tier that is a Masker takes that choice on the device;
	// on the others Step takes it from the logits on the host.
	Mask []uint64 `json:"-"`
	// Sample, when set, has a DeviceSampler tier replace the row's greedy
	// choice by a temperature draw from its logits (sample.DrawWith's, in
	// the same operations). Only a row that wants logits and has no Mask
	// may have one, and only on a tier that SamplesOnDevice.
	Sample *RowSample `json:"-"`
}

// RowSample is a row's draw on the device: the inverse temperature, the
// uniform draw in [0, 1) and the tokens banned from it (at most
// MaxSampleBans).
type RowSample struct {
	Inv, U float64
	Ban    []int32
}

// MaxSampleBans is the most banned tokens a RowSample may carry.
const MaxSampleBans = 4

// DeviceSampler is a tier that draws a row's token at a temperature on
// the device (Row.Sample), so its logits never come to the host.
type DeviceSampler interface {
	// Samples reports whether SampleGreedy works (a bundle built before
	// the tier's sampling kernel existed has none).
	Samples() bool
	// SampleGreedy makes the next Run replace the greedy token of each
	// slot in slots by a draw at inverse temperature inv[i] with the
	// uniform draw u[i], the tokens of ban[i] excluded; -1 where no
	// token has weight or a logit is +Inf (the caller draws on the host).
	SampleGreedy(slots []int, inv, u []float64, ban [][]int32) error
}

// Masker is a tier that takes a constrained row's greedy choice on the
// device, so its logits, a vocabulary of floats, never come to the host.
type Masker interface {
	// Masks reports whether MaskGreedy works (a bundle built before the
	// tier's masked argmax existed has no kernel for it).
	Masks() bool
	// MaskGreedy makes the next Run replace the greedy token of each slot
	// in slots by its largest logit among the tokens allowed[i] sets.
	// Run reads the masks after it has launched the step's forward pass,
	// once ready (when not nil) has returned; they must stay unchanged
	// from then until Run returns.
	MaskGreedy(slots []int, allowed [][]uint64, ready func()) error
}

// SlotPages is a slot's page table: Pages[i] is the KV page holding its
// positions [16i, 16i+16).
type SlotPages struct {
	Slot  int
	Pages []uint32
}

// Batch is one step's input: the variant to replay, its query rows, and
// the page tables of the slots those rows belong to. It is a plain value
// so a scheduler can build, print and log it.
type Batch struct {
	Key   ShapeKey
	Rows  []Row
	Pages []SlotPages
	// MasksReady, when set, waits until the rows' masks (Row.Mask) hold
	// their tokens: the caller may still be computing them when it calls
	// Step. Step calls it once, before anything reads a mask, and on a
	// Masker tier after the step's forward pass was launched, so that the
	// host's work on the masks overlaps the device's.
	MasksReady func() `json:"-"`
	// OneRowBits asks that every row come out bit for bit as it does in
	// a one-row decode step of its own: a speculative verify step, whose
	// rows stand for the one-row steps of decoding without speculation,
	// so that greedy output does not change with speculation. A tier
	// whose rows' bits depend on how many share a step (T-CUDA's
	// tensor-core tiles) is a OneRowRunner and replays such a step with
	// other kernels; the others (T-CPU: batch invariant) need nothing.
	OneRowBits bool `json:",omitempty"`
}

// OneRowRunner is a tier whose rows' bits in a decode step of several
// rows may differ from a one-row step's, and that can replay a step so
// that they do not (Batch.OneRowBits).
type OneRowRunner interface {
	// RunOneRow is Run for decode variant i, every row with the bits of
	// a one-row decode step.
	RunOneRow(ctx context.Context, i int) error
}

// Program is a loaded bundle on a tier.
type Program struct {
	Bundle  *bundle.Bundle
	Hparams bundle.Hparams
	Tok     *tokenizer.Tokenizer
	tier    Tier
	// ranks are the other ranks' bundles of a tensor-parallel set, whose
	// rank 0 is Bundle: one tier runs them all.
	ranks []*bundle.Bundle

	keys             []ShapeKey // by variant index
	table            kernels.RequestTable
	kvPages          int
	kv               int // the KV pool's region
	io, logits, toks int // region indices
	// ioRing is the window ring's request table region, -1 without one:
	// a copy of io's header and rows whose page tables put a slot's
	// positions on its own ring of pages.
	ioRing int
	// err is a failure to fetch logits, which Logits cannot return: the
	// next Step returns it, and every one after.
	err error
	// masked are the slots and masks of the step being written whose
	// greedy choice Step takes on the host (the tier is no Masker);
	// scratch holds a slot's logits for it; masksReady is the batch's
	// MasksReady, called before the masks are read.
	maskSlots  []int
	masks      [][]uint64
	masksReady func()
	scratch    []float32
	// fetched marks the slots whose logits FetchLogits brought to the
	// host since the last Step (a device tier's); nil: none.
	fetched []bool
}

// Open loads a bundle and its tier.
func Open(dir string, opt Options) (*Program, error) {
	b, err := bundle.Open(dir, false)
	if err != nil {
		return nil, err
	}
	if opt.Verify {
		start := time.Now()
		logf(opt, "verifying the weights pack of %s (%s)", dir, sysmem.Bytes(int64(len(b.Pack))))
		if err := bundle.VerifyWeights(b.Pack, b.Graph.Ident.WeightsHash); err != nil {
			b.Close()
			return nil, fmt.Errorf("bundle %s: %s: %w", dir, bundle.WeightsFile, err)
		}
		logf(opt, "weights verified in %v", time.Since(start).Round(time.Millisecond))
	}
	p := &Program{Bundle: b, Hparams: b.Graph.Hparams, ioRing: -1}
	fail := func(err error) (*Program, error) { p.Close(); return nil, err }
	if b.Graph.Hparams.TPRanks > 1 {
		if p.ranks, err = openRanks(dir, b, opt); err != nil {
			return fail(err)
		}
	}
	if _, err := kernels.CheckBundle(b.Graph); err != nil {
		return fail(fmt.Errorf("bundle %s: %w", dir, err))
	}
	if p.Tok, err = loadTokenizer(b.Graph.Vocab); err != nil {
		return fail(fmt.Errorf("bundle %s: tokenizer: %w", dir, err))
	}
	for _, v := range b.Graph.Variants {
		p.keys = append(p.keys, v.ShapeKey())
	}
	h := &p.Hparams
	p.table = kernels.NewRequestTable(h.PrefillChunk, h.MaxSlots, h.MaxPages)
	idx := map[string]*int{kernels.RegionIO: &p.io, kernels.RegionLogits: &p.logits, kernels.RegionTokens: &p.toks}
	kv := -1
	for i, r := range b.Graph.Regions {
		if q, ok := idx[r.Name]; ok {
			*q = i + 1 // 0 marks a region not found
		}
		switch r.Name {
		case kernels.RegionKV:
			kv = i
		case kernels.RegionIOWindow:
			p.ioRing = i
		}
	}
	if (p.ioRing >= 0) != (h.KVWindowRing > 0) {
		has := map[bool]string{true: "has", false: "lacks"}[p.ioRing >= 0]
		return fail(fmt.Errorf("bundle %s: kv_window_ring is %d but the memory plan %s region %s", dir, h.KVWindowRing, has, kernels.RegionIOWindow))
	}
	for name, q := range idx {
		if *q == 0 {
			return fail(fmt.Errorf("bundle %s: memory plan lacks region %s", dir, name))
		}
		*q--
	}
	if kv < 0 {
		return fail(fmt.Errorf("bundle %s: memory plan lacks region %s", dir, kernels.RegionKV))
	}
	p.kv = kv
	if pb := int64(kernels.PageBytes(h)); pb > 0 {
		p.kvPages = int(b.Graph.Regions[kv].Bytes / pb)
	}
	tier, err := openTier(b, p.ranks, opt)
	if err != nil {
		return fail(err) // tier may be a typed nil: never keep it
	}
	p.tier = tier
	for _, region := range []int{p.io, p.ioRing} {
		if region < 0 {
			continue
		}
		w := p.words(region)
		if len(w) < p.table.Words() {
			return fail(fmt.Errorf("bundle %s: request table region of %d words, the plan needs %d", dir, len(w), p.table.Words()))
		}
		w[kernels.IOWordMaxPages] = uint32(p.table.MaxPages)
		w[kernels.IOWordPageTable] = uint32(p.table.PageTable())
	}
	return p, nil
}

// openRanks opens ranks 1.. of the tensor-parallel set whose rank 0 is
// b, at dir: a set runs only whole, so the bundle must be its set's
// member (the set's index beside it names the others) and every rank
// must be there, built from the same model for the same set.
func openRanks(dir string, b *bundle.Bundle, opt Options) ([]*bundle.Bundle, error) {
	h := &b.Graph.Hparams
	set := filepath.Dir(filepath.Clean(dir))
	if h.TPRank != 0 {
		return nil, fmt.Errorf("bundle %s is rank %d of a tensor-parallel set of %d: open the set %s (or its rank 0)", dir, h.TPRank, h.TPRanks, set)
	}
	x, err := bundleset.Read(set)
	if err != nil {
		return nil, fmt.Errorf("bundle %s is rank 0 of a tensor-parallel set of %d, which runs only with every rank: %w", dir, h.TPRanks, err)
	}
	if x.TPRanks != h.TPRanks {
		return nil, fmt.Errorf("bundle set %s: tp_ranks %d, its bundle %s says %d", set, x.TPRanks, dir, h.TPRanks)
	}
	target := b.Graph.Ident.Target
	var ranks []*bundle.Bundle
	fail := func(err error) ([]*bundle.Bundle, error) {
		for _, r := range ranks {
			r.Close()
		}
		return nil, err
	}
	for r := 1; r < h.TPRanks; r++ {
		m, ok := x.Rank(target, r)
		if !ok {
			return fail(fmt.Errorf("bundle set %s: no rank %d of target %s (the set runs only with all %d)", set, r, target, h.TPRanks))
		}
		if err := bundleset.VerifyMember(set, m); err != nil {
			return fail(err)
		}
		rb, err := bundle.Open(m.Path(set), false)
		if err != nil {
			return fail(fmt.Errorf("bundle set %s: rank %d: %w", set, r, err))
		}
		ranks = append(ranks, rb)
		rh, id := &rb.Graph.Hparams, &rb.Graph.Ident
		if rh.TPRanks != h.TPRanks || rh.TPRank != r || id.SourceHash != b.Graph.Ident.SourceHash || id.Target != target {
			return fail(fmt.Errorf("bundle set %s: %s is not rank %d of the set of %d that %s begins (a member of another build?)", set, m.Dir, r, h.TPRanks, dir))
		}
		if _, err := kernels.CheckBundle(rb.Graph); err != nil {
			return fail(fmt.Errorf("bundle %s: %w", m.Path(set), err))
		}
		if opt.Verify {
			if err := bundle.VerifyWeights(rb.Pack, rb.Graph.Ident.WeightsHash); err != nil {
				return fail(fmt.Errorf("bundle %s: %s: %w", m.Path(set), bundle.WeightsFile, err))
			}
		}
	}
	return ranks, nil
}

// logf reports through opt.Log when it is set.
func logf(opt Options, format string, args ...any) {
	if opt.Log != nil {
		opt.Log(format, args...)
	}
}

func loadTokenizer(b []byte) (*tokenizer.Tokenizer, error) {
	v, err := vocab.Unmarshal(b)
	if err != nil {
		return nil, err
	}
	return tokenizer.New(v)
}

// openTier loads b on the tier the choice in opt names, through the tier
// table (opt.Table, else runtime/tiers.Table): the row that runs the
// bundle's target, which an explicit choice must name; a choice that
// cannot run fails with the reason.
func openTier(b *bundle.Bundle, ranks []*bundle.Bundle, opt Options) (Tier, error) {
	target, ok := kernels.LookupTarget(b.Graph.Ident.Target)
	if !ok {
		return nil, fmt.Errorf("bundle target %s: this zrt-run knows %v; rebuild the bundle for one of them", b.Graph.Ident.Target, kernels.TargetNames())
	}
	rows := opt.Table
	if rows == nil {
		rows = tiers.Table()
	}
	row, err := tiers.Select(rows, opt.Tier, target)
	if err != nil {
		return nil, err
	}
	if len(ranks) > 0 {
		return tiers.LoadSet(row, append([]*bundle.Bundle{b}, ranks...), opt.TierOptions())
	}
	return row.Load(b, opt.TierOptions())
}

// TierOptions are the settings a tier's loader and device probe take.
func (opt Options) TierOptions() tiers.Options {
	o := tiers.Options{Threads: opt.Threads, Trace: opt.Trace, MapWeights: opt.MapWeights, Log: opt.Log, CUDA: opt.CUDA, KFD: opt.KFD}
	if opt.Beside != nil {
		o.CPUPool = tiers.CPUWorkers(opt.Beside.tier)
	}
	return o
}

// KVPageBytes is one KV page's bytes.
func (p *Program) KVPageBytes() int { return kernels.PageBytes(&p.Hparams) }

// KVLayout identifies how this program's KV pages hold their bytes, for
// the prefix cache's host tier, which never writes bytes stored under one
// layout into pages of another: a hash of the weights, the target, the
// tier and every hyperparameter (the cache types, rotations and page size
// among them). It is "" where pages cannot be copied: a tier that is no
// RegionCopier, or a tensor-parallel set, whose KV is split across
// devices.
func (p *Program) KVLayout() string {
	if _, ok := p.tier.(RegionCopier); !ok || len(p.ranks) > 0 || p.kvPages == 0 {
		return ""
	}
	id := &p.Bundle.Graph.Ident
	h := sha256.New()
	fmt.Fprintf(h, "%x\x00%x\x00%s\x00%s\x00%d\x00%+v", id.WeightsHash, id.SourceHash, id.Target, p.tier.Name(), p.KVPageBytes(), p.Hparams)
	return hex.EncodeToString(h.Sum(nil))
}

// ReadKVPage copies KV page page's bytes into dst (KVPageBytes long), as
// the last Step left them.
func (p *Program) ReadKVPage(page uint32, dst []byte) error {
	c, off, err := p.kvPage(page, len(dst))
	if err != nil {
		return err
	}
	return c.CopyFromRegion(p.kv, off, dst)
}

// WriteKVPage copies src (KVPageBytes long) into KV page page, in time for
// the next Step.
func (p *Program) WriteKVPage(page uint32, src []byte) error {
	c, off, err := p.kvPage(page, len(src))
	if err != nil {
		return err
	}
	return c.CopyToRegion(p.kv, off, src)
}

// kvPage checks a page copy of n bytes and returns the tier that makes it
// and the page's offset in the KV region.
func (p *Program) kvPage(page uint32, n int) (RegionCopier, int64, error) {
	c, ok := p.tier.(RegionCopier)
	switch {
	case !ok || len(p.ranks) > 0:
		return nil, 0, fmt.Errorf("runtime: tier %s cannot copy KV pages to and from host memory", p.tier.Name())
	case int(page) >= p.kvPages:
		return nil, 0, fmt.Errorf("runtime: KV page %d outside the pool of %d", page, p.kvPages)
	case n != p.KVPageBytes():
		return nil, 0, fmt.Errorf("runtime: a KV page copy of %d bytes, a page is %d", n, p.KVPageBytes())
	}
	return c, int64(page) * int64(n), nil
}

// Keys lists the compiled variants.
func (p *Program) Keys() []ShapeKey { return append([]ShapeKey(nil), p.keys...) }

// Key returns the variant of a stage that fits rows query rows with the
// least waste, or false when none does.
func (p *Program) Key(stage Stage, rows int) (ShapeKey, bool) {
	best, ok := ShapeKey{}, false
	for _, k := range p.keys {
		if k.Stage == stage && k.Rows >= rows && (!ok || k.Rows < best.Rows) {
			best, ok = k, true
		}
	}
	return best, ok
}

// Largest returns the variant of a stage with the most rows, or false when
// the bundle has none of that stage.
func (p *Program) Largest(stage Stage) (ShapeKey, bool) {
	best, ok := ShapeKey{}, false
	for _, k := range p.keys {
		if k.Stage == stage && (!ok || k.Rows > best.Rows) {
			best, ok = k, true
		}
	}
	return best, ok
}

// Slots is how many slots the page table covers: slot ids run 0..Slots-1.
func (p *Program) Slots() int { return p.table.Slots }

// MaxPages is the page-table entries a slot has: its longest sequence is
// MaxPages × kernels.KVPageTokens positions.
func (p *Program) MaxPages() int { return p.table.MaxPages }

// KVPages is the number of pages in the KV region; page ids run
// 0..KVPages-1.
func (p *Program) KVPages() int { return p.kvPages }

// SlotState reports whether the model keeps state in its slots beside
// the shared KV pages: recurrent layers, whose state starts over at
// position 0, or a ring of window-layer pages. Such state cannot be
// shared between sequences, and a slot's next occupant overwrites it.
func (p *Program) SlotState() bool { return p.Hparams.RecurrentBytes > 0 || p.Hparams.KVWindowRing > 0 }

// TierName names the tier in use.
func (p *Program) TierName() string { return p.tier.Name() }

// Close releases the tier and the bundle.
func (p *Program) Close() error {
	if p.tier != nil {
		p.tier.Close()
	}
	for _, b := range p.ranks {
		b.Close()
	}
	return p.Bundle.Close()
}

// ioWords views the request table.
func (p *Program) ioWords() []uint32 { return p.words(p.io) }

// words views a region as 32-bit words.
func (p *Program) words(region int) []uint32 {
	b := p.tier.Region(region)
	return unsafe.Slice((*uint32)(unsafe.Pointer(&b[0])), len(b)/4)
}

// Step writes b's rows and page tables into the request table and replays
// b.Key's variant once. It checks everything a kernel would otherwise
// index with: the variant exists, the rows fit it, slots, positions and
// tokens are in range, and each row's position lies on a page its slot's
// table (given in b.Pages) maps to a page of the KV region.
func (p *Program) Step(ctx context.Context, b Batch) error {
	if p.err != nil {
		return p.err
	}
	vi, err := p.write(b)
	if err != nil {
		return err
	}
	run := p.tier.Run
	if o, ok := p.tier.(OneRowRunner); ok && b.OneRowBits {
		run = o.RunOneRow
	}
	if err := run(ctx, vi); err != nil {
		return err
	}
	return p.maskOnHost()
}

// Warm replays the smallest prefill variant and the one-row decode
// variant once, a row each (token 0 at position 0 of slot 0, its key and
// value in KV page 0), so that what a tier does on a variant's first
// replay is paid before the first request rather than by it: T-CPU
// interleaves its Q4_K matrices and faults in the weights' pages (about
// half a second for the qwen3 0.6B shape on 2 cores, seconds for a 7B),
// T-CUDA instantiates the variants' graphs. It leaves page 0 and slot 0's
// state as any request's first step finds them written again (a request
// writes both from position 0 on before it reads them), so it may run
// only before the first request.
func (p *Program) Warm(ctx context.Context) error {
	if p.kvPages == 0 || p.table.Slots == 0 {
		return nil
	}
	for _, st := range []Stage{Prefill, Decode} {
		k, ok := p.Key(st, 1)
		if !ok {
			continue
		}
		row := Row{Slot: 0, Pos: 0, Token: 0, Logits: true}
		if st == Prefill {
			row.Prompt = 1
		}
		b := Batch{Key: k, Rows: []Row{row}, Pages: []SlotPages{{Slot: 0, Pages: []uint32{0}}}}
		if err := p.Step(ctx, b); err != nil {
			return fmt.Errorf("runtime: warming variant %s: %w", k, err)
		}
	}
	return nil
}

// MasksOnDevice reports whether the tier takes masked rows' greedy choice
// on the device (Row.Mask): a caller that can compute a mask only after
// the step (overlapping the two) may then prefer to send it before.
func (p *Program) MasksOnDevice() bool {
	m, ok := p.tier.(Masker)
	return ok && m.Masks()
}

// StepPath says how the steps of variant key run, for a tier that has
// more than one way (T-CUDA's persistent decode kernel or its graph path,
// docs/design/megakernel.md): "megakernel", or "graph: " and why not the
// megakernel; "" for a tier with one way.
func (p *Program) StepPath(key ShapeKey) string {
	m, ok := p.tier.(interface{ Megakernel(vi int) (bool, string) })
	if !ok {
		return ""
	}
	on, why := m.Megakernel(p.VariantIndex(key))
	if on {
		return "megakernel"
	}
	return "graph: " + why
}

// SetMegakernel switches a tier's persistent decode kernel on or off
// (T-CUDA's Tier.SetMegakernel), for A/B runs in one process; false for a
// tier without one.
func (p *Program) SetMegakernel(on bool) (bool, error) {
	m, ok := p.tier.(interface{ SetMegakernel(on bool) error })
	if !ok {
		return false, nil
	}
	return true, m.SetMegakernel(on)
}

// mask sends the masks of b's rows to the tier, or keeps them for
// maskOnHost.
func (p *Program) mask(b Batch) error {
	p.maskSlots, p.masks, p.masksReady = p.maskSlots[:0], p.masks[:0], nil
	for i, r := range b.Rows {
		if r.Mask == nil {
			continue
		}
		if !r.Logits {
			return fmt.Errorf("step: row %d has a token mask but wants no logits", i)
		}
		p.maskSlots = append(p.maskSlots, r.Slot)
		p.masks = append(p.masks, r.Mask)
	}
	if !p.MasksOnDevice() {
		p.masksReady = b.MasksReady
		return nil
	}
	// Also with no masks, so that a Run that failed before it read the
	// last ones leaves none for the next.
	err := p.tier.(Masker).MaskGreedy(p.maskSlots, p.masks, b.MasksReady)
	p.maskSlots, p.masks = p.maskSlots[:0], p.masks[:0]
	return err
}

// maskOnHost takes the greedy choice of the masked rows the tier did not
// take, from their logits, into the tokens Greedy reads.
func (p *Program) maskOnHost() error {
	if p.masksReady != nil && len(p.maskSlots) > 0 {
		p.masksReady()
	}
	p.masksReady = nil
	toks := p.tier.Region(p.toks)
	for i, slot := range p.maskSlots {
		logits := p.LogitsView(slot)
		if logits == nil {
			p.scratch = p.Logits(slot, p.scratch)
			logits = p.scratch
		}
		binary.LittleEndian.PutUint32(toks[4*slot:], uint32(sample.MaskedArgmax(logits, p.masks[i])))
	}
	p.maskSlots, p.masks = p.maskSlots[:0], p.masks[:0]
	return p.err
}

// Inspector is a tier that can stop after each dispatch of a replay and
// show any region then: slow (no captured graph, a wait per kernel), for
// comparing tiers value by value (zrt-run validate).
type Inspector interface {
	// RunEach replays variant vi like Run, calling after once each
	// dispatch has finished; an error from it ends the replay.
	RunEach(ctx context.Context, vi int, after func(dispatch int) error) error
	// ReadRegion copies n bytes at off of region i.
	ReadRegion(i int, off, n int64) ([]byte, error)
}

// Inspect is Step on a tier that is an Inspector: after each dispatch it
// calls after with the dispatch's index and a reader of the regions. The
// variant replayed is b.Key's; Bundle.Graph.Variants at VariantIndex
// says which IR value each dispatch defines and where it lives.
func (p *Program) Inspect(ctx context.Context, b Batch, after func(dispatch int, read func(region int, off, n int64) ([]byte, error)) error) error {
	in, ok := p.tier.(Inspector)
	if !ok {
		return fmt.Errorf("tier %s cannot stop between dispatches", p.tier.Name())
	}
	vi, err := p.write(b)
	if err != nil {
		return err
	}
	return in.RunEach(ctx, vi, func(d int) error { return after(d, in.ReadRegion) })
}

// VariantIndex is the index of key's variant in the bundle's graph, or -1.
func (p *Program) VariantIndex(key ShapeKey) int {
	for i, k := range p.keys {
		if k == key {
			return i
		}
	}
	return -1
}

// write checks b and writes it into the request table, returning its
// variant's index.
func (p *Program) write(b Batch) (int, error) {
	clear(p.fetched) // the step overwrites the logits
	vi := p.VariantIndex(b.Key)
	if vi < 0 {
		return -1, fmt.Errorf("step: no variant %s in this bundle (it has %v)", b.Key, p.keys)
	}
	if len(b.Rows) == 0 || len(b.Rows) > b.Key.Rows {
		return -1, fmt.Errorf("step: %d rows for variant %s", len(b.Rows), b.Key)
	}
	mapped := make(map[int]int, len(b.Pages)) // slot → pages given
	w := p.ioWords()
	for _, sp := range b.Pages {
		if sp.Slot < 0 || sp.Slot >= p.table.Slots || len(sp.Pages) > p.table.MaxPages {
			return -1, fmt.Errorf("step: page table of %d pages for slot %d (slots 0..%d, at most %d pages)", len(sp.Pages), sp.Slot, p.table.Slots-1, p.table.MaxPages)
		}
		base := p.table.PageTable() + sp.Slot*p.table.MaxPages
		for i, pg := range sp.Pages {
			if int(pg) >= p.kvPages {
				return -1, fmt.Errorf("step: slot %d maps page %d, the KV region has %d", sp.Slot, pg, p.kvPages)
			}
			w[base+i] = pg
		}
		mapped[sp.Slot] = len(sp.Pages)
	}
	nv := int32(p.Hparams.NVocab)
	for i, r := range b.Rows {
		switch {
		case r.Token < 0 || r.Token >= nv:
			return -1, fmt.Errorf("step: row %d: token id %d outside the vocabulary of %d", i, r.Token, nv)
		case r.Pos < 0 || r.Pos >= mapped[r.Slot]*kernels.KVPageTokens:
			return -1, fmt.Errorf("step: row %d: position %d of slot %d is not on a page the batch maps", i, r.Pos, r.Slot)
		}
		rec := w[kernels.IOWordRowBase+i*kernels.IORowWords:]
		rec[kernels.IORowToken] = uint32(r.Token)
		rec[kernels.IORowPos] = uint32(r.Pos)
		rec[kernels.IORowSlot] = uint32(r.Slot)
		flags := uint32(0)
		if r.Logits {
			flags |= kernels.RowWantsLogits
		}
		if r.Prompt > 0 {
			flags |= kernels.RowPrompt
		}
		if r.Prompt >= kernels.LongPromptRows {
			flags |= kernels.RowLongPrompt
		}
		if promptTail(r) {
			flags |= kernels.RowPromptTail
		}
		rec[kernels.IORowFlags] = flags
	}
	w[kernels.IOWordRows] = uint32(len(b.Rows))
	if p.ioRing >= 0 {
		p.writeRing(w, b)
	}
	if err := p.mask(b); err != nil {
		return -1, err
	}
	if err := p.sample(b); err != nil {
		return -1, err
	}
	return vi, nil
}

// SamplesOnDevice reports whether the tier draws rows' tokens on the
// device (Row.Sample).
func (p *Program) SamplesOnDevice() bool {
	d, ok := p.tier.(DeviceSampler)
	return ok && d.Samples()
}

// sample sends the draws of b's rows to the tier.
func (p *Program) sample(b Batch) error {
	var slots []int
	var inv, u []float64
	var ban [][]int32
	for i, r := range b.Rows {
		switch {
		case r.Sample == nil:
			continue
		case !r.Logits || r.Mask != nil:
			return fmt.Errorf("step: row %d has a draw on the device but wants no logits, or has a mask", i)
		case len(r.Sample.Ban) > MaxSampleBans:
			return fmt.Errorf("step: row %d bans %d tokens from its draw, at most %d", i, len(r.Sample.Ban), MaxSampleBans)
		}
		slots, inv, u, ban = append(slots, r.Slot), append(inv, r.Sample.Inv), append(u, r.Sample.U), append(ban, r.Sample.Ban)
	}
	d, ok := p.tier.(DeviceSampler)
	switch {
	case ok && d.Samples():
		// Also with none, so that a Run that failed leaves none for the next.
		return d.SampleGreedy(slots, inv, u, ban)
	case len(slots) > 0:
		return fmt.Errorf("step: %d rows have draws on the device, which tier %s does not make", len(slots), p.tier.Name())
	}
	return nil
}

// writeRing fills the window ring's request table: the step's header and
// rows as written to the request table w, and for each slot in b a page
// table that puts its position p on ring page p/16 mod KVWindowRing of
// the slot's own ring. The ring holds a window and a chunk (the compiler
// sized it), so no page a row reads is one another row of the step
// writes.
func (p *Program) writeRing(w []uint32, b Batch) {
	r, n := p.words(p.ioRing), kernels.IOWordRowBase+len(b.Rows)*kernels.IORowWords
	copy(r[:n], w[:n])
	ring := p.Hparams.KVWindowRing
	for _, sp := range b.Pages {
		base := p.table.PageTable() + sp.Slot*p.table.MaxPages
		for i := range sp.Pages {
			r[base+i] = uint32(sp.Slot*ring + i%ring)
		}
	}
}

// Logits copies slot's logits from the last step that asked for them into
// dst (grown as needed) and returns it. On a tier that keeps them on the
// device it fetches them first, unless FetchLogits did; should that fail,
// they are NaN and the next Step returns the failure.
func (p *Program) Logits(slot int, dst []float32) []float32 {
	nv := p.Hparams.NVocab
	if cap(dst) < nv {
		dst = make([]float32, nv)
	}
	dst = dst[:nv]
	if f, ok := p.tier.(Fetcher); ok && p.err == nil && !p.wasFetched(slot) {
		if err := f.Fetch(p.logits, int64(slot*nv*4), int64(nv*4)); err != nil {
			p.err = fmt.Errorf("logits of slot %d: %w", slot, err)
		}
	}
	if p.err != nil {
		nan := float32(math.NaN())
		for i := range dst {
			dst[i] = nan
		}
		return dst
	}
	// The region holds the host's float32s, as the request table holds
	// its words (words): one copy, not a decode a float at a time (a
	// constrained row reads its whole vocabulary every step).
	copy(dst, p.logitsOf(slot))
	return dst
}

// FetchLogits brings the logits of slots of the last step to the host,
// on a tier that keeps them on the device, in one copy for each run of
// consecutive slots (Logits would take one a slot). Until the next Step,
// Logits then copies them without fetching and LogitsView shows them,
// which several goroutines may do at once. On a failure, Logits gives
// NaNs for every slot not yet fetched and the next Step returns it.
func (p *Program) FetchLogits(slots []int) error {
	f, ok := p.tier.(Fetcher)
	if !ok || p.err != nil {
		return p.err
	}
	if len(p.fetched) != p.table.Slots {
		p.fetched = make([]bool, p.table.Slots)
	}
	want := slices.Clone(slots)
	slices.Sort(want)
	row := int64(p.Hparams.NVocab * 4)
	for i := 0; i < len(want); {
		first := want[i]
		if first < 0 || first >= len(p.fetched) {
			return fmt.Errorf("logits of slot %d: slots are 0..%d", first, len(p.fetched)-1)
		}
		j := i + 1
		for j < len(want) && want[j] <= want[j-1]+1 {
			j++
		}
		last := want[j-1]
		if err := f.Fetch(p.logits, int64(first)*row, int64(last-first+1)*row); err != nil {
			p.err = fmt.Errorf("logits of slots %d..%d: %w", first, last, err)
			return p.err
		}
		for s := first; s <= last; s++ {
			p.fetched[s] = true
		}
		i = j
	}
	return nil
}

// wasFetched reports whether FetchLogits brought slot's logits to the
// host since the last Step.
func (p *Program) wasFetched(slot int) bool {
	return slot >= 0 && slot < len(p.fetched) && p.fetched[slot]
}

// logitsOf is slot's logits in the logits region's host view.
func (p *Program) logitsOf(slot int) []float32 {
	nv := p.Hparams.NVocab
	w := p.words(p.logits)[slot*nv : (slot+1)*nv]
	return unsafe.Slice((*float32)(unsafe.Pointer(&w[0])), nv)
}

// LogitsView is slot's logits of the last step where the tier keeps them,
// or FetchLogits brought them, read-only and valid until the next Step:
// a pass that reads few of them (a masked argmax over a grammar's allowed
// tokens) then copies none of the vocabulary. nil where they must be
// fetched (a device tier) or the last step failed: Logits copies them
// then.
func (p *Program) LogitsView(slot int) []float32 {
	if _, ok := p.tier.(Fetcher); ok && !p.wasFetched(slot) || p.err != nil {
		return nil
	}
	return p.logitsOf(slot)
}

// Greedy is the token the graph's ARGMAX picked for slot in the last step
// that asked for its logits.
func (p *Program) Greedy(slot int) int32 {
	return int32(binary.LittleEndian.Uint32(p.tier.Region(p.toks)[4*slot:]))
}

// promptTail says whether prompt row r is among the last (n mod 4) rows of
// the ubatch of n rows llama.cpp evaluates it in, the prompt evaluated from
// position 0 in ubatches of kernels.PromptUbatchRows (kernels.RowPromptTail).
func promptTail(r Row) bool {
	if r.Prompt <= 0 || r.Pos < 0 || r.Pos >= r.Prompt {
		return false
	}
	u := r.Pos / kernels.PromptUbatchRows * kernels.PromptUbatchRows
	n := min(kernels.PromptUbatchRows, r.Prompt-u)
	return r.Pos-u >= n-n%4
}
