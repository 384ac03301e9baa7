package driver

import (
	"errors"
	"testing"
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
