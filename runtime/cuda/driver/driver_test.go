package driver

import (
	"errors"
	"testing"
	"unsafe"
)

// TestProbe must not panic on machines without CUDA; where a device is
// present it must name it.
func TestProbe(t *testing.T) {
	info, err := Probe()
	if err != nil {
		t.Skipf("no CUDA here: %v", err)
	}
	if info.Name == "" || info.Major == 0 {
		t.Errorf("probe found a device without a name or compute capability: %+v", info)
	}
	t.Logf("device 0: %s", info)
}

func TestErrorText(t *testing.T) {
	e := error(&Error{Call: "cuLaunchKernel", Code: 1, Name: "CUDA_ERROR_INVALID_VALUE"})
	if got, want := e.Error(), "cuda: cuLaunchKernel: CUDA_ERROR_INVALID_VALUE (1)"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if IsNotReady(e) || !IsNotReady(&Error{Code: NotReady}) || IsNotReady(errors.New("x")) {
		t.Error("IsNotReady misclassifies")
	}
}

// TestMemcpy2DLayout holds memcpy2D to CUDA_MEMCPY2D's layout in cuda.h
// (128 bytes; the destination's fields from byte 56, the width at 112).
func TestMemcpy2DLayout(t *testing.T) {
	var c memcpy2D
	for _, f := range []struct {
		name      string
		got, want uintptr
	}{
		{"size", unsafe.Sizeof(c), 128},
		{"srcMemoryType", unsafe.Offsetof(c.srcMemoryType), 16},
		{"srcDevice", unsafe.Offsetof(c.srcDevice), 32},
		{"srcPitch", unsafe.Offsetof(c.srcPitch), 48},
		{"dstXInBytes", unsafe.Offsetof(c.dstXInBytes), 56},
		{"dstMemoryType", unsafe.Offsetof(c.dstMemoryType), 72},
		{"dstDevice", unsafe.Offsetof(c.dstDevice), 88},
		{"dstPitch", unsafe.Offsetof(c.dstPitch), 104},
		{"widthInBytes", unsafe.Offsetof(c.widthInBytes), 112},
		{"height", unsafe.Offsetof(c.height), 120},
	} {
		if f.got != f.want {
			t.Errorf("%s at %d, want %d", f.name, f.got, f.want)
		}
	}
}
