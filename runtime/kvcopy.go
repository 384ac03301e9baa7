package runtime

import "fmt"

// RegionMover is a tier that can copy bytes from one place of a region to
// another between replays, ordered before the next one: a SubmitN
// choice takes its own copy of its group's partial prompt page so
// (Program.CopyKVPage). T-CPU moves memory; T-CUDA queues a
// device-to-device copy on its stream.
type RegionMover interface {
	CopyWithinRegion(i int, dst, src, n int64) error
}

// CopiesKVPages reports whether CopyKVPage can copy pages: the tier is a
// RegionMover and the KV is not split across devices.
func (p *Program) CopiesKVPages() bool {
	_, ok := p.tier.(RegionMover)
	return ok && len(p.ranks) == 0 && p.kvPages > 0
}

// CopyKVPage copies KV page src's bytes (every layer's K and V) into
// page dst, as the last Step left them, in time for the next Step.
func (p *Program) CopyKVPage(dst, src uint32) error {
	m, ok := p.tier.(RegionMover)
	switch {
	case !ok || len(p.ranks) > 0:
		return fmt.Errorf("runtime: tier %s cannot copy KV pages", p.tier.Name())
	case int(dst) >= p.kvPages || int(src) >= p.kvPages:
		return fmt.Errorf("runtime: a KV page copy from page %d to %d, outside the pool of %d", src, dst, p.kvPages)
	case dst == src:
		return nil
	}
	n := int64(p.KVPageBytes())
	return m.CopyWithinRegion(p.kv, int64(dst)*n, int64(src)*n, n)
}
