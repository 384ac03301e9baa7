package bundle

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// scheduledGraph is sampleGraph with a two-dispatch, two-row decode
// variant and its schedule: a row task per row of dispatch 0, then two
// tiles of dispatch 1 that wait for both rows, on two multiprocessors.
func scheduledGraph() *Graph {
	g := sampleGraph()
	g.Variants[0].Rows, g.Variants[0].Dispatches = 2, 2
	g.Schedules = []Schedule{{
		Variant: 0, SMs: 2,
		Ops: []Op{{Strides: []uint32{0, 0, 32}}, {Strides: []uint32{32, 0, 0, 0, 64}}},
		Tasks: []Task{
			{Op: 0, Kind: TaskRows, RowLo: 0, RowHi: 1, Bytes: 40, Signal: 0, SM: 0},
			{Op: 0, Kind: TaskRows, RowLo: 1, RowHi: 2, Bytes: 40, Signal: 1, SM: 1},
			{Op: 1, Kind: TaskTile, RowLo: 0, RowHi: 2, Lo: 0, Hi: 8, Bytes: 300, WaitOff: 0, WaitLen: 2, Signal: 2, SM: 0},
			{Op: 1, Kind: TaskTile, RowLo: 0, RowHi: 2, Lo: 8, Hi: 16, Bytes: 300, WaitOff: 0, WaitLen: 2, Signal: 2, SM: 1},
		},
		Waits:    []Wait{{0, 1}, {1, 1}},
		Counters: []uint32{1, 1, 2},
		Queues:   [][]uint32{{0, 2}, {1, 3}},
	}}
	return g
}

func TestScheduleRoundTrip(t *testing.T) {
	g := scheduledGraph()
	enc := g.Encode()
	d, err := DecodeGraph(enc)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(g.Schedules, d.Schedules); diff != "" {
		t.Errorf("schedules changed in a round trip (-want +got):\n%s", diff)
	}
	if !bytes.Equal(d.Encode(), enc) {
		t.Error("decode then encode changed the bytes")
	}
	// A graph without schedules has no MEGA section: its bytes are
	// what they were before the section existed, but for the version.
	if bytes.Contains(sampleGraph().Encode(), []byte(tagMegakernel)) {
		t.Error("a graph without schedules has a MEGA section")
	}
	var b strings.Builder
	if err := d.Schedules[0].WriteText(&b, "decode.s1.r2", []string{"embed.f32", "matmul.q8_0"}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"4 tasks (0 whole, 2 rows, 2 tiles, 0 heads), 3 counters", "matmul.q8_0", "c0>=1 c1>=1", "[8,16)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("schedule text lacks %q:\n%s", want, b.String())
		}
	}
}

// TestScheduleValidate breaks a valid schedule one way at a time; each is
// refused, by Validate and by DecodeGraph.
func TestScheduleValidate(t *testing.T) {
	cases := []struct {
		name string
		edit func(s *Schedule)
		want string
	}{
		{"wait on a later task", func(s *Schedule) { s.Tasks[0].WaitOff, s.Tasks[0].WaitLen = 1, 1 }, "waits must be on earlier tasks"},
		{"wait on own counter", func(s *Schedule) { s.Tasks[2].WaitOff, s.Tasks[2].WaitLen = 0, 1; s.Waits[0] = Wait{2, 1} }, "waits must be on earlier tasks"},
		{"count never reached", func(s *Schedule) { s.Waits[1].Count = 2 }, "to reach 2"},
		{"wrong counter total", func(s *Schedule) { s.Counters[2] = 3 }, "reaches 3"},
		{"queue out of order", func(s *Schedule) { s.Queues[0] = []uint32{2, 0} }, "queues run in task order"},
		{"task in no queue", func(s *Schedule) { s.Queues[1] = []uint32{1} }, "in no queue"},
		{"task on another queue", func(s *Schedule) { s.Tasks[3].SM = 0 }, "of another queue"},
		{"rows past the variant", func(s *Schedule) { s.Tasks[1].RowHi = 3 }, "rows [1, 3) of 2"},
		{"tile without features", func(s *Schedule) { s.Tasks[2].Hi = 0 }, "tile of [0, 0)"},
		{"dispatch past the stream", func(s *Schedule) { s.Tasks[3].Op = 2 }, "dispatch 2 of 2"},
		{"ops for other dispatches", func(s *Schedule) { s.Ops = s.Ops[:1] }, "1 ops for 2 dispatches"},
		{"queues for other SMs", func(s *Schedule) { s.SMs = 3 }, "2 queues for 3 multiprocessors"},
	}
	for _, c := range cases {
		g := scheduledGraph()
		s := &g.Schedules[0]
		c.edit(s)
		if err := s.Validate(2, 2); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Validate gave %v, want %q", c.name, err, c.want)
		}
		if _, err := DecodeGraph(g.Encode()); err == nil {
			t.Errorf("%s: DecodeGraph accepted it", c.name)
		}
	}
	if err := scheduledGraph().Schedules[0].Validate(2, 2); err != nil {
		t.Errorf("the valid schedule: %v", err)
	}
}

// TestScheduleOtherVersion: a schedule format this reader does not know
// leaves the graph readable, without schedules.
func TestScheduleOtherVersion(t *testing.T) {
	g := scheduledGraph()
	secs := map[string][]byte{}
	enc := g.Encode()
	_, _, all, err := sectionTable(enc)
	if err != nil {
		t.Fatal(err)
	}
	for tag, b := range all {
		secs[tag] = append([]byte(nil), b...)
	}
	secs[tagMegakernel][0] = ScheduleVersion + 1
	d, err := DecodeGraph(assemble(secs))
	if err != nil || len(d.Schedules) != 0 {
		t.Errorf("schedule format %d: %v, %d schedules", ScheduleVersion+1, err, len(d.Schedules))
	}
}

// TestScheduleAssign rebalances the sample on one and on three queues:
// still valid, every task once, the loads as even as the rule makes them.
func TestScheduleAssign(t *testing.T) {
	for _, sms := range []int{1, 3} {
		s := scheduledGraph().Schedules[0]
		s.Assign(sms)
		if err := s.Validate(2, 2); err != nil {
			t.Errorf("%d queues: %v", sms, err)
		}
	}
	s := scheduledGraph().Schedules[0]
	s.Assign(3)
	if want := [][]uint32{{0, 3}, {1}, {2}}; !cmp.Equal(s.Queues, want) {
		t.Errorf("queues %v, want %v", s.Queues, want)
	}
}

// TestScheduleEstimate works the sample out by hand on a machine of 1 B/s
// a multiprocessor and a 1 s hop: both rows by 40 s, the tiles from 41 s
// to 341 s.
func TestScheduleEstimate(t *testing.T) {
	s := scheduledGraph().Schedules[0]
	step, busy := s.Estimate(Model{BytesPerSec: 2, Hop: 1})
	if step != 341 || busy != 680.0/682 {
		t.Errorf("step %v, busy %v; want 341, %v", step, busy, 680.0/682)
	}
}
