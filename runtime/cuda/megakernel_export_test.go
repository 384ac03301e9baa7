package cuda

import "github.com/zrtdev/zrt/format/bundle"

// MkTables builds a schedule's persistent-kernel tables from its
// variant's launches (buildMkTables), regroups them into blocks queues
// when blocks > 0, and returns each queue's task indices, the tasks (the
// schedule's, spread) and the tables' image size: for tests without a
// GPU.
func MkTables(s *bundle.Schedule, ls []Launch, rows, blocks int) (queues [][]uint32, tasks, size int, err error) {
	m, err := buildMkTables(s, ls, rows)
	if err != nil {
		return nil, 0, 0, err
	}
	if blocks > 0 {
		m.regroup(blocks, false)
	}
	l := m.layout()
	return m.queues, len(m.tasks), len(m.image(l)), nil
}

// MkCounts returns, for a schedule's tables, each task's box and the
// counter it signals, and each wait's counter and count: for tests of
// spread without a GPU.
func MkCounts(s *bundle.Schedule, ls []Launch, rows int) (boxes [][6]uint32, sigs []uint32, waits []bundle.Wait, err error) {
	m, err := buildMkTables(s, ls, rows)
	if err != nil {
		return nil, nil, nil, err
	}
	for _, t := range m.tasks {
		boxes, sigs = append(boxes, t.box), append(sigs, t.sig)
	}
	return boxes, sigs, m.waits, nil
}

// MkPrefetch returns, per task of a schedule, the weight bytes the
// persistent kernel prefetches for it ([addr, addr+n); n = 0 for none) and
// whether the task is a tile of a matrix product.
func MkPrefetch(s *bundle.Schedule, ls []Launch, rows int) (addr []uint64, n []uint32, matrix []bool, err error) {
	m, err := buildMkTables(s, ls, rows)
	if err != nil {
		return nil, nil, nil, err
	}
	for _, t := range m.tasks {
		addr, n, matrix = append(addr, t.pf), append(n, t.pfBytes), append(matrix, m.ops[t.op].matrix)
	}
	return addr, n, matrix, nil
}
