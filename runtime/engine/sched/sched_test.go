package sched

import (
	"slices"
	"testing"
)

// running and waiting make the scheduler's view of one request.
func running(id uint64, tenant string, q QoS) Seq {
	return Seq{ID: id, Tenant: tenant, QoS: q, Arrival: id, Prompt: 4, Done: 5, Pages: 1, Held: 1, Running: true}
}

func waiting(id uint64, tenant string, q QoS) Seq {
	return Seq{ID: id, Tenant: tenant, QoS: q, Arrival: id, Prompt: 4, Pages: 1}
}

func input(free int, limits map[string]Limits, seqs ...Seq) Input {
	return Input{Seqs: seqs, FreeSlots: free, FreePages: 100, Slots: 8, Pages: 100, Budget: 64, PageTokens: 16,
		Limits: func(t string) Limits { return limits[t] }}
}

// TestDominantShare checks DRF admission (seed 000 §18.5): the lowest
// dominant share first, ties by arrival, classes before shares, and the
// soft rate limits weighing in without blocking.
func TestDominantShare(t *testing.T) {
	for _, tc := range []struct {
		name  string
		in    Input
		admit []uint64
	}{
		{"lowest share first", input(1, nil,
			running(1, "a", Standard), running(2, "a", Standard), running(3, "b", Standard),
			waiting(4, "a", Standard), waiting(5, "b", Standard)), []uint64{5}},
		{"ties by arrival", input(1, nil,
			running(1, "a", Standard), running(2, "b", Standard),
			waiting(4, "b", Standard), waiting(3, "a", Standard)), []uint64{3}},
		{"shares against the tenant's own quota", input(1, map[string]Limits{"b": {MaxSlots: 2}},
			running(1, "a", Standard), running(2, "a", Standard), running(3, "b", Standard),
			waiting(4, "b", Standard), waiting(5, "a", Standard)), []uint64{5}},
		{"class before share", input(1, nil,
			running(1, "a", Standard), running(2, "a", Standard),
			waiting(3, "b", Batch), waiting(4, "a", Interactive)), []uint64{4}},
		{"each admission raises the share", input(4, nil,
			waiting(1, "a", Standard), waiting(2, "a", Standard), waiting(3, "a", Standard),
			waiting(4, "b", Standard), waiting(5, "b", Standard), waiting(6, "b", Standard)), []uint64{1, 4, 2, 5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if p := Schedule(tc.in); !slices.Equal(p.Admit, tc.admit) || len(p.Preempt) > 0 {
				t.Fatalf("%v, want admit %v", p, tc.admit)
			}
		})
	}

	// A tenant over its soft decode rate yields to one within its limits,
	// but still runs when nobody else waits.
	limits := map[string]Limits{"a": {DecodeTokensPerSecond: 100}}
	in := input(1, limits, running(1, "b", Standard), running(2, "b", Standard), waiting(3, "a", Standard), waiting(4, "b", Standard))
	in.Rates = map[string]Rates{"a": {Decode: 150}}
	if p := Schedule(in); !slices.Equal(p.Admit, []uint64{4}) {
		t.Fatalf("over its rate: %v, want admit [4]", p)
	}
	in = input(1, limits, running(1, "b", Standard), waiting(3, "a", Standard))
	in.Rates = map[string]Rates{"a": {Decode: 150}}
	if p := Schedule(in); !slices.Equal(p.Admit, []uint64{3}) {
		t.Fatalf("alone over its rate: %v, want admit [3]", p)
	}
}

