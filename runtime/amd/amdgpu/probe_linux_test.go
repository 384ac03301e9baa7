//go:build linux

package amdgpu

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// On a machine without render nodes (this one, in CI) Open says so.
func TestOpenWithoutRenderNode(t *testing.T) {
	if nodes, _ := RenderNodes(); len(nodes) > 0 {
		t.Skipf("this machine has render nodes %v", nodes)
	}
	_, err := Open(OpenOptions{})
	if err == nil || !strings.HasPrefix(err.Error(), "no render node") {
		t.Fatalf("Open without render nodes: %v", err)
	}
}

// Render-node discovery and its reasons on a fake /dev/dri: an empty
// directory, and a node that is not a DRM device.
func TestOpenReasons(t *testing.T) {
	old := DRIDir
	defer func() { DRIDir = old }()
	DRIDir = filepath.Join(t.TempDir(), "dri")
	if _, err := Open(OpenOptions{}); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("missing dir: %v", err)
	}
	os.Mkdir(DRIDir, 0o755)
	if _, err := Open(OpenOptions{}); err == nil || !strings.Contains(err.Error(), "has no renderD") {
		t.Fatalf("empty dir: %v", err)
	}
	os.WriteFile(filepath.Join(DRIDir, "renderD129"), nil, 0o644)
	os.WriteFile(filepath.Join(DRIDir, "renderD128"), nil, 0o644)
	nodes, _ := RenderNodes()
	if len(nodes) != 2 || filepath.Base(nodes[0]) != "renderD128" {
		t.Fatalf("nodes %v", nodes)
	}
	_, err := Open(OpenOptions{})
	if err == nil || !strings.HasPrefix(err.Error(), "not amdgpu") || !strings.Contains(err.Error(), "renderD128: DRM_IOCTL_VERSION") {
		t.Fatalf("non-DRM nodes: %v", err)
	}
	for e, want := range map[error]string{unix.EINVAL: "kernel without user queues", unix.ENOTTY: "kernel without user queues",
		unix.ENOSPC: "no user queue slots", unix.EBUSY: "create: device or resource busy"} {
		if got := userqError(e); !strings.Contains(got.Error(), want) || !errors.Is(got, e) {
			t.Errorf("%v: %v", e, got)
		}
	}
}
