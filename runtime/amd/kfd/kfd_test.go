//go:build linux

package kfd

import (
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestGfxNames(t *testing.T) {
	for v, want := range map[uint32]string{120001: "gfx1201", 120000: "gfx1200", 110000: "gfx1100", 110501: "gfx1151", 90402: "gfx942", 90010: "gfx90a"} {
		if got := Gfx(v); got != want {
			t.Errorf("Gfx(%d) = %s, want %s", v, got, want)
		}
	}
}

// The probe's reasons for the failures a machine without a usable GPU
// shows.
func TestOpenReasons(t *testing.T) {
	for err, want := range map[error]string{
		unix.ENOENT: "no /dev/kfd: the amdgpu driver with KFD",
		unix.EACCES: "permission denied opening /dev/kfd: add the user to the render",
		unix.EPERM:  "permission denied",
		unix.EBUSY:  "open /dev/kfd: device or resource busy",
	} {
		if got := openReason(DevicePath, err).Error(); !strings.HasPrefix(got, want) {
			t.Errorf("%v: %q, want it to start %q", err, got, want)
		}
	}
	if _, err := os.Stat(DevicePath); err != nil {
		_, err := Probe(nil)
		if err == nil || !strings.Contains(err.Error(), "no /dev/kfd") {
			t.Fatalf("probe without %s: %v", DevicePath, err)
		}
	}
}
