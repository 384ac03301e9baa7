package obj

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/kernels/amd"
)

// sourceHash is build_amd.sh's hash: kernels.cl, every .h in name order,
// INSTANCES and build_amd.sh.
func sourceHash(t *testing.T) string {
	h := sha256.New()
	hs, _ := filepath.Glob(filepath.Join("..", "*.h"))
	sort.Strings(hs)
	files := append([]string{filepath.Join("..", "kernels.cl")}, hs...)
	files = append(files, filepath.Join("..", "INSTANCES"), filepath.Join("..", "build_amd.sh"))
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))
}

type object struct {
	gfx, entry string
	inst       amd.Instance
}

// objects lists every object the tree asks for.
func objects(t *testing.T) []object {
	insts, err := amd.Instances()
	if err != nil {
		t.Fatal(err)
	}
	var out []object
	for _, gfx := range amd.Targets {
		for _, in := range insts {
			out = append(out, object{gfx, amd.Entry(in.Name), in})
		}
	}
	return out
}

// TestObjectsFresh fails when a committed object was built from sources
// other than the ones in the tree, an instance has no object, or an
// object no instance wants is committed: run `make amd` (LLVM 19) and
// commit kernels/amd/obj.
func TestObjectsFresh(t *testing.T) {
	recorded := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(Sources()))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		hash, name, ok := strings.Cut(line, "  ")
		if !ok {
			t.Fatalf("SOURCES: malformed line %q", line)
		}
		recorded[name] = hash
	}
	want := sourceHash(t)
	for _, o := range objects(t) {
		name := o.gfx + "/" + o.entry + ".co"
		h, ok := recorded[name]
		switch {
		case !ok:
			t.Errorf("%s has no object: run make amd", name)
		case h != want:
			t.Errorf("%s is stale against kernels/amd's sources: run make amd", name)
		}
		if _, err := files.Open(name); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		delete(recorded, name)
	}
	for name := range recorded {
		t.Errorf("SOURCES lists %s, which no instance wants: run make amd", name)
	}
}

// TestCodeObjects parses every object: an HSA code object v5 for its
// processor, one kernel named after the instance, wave32, the workgroup
// size package amd documents, and arguments laid out as the dispatch's
// user-data dwords followed by the slot dwords, with no hidden arguments.
func TestCodeObjects(t *testing.T) {
	for _, o := range objects(t) {
		code, err := Source(o.gfx, o.inst.Name)
		if err != nil {
			t.Fatal(err)
		}
		co, err := amd.ParseCodeObject(code)
		if err != nil {
			t.Errorf("%s/%s: %v", o.gfx, o.entry, err)
			continue
		}
		if co.Processor() != o.gfx || co.Target != "amdgcn-amd-amdhsa--"+o.gfx {
			t.Errorf("%s/%s: code object for %s (%s)", o.gfx, o.entry, co.Processor(), co.Target)
		}
		k, ok := co.Kernel(o.entry)
		if !ok || len(co.Kernels) != 1 {
			t.Errorf("%s/%s: kernels %v", o.gfx, o.entry, co.Kernels)
			continue
		}
		if k.WavefrontSize != 32 || k.ReqdWorkgroupSize != [3]uint32{amd.WorkgroupSize, 1, 1} {
			t.Errorf("%s/%s: wave %d, workgroup %v", o.gfx, o.entry, k.WavefrontSize, k.ReqdWorkgroupSize)
		}
		if k.Descriptor.PrivateSegmentFixedSize != 0 {
			t.Errorf("%s/%s: %d bytes of scratch (spills or a stack)", o.gfx, o.entry, k.Descriptor.PrivateSegmentFixedSize)
		}
		if err := checkArgs(o.inst.ABI, k); err != nil {
			t.Errorf("%s/%s: %v", o.gfx, o.entry, err)
		}
	}
}

func checkArgs(abi *kernels.ABI, k *amd.Kernel) error {
	var want []amd.Arg
	for i := range abi.Bufs {
		want = append(want, amd.Arg{Offset: uint32(8 * i), Size: 8, ValueKind: "global_buffer"})
	}
	for i := 0; i < len(abi.Push)+len(abi.Spec); i++ {
		want = append(want, amd.Arg{Offset: uint32(8*len(abi.Bufs) + 4*i), Size: 4, ValueKind: "by_value"})
	}
	if fmt.Sprint(k.Args) != fmt.Sprint(want) {
		return fmt.Errorf("arguments %v, want %v (buffers, push constants, slots)", k.Args, want)
	}
	if n := uint32(4 * (abi.UserDataDwords() + len(abi.Spec))); k.KernargSegmentSize != n {
		return fmt.Errorf("kernarg segment of %d bytes, want %d", k.KernargSegmentSize, n)
	}
	return nil
}

// llvm returns the path of an LLVM 19 tool, skipping the test without it
// (.ci/run installs Debian's llvm-19).
func llvm(t *testing.T, tool string) string {
	p, err := exec.LookPath(tool + "-19")
	if err != nil {
		t.Skipf("%s-19 not found (apt-get install llvm-19): the object-file checks skip", tool)
	}
	return p
}

