// Package buildkey computes a build's cache key: one SHA-256 over
// everything that decides the bytes of the bundle zrtc writes, and over
// nothing else. A key that missed an input would hand out a stale bundle
// (the bug class that haunts other engines' caches); one that covered
// more (a path, a timestamp, --quiet) would only miss, so where in doubt
// an input is in.
//
// What is in: the GGUF's content digest (not its name, path or mtime),
// the effective model config after defaults (canonical TOML, target
// included), the target, the options the graph file records (--no-fuse),
// the kernels' source when it is not the one built into zrtc
// ($ZRT_PTX_DIR), and the toolchain: zrtc's version, the kernel ABI and
// format versions, and whatever the command adds to identify its own
// executable.
//
// What is out: the GGUF's file name (the cache restamps it, see
// format/buildcache), the config file's path and formatting (only the
// effective values count), and options that leave the bundle as it is
// (--dump-after, --quiet, --verify-each, --memory-budget).
package buildkey

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/compiler/config"
	"github.com/zrtdev/zrt/format/buildcache"
	"github.com/zrtdev/zrt/format/gguf"
)

// scheme starts the encoding; a change to what the key covers or how it
// is encoded changes it, so keys of two schemes never collide.
const scheme = "zrtc build key 1"

// Inputs are the things a key covers, each already canonical.
type Inputs struct {
	// Model is the SHA-256 of the GGUF's bytes.
	Model [32]byte
	// Config is the effective model config as TOML (defaults from the
	// GGUF, then the config file, then --target).
	Config string
	// Target is the compile target.
	Target string
	// Flags are the build options the graph file records.
	Flags string
	// Kernels is "embedded" for the kernel code built into zrtc, or a
	// digest of the directory it comes from instead.
	Kernels string
	// Toolchain identifies zrtc (compiler.Toolchain and the caller's
	// executable digest).
	Toolchain string
}

// fields lists the inputs in their fixed encoding order.
func (in Inputs) fields() [][2]string {
	return [][2]string{
		{"model", fmt.Sprintf("sha256:%x", in.Model)},
		{"config", in.Config},
		{"target", in.Target},
		{"flags", in.Flags},
		{"kernels", in.Kernels},
		{"toolchain", in.Toolchain},
	}
}

// Key is the SHA-256 of the inputs' encoding: each field as its name,
// its length in bytes and its value, so no two different inputs encode
// alike whatever bytes they hold.
func (in Inputs) Key() buildcache.Key {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n", scheme)
	for _, f := range in.fields() {
		fmt.Fprintf(h, "%s %d\n%s\n", f[0], len(f[1]), f[1])
	}
	var k buildcache.Key
	copy(k[:], h.Sum(nil))
	return k
}

// Describe lists the inputs one per line (the config by its digest), for
// zrtc key -v: what to compare when two builds miss each other's
// entries.
func (in Inputs) Describe() string {
	var b strings.Builder
	for _, f := range in.fields() {
		v := f[1]
		if f[0] == "config" {
			v = fmt.Sprintf("sha256:%x (%d bytes of TOML)", sha256.Sum256([]byte(v)), len(v))
		}
		fmt.Fprintf(&b, "%-9s %s\n", f[0], v)
	}
	return b.String()
}

// Uncacheable returns why a build with opt cannot use the cache, or nil.
// Text IR resumed from (--compile-from) may have been edited, and the key
// does not cover it; --compile-to writes text IR, not a bundle.
func Uncacheable(opt compiler.Options) error {
	switch {
	case opt.CompileFrom != "" || opt.IRPath != "":
		return errors.New("--compile-from resumes from text IR, which the cache key does not cover")
	case opt.CompileTo != "":
		return errors.New("--compile-to writes text IR, not a bundle")
	}
	return nil
}

// Resolve gathers the inputs of a build of the GGUF at path with opt,
// given the GGUF's digest (which the caller may have remembered rather
// than computed) and the toolchain identity. It reads the GGUF's
// metadata, not its tensors.
func Resolve(path string, model [32]byte, opt compiler.Options, toolchain string) (Inputs, error) {
	if err := Uncacheable(opt); err != nil {
		return Inputs{}, err
	}
	f, err := gguf.OpenModel(path)
	if err != nil {
		return Inputs{}, err
	}
	defer f.Close()
	cfg, err := config.Load(f, opt.ConfigPath, opt.Overrides()) // as the compiler's frontend does
	if err != nil {
		return Inputs{}, err
	}
	if !slices.Contains(compiler.Targets(), cfg.Target) {
		return Inputs{}, fmt.Errorf("target %s: this zrtc compiles for %s", cfg.Target, strings.Join(compiler.Targets(), ", "))
	}
	in := Inputs{Model: model, Config: cfg.TOML(), Target: cfg.Target, Flags: compiler.RecordedFlags(cfg.Target, opt),
		Kernels: "embedded", Toolchain: toolchain}
	if opt.PTXDir != "" {
		d, err := dirDigest(opt.PTXDir)
		if err != nil {
			return Inputs{}, fmt.Errorf("kernel directory %s: %w", opt.PTXDir, err)
		}
		in.Kernels = fmt.Sprintf("ptx-dir sha256:%x", d)
	}
	return in, nil
}

// dirDigest hashes the paths and contents of the regular files in dir
// and its subdirectories (build_ptx.sh writes <arch>/<entry>.ptx), in
// path order: the kernel code a build may read from there.
func dirDigest(dir string) ([32]byte, error) {
	var sum [32]byte
	h := sha256.New()
	err := filepath.WalkDir(dir, func(p string, de fs.DirEntry, err error) error {
		if err != nil || !de.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s %d\n", filepath.ToSlash(rel), len(b))
		h.Write(b)
		return nil
	})
	if err != nil {
		return sum, err
	}
	copy(sum[:], h.Sum(nil))
	return sum, nil
}
