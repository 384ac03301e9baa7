// Package autobuild turns a GGUF into a bundle in the build cache, for
// zrt-run given a model file instead of a bundle: it asks zrtc for the
// build's key, runs the cached bundle when there is one, and otherwise
// runs zrtc build into the cache first.
//
// zrtc runs as a separate process, found beside the caller's executable
// or on PATH, so the runtime never links the compiler; the key and the
// cache (format/buildcache) are zrtc's own, so zrt-run and zrtc build
// --cache share entries. Two processes building the same key take turns
// (buildcache's build lock): the second finds the first's entry.
package autobuild

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/zrtdev/zrt/format/buildcache"
)

// Request is one model to build, or to find already built.
type Request struct {
	// GGUF is the model file.
	GGUF string
	// CacheDir is the build cache directory (zrtc build --cache).
	CacheDir string
	// Target is the compile target; "" is zrtc's default (cpu).
	Target string
	// ContextLength and Slots, when positive, are zrtc build's --ctx-size
	// and --slots; zero takes zrtc's defaults for the GGUF and target.
	ContextLength, Slots int
	// DraftLayers, when set, is zrtc build's --draft-layers: the layers
	// of the self-speculation draft variants, 0 for none; nil takes
	// zrtc's default.
	DraftLayers *int
	// Run runs zrtc with args (key, build) and waits for it; FindZrtc
	// and Exec give the usual one.
	Run Runner
	// Log receives progress lines and zrtc build's own progress; nil
	// discards them.
	Log io.Writer
}

// Runner runs zrtc with args, its standard output and error going to
// stdout and stderr, and returns when it has exited. A zrtc that exits
// non-zero is an error; Exec's is a *ToolError.
type Runner func(ctx context.Context, args []string, stdout, stderr io.Writer) error

// Result is a bundle in the cache.
type Result struct {
	// Dir is the bundle: the cache entry itself, which is never changed
	// in place (see buildcache.Cache.Use).
	Dir string
	// Key is the build's key, as zrtc key prints it.
	Key buildcache.Key
	// Built is true when this call ran zrtc build, false when the entry
	// was there already.
	Built bool
}

// ToolError is zrtc's failure: its exit status (zrtc's documented
// statuses: 2 usage, 3 unsupported input, 4 malformed input) and what
// it said on stderr, when that was kept.
type ToolError struct {
	Args   []string
	Status int
	Stderr string
}

func (e *ToolError) Error() string {
	msg := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(e.Stderr), "zrtc: "))
	if msg == "" {
		msg = "see its output above"
	}
	return fmt.Sprintf("zrtc %s exited with status %d: %s", e.Args[0], e.Status, msg)
}

// ExitStatus is zrtc's exit status, for a caller that passes it on.
func (e *ToolError) ExitStatus() int { return e.Status }

// Exec returns the Runner that executes the zrtc at path. Cancelling
// the context kills it.
func Exec(path string) Runner {
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		cmd := exec.CommandContext(ctx, path, args...)
		cmd.Stdout, cmd.Stderr = stdout, stderr
		cmd.WaitDelay = 5 * time.Second
		err := cmd.Run()
		if err != nil && ctx.Err() != nil {
			return fmt.Errorf("zrtc %s: %w", args[0], ctx.Err())
		}
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return &ToolError{Args: args, Status: ee.ExitCode()}
		}
		if err != nil {
			return fmt.Errorf("running %s: %w", path, err)
		}
		return nil
	}
}

// FindZrtc returns the zrtc to build with: the one beside self (the
// caller's executable, os.Executable) if there is one, else lookPath's
// (exec.LookPath, which searches PATH). The error names both places.
func FindZrtc(self string, lookPath func(string) (string, error)) (string, error) {
	beside := ""
	if self != "" {
		beside = filepath.Join(filepath.Dir(self), "zrtc")
		if fi, err := os.Stat(beside); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return beside, nil
		}
	}
	if lookPath != nil {
		if p, err := lookPath("zrtc"); err == nil {
			return p, nil
		}
	}
	where := "beside this executable"
	if beside != "" {
		where = beside
	}
	return "", fmt.Errorf("building a GGUF needs zrtc, and there is none at %s or on $PATH: install zrtc beside zrt-run (make build puts both in bin/), or build a bundle with zrtc build and pass that", where)
}

