package runtime

import "fmt"

// RegionStager is a tier that copies batches of ranges between a region
// and host memory without the host waiting for them, ordered with its
// replays as RegionCopier's copies are: the prefix cache's host tier
// copies a step's evicted KV pages out, and the pages it gives back in,
// so (Program.ReadKVPages, WriteKVPages). T-CUDA queues the copies on its
// stream, to and from page-locked memory.
type RegionStager interface {
	// HostBuffer returns n bytes of host memory the copies are fastest
	// to and from, kept until the tier closes. It may fail while
	// ReserveHostBuffers is still preparing the memory.
	HostBuffer(n int) ([]byte, error)
	// ReserveHostBuffers prepares memory for count HostBuffers of n
	// bytes in the background (pinning it takes T-CUDA's driver about
	// half a second a GiB), so that HostBuffer hands it out without
	// waiting.
	ReserveHostBuffers(n, count int)
	// StageFromRegion queues copies of len(dsts[k]) bytes at offs[k] of
	// region i into dsts[k], after everything queued before them and
	// before anything queued after (a replay that writes the bytes);
	// done reports, without waiting, whether they have landed.
	StageFromRegion(i int, offs []int64, dsts [][]byte) (done func() (bool, error), err error)
	// StageToRegion queues copies of srcs[k] into region i at offs[k],
	// in time for the next replay; srcs must not change until done
	// reports true.
	StageToRegion(i int, offs []int64, srcs [][]byte) (done func() (bool, error), err error)
	// StageRate is the copies' measured rate in bytes a second (0: none
	// measured yet).
	StageRate() float64
}

// KVHostBuffer returns one KV page's bytes of host memory that
// ReadKVPages and WriteKVPages copy fastest to and from (page-locked on
// T-CUDA; plain memory where the tier is no RegionStager).
func (p *Program) KVHostBuffer() ([]byte, error) {
	if s, ok := p.tier.(RegionStager); ok {
		return s.HostBuffer(p.KVPageBytes())
	}
	return make([]byte, p.KVPageBytes()), nil
}

// ReserveKVHostBuffers prepares memory for count KVHostBuffers in the
// background, where the tier has such memory to prepare (page-locked on
// T-CUDA): a KVHostBuffer call then takes it without waiting, and fails
// while none is ready yet.
func (p *Program) ReserveKVHostBuffers(count int) {
	if s, ok := p.tier.(RegionStager); ok {
		s.ReserveHostBuffers(p.KVPageBytes(), count)
	}
}

// ReadKVPages queues copies of pages' bytes, as the last Step left them,
// into dsts (KVPageBytes each), ordered before anything after writes the
// pages; dsts hold the bytes once done reports true. A tier that is no
// RegionStager copies them before it returns.
func (p *Program) ReadKVPages(pages []uint32, dsts [][]byte) (done func() (bool, error), err error) {
	offs, err := p.kvPageOffs(pages, dsts)
	if err != nil {
		return nil, err
	}
	if s, ok := p.tier.(RegionStager); ok {
		return s.StageFromRegion(p.kv, offs, dsts)
	}
	for k, pg := range pages {
		if err := p.ReadKVPage(pg, dsts[k]); err != nil {
			return nil, err
		}
	}
	return landed, nil
}

// WriteKVPages queues copies of srcs (KVPageBytes each) into pages, in
// time for the next Step; srcs must not change until done reports true.
// A tier that is no RegionStager copies them before it returns.
func (p *Program) WriteKVPages(pages []uint32, srcs [][]byte) (done func() (bool, error), err error) {
	offs, err := p.kvPageOffs(pages, srcs)
	if err != nil {
		return nil, err
	}
	if s, ok := p.tier.(RegionStager); ok {
		return s.StageToRegion(p.kv, offs, srcs)
	}
	for k, pg := range pages {
		if err := p.WriteKVPage(pg, srcs[k]); err != nil {
			return nil, err
		}
	}
	return landed, nil
}

// KVCopyRate is the measured rate of ReadKVPages' and WriteKVPages'
// copies in bytes a second; 0 where none is measured (or the tier is no
// RegionStager, whose copies are memory moves).
func (p *Program) KVCopyRate() float64 {
	if s, ok := p.tier.(RegionStager); ok {
		return s.StageRate()
	}
	return 0
}

func landed() (bool, error) { return true, nil }

// kvPageOffs checks a batch of page copies and returns the pages' offsets
// in the KV region.
func (p *Program) kvPageOffs(pages []uint32, bufs [][]byte) ([]int64, error) {
	if len(pages) != len(bufs) {
		return nil, fmt.Errorf("runtime: %d KV pages to copy with %d buffers", len(pages), len(bufs))
	}
	offs := make([]int64, len(pages))
	for k, pg := range pages {
		_, off, err := p.kvPage(pg, len(bufs[k]))
		if err != nil {
			return nil, err
		}
		offs[k] = off
	}
	return offs, nil
}