func run(t *testing.T, path string, args ...string) string {
	out, err := exec.Command(path, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(path), strings.Join(args, " "), err, out)
	}
	return string(out)
}

// field reads "key: value" (readelf's metadata YAML) or ".key value"
// (objdump's descriptor directives) as an integer.
func field(t *testing.T, text, name, key string) uint32 {
	m := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(key) + `:?\s+(\d+)\s*$`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("%s: no %s in\n%s", name, key, text)
	}
	v, _ := strconv.ParseUint(m[1], 10, 32)
	return uint32(v)
}

// TestLLVMTools checks every committed object with LLVM's own tools:
// llvm-objdump disassembles its kernel (ending in s_endpgm) and decodes
// its descriptor, llvm-readelf lists the kernel and name.kd symbols and
// prints the metadata; and what package amd (and so zrtc's blob header)
// reads agrees with what they print.
func TestLLVMTools(t *testing.T) {
	objdump, readelf := llvm(t, "llvm-objdump"), llvm(t, "llvm-readelf")
	dir := t.TempDir()
	for _, o := range objects(t) {
		name := o.gfx + "/" + o.entry
		// Each object in a parallel subtest: three tool runs apiece, 224
		// objects, which take minutes one after another.
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			checkWithLLVM(t, objdump, readelf, dir, o, name)
		})
	}
}

// checkWithLLVM is TestLLVMTools for one object.
func checkWithLLVM(t *testing.T, objdump, readelf, dir string, o object, name string) {
	code, err := Source(o.gfx, o.inst.Name)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, o.gfx+"-"+o.entry+".co")
	if err := os.WriteFile(p, code, 0o644); err != nil {
		t.Fatal(err)
	}
	co, err := amd.ParseCodeObject(code)
	if err != nil {
		t.Fatal(err)
	}
	k, _ := co.Kernel(o.entry)
	if k == nil {
		t.Fatalf("%s: no kernel", name)
	}
	dis := run(t, objdump, "-d", "--mcpu="+o.gfx, p)
	if !strings.Contains(dis, "<"+o.entry+">:") || !strings.Contains(dis, "s_endpgm") {
		t.Errorf("%s: llvm-objdump -d shows no kernel %s ending in s_endpgm", name, o.entry)
	}
	syms := run(t, readelf, "-s", "--notes", p)
	for _, s := range []string{" " + o.entry + "\n", " " + o.entry + ".kd\n"} {
		if !strings.Contains(syms, s) {
			t.Errorf("%s: llvm-readelf -s lists no symbol%s", name, strings.TrimSuffix(s, "\n"))
		}
	}
	for _, f := range []struct {
		key string
		got uint32
	}{
		{".vgpr_count", k.VGPRCount}, {".sgpr_count", k.SGPRCount}, {".group_segment_fixed_size", k.GroupSegmentFixedSize},
		{".kernarg_segment_size", k.KernargSegmentSize}, {".wavefront_size", k.WavefrontSize},
		{".max_flat_workgroup_size", k.MaxFlatWorkgroupSize},
	} {
		if want := field(t, syms, name, f.key); want != f.got {
			t.Errorf("%s: metadata %s = %d, package amd read %d", name, f.key, want, f.got)
		}
	}
	// The descriptor as llvm-objdump reads the .kd symbol. LLVM 19's
	// objdump cannot decode GFX10+ descriptors into directives (it
	// refuses the GRANULATED_WAVEFRONT_SGPR_COUNT bits LLVM itself
	// writes) and prints the 64 bytes instead: compare those with
	// what package amd decoded.
	kd := run(t, objdump, "-D", "--mcpu="+o.gfx, "--disassemble-symbols="+o.entry+".kd", p)
	var raw []byte
	for _, m := range regexp.MustCompile(`\.byte\s+0x([0-9A-Fa-f]+)`).FindAllStringSubmatch(kd, -1) {
		v, _ := strconv.ParseUint(m[1], 16, 8)
		raw = append(raw, byte(v))
	}
	if len(raw) != 64 {
		t.Errorf("%s: llvm-objdump shows %d bytes of %s.kd, want 64", name, len(raw), o.entry)
		return
	}
	d := k.Descriptor
	le := binary.LittleEndian
	if le.Uint32(raw[0:]) != d.GroupSegmentFixedSize || le.Uint32(raw[4:]) != d.PrivateSegmentFixedSize ||
		le.Uint32(raw[8:]) != d.KernargSize || le.Uint32(raw[48:]) != d.PgmRsrc1 || le.Uint32(raw[52:]) != d.PgmRsrc2 ||
		le.Uint16(raw[56:]) != d.CodeProperties {
		t.Errorf("%s: llvm-objdump's %s.kd % x disagrees with package amd's %+v", name, o.entry, raw, d)
	}
}