// TestPreemptVictim checks whom an urgent request preempts when every
// slot is taken: batch before standard, then the tenant with the highest
// dominant share, then the latest arrival; never an interactive request,
// and never one as urgent as the newcomer.
func TestPreemptVictim(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      Input
		preempt []uint64
	}{
		{"batch before standard", input(0, nil,
			running(1, "a", Standard), running(2, "b", Batch), waiting(9, "c", Interactive)), []uint64{2}},
		{"highest share", input(0, nil,
			running(1, "a", Batch), running(2, "b", Batch), running(3, "b", Batch), waiting(9, "c", Interactive)), []uint64{3}},
		{"latest arrival on a tie", input(0, nil,
			running(1, "a", Batch), running(2, "b", Batch), waiting(9, "c", Standard)), []uint64{2}},
		{"never interactive", input(0, nil,
			running(1, "a", Interactive), waiting(9, "c", Interactive)), nil},
		{"never the same class", input(0, nil,
			running(1, "a", Standard), waiting(9, "c", Standard)), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Schedule(tc.in)
			if !slices.Equal(p.Preempt, tc.preempt) {
				t.Fatalf("%v, want preempt %v", p, tc.preempt)
			}
			if len(tc.preempt) > 0 && !slices.Equal(p.Admit, []uint64{9}) {
				t.Fatalf("%v: the newcomer was not admitted", p)
			}
		})
	}
}

// TestLatencyRows checks the interactive latency budget: while an
// interactive request decodes, standard and batch prefill together take
// at most LatencyRows, interactive prefill is not limited, and without an
// interactive decode the whole budget is used.
func TestLatencyRows(t *testing.T) {
	prefilling := func(id uint64, tenant string, q QoS) Seq {
		return Seq{ID: id, Tenant: tenant, QoS: q, Arrival: id, Prompt: 100, Done: 0, Pages: 7, Running: true}
	}
	for _, tc := range []struct {
		name string
		seqs []Seq
		want string
	}{
		{"interactive decoding", []Seq{running(1, "a", Interactive), prefilling(2, "b", Batch), prefilling(3, "b", Standard)},
			"preempt [] admit [] rows 11: 1@5+1* 3@0+10"},
		{"interactive prefill is not limited", []Seq{running(1, "a", Interactive), prefilling(2, "a", Interactive), prefilling(3, "b", Batch)},
			"preempt [] admit [] rows 64: 1@5+1* 2@0+63"},
		{"no interactive decode", []Seq{running(1, "a", Standard), prefilling(2, "b", Batch)},
			"preempt [] admit [] rows 64: 1@5+1* 2@0+63"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := input(0, nil, tc.seqs...)
			in.LatencyRows = 10
			if got := Schedule(in).String(); got != tc.want {
				t.Fatalf("%s, want %s", got, tc.want)
			}
		})
	}
}

// TestPagesOnDemand: requests take the pages their rows reach, not their
// longest sequence, so a pool that holds four requests' whole lengths
// admits eight short ones; an interactive request is admitted only while
// the pool could grow every interactive one to its end.
func TestPagesOnDemand(t *testing.T) {
	var seqs []Seq
	for i := range 8 {
		s := waiting(uint64(i+1), "a", Standard)
		s.Prompt, s.Pages = 10, 14 // 10 prompt tokens, up to 214 in all
		seqs = append(seqs, s)
	}
	in := input(8, nil, seqs...)
	in.FreePages, in.Pages, in.Budget = 4*14, 4*14, 100
	p := Schedule(in)
	if len(p.Admit) != 8 || p.NRows != 80 {
		t.Fatalf("%v: want all 8 admitted with their 10-row prompts", p)
	}
	for i := range seqs {
		seqs[i].QoS = Interactive
	}
	in = input(8, nil, seqs...)
	in.FreePages, in.Pages = 4*14, 4*14
	if p := Schedule(in); len(p.Admit) != 4 {
		t.Fatalf("interactive: %v, want 4 admitted (4 × 14 pages fill the pool)", p)
	}
	// A reservation of another tenant's is not the interactive tenant's
	// to grow into; its own is.
	in = input(8, nil, seqs...)
	in.FreePages, in.Pages, in.Reservations, in.Used = 4*14, 4*14, map[string]int{"b": 14}, map[string]int{}
	if p := Schedule(in); len(p.Admit) != 3 {
		t.Fatalf("interactive beside b's reservation: %v, want 3 admitted", p)
	}
	in.Reservations = map[string]int{"a": 14}
	if p := Schedule(in); len(p.Admit) != 4 {
		t.Fatalf("interactive with its own reservation: %v, want 4 admitted", p)
	}
}

