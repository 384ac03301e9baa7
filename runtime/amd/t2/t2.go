// Package t2 is T2: T1's PM4 submission path (runtime/amd/t1: ring,
// packets, relocations, fences) over the amdgpu DRM uapi of a render
// node with a compute user-mode queue (runtime/amd/amdgpu) instead of
// /dev/kfd. Only the device differs; the tier code is T1's.
package t2

import (
	"fmt"

	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/runtime/amd/amdgpu"
	"github.com/zrtdev/zrt/runtime/amd/kfd"
	"github.com/zrtdev/zrt/runtime/amd/t1"
)

// Probe says whether T2 can run here and exactly why not: no render
// node, permission, not amdgpu, unsupported gfx version, kernel without
// (compute) user queues — the last also by creating and freeing a user
// queue with T1's ring, pointers, EOP buffer and event.
func Probe() (kfd.Info, error) {
	d, err := amdgpu.Open(amdgpu.OpenOptions{Gfx: t1.GfxTargets()})
	if err != nil {
		return kfd.Info{}, err
	}
	defer d.Close()
	if err := t1.CheckQueue(d); err != nil {
		return kfd.Info{}, err
	}
	return d.Info(), nil
}

// Load opens the first amdgpu render node whose gfx version is gfx
// ("gfx1201") and loads b on it through T1's tier code; Close closes the
// device.
func Load(b *bundle.Bundle, gfx string) (*t1.Tier, error) {
	d, err := amdgpu.Open(amdgpu.OpenOptions{Gfx: []string{gfx}})
	if err != nil {
		return nil, fmt.Errorf("tier t2: %w", err)
	}
	t, err := t1.Load(b, d, t1.Options{CloseDevice: true, Name: "t2"})
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("tier t2: %w", err)
	}
	return t, nil
}
