package pm4

import (
	"strings"
	"testing"
)

// checkEnv: regions scratch (4 KiB), kv, fence, and two kernels: k0 takes
// two pointers (the second nullable) and two push constants, k1 one
// pointer and one push constant.
var checkEnv = Env{
	Regions: []int64{4096, 8192, 8, 1024},
	Kernels: []KernelABI{
		{Name: "copy", Pointers: 2, UserData: 6, Nullable: []bool{false, true}},
		{Name: "scale", Pointers: 1, UserData: 3},
	},
	Fence: 2,
}

func region(i uint32, add uint64) [2]Value {
	return Addr(Symbol{Space: SpaceRegion, Index: i, Addend: add})
}

func program(b *Builder, k uint32) {
	p := Addr(Symbol{Space: SpaceKernel, Index: k})
	b.SetShReg(COMPUTE_PGM_LO, p[0], p[1])
}

func dispatch0(b *Builder) {
	program(b, 0)
	x, y := region(0, 0x40), region(1, 0)
	b.SetShReg(COMPUTE_USER_DATA_0, x[0], x[1], y[0], y[1], C(3), C(4))
	b.DispatchDirect(8, 1, 1)
}

func dispatch1(b *Builder) {
	program(b, 1)
	x := region(0, 0)
	b.SetShReg(COMPUTE_USER_DATA_0, x[0], x[1], C(2))
	b.DispatchDirect(1, 1, 1)
}

func fence(b *Builder) {
	b.Barrier()
	b.ReleaseMem(Symbol{Space: SpaceRegion, Index: 2}, 1)
}

func TestCheckAccepts(t *testing.T) {
	var b Builder
	dispatch0(&b)
	b.Barrier()
	dispatch1(&b)
	fence(&b)
	st, err := Check(b.Words, b.Relocs, checkEnv)
	if err != nil {
		t.Fatal(err)
	}
	if st != (Stats{Packets: 11, Dispatches: 2, Barriers: 2}) {
		t.Errorf("stats %+v", st)
	}
	// A nullable pointer may be null; an empty stream needs only its fence.
	var n Builder
	program(&n, 0)
	x := region(0, 0)
	n.SetShReg(COMPUTE_USER_DATA_0, x[0], x[1], C(0), C(0), C(3), C(4))
	n.DispatchDirect(1, 1, 1)
	fence(&n)
	if _, err := Check(n.Words, n.Relocs, checkEnv); err != nil {
		t.Errorf("null optional pointer: %v", err)
	}
	var e Builder
	e.ReleaseMem(Symbol{Space: SpaceRegion, Index: 2}, 1)
	if _, err := Check(e.Words, e.Relocs, checkEnv); err != nil {
		t.Errorf("fence only: %v", err)
	}
	// Fence -1 accepts any region.
	var any Builder
	any.ReleaseMem(Symbol{Space: SpaceRegion, Index: 1}, 1)
	env := checkEnv
	env.Fence = -1
	if _, err := Check(any.Words, any.Relocs, env); err != nil {
		t.Errorf("any fence: %v", err)
	}
}

