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
