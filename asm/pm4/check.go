package pm4

import "fmt"

// KernelABI is what the stream checker needs of a kernel's calling
// convention (the catalog in package kernels has the full one): user data
// starts with Pointers 64-bit buffer addresses, then push constants, UserData
// dwords in all.
type KernelABI struct {
	Name     string
	Pointers int
	UserData int
	// Nullable[i] says pointer i may be passed as null (0, 0).
	Nullable []bool
}

// Env is what a stream may refer to: the memory plan's regions, the
// bundle's kernels, and the region its closing fence writes.
type Env struct {
	Regions []int64     // bytes of each region, by index
	Kernels []KernelABI // by kernel index
	Fence   int         // region the final RELEASE_MEM must target; -1: any
}

// Stats counts what Check saw.
type Stats struct {
	Packets, Dispatches, Barriers int
}

// Check walks an unpatched stream the way a tier would replay it and
// returns the first broken invariant. It checks, independently of any
// runtime:
//   - the stream decodes, and holds only the packets a compute stream uses;
//   - every relocation is one half of an address whose other half sits in
//     the next (lo) or previous (hi) dword with the same symbol, the
//     relocated dword holds 0 (nothing baked in), region symbols point
//     inside their region and kernel symbols name a kernel;
//   - relocations sit only on SET_SH_REG values and RELEASE_MEM addresses;
//   - every dispatch has its own program address, relocated to a kernel,
//     and user data covering that kernel's ABI: pointers relocated to
//     regions (or null where the ABI allows), push constants not relocated;
//   - a barrier (CS partial flush, then ACQUIRE_MEM) separates the last
//     dispatch from the fence, and a RELEASE_MEM to the fence region ends
//     the work: no dispatch follows it, and the stream has one.
//
// It cannot see which dispatches depend on which (the stream does not say
// what a kernel reads or writes), so barriers between dispatches are
// counted, not required.
func Check(words []uint32, relocs []Reloc, env Env) (Stats, error) {
	var st Stats
	pkts, err := Decode(words)
	if err != nil {
		return st, err
	}
	st.Packets = len(pkts)
	// Which dwords are packet headers, to refuse relocations on them.
	header := map[uint32]bool{}
	for _, p := range pkts {
		header[uint32(p.Offset)] = true
		if x := words[p.Offset] & 0xFF; x != 0 {
			return st, fmt.Errorf("pm4: dword %#x: %s header has bits %#x below the opcode (predicate, shader type), which zrt streams leave 0", p.Offset, p.Op, x)
		}
	}
	at := map[uint32]Reloc{}
	for _, r := range relocs {
		if err := checkReloc(r, words, header, env); err != nil {
			return st, err
		}
		if _, dup := at[r.Word]; dup {
			return st, fmt.Errorf("pm4: dword %#x: two relocations", r.Word)
		}
		at[r.Word] = r
	}
	for _, r := range relocs {
		pair := r.Word + 1
		if r.Kind == RelocHi {
			pair = r.Word - 1
		}
		o, ok := at[pair]
		if !ok || o.Sym != r.Sym || o.Kind == r.Kind {
			return st, fmt.Errorf("pm4: dword %#x: %s half of %s without its other half in dword %#x", r.Word, r.Kind, symDebug(r.Sym), pair)
		}
	}

	// SH register state since the last dispatch: a dispatch consumes it, so
	// each dispatch must set everything it uses itself (as T-CPU requires).
	const nSH = COMPUTE_USER_DATA_0 + NumUserData
	var sh [nSH]uint32
	var set [nSH]bool
	var shReloc [nSH]*Reloc
	relocated := map[uint32]bool{} // dwords whose relocation a packet accounts for
	flushed, barrier, fenced, dispatched := false, false, false, false
	for _, p := range pkts {
		base := uint32(p.Offset + 1)
		switch p.Op {
		case SET_SH_REG:
			reg := uint64(p.Body[0])
			if reg+uint64(len(p.Body)-1) > nSH {
				return st, fmt.Errorf("pm4: dword %#x: SET_SH_REG of %d registers at %#x is outside the compute registers", p.Offset, len(p.Body)-1, reg)
			}
			for i, x := range p.Body[1:] {
				w := base + 1 + uint32(i)
				sh[int(reg)+i], set[int(reg)+i], shReloc[int(reg)+i] = x, true, nil
				if r, ok := at[w]; ok {
					shReloc[int(reg)+i] = &r
					relocated[w] = true
				}
			}
		case DISPATCH_DIRECT:
			if fenced {
				return st, fmt.Errorf("pm4: dword %#x: dispatch after the fence", p.Offset)
			}
			if err := checkDispatch(p, sh[:], set[:], shReloc[:], env); err != nil {
				return st, fmt.Errorf("pm4: dword %#x: %w", p.Offset, err)
			}
			st.Dispatches++
			set, shReloc = [nSH]bool{}, [nSH]*Reloc{}
			flushed, barrier, dispatched = false, false, true
		case EVENT_WRITE:
			if p.Body[0]&0x3F == EventCSPartialFlush {
				flushed = true
			}
		case ACQUIRE_MEM:
			if flushed {
				// A flush then an invalidate: earlier writes are done and
				// visible to later reads.
				barrier, flushed = true, false
				st.Barriers++
			}
		case RELEASE_MEM:
			lo, hi := at[base+2], at[base+3]
			if lo.Kind != RelocLo || hi.Kind != RelocHi || lo.Sym.Space != SpaceRegion ||
				(env.Fence >= 0 && lo.Sym.Index != uint32(env.Fence)) {
				return st, fmt.Errorf("pm4: dword %#x: RELEASE_MEM does not write the fence region through a relocation", p.Offset)
			}
			relocated[base+2], relocated[base+3] = true, true
			if dispatched && !barrier {
				return st, fmt.Errorf("pm4: dword %#x: fence without a barrier after the last dispatch", p.Offset)
			}
			fenced = true
		default:
			return st, fmt.Errorf("pm4: dword %#x: %s is not valid in a compute stream", p.Offset, p.Op)
		}
	}
	for _, r := range relocs {
		if !relocated[r.Word] {
			return st, fmt.Errorf("pm4: dword %#x: relocation on a dword that holds no address", r.Word)
		}
	}
	if !fenced {
		return st, fmt.Errorf("pm4: stream ends without a fence (RELEASE_MEM)")
	}
	return st, nil
}