// TestPoolDry: a decoding request that needs a page when none is free
// makes requests below it give theirs up — one without a slot first, then
// the least urgent class, then the latest arrival; never an interactive
// one — and a request with nobody below it gives up its own pages.
func TestPoolDry(t *testing.T) {
	dec := func(id uint64, tenant string, q QoS, done, held int) Seq {
		return Seq{ID: id, Tenant: tenant, QoS: q, Arrival: id, Prompt: 4, Done: done, Pages: 10, Held: held, Frees: held, Running: true}
	}
	paged := func(s Seq) Seq { s.Running, s.Paged = false, true; return s }
	for _, tc := range []struct {
		name string
		free int
		seqs []Seq
		want string
	}{
		{"a page is free", 1, []Seq{dec(1, "a", Standard, 32, 2), dec(2, "b", Batch, 20, 2)},
			"preempt [] admit [] rows 2: 1@32+1* 2@20+1*"},
		{"batch gives way", 0, []Seq{dec(1, "a", Standard, 32, 2), dec(2, "b", Batch, 20, 2), dec(3, "c", Standard, 40, 3), dec(4, "d", Interactive, 30, 2)},
			"preempt [] release [2] admit [] rows 3: 4@30+1* 1@32+1* 3@40+1*"},
		{"the preempted first", 0, []Seq{dec(1, "a", Standard, 32, 2), paged(dec(2, "b", Standard, 20, 2)), dec(3, "c", Batch, 40, 3)},
			"preempt [] release [2] admit [] rows 2: 1@32+1* 3@40+1*"},
		{"the latest arrival", 0, []Seq{dec(1, "a", Standard, 32, 2), dec(2, "b", Standard, 20, 2), dec(3, "c", Standard, 40, 3)},
			"preempt [] release [3] admit [] rows 2: 1@32+1* 2@20+1*"},
		{"nobody below: its own", 0, []Seq{dec(1, "a", Interactive, 20, 2), dec(2, "b", Standard, 32, 2)},
			"preempt [] release [2] admit [] rows 1: 1@20+1*"},
		{"never interactive", 0, []Seq{dec(1, "a", Interactive, 32, 2), dec(2, "b", Interactive, 20, 2)},
			"preempt [] admit [] rows 1: 2@20+1*"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := input(0, nil, tc.seqs...)
			in.FreePages = tc.free
			if got := Schedule(in).String(); got != tc.want {
				t.Fatalf("%s, want %s", got, tc.want)
			}
		})
	}
}

// TestDrafts checks the draft rows of speculative decoding: they follow
// a running decode row (most urgent first) from what is left of the
// budget after prefill, one free slot each, within the pages the pool
// has free — a draft never makes anyone give up pages — and other
// classes' drafts count under the latency budget.
func TestDrafts(t *testing.T) {
	dec := func(id uint64, q QoS, done, held, draft int) Seq {
		return Seq{ID: id, Tenant: "a", QoS: q, Arrival: id, Prompt: 4, Done: done, Pages: 10, Held: held, Frees: held, Running: true, Draft: draft}
	}
	paged := Seq{ID: 9, Tenant: "b", QoS: Batch, Arrival: 9, Prompt: 4, Done: 40, Pages: 10, Held: 3, Frees: 3, Paged: true}
	prefilling := Seq{ID: 8, Tenant: "b", QoS: Standard, Arrival: 8, Prompt: 60, Pages: 7, Running: true}
	for _, tc := range []struct {
		name                     string
		slots, free, budget, lat int
		seqs                     []Seq
		want                     string
	}{
		{"all of it", 8, 10, 64, 0, []Seq{dec(1, Standard, 20, 2, 3), dec(2, Batch, 5, 1, 2)},
			"preempt [] admit [] rows 7: 1@20+4~3* 2@5+3~2*"},
		{"no draft without free slots", 2, 10, 64, 0, []Seq{dec(1, Standard, 20, 2, 3), dec(2, Batch, 5, 1, 2)},
			"preempt [] admit [] rows 2: 1@20+1* 2@5+1*"},
		{"free slots, urgent first", 4, 10, 64, 0, []Seq{dec(2, Batch, 5, 1, 2), dec(1, Interactive, 20, 2, 3)},
			"preempt [] admit [] rows 4: 1@20+3~2* 2@5+1*"},
		{"what the budget leaves after prefill", 8, 10, 62, 0, []Seq{dec(1, Standard, 20, 2, 3), prefilling},
			"preempt [] admit [] rows 62: 1@20+2~1* 8@0+60*"},
		{"the pages free", 10, 0, 64, 0, []Seq{dec(1, Standard, 30, 2, 4), dec(2, Standard, 44, 3, 4)},
			"preempt [] admit [] rows 6: 1@30+2~1* 2@44+4~3*"},
		{"a free page", 10, 1, 64, 0, []Seq{dec(1, Standard, 30, 2, 4), dec(2, Standard, 44, 3, 4)},
			"preempt [] admit [] rows 9: 1@30+5~4* 2@44+4~3*"},
		{"never another's pages", 8, 0, 64, 0, []Seq{dec(1, Standard, 30, 2, 4), paged},
			"preempt [] admit [] rows 2: 1@30+2~1*"},
		{"within its longest sequence", 8, 10, 64, 0, []Seq{dec(1, Standard, 157, 10, 4)},
			"preempt [] admit [] rows 3: 1@157+3~2*"},
		{"other classes under the latency budget", 8, 10, 64, 1, []Seq{dec(1, Interactive, 20, 2, 3), dec(2, Batch, 5, 1, 2)},
			"preempt [] admit [] rows 6: 1@20+4~3* 2@5+2~1*"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := input(0, nil, tc.seqs...)
			in.VerifySlots, in.FreePages, in.Budget, in.LatencyRows = tc.slots, tc.free, tc.budget, tc.lat
			if got := Schedule(in).String(); got != tc.want {
				t.Fatalf("%s, want %s", got, tc.want)
			}
		})
	}
}

