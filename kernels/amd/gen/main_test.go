package main

import (
	"testing"

	"github.com/zrtdev/zrt/kernels/internal/asmgen"
)

// TestGeneratedFresh fails when the committed INSTANCES or iq3s_grid.h
// are not what the generator writes from the current tables: run make
// generate (asmgen.CheckFresh).
func TestGeneratedFresh(t *testing.T) { asmgen.CheckFresh(t, "kernels/amd", render) }