// checkReloc checks one relocation on its own.
func checkReloc(r Reloc, words []uint32, header map[uint32]bool, env Env) error {
	if int(r.Word) >= len(words) {
		return fmt.Errorf("pm4: relocation at dword %#x is outside the %d-dword stream", r.Word, len(words))
	}
	if header[r.Word] {
		return fmt.Errorf("pm4: dword %#x: relocation on a packet header", r.Word)
	}
	if r.Kind != RelocLo && r.Kind != RelocHi {
		return fmt.Errorf("pm4: dword %#x: relocation kind %d", r.Word, r.Kind)
	}
	if words[r.Word] != 0 {
		return fmt.Errorf("pm4: dword %#x: relocated dword holds %#x, not 0 (an address baked in, or a patched stream)", r.Word, words[r.Word])
	}
	switch r.Sym.Space {
	case SpaceRegion:
		if int(r.Sym.Index) >= len(env.Regions) {
			return fmt.Errorf("pm4: dword %#x: region %d does not exist (%d regions)", r.Word, r.Sym.Index, len(env.Regions))
		}
		if size := env.Regions[r.Sym.Index]; r.Sym.Addend >= uint64(size) {
			return fmt.Errorf("pm4: dword %#x: offset %#x is outside region %d of %d bytes", r.Word, r.Sym.Addend, r.Sym.Index, size)
		}
	case SpaceKernel:
		if int(r.Sym.Index) >= len(env.Kernels) || r.Sym.Addend != 0 {
			return fmt.Errorf("pm4: dword %#x: kernel %d+%#x does not exist (%d kernels)", r.Word, r.Sym.Index, r.Sym.Addend, len(env.Kernels))
		}
	default:
		return fmt.Errorf("pm4: dword %#x: relocation symbol space %d", r.Word, r.Sym.Space)
	}
	return nil
}