// Build returns the bundle for req: the cache's entry for its key, built
// first when missing. It says on req.Log which it did and where.
func Build(ctx context.Context, req Request) (Result, error) {
	if req.Run == nil {
		return Result{}, errors.New("autobuild: no way to run zrtc (Request.Run is nil)")
	}
	if req.CacheDir == "" {
		return Result{}, errors.New("autobuild: no cache directory")
	}
	log := req.Log
	if log == nil {
		log = io.Discard
	}
	fi, err := os.Stat(req.GGUF)
	if err != nil {
		return Result{}, fmt.Errorf("model %w", err)
	}
	if fi.IsDir() {
		return Result{}, fmt.Errorf("model %s is a directory, not a GGUF file", req.GGUF)
	}
	cache, err := buildcache.Open(req.CacheDir)
	if err != nil {
		return Result{}, err
	}
	key, err := req.key(ctx)
	if err != nil {
		return Result{}, err
	}
	if dir, ok, err := lookup(cache, key); err != nil || ok {
		if ok {
			fmt.Fprintf(log, "zrt-run: using cached build at %s\n", dir)
		}
		return Result{Dir: dir, Key: key}, err
	}
	release, err := cache.Building(ctx, key)
	if err != nil {
		return Result{}, err
	}
	defer release()
	// Another process may have built it while this one waited.
	if dir, ok, err := lookup(cache, key); err != nil || ok {
		if ok {
			fmt.Fprintf(log, "zrt-run: using cached build at %s (built meanwhile by another process)\n", dir)
		}
		return Result{Dir: dir, Key: key}, err
	}
	target := req.Target
	if target == "" {
		target = "zrtc's default target"
	}
	fmt.Fprintf(log, "zrt-run: building %s for %s into the cache %s (once; later runs reuse it)\n", req.GGUF, target, req.CacheDir)
	start := time.Now()
	args := append([]string{"build", "--cache", req.CacheDir}, req.flags()...)
	if err := req.Run(ctx, append(args, req.GGUF), log, log); err != nil {
		return Result{}, err
	}
	dir, err := cache.Use(key)
	if err != nil {
		if errors.Is(err, buildcache.ErrMiss) {
			return Result{}, fmt.Errorf("zrtc build succeeded, but the cache %s has no entry %s, the key zrtc key gave: was zrtc replaced meanwhile?", req.CacheDir, key)
		}
		return Result{}, err
	}
	fmt.Fprintf(log, "zrt-run: built %s in %s: %s\n", filepath.Base(req.GGUF), time.Since(start).Round(time.Millisecond), dir)
	return Result{Dir: dir, Key: key, Built: true}, nil
}

// flags are the build options both zrtc key and zrtc build get, so they
// agree on the key.
func (req Request) flags() []string {
	var f []string
	if req.Target != "" {
		f = append(f, "--target", req.Target)
	}
	if req.ContextLength != 0 {
		f = append(f, "--ctx-size", strconv.Itoa(req.ContextLength))
	}
	if req.Slots != 0 {
		f = append(f, "--slots", strconv.Itoa(req.Slots))
	}
	if req.DraftLayers != nil {
		f = append(f, "--draft-layers", strconv.Itoa(*req.DraftLayers))
	}
	return f
}

// key asks zrtc for the build's key. Its digest of the GGUF is
// remembered in the cache, so a model is hashed once.
func (req Request) key(ctx context.Context) (buildcache.Key, error) {
	var out, errb bytes.Buffer
	args := append([]string{"key", "--cache", req.CacheDir}, req.flags()...)
	if err := req.Run(ctx, append(args, req.GGUF), &out, &errb); err != nil {
		var te *ToolError
		if errors.As(err, &te) && te.Stderr == "" {
			te.Stderr = errb.String()
		}
		return buildcache.Key{}, err
	}
	k, err := buildcache.ParseKey(strings.TrimSpace(out.String()))
	if err != nil {
		return k, fmt.Errorf("zrtc key: %w", err)
	}
	return k, nil
}

// lookup returns key's entry when the cache holds a whole one.
func lookup(c *buildcache.Cache, k buildcache.Key) (string, bool, error) {
	hit, err := c.Lookup(k)
	if err != nil || !hit {
		return "", false, err
	}
	dir, err := c.Use(k)
	if errors.Is(err, buildcache.ErrMiss) {
		return "", false, nil // pruned between the two
	}
	return dir, err == nil, err
}

// IsGGUF reports whether path names a GGUF model rather than a bundle, a
// set or a pack: a .gguf name that is not a directory (a missing one is
// reported by the build).
func IsGGUF(path string) bool {
	if !strings.HasSuffix(strings.ToLower(path), ".gguf") {
		return false
	}
	fi, err := os.Stat(path)
	return err != nil || !fi.IsDir()
}
