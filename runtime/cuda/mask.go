package cuda

import (
	"encoding/binary"
	"fmt"
	"strings"
	"unsafe"

	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/kernels"
	kcuda "github.com/zrtdev/zrt/kernels/cuda"
	"github.com/zrtdev/zrt/runtime/cuda/driver"
)

// masker takes constrained rows' greedy choice on the device: after a
// step's graph, argmax's _masked entry picks each such slot's largest
// logit among the tokens its mask allows and overwrites its token, and
// the tokens come back again. Only the masks and a slot list go up (19
// KB a row for a 152k vocabulary), where the host path brings a row's
// logits down (600 KB) and scans them.
type masker struct {
	fn             driver.Function // 0: the bundle's argmax has no _masked entry
	logits, tokens int             // region indices
	nVocab, words  int             // words: 32-bit mask words a row
	maxRows        int
	host           []byte // pinned: the slot list (maxRows words), then the masks
	dev            driver.DevPtr
	// up is the stream the masks go up on, beside the step's: the copy
	// runs while the graph does, and the argmax waits only for uploaded,
	// recorded after it, instead of the copy following the graph on the
	// step's stream (tens of µs a step, a 64-row batch's masks being a
	// megabyte).
	up       driver.Stream
	uploaded driver.Event
	// The next Run's masked rows: their slots and masks, read once ready
	// (when set) has returned, after the step's graph was launched.
	slots   []int
	allowed [][]uint64
	ready   func()
}

// argmaxEntry is entry e of the bundle's argmax instance and the logits'
// and tokens' regions it reads and writes; 0 where the bundle's PTX has
// no such entry (a bundle built before it) or the graph no such region.
func (t *Tier) argmaxEntry(b *bundle.Bundle, e kcuda.EntryPoint) (fn driver.Function, logits, tokens int) {
	logits, tokens = b.Graph.RegionIndex(kernels.RegionLogits), b.Graph.RegionIndex(kernels.RegionTokens)
	for k, blob := range b.Blobs {
		if family, _, _ := strings.Cut(blob.Name, "."); family == "argmax" && t.entries[e][k] != 0 {
			fn = t.entries[e][k]
		}
	}
	if logits < 0 || tokens < 0 {
		fn = 0
	}
	return fn, logits, tokens
}

// hostAndDevice allocates n bytes of pinned host memory and n of device
// memory, a step's upload from the one to the other.
func hostAndDevice(n int) ([]byte, driver.DevPtr, error) {
	host, err := driver.MemHostAlloc(n)
	if err != nil {
		return nil, 0, err
	}
	dev, err := driver.MemAlloc(n)
	if err != nil {
		driver.MemFreeHost(host)
		return nil, 0, err
	}
	return host, dev, nil
}

// initMasker finds argmax's _masked entry and allocates the masks'
// buffers, for a bundle whose PTX has it.
func (t *Tier) initMasker(b *bundle.Bundle) error {
	m := &t.mask
	if m.fn, m.logits, m.tokens = t.argmaxEntry(b, kcuda.EntryMasked); m.fn == 0 {
		return nil
	}
	h := &b.Graph.Hparams
	m.nVocab, m.words, m.maxRows = h.NVocab, (h.NVocab+31)/32, h.MaxSlots
	var err error
	if m.host, m.dev, err = hostAndDevice(4 * m.maxRows * (1 + m.words)); err != nil {
		return fmt.Errorf("cuda: token masks: %w", err)
	}
	if m.up, err = driver.NewStream(driver.StreamNonBlocking); err != nil {
		return fmt.Errorf("cuda: token masks' stream: %w", err)
	}
	if m.uploaded, err = driver.NewEvent(driver.EventDisableTiming); err != nil {
		return fmt.Errorf("cuda: token masks' event: %w", err)
	}
	return nil
}

// Masks reports whether MaskGreedy works: the bundle's argmax has the
// _masked entry (bundles built before it have not).
func (t *Tier) Masks() bool { return t.mask.fn != 0 }