// checkDispatch checks the registers a dispatch consumes.
func checkDispatch(p Packet, sh []uint32, set []bool, rel []*Reloc, env Env) error {
	lo, hi := rel[COMPUTE_PGM_LO], rel[COMPUTE_PGM_HI]
	if !set[COMPUTE_PGM_LO] || !set[COMPUTE_PGM_HI] {
		return fmt.Errorf("dispatch without a program address (COMPUTE_PGM_LO/HI not set since the last dispatch)")
	}
	if lo == nil || hi == nil || lo.Kind != RelocLo || hi.Kind != RelocHi || lo.Sym != hi.Sym || lo.Sym.Space != SpaceKernel {
		return fmt.Errorf("program address is not a relocation to a kernel")
	}
	k := env.Kernels[lo.Sym.Index]
	if k.Pointers < 0 || 2*k.Pointers > k.UserData || k.UserData > NumUserData {
		return fmt.Errorf("kernel %d (%s): ABI of %d pointers in %d user-data dwords does not fit %d registers", lo.Sym.Index, k.Name, k.Pointers, k.UserData, NumUserData)
	}
	for i := 0; i < k.UserData; i++ {
		if !set[COMPUTE_USER_DATA_0+i] {
			return fmt.Errorf("kernel %d (%s) needs %d user-data dwords, only %d set", lo.Sym.Index, k.Name, k.UserData, i)
		}
	}
	ud := rel[COMPUTE_USER_DATA_0:]
	for i := 0; i < k.Pointers; i++ {
		a, b := ud[2*i], ud[2*i+1]
		if a == nil && b == nil {
			// Unrelocated: null is the only constant pointer allowed,
			// since any other would be an address baked into the stream.
			if v := ud0(sh, 2*i) | ud0(sh, 2*i+1); v != 0 {
				return fmt.Errorf("kernel %d (%s): pointer %d (COMPUTE_USER_DATA_%d..%d) is a constant, not a relocation", lo.Sym.Index, k.Name, i, 2*i, 2*i+1)
			}
			if i >= len(k.Nullable) || !k.Nullable[i] {
				return fmt.Errorf("kernel %d (%s): pointer %d (COMPUTE_USER_DATA_%d..%d) is not relocated and may not be null", lo.Sym.Index, k.Name, i, 2*i, 2*i+1)
			}
			continue
		}
		if a == nil || b == nil || a.Kind != RelocLo || b.Kind != RelocHi || a.Sym != b.Sym || a.Sym.Space != SpaceRegion {
			return fmt.Errorf("kernel %d (%s): pointer %d (COMPUTE_USER_DATA_%d..%d) is not a lo/hi relocation to a region", lo.Sym.Index, k.Name, i, 2*i, 2*i+1)
		}
	}
	for i := 2 * k.Pointers; i < k.UserData; i++ {
		if ud[i] != nil {
			return fmt.Errorf("kernel %d (%s): push constant COMPUTE_USER_DATA_%d is relocated", lo.Sym.Index, k.Name, i)
		}
	}
	if p.Body[0] == 0 || p.Body[1] == 0 || p.Body[2] == 0 {
		return fmt.Errorf("empty grid %d,%d,%d", p.Body[0], p.Body[1], p.Body[2])
	}
	if p.Body[3]&InitComputeShaderEn == 0 {
		return fmt.Errorf("DISPATCH_INITIATOR %#x lacks COMPUTE_SHADER_EN", p.Body[3])
	}
	return nil
}

func ud0(sh []uint32, i int) uint32 { return sh[COMPUTE_USER_DATA_0+i] }

func symDebug(s Symbol) string {
	sp := "region"
	if s.Space == SpaceKernel {
		sp = "kernel"
	}
	return fmt.Sprintf("%s %d+%#x", sp, s.Index, s.Addend)
}
