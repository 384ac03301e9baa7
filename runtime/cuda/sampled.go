package cuda

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/zrtdev/zrt/format/bundle"
	kcuda "github.com/zrtdev/zrt/kernels/cuda"
	"github.com/zrtdev/zrt/runtime/cuda/driver"
)

// drawer draws sampled rows' tokens on the device: after a step's graph,
// argmax's _sampled entry draws each such slot's token at its temperature
// from its logits with the uniform draw the host gave it
// (sample.Sampler.DrawWith's arithmetic, bit for bit) and overwrites its
// token, and the tokens come back again. A row's parameters go up (32
// bytes) where the host path brings its logits down (600 KB for a 152k
// vocabulary) and passes over them on a core.
type drawer struct {
	fn             driver.Function // 0: the bundle's argmax has no _sampled entry
	logits, tokens int             // region indices
	nVocab         int
	maxRows        int
	host           []byte // pinned: the slot list (maxRows words), then 32 bytes a row from specOff
	dev            driver.DevPtr
	specOff        int
	// The next Run's sampled rows.
	slots  []int
	inv, u []float64
	ban    [][]int32
}

// drawSpecBytes is a row's parameters in the kernel's layout: the inverse
// temperature and the uniform draw as float64, then MaxSampleBans int32
// banned tokens (-1: none).
const drawSpecBytes = 32

// initDrawer finds argmax's _sampled entry and allocates its buffers, for
// a bundle whose PTX has it.
func (t *Tier) initDrawer(b *bundle.Bundle) error {
	d := &t.drawer
	if d.fn, d.logits, d.tokens = t.argmaxEntry(b, kcuda.EntrySampled); d.fn == 0 {
		return nil
	}
	h := &b.Graph.Hparams
	d.nVocab, d.maxRows = h.NVocab, h.MaxSlots
	d.specOff = (4*d.maxRows + 7) &^ 7
	var err error
	if d.host, d.dev, err = hostAndDevice(d.specOff + drawSpecBytes*d.maxRows); err != nil {
		return fmt.Errorf("cuda: sampled rows' parameters: %w", err)
	}
	return nil
}

// Samples reports whether SampleGreedy works: the bundle's argmax has the
// _sampled entry (bundles built before it have not).
func (t *Tier) Samples() bool { return t.drawer.fn != 0 }

// SampleGreedy makes the next Run replace each slot's greedy token by
// its draw at inverse temperature inv[i] with the uniform draw u[i], the
// tokens of ban[i] excluded (runtime.DeviceSampler).
func (t *Tier) SampleGreedy(slots []int, inv, u []float64, ban [][]int32) error {
	d := &t.drawer
	switch {
	case d.fn == 0:
		return fmt.Errorf("cuda: this bundle's argmax draws no samples (rebuild it with this zrtc)")
	case len(inv) != len(slots) || len(u) != len(slots) || len(ban) != len(slots) || len(slots) > d.maxRows:
		return fmt.Errorf("cuda: %d draws for %d slots (at most %d)", len(inv), len(slots), d.maxRows)
	}
	for i, slot := range slots {
		if slot < 0 || slot >= d.maxRows || len(ban[i]) > drawSpecBytes/4-4 {
			return fmt.Errorf("cuda: a draw for slot %d (slots 0..%d) banning %d tokens", slot, d.maxRows-1, len(ban[i]))
		}
	}
	d.slots, d.inv, d.u, d.ban = append(d.slots[:0], slots...), append(d.inv[:0], inv...), append(d.u[:0], u...), append(d.ban[:0], ban...)
	return nil
}

// sampledDraw queues the sampled rows' draws and the tokens' copy back
// after the step's kernels on the stream, when SampleGreedy asked for
// them.
func (t *Tier) sampledDraw() error {
	d := &t.drawer
	n := len(d.slots)
	if n == 0 {
		return nil
	}
	le := binary.LittleEndian
	for i, slot := range d.slots {
		le.PutUint32(d.host[4*i:], uint32(slot))
		spec := d.host[d.specOff+drawSpecBytes*i:]
		le.PutUint64(spec, math.Float64bits(d.inv[i]))
		le.PutUint64(spec[8:], math.Float64bits(d.u[i]))
		for k := range 4 {
			b := int32(-1)
			if k < len(d.ban[i]) {
				b = d.ban[i][k]
			}
			le.PutUint32(spec[16+4*k:], uint32(b))
		}
	}
	d.slots, d.inv, d.u, d.ban = d.slots[:0], d.inv[:0], d.u[:0], d.ban[:0]
	// The previous step's draw, the last reader of the device buffer,
	// ended before Run returned.
	if err := driver.MemcpyHtoDAsync(d.dev, d.host[:d.specOff+drawSpecBytes*n], t.stream); err != nil {
		return err
	}
	logits, tokens := &t.regions[d.logits], &t.regions[d.tokens]
	l := Launch{Name: "argmax (sampled)", Shape: kcuda.Launch{Grid: [3]uint32{uint32(n), 1, 1}, Block: [3]uint32{1024, 1, 1}},
		Params: []uint64{uint64(logits.dev), uint64(d.dev), uint64(d.dev) + uint64(d.specOff), uint64(tokens.dev), uint64(d.nVocab)}}
	if err := t.launchFn(d.fn, &l, false); err != nil {
		return fmt.Errorf("cuda: sampled draw: %w", err)
	}
	return driver.MemcpyDtoHAsync(tokens.host, tokens.dev, t.stream)
}

// free releases the draws' buffers.
func (d *drawer) free() {
	if d.dev != 0 {
		driver.MemFree(d.dev)
		d.dev = 0
	}
	if d.host != nil {
		driver.MemFreeHost(d.host)
		d.host = nil
	}
	d.fn = 0
}

// deviceChoices queues what replaces the graph's greedy tokens after it:
// the constrained rows' masked argmax and the sampled rows' draws.
func (t *Tier) deviceChoices() error {
	if err := t.maskedArgmax(); err != nil {
		return err
	}
	return t.sampledDraw()
}