// MaskGreedy makes the next Run take each slot's greedy token among the
// tokens allowed[i] sets (bit t%64 of word t/64; words past the slice are
// clear, bits past the vocabulary ignored). Run reads the masks after it
// launched the step's graph, once ready (when not nil) has returned, so
// that the host may still compute them while the device runs the step.
func (t *Tier) MaskGreedy(slots []int, allowed [][]uint64, ready func()) error {
	m := &t.mask
	switch {
	case m.fn == 0:
		return fmt.Errorf("cuda: this bundle's argmax takes no token masks (rebuild it with this zrtc)")
	case len(slots) != len(allowed) || len(slots) > m.maxRows:
		return fmt.Errorf("cuda: %d masks for %d slots (at most %d)", len(allowed), len(slots), m.maxRows)
	}
	for _, slot := range slots {
		if slot < 0 || slot >= m.maxRows {
			return fmt.Errorf("cuda: mask for slot %d (slots 0..%d)", slot, m.maxRows-1)
		}
	}
	m.slots = append(m.slots[:0], slots...)
	m.allowed = append(m.allowed[:0], allowed...)
	m.ready = ready
	return nil
}

// maskedArgmax queues the masked rows' argmax and the tokens' copy back
// after the step's kernels on the stream, when MaskGreedy asked for it:
// it waits for the masks (the graph already runs), copies them into the
// pinned buffer and queues their upload on the masks' stream, which the
// argmax waits for.
func (t *Tier) maskedArgmax() error {
	m := &t.mask
	n := len(m.slots)
	if n == 0 {
		return nil
	}
	if m.ready != nil {
		m.ready()
	}
	masks := m.host[4*m.maxRows:]
	for i, slot := range m.slots {
		binary.LittleEndian.PutUint32(m.host[4*i:], uint32(slot))
		row := masks[4*i*m.words : 4*(i+1)*m.words]
		// A uint64 word is two uint32 words in little-endian order: the
		// same bits, token t at bit t%32 of word t/32.
		c := copy(row, unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(m.allowed[i]))), 8*len(m.allowed[i])))
		clear(row[c:])
	}
	m.slots, m.allowed, m.ready = m.slots[:0], m.allowed[:0], nil
	// One copy, of the slot list (the words past the n-th unread) and the
	// masks after it, on the masks' stream: the previous step's argmax,
	// the last reader of the device buffer, ended before Run returned.
	off := 4 * m.maxRows
	if err := driver.MemcpyHtoDAsync(m.dev, m.host[:off+4*n*m.words], m.up); err != nil {
		return err
	}
	if err := m.uploaded.Record(m.up); err != nil {
		return err
	}
	if err := t.stream.WaitEvent(m.uploaded); err != nil {
		return err
	}
	logits, tokens := &t.regions[m.logits], &t.regions[m.tokens]
	l := Launch{Name: "argmax (masked)", Shape: kcuda.Launch{Grid: [3]uint32{uint32(n), 1, 1}, Block: [3]uint32{1024, 1, 1}},
		Params: []uint64{uint64(logits.dev), uint64(m.dev), uint64(m.dev) + uint64(off), uint64(tokens.dev), uint64(m.nVocab), uint64(m.words)}}
	// A plain launch, not an overlapped one: the kernel does not wait for
	// the graph before it (it has no dep_sync).
	if err := t.launchFn(m.fn, &l, false); err != nil {
		return fmt.Errorf("cuda: masked argmax: %w", err)
	}
	return driver.MemcpyDtoHAsync(tokens.host, tokens.dev, t.stream)
}

// free releases the masks' buffers.
func (m *masker) free() {
	if m.uploaded != 0 {
		m.uploaded.Destroy()
		m.uploaded = 0
	}
	if m.up != 0 {
		m.up.Destroy()
		m.up = 0
	}
	if m.dev != 0 {
		driver.MemFree(m.dev)
		m.dev = 0
	}
	if m.host != nil {
		driver.MemFreeHost(m.host)
		m.host = nil
	}
	m.fn = 0
}
