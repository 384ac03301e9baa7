package cuda

import "github.com/zrtdev/zrt/format/bundle"

// MkTables builds a schedule's persistent-kernel tables from its
// variant's launches (buildMkTables), regroups them into blocks queues
// when blocks > 0, and returns each queue's task indices and the tables'
// image size: for tests without a GPU.
func MkTables(s *bundle.Schedule, ls []Launch, rows, blocks int) ([][]uint32, int, error) {
	m, err := buildMkTables(s, ls, rows)
	if err != nil {
		return nil, 0, err
	}
	if blocks > 0 {
		m.regroup(blocks)
	}
	l := m.layout()
	return m.queues, len(m.image(l)), nil
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
