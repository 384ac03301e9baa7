package amdgpu

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/zrtdev/zrt/runtime/amd/kfd"
	"github.com/zrtdev/zrt/runtime/amd/t1"
)

// fakeDRM is the ioctl layer in memory: GEM objects are byte slices, VA
// maps are recorded, user queue creation keeps its arguments and MQD.
type fakeDRM struct {
	next     uint32
	objs     map[uint32][]byte
	domains  map[uint32]uint64
	mapped   map[uint64]uint32 // VA -> handle
	queues   map[uint32]UserqIn
	mqds     map[uint32]MQDComputeGfx11
	userqErr error
	closed   bool
}

func newFake() *fakeDRM {
	return &fakeDRM{objs: map[uint32][]byte{}, domains: map[uint32]uint64{}, mapped: map[uint64]uint32{},
		queues: map[uint32]UserqIn{}, mqds: map[uint32]MQDComputeGfx11{}}
}

func (f *fakeDRM) GemCreate(size, align, domains, flags uint64) (uint32, error) {
	f.next++
	f.objs[f.next] = make([]byte, size)
	f.domains[f.next] = domains
	return f.next, nil
}
func (f *fakeDRM) Map(h uint32, size uint64) ([]byte, error) {
	b, ok := f.objs[h]
	if !ok || uint64(len(b)) < size {
		return nil, fmt.Errorf("no object %d", h)
	}
	return b[:size], nil
}
func (f *fakeDRM) Unmap([]byte) error { return nil }
func (f *fakeDRM) GemVA(op, h, flags uint32, va, size uint64) error {
	switch op {
	case VAOpMap:
		if _, ok := f.mapped[va]; ok {
			return fmt.Errorf("VA %#x mapped twice", va)
		}
		f.mapped[va] = h
	case VAOpUnmap:
		if f.mapped[va] != h {
			return fmt.Errorf("VA %#x is not object %d", va, h)
		}
		delete(f.mapped, va)
	}
	return nil
}
func (f *fakeDRM) GemClose(h uint32) error {
	if _, ok := f.objs[h]; !ok {
		return fmt.Errorf("no object %d", h)
	}
	delete(f.objs, h)
	return nil
}
func (f *fakeDRM) UserqCreate(in *UserqIn, mqd *MQDComputeGfx11) (uint32, error) {
	if f.userqErr != nil {
		return 0, f.userqErr
	}
	if in.MQDSize != uint64(unsafe.Sizeof(MQDComputeGfx11{})) {
		return 0, fmt.Errorf("mqd size %d", in.MQDSize)
	}
	id := uint32(len(f.queues) + 7)
	f.queues[id] = *in
	if in.MQD != uint64(uintptr(unsafe.Pointer(mqd))) {
		return 0, fmt.Errorf("mqd at %#x, not the MQD passed", in.MQD)
	}
	f.mqds[id] = *mqd
	return id, nil
}
func (f *fakeDRM) UserqFree(id uint32) error {
	if _, ok := f.queues[id]; !ok {
		return fmt.Errorf("no queue %d", id)
	}
	delete(f.queues, id)
	return nil
}
func (f *fakeDRM) Close() error { f.closed = true; return nil }

func fakeDevice() (*Device, *fakeDRM) {
	f := newFake()
	di := InfoDevice{VirtualAddressOffset: 0x200000, VirtualAddressMax: 1 << 47, VirtualAddressAlignment: 4096, UserqIPMask: 1 << HWIPCompute}
	return newDevice(f, di, kfd.Info{Name: "fake", GfxVersion: 120001}), f
}

