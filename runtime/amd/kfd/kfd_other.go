//go:build !linux

package kfd

import (
	"fmt"
	"runtime"
)

// Probe says why T1 cannot run here: KFD is Linux only.
func Probe(gfx []string) (Info, error) {
	return Info{}, fmt.Errorf("no /dev/kfd: KFD is a Linux interface, this is %s", runtime.GOOS)
}

// OpenOptions configure Open.
type OpenOptions struct {
	Node int
	Gfx  []string
}

// Open fails: KFD is Linux only.
func Open(o OpenOptions) (Device, error) {
	_, err := Probe(o.Gfx)
	return nil, err
}