// TestSwapIn: a waiting request whose prefix the host tier holds is
// admitted with fresh pages for those chunks besides its prompt's rest
// (its Held leaves them out), the plan names the swap-in, and its prefill
// starts after the swapped chunks; one the pool cannot give the swapped
// pages to waits, and the plan names no swap-in.
func TestSwapIn(t *testing.T) {
	s := Seq{ID: 1, Tenant: "a", QoS: Standard, Arrival: 1, Prompt: 60, Pages: 5, Done: 48, Held: 1, Shared: 1, Host: 2}
	in := input(1, nil, s)
	p := Schedule(in)
	want := []Chunk{{ID: 1, From: 48, N: 12, Logits: true}}
	if !slices.Equal(p.Admit, []uint64{1}) || !slices.Equal(p.SwapIn, []SwapIn{{ID: 1, Pages: 2}}) || !slices.Equal(p.Rows, want) {
		t.Fatalf("%v, want admit [1] swap-in 1:2 rows %v", p, want)
	}
	// It needs three pages: two to swap in and one for the rest of its
	// prompt and its first token.
	in.FreePages = 2
	if p := Schedule(in); len(p.Admit) > 0 || len(p.SwapIn) > 0 {
		t.Fatalf("with 2 free pages: %v, want nothing admitted", p)
	}
	in.FreePages = 3
	if p := Schedule(in); !slices.Equal(p.SwapIn, []SwapIn{{ID: 1, Pages: 2}}) {
		t.Fatalf("with 3 free pages: %v, want swap-in 1:2", p)
	}
}

// TestHold: a running request whose prompt rows are held gets no rows
// and keeps its slot; the prompt of one not held fills the budget.
func TestHold(t *testing.T) {
	a := Seq{ID: 1, Tenant: "a", QoS: Standard, Arrival: 1, Prompt: 40, Done: 16, Pages: 4, Held: 1, Running: true, Hold: true}
	b := Seq{ID: 2, Tenant: "a", QoS: Standard, Arrival: 2, Prompt: 100, Done: 16, Pages: 8, Held: 1, Running: true}
	p := Schedule(input(0, nil, running(3, "a", Standard), a, b))
	want := []Chunk{{ID: 3, From: 5, N: 1, Logits: true}, {ID: 2, From: 16, N: 63}}
	if !slices.Equal(p.Rows, want) || len(p.Preempt)+len(p.Release) > 0 {
		t.Fatalf("%v, want rows %v", p, want)
	}
}
