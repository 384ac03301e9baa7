//go:build !linux

package amdgpu

import (
	"fmt"
	"runtime"
)

// OpenOptions configure Open.
type OpenOptions struct {
	Node int
	Gfx  []string
}

// Open fails: render nodes and the amdgpu uapi are Linux only.
func Open(o OpenOptions) (*Device, error) {
	return nil, fmt.Errorf("no render node: the amdgpu DRM uapi is a Linux interface, this is %s", runtime.GOOS)
}
