package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/spf13/cobra"
	"github.com/zrtdev/zrt/cmd/internal/exitcode"
	"github.com/zrtdev/zrt/format/autobuild"
	"github.com/zrtdev/zrt/internal/optflag"
)

// cacheEnv names the build cache when --cache is not given, as for zrtc.
const cacheEnv = "ZRTC_CACHE"

// buildFlags are how a GGUF given where a bundle goes is built: the
// common model-config settings as flags, so no config file is needed.
type buildFlags struct {
	cache  string
	target string
	ctx    int
	slots  int
	// draftLayers: --draft-layers, for the commands that speculate (nil
	// when left out).
	draftLayers *int
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
	c.Flags().Var(optflag.Int{P: &b.draftLayers}, "draft-layers", "given a GGUF: build draft variants of its first N layers and its head, for --speculative self; 0: none (default: zrtc's, a quarter of the layers where the model can draft)")
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

// request is how a GGUF is built: through zrtc (beside zrt-run, else on
// $PATH) into the build cache.
func (b *buildFlags) request() (autobuild.Request, error) {
	switch {
	case b.ctx < 0:
		return autobuild.Request{}, exitcode.Usagef("--ctx-size %d: want a positive context length (0: the GGUF's)", b.ctx)
	case b.slots < 0:
		return autobuild.Request{}, exitcode.Usagef("--slots %d: want a positive number of requests (0: the target's default)", b.slots)
	}
	dir, err := b.cacheDir()
	if err != nil {
		return autobuild.Request{}, err
	}
	self, _ := os.Executable()
	zrtc, err := autobuild.FindZrtc(self, exec.LookPath)
	return autobuild.Request{CacheDir: dir, Target: b.target, ContextLength: b.ctx, Slots: b.slots, DraftLayers: b.draftLayers, Run: autobuild.Exec(zrtc), Log: os.Stderr}, err
}
