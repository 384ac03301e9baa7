package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/zrtdev/zrt/cmd/internal/exitcode"
	"github.com/zrtdev/zrt/format/autobuild"
	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/runtime"
)

// cacheEnv names the build cache when --cache is not given, as for zrtc.
const cacheEnv = "ZRTC_CACHE"

// buildFlags are how a GGUF given where a bundle goes is built: the
// common model-config settings as flags, so no config file is needed.
// There is no KV type flag: the model config has no KV type key (the KV
// cache is F16).
type buildFlags struct {
	cache  string
	target string
	ctx    int
	slots  int
	// draftLayers builds a self-speculation draft variant (--speculative
	// self) of the first layers.
	draftLayers int
}

func (b *buildFlags) add(c *cobra.Command) {
	c.Flags().StringVar(&b.cache, "cache", "", "given a GGUF: the build cache it is built into and reused from (default $"+cacheEnv+", else the user cache directory's zrt)")
	c.Flags().StringVar(&b.target, "target", "", "given a GGUF: the compile target (default cpu; cuda:sm_90 with --tier cuda)")
	c.Flags().IntVar(&b.ctx, "ctx-size", 0, "given a GGUF: the context length (default: the GGUF's trained context)")
}

// addSlots adds --slots, for the commands that have no --slots of their
// own.
func (b *buildFlags) addSlots(c *cobra.Command) {
	c.Flags().IntVar(&b.slots, "slots", 0, "given a GGUF: requests served at once, which sets its decode variants (default 16 on cpu, 64 on cuda)")
}

// addDraftLayers adds --draft-layers, for the commands that speculate.
func (b *buildFlags) addDraftLayers(c *cobra.Command) {
	c.Flags().IntVar(&b.draftLayers, "draft-layers", 0, "given a GGUF: build a draft variant of its first N layers and its head, for --speculative self (default: none)")
}

// isGGUF reports whether path names a GGUF model rather than a bundle,
// a set or a pack.
func isGGUF(path string) bool {
	if !strings.HasSuffix(strings.ToLower(path), ".gguf") {
		return false
	}
	fi, err := os.Stat(path)
	return err != nil || !fi.IsDir() // a missing one is reported by the build
}

// cacheDir is the build cache: --cache, else $ZRTC_CACHE, else the user
// cache directory's zrt (never beside the GGUF, which may be read-only
// or shared).
func (b *buildFlags) cacheDir() (string, error) {
	if b.cache != "" {
		return b.cache, nil
	}
	if d := os.Getenv(cacheEnv); d != "" {
		return d, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no cache directory to build the GGUF into (%v): pass --cache DIR or set $%s", err, cacheEnv)
	}
	return filepath.Join(d, "zrt"), nil
}

// bundle builds the GGUF at path through zrtc into the build cache, or
// finds it built, and returns the bundle's directory.
func (b *buildFlags) bundle(ctx context.Context, path string, opt runtime.Options) (string, error) {
	switch {
	case b.ctx < 0:
		return "", exitcode.Usagef("--ctx-size %d: want a positive context length (0: the GGUF's)", b.ctx)
	case b.slots < 0:
		return "", exitcode.Usagef("--slots %d: want a positive number of requests (0: the target's default)", b.slots)
	case b.draftLayers < 0:
		return "", exitcode.Usagef("--draft-layers %d: want a positive number of layers (0: no draft variant)", b.draftLayers)
	}
	dir, err := b.cacheDir()
	if err != nil {
		return "", err
	}
	self, _ := os.Executable()
	zrtc, err := autobuild.FindZrtc(self, exec.LookPath)
	if err != nil {
		return "", err
	}
	target := b.target
	switch {
	case target == "" && opt.Tier == string(kernels.TierCUDA):
		target = cudaTarget()
	case target == "":
		target = string(kernels.TierCPU) // zrtc's default, said in the progress line
	}
	r, err := autobuild.Build(ctx, autobuild.Request{GGUF: path, CacheDir: dir, Target: target,
		ContextLength: b.ctx, Slots: b.slots, DraftLayers: b.draftLayers, Run: autobuild.Exec(zrtc), Log: os.Stderr})
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return r.Dir, nil
}

// cudaTarget is the first CUDA target in the registry: what --tier cuda
// builds a GGUF for when --target is not given.
func cudaTarget() string {
	for _, t := range kernels.Targets() {
		if t.Tier == kernels.TierCUDA {
			return t.Name
		}
	}
	return ""
}