// The queue descriptor: ring, pointers, doorbell, MQD as the kernel wants
// them, and the ring writer's doorbell value.
func TestQueueDescriptorAndDoorbell(t *testing.T) {
	d, f := fakeDevice()
	ring, _ := d.Alloc(64<<10, kfd.MemHost)
	ptrs, _ := d.Alloc(4096, kfd.MemHost)
	eop, _ := d.Alloc(4096, kfd.MemVRAM)
	q, err := d.CreateQueue(kfd.QueueSpec{Ring: ring, Pointers: ptrs, EOP: eop})
	if err != nil {
		t.Fatal(err)
	}
	in := f.queues[q.ID]
	want := UserqIn{Op: UserqOpCreate, IPType: HWIPCompute, DoorbellHandle: in.DoorbellHandle, QueueVA: ring.VA, QueueSize: 64 << 10,
		RptrVA: ptrs.VA, WptrVA: ptrs.VA + 8, MQD: in.MQD, MQDSize: 8}
	if in != want {
		t.Fatalf("userq args %+v, want %+v", in, want)
	}
	if f.domains[in.DoorbellHandle] != DomainDoorbell {
		t.Fatalf("doorbell object in domain %#x", f.domains[in.DoorbellHandle])
	}
	if f.mqds[q.ID].EOPVA != eop.VA {
		t.Fatalf("MQD eop_va %#x, want %#x", f.mqds[q.ID].EOPVA, eop.VA)
	}
	// A second queue takes the next doorbell.
	q2, err := d.CreateQueue(kfd.QueueSpec{Ring: ring, Pointers: ptrs, EOP: eop})
	if err != nil {
		t.Fatal(err)
	}
	if f.queues[q2.ID].DoorbellOffset != 1 || q2.Doorbell.(*Doorbell).Index() != 1 {
		t.Fatalf("second queue's doorbell %d", f.queues[q2.ID].DoorbellOffset)
	}
	// T1's ring writer: packets in the ring, the write pointer in dwords
	// in the wptr slot and in the doorbell.
	r := t1.NewRing(ring, ptrs, q.Doorbell)
	pkt := []uint32{3<<30 | 1<<16 | 0x10, 0xAAAA, 0xBBBB} // type-3, two body dwords
	for i := 0; i < 3; i++ {
		if err := r.Submit(pkt); err != nil {
			t.Fatal(err)
		}
	}
	db := f.objs[in.DoorbellHandle]
	if got := binary.LittleEndian.Uint64(db[0:]); got != 9 {
		t.Fatalf("doorbell holds %d, want the write pointer 9", got)
	}
	if got := ptrs.Load64(kfd.WritePtrOff); got != 9 {
		t.Fatalf("wptr %d, want 9", got)
	}
	if got := ring.Load32(4 * 3); got != pkt[0] {
		t.Fatalf("ring dword 3 is %#x", got)
	}
	if err := d.DestroyQueue(q); err != nil {
		t.Fatal(err)
	}
	for _, m := range []*kfd.Mem{ring, ptrs, eop} {
		if err := d.Free(m); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Free(ring); err == nil {
		t.Fatal("double free accepted")
	}
	d.Close()
	if len(f.mapped) != 0 || len(f.objs) != 0 || len(f.queues) != 0 || !f.closed {
		t.Fatalf("after close: %d VA maps, %d objects, %d queues, closed %v", len(f.mapped), len(f.objs), len(f.queues), f.closed)
	}
}

func TestQueueArgsRejects(t *testing.T) {
	m := func(size uint64) *kfd.Mem { return &kfd.Mem{VA: 0x100000, Size: size} }
	var mqd MQDComputeGfx11
	for _, s := range []kfd.QueueSpec{{Ring: m(100), Pointers: m(4096), EOP: m(4096)}, {Ring: m(4096), Pointers: m(8), EOP: m(4096)}, {Ring: m(4096), Pointers: m(4096)}} {
		if _, err := QueueArgs(s, 1, 0, &mqd); err == nil {
			t.Errorf("spec %+v accepted", s)
		}
	}
}

// Allocation placement and GPU addresses: distinct, aligned, inside the
// device's range.
func TestAllocPlacement(t *testing.T) {
	d, f := fakeDevice()
	var last uint64
	for _, k := range []kfd.MemKind{kfd.MemVRAM, kfd.MemWeights, kfd.MemCode, kfd.MemHost} {
		m, err := d.Alloc(5000, k)
		if err != nil {
			t.Fatal(err)
		}
		if m.Size != 8192 || m.VA%4096 != 0 || m.VA < 0x200000 || m.VA < last+8192 && last != 0 {
			t.Fatalf("%s: %d bytes at %#x (last %#x)", k, m.Size, m.VA, last)
		}
		last = m.VA
		want := uint64(DomainVRAM)
		if k == kfd.MemHost {
			want = DomainGTT
		}
		if f.domains[uint32(m.Handle)] != want {
			t.Fatalf("%s in domain %#x", k, f.domains[uint32(m.Handle)])
		}
	}
	big, _ := d.Alloc(3<<20, kfd.MemVRAM)
	if big.VA%(2<<20) != 0 {
		t.Fatalf("3 MiB at %#x, want 2 MiB alignment", big.VA)
	}
	if _, err := d.Alloc(1, 0); err == nil {
		t.Fatal("memory kind 0 accepted")
	}
}

// Events: a mailbox the RELEASE_MEM writes; WaitEvent sees it and
// resets it, and times out otherwise.
func TestEvents(t *testing.T) {
	d, _ := fakeDevice()
	e, err := d.CreateEvent()
	if err != nil {
		t.Fatal(err)
	}
	e2, _ := d.CreateEvent()
	if e.ID == 0 || e2.ID == e.ID || e2.Mailbox != e.Mailbox+8 {
		t.Fatalf("events %+v %+v", e, e2)
	}
	if err := d.WaitEvent(e, 5*time.Millisecond); err == nil || !strings.Contains(err.Error(), "not signalled") {
		t.Fatalf("unsignalled wait: %v", err)
	}
	go func() {
		time.Sleep(2 * time.Millisecond)
		d.evPage.Store32(e.Mailbox-d.evPage.VA, e.ID)
	}()
	if err := d.WaitEvent(e, time.Second); err != nil {
		t.Fatal(err)
	}
	if d.evPage.Load32(e.Mailbox-d.evPage.VA) != 0 {
		t.Fatal("mailbox not reset")
	}
	d.DestroyEvent(e)
	if err := d.WaitEvent(e, time.Millisecond); err == nil {
		t.Fatal("wait on a destroyed event accepted")
	}
}

// T1's probe step (ring, pointers, EOP, queue, event, then all freed)
// runs on the T2 device, and a kernel without user queues fails it with
// the driver's reason.
func TestCheckQueueOnFake(t *testing.T) {
	d, f := fakeDevice()
	if err := t1.CheckQueue(d); err != nil {
		t.Fatal(err)
	}
	if len(f.queues) != 0 || len(f.mapped) != 1 { // the event page stays until Close
		t.Fatalf("after the check: %d queues, %d VA maps", len(f.queues), len(f.mapped))
	}
	f.userqErr = fmt.Errorf("amdgpu: kernel without user queues for compute: DRM_IOCTL_AMDGPU_USERQ create failed (invalid argument)")
	if err := t1.CheckQueue(d); err == nil || !strings.Contains(err.Error(), "kernel without user queues") {
		t.Fatalf("check with failing userq: %v", err)
	}
}

func TestGfxTargetVersion(t *testing.T) {
	for ip, want := range map[uint32]string{12<<16 | 1: "gfx1201", 12 << 16: "gfx1200", 11 << 16: "gfx1100", 11<<16 | 3: "gfx1101",
		11<<16 | 2: "gfx1102", 11<<16 | 1: "gfx1103", 11<<16 | 5<<8 | 1: "gfx1151", 10<<16 | 3<<8: "gfx1030"} {
		if got := kfd.Gfx(GfxTargetVersion(ip)); got != want {
			t.Errorf("GC %#x: %s, want %s", ip, got, want)
		}
	}
	if GfxTargetVersion(9<<16|4<<8|3) != 0 {
		t.Error("gfx9 mapped digit for digit")
	}
}