// TestCheckRejects breaks one invariant at a time.
func TestCheckRejects(t *testing.T) {
	type edit func(b *Builder)
	seq := func(es ...edit) edit {
		return func(b *Builder) {
			for _, e := range es {
				e(b)
			}
		}
	}
	sh := func(reg uint32, v ...Value) edit { return func(b *Builder) { b.SetShReg(reg, v...) } }
	dd := func(x uint32) edit { return func(b *Builder) { b.DispatchDirect(x, 1, 1) } }
	pgm := func(k uint32) edit { return func(b *Builder) { program(b, k) } }
	ud0 := func(ptr [2]Value) edit {
		y := region(1, 0)
		return sh(COMPUTE_USER_DATA_0, ptr[0], ptr[1], y[0], y[1], C(3), C(4))
	}
	// post edits the finished stream.
	type post func(b *Builder)
	cases := []struct {
		name  string
		build edit
		post  post
		want  string
	}{
		{"no fence", dispatch0, nil, "without a fence"},
		{"no barrier before fence", seq(dispatch0, func(b *Builder) { b.ReleaseMem(Symbol{Space: SpaceRegion, Index: 2}, 1) }), nil, "fence without a barrier"},
		{"flush without invalidate", seq(dispatch0, func(b *Builder) {
			b.packet(EVENT_WRITE, EventCSPartialFlush|4<<eventIndexShift)
			b.ReleaseMem(Symbol{Space: SpaceRegion, Index: 2}, 1)
		}), nil, "fence without a barrier"},
		{"dispatch after fence", seq(dispatch0, fence, dispatch1), nil, "dispatch after the fence"},
		{"fence to another region", seq(dispatch0, func(b *Builder) { b.Barrier(); b.ReleaseMem(Symbol{Space: SpaceRegion, Index: 1}, 1) }), nil, "does not write the fence"},
		{"program not set again", seq(dispatch0, ud0(region(0, 0)), dd(1), fence), nil, "without a program address"},
		{"program constant", seq(sh(COMPUTE_PGM_LO, C(0x1000), C(0)), ud0(region(0, 0)), dd(1), fence), nil, "not a relocation to a kernel"},
		{"program in a region", seq(sh(COMPUTE_PGM_LO, region(0, 0)[0], region(0, 0)[1]), ud0(region(0, 0)), dd(1), fence), nil, "not a relocation to a kernel"},
		{"kernel out of range", seq(pgm(5), ud0(region(0, 0)), dd(1), fence), nil, "kernel 5+0x0 does not exist"},
		{"user data short", seq(pgm(0), sh(COMPUTE_USER_DATA_0, region(0, 0)[0], region(0, 0)[1], C(0), C(0), C(3)), dd(1), fence), nil, "needs 6 user-data dwords, only 5"},
		{"pointer past region", seq(pgm(0), ud0(region(0, 4096)), dd(1), fence), nil, "outside region 0 of 4096 bytes"},
		{"region out of range", seq(pgm(0), ud0(region(9, 0)), dd(1), fence), nil, "region 9 does not exist"},
		{"null required pointer", seq(pgm(0), ud0([2]Value{C(0), C(0)}), dd(1), fence), nil, "may not be null"},
		{"constant pointer", seq(pgm(0), ud0([2]Value{C(0x1000), C(0)}), dd(1), fence), nil, "is a constant"},
		{"pointer halves of two symbols", seq(pgm(0), ud0([2]Value{region(0, 0)[0], region(3, 0)[1]}), dd(1), fence), nil, "without its other half"},
		{"pointer to a kernel", seq(pgm(0), ud0(Addr(Symbol{Space: SpaceKernel, Index: 1})), dd(1), fence), nil, "not a lo/hi relocation to a region"},
		{"push constant relocated", seq(pgm(0), sh(COMPUTE_USER_DATA_0, region(0, 0)[0], region(0, 0)[1], C(0), C(0), region(1, 0)[0], region(1, 0)[1]), dd(1), fence), nil, "push constant COMPUTE_USER_DATA_4 is relocated"},
		{"empty grid", seq(pgm(0), ud0(region(0, 0)), dd(0), fence), nil, "empty grid"},
		{"registers outside compute", seq(sh(0x300, C(1)), fence), nil, "outside the compute registers"},
		{"nop", seq(func(b *Builder) { b.packet(NOP, 0) }, fence), nil, "NOP is not valid"},
		{"header low bits", seq(dispatch0, fence), func(b *Builder) { b.Words[0] |= 2 }, "below the opcode"},
		{"initiator", seq(dispatch0, fence), func(b *Builder) { b.Words[16] = InitForceStartAt000 }, "lacks COMPUTE_SHADER_EN"},
		{"relocated dword not zero", seq(dispatch0, fence), func(b *Builder) { b.Words[b.Relocs[0].Word] = 0x1000 }, "holds 0x1000, not 0"},
		{"unpaired relocation", seq(dispatch0, fence), func(b *Builder) { b.Relocs = b.Relocs[1:] }, "without its other half"},
		{"relocation on header", seq(dispatch0, fence), func(b *Builder) { b.Relocs[0].Word = 0 }, "relocation on a packet header"},
		{"relocation outside", seq(dispatch0, fence), func(b *Builder) { b.Relocs[0].Word = 9999 }, "outside the"},
		{"relocation kind", seq(dispatch0, fence), func(b *Builder) { b.Relocs[0].Kind = 3 }, "relocation kind 3"},
		{"relocation space", seq(dispatch0, fence), func(b *Builder) { b.Relocs[0].Sym.Space = 7 }, "symbol space 7"},
		{"duplicate relocation", seq(dispatch0, fence), func(b *Builder) { b.Relocs = append(b.Relocs, b.Relocs[0]) }, "two relocations"},
		{"relocation on a control dword", seq(dispatch0, fence), func(b *Builder) {
			// ACQUIRE_MEM's coher base (two zero dwords) is no address slot.
			at := uint32(len(b.Words) - 8 - 8 + 4)
			s := Symbol{Space: SpaceRegion, Index: 1}
			b.Relocs = append(b.Relocs, Reloc{Word: at, Kind: RelocLo, Sym: s}, Reloc{Word: at + 1, Kind: RelocHi, Sym: s})
		}, "holds no address"},
		{"truncated", seq(dispatch0, fence), func(b *Builder) { b.Words = b.Words[:len(b.Words)-1] }, "runs past the end"},
	}
	for _, c := range cases {
		var b Builder
		c.build(&b)
		if c.post != nil {
			c.post(&b)
		}
		_, err := Check(b.Words, b.Relocs, checkEnv)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "pm4: ") {
			t.Errorf("%s: %v, want …%s…", c.name, err, c.want)
		}
	}
	// An ABI that cannot fit the registers is reported, not indexed past.
	env := checkEnv
	env.Kernels = []KernelABI{{Name: "huge", Pointers: 9, UserData: 18}}
	var b Builder
	dispatch0(&b)
	fence(&b)
	if _, err := Check(b.Words, b.Relocs, env); err == nil || !strings.Contains(err.Error(), "does not fit") {
		t.Errorf("oversized ABI: %v", err)
	}
}

func FuzzCheck(f *testing.F) {
	var b Builder
	dispatch0(&b)
	fence(&b)
	f.Add(wordBytes(b.Words), uint32(2), uint32(3))
	f.Fuzz(func(t *testing.T, raw []byte, lo, hi uint32) {
		relocs := []Reloc{{Word: lo, Kind: RelocLo, Sym: Symbol{Space: SpaceKernel}}, {Word: hi, Kind: RelocHi, Sym: Symbol{Space: SpaceKernel}}}
		Check(bytesWords(raw), relocs, checkEnv)
	})
}
