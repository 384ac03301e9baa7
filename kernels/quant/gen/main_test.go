package main

import (
	"testing"

	"github.com/zrtdev/zrt/kernels/internal/asmgen"
)

// TestGeneratedFresh: the committed assembly is what the tables write
// (asmgen.CheckFresh).
func TestGeneratedFresh(t *testing.T) { asmgen.CheckFresh(t, "kernels/quant", render) }
