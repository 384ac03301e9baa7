package buildkey

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/compiler/config"
	"github.com/zrtdev/zrt/compiler/synth"
	"github.com/zrtdev/zrt/format/buildcache"
	"github.com/zrtdev/zrt/format/gguf"
)

func writeFile(t *testing.T, path string, data []byte) string {
	t.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestKeyCoversWhatMattersAndNothingElse changes one input at a time: each
// that changes the bundle's bytes changes the key, and each that does not
// leaves it as it was.
func TestKeyCoversWhatMattersAndNothingElse(t *testing.T) {
	dir := t.TempDir()
	raw, err := synth.Write(synth.Tiny)
	if err != nil {
		t.Fatal(err)
	}
	model := writeFile(t, filepath.Join(dir, "tiny.gguf"), raw)
	f, err := gguf.Open(model)
	if err != nil {
		t.Fatal(err)
	}
	def, err := config.Load(f, "", config.Overrides{})
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	var digest [32]byte
	digest[0] = 1
	const tc = "zrtc test; executable sha256:00"
	key := func(t *testing.T, path string, d [32]byte, opt compiler.Options, toolchain string) buildcache.Key {
		t.Helper()
		in, err := Resolve(path, d, opt, toolchain)
		if err != nil {
			t.Fatal(err)
		}
		return in.Key()
	}
	base := key(t, model, digest, compiler.Options{}, tc)

	cfg := func(name, text string) string { return writeFile(t, filepath.Join(dir, name), []byte(text)) }
	ptxA, ptxB := filepath.Join(dir, "ptxA"), filepath.Join(dir, "ptxB")
	for _, d := range []string{ptxA, ptxB} {
		os.Mkdir(d, 0o755)
	}
	writeFile(t, filepath.Join(ptxA, "k.ptx"), []byte("a"))
	writeFile(t, filepath.Join(ptxB, "k.ptx"), []byte("b"))
	other := digest
	other[31] = 9

	same := []struct {
		name  string
		path  string
		opt   compiler.Options
		model [32]byte
	}{
		{"renamed copy of the GGUF", writeFile(t, filepath.Join(dir, "renamed.gguf"), raw), compiler.Options{}, digest},
		{"config file restating the defaults", model, compiler.Options{ConfigPath: cfg("defaults.toml",
			fmt.Sprintf("# comments and layout do not count\ncontext_length   = %d\ntarget = %q\n", def.ContextLength, def.Target))}, digest},
		{"--target equal to the config's", model, compiler.Options{Target: def.Target}, digest},
		{"cache types restating the default", model, compiler.Options{ConfigPath: cfg("f16.toml", "cache_type_k = \"f16\"\ncache_type_v = \"f16\"\n")}, digest},
		{"--verify-each", model, compiler.Options{VerifyEach: true}, digest},
		{"--dump-after/--dump-dir", model, compiler.Options{DumpAfter: "all", DumpDir: filepath.Join(dir, "dumps")}, digest},
		{"--memory-budget and progress", model, compiler.Options{MemoryBudget: 1, Progress: func(string, ...any) {}}, digest},
		// The defaults are in the effective config: flags restating them
		// build the same bundle.
		{"--slots and --ctx-size equal to the defaults", model, compiler.Options{Slots: def.MaxSlots, ContextLength: def.ContextLength}, digest},
	}
	for _, c := range same {
		if k := key(t, c.path, c.model, c.opt, tc); k != base {
			t.Errorf("%s changed the key", c.name)
		}
	}

	viaConfig := key(t, model, digest, compiler.Options{ConfigPath: cfg("cuda.toml", "target = \"cuda:sm_90\"\n")}, tc)
	viaFlag := key(t, model, digest, compiler.Options{Target: "cuda:sm_90"}, tc)
	if viaConfig != viaFlag {
		t.Error("the target from the config and from --target give different keys")
	}
	differ := map[string]buildcache.Key{
		"model content":  key(t, model, other, compiler.Options{}, tc),
		"config value":   key(t, model, digest, compiler.Options{ConfigPath: cfg("ctx.toml", fmt.Sprintf("context_length = %d\n", def.ContextLength/2))}, tc),
		"cache_type_k":   key(t, model, digest, compiler.Options{ConfigPath: cfg("ctk.toml", "cache_type_k = \"q8_0\"\n")}, tc),
		"cache_type_v":   key(t, model, digest, compiler.Options{ConfigPath: cfg("ctv.toml", "cache_type_v = \"q8_0\"\n")}, tc),
		"target":         viaFlag,
		"--no-fuse":      key(t, model, digest, compiler.Options{NoFuse: true}, tc),
		"--slots":        key(t, model, digest, compiler.Options{Slots: def.MaxSlots / 2}, tc),
		"--ctx-size":     key(t, model, digest, compiler.Options{ContextLength: def.ContextLength * 2}, tc),
		"PTX directory":  key(t, model, digest, compiler.Options{PTXDir: ptxA}, tc),
		"PTX contents":   key(t, model, digest, compiler.Options{PTXDir: ptxB}, tc),
		"toolchain":      key(t, model, digest, compiler.Options{}, tc+"1"),
		"version string": key(t, model, digest, compiler.Options{}, strings.Replace(tc, "zrtc", "zrtc 2", 1)),
	}
	seen := map[buildcache.Key]string{base: "base"}
	for name, k := range differ {
		if prev, dup := seen[k]; dup {
			t.Errorf("%s gives the same key as %s", name, prev)
		}
		seen[k] = name
	}
}

func TestResolveRefuses(t *testing.T) {
	raw, err := synth.Write(synth.Tiny)
	if err != nil {
		t.Fatal(err)
	}
	model := writeFile(t, filepath.Join(t.TempDir(), "m.gguf"), raw)
	for _, c := range []struct {
		opt  compiler.Options
		want string
	}{
		{compiler.Options{CompileFrom: "fuse", IRPath: "x.zir"}, "--compile-from"},
		{compiler.Options{CompileTo: "fuse"}, "--compile-to"},
		{compiler.Options{Target: "amd:gfx9999"}, "this zrtc compiles for"},
	} {
		if _, err := Resolve(model, [32]byte{}, c.opt, "tc"); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.opt, err, c.want)
		}
	}
}

func TestDescribeNamesEveryInput(t *testing.T) {
	d := Inputs{Config: "a = 1\n", Target: "cpu", Flags: "--target cpu", Kernels: "embedded", Toolchain: "zrtc"}.Describe()
	for _, f := range []string{"model", "config", "target", "flags", "kernels", "toolchain"} {
		if !strings.Contains(d, f+" ") {
			t.Errorf("Describe lacks %s:\n%s", f, d)
		}
	}
}
