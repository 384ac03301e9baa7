package publish

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"
)

var errCrash = errors.New("crashed")

// crashFS is OS until its step budget runs out; then the process is dead:
// that step and every later one fail without touching the disk, and the
// locks it held are dropped as the kernel would drop them.
type crashFS struct {
	OS
	left    int
	crashed bool
	held    []func()
}

func (c *crashFS) step() error {
	if c.crashed {
		return errCrash
	}
	if c.left == 0 {
		c.crashed = true
		for _, release := range c.held {
			release()
		}
		return errCrash
	}
	c.left--
	return nil
}

func (c *crashFS) Lstat(p string) (fs.FileInfo, error) {
	return stepThen(c, func() (fs.FileInfo, error) { return c.OS.Lstat(p) })
}

func (c *crashFS) ReadDir(p string) ([]fs.DirEntry, error) {
	return stepThen(c, func() ([]fs.DirEntry, error) { return c.OS.ReadDir(p) })
}

func (c *crashFS) MkdirTemp(d, p string) (string, error) {
	return stepThen(c, func() (string, error) { return c.OS.MkdirTemp(d, p) })
}

func (c *crashFS) CreateTemp(d, p string) (string, error) {
	return stepThen(c, func() (string, error) { return c.OS.CreateTemp(d, p) })
}

func (c *crashFS) WriteFile(p string, b []byte) error {
	return c.then(func() error { return c.OS.WriteFile(p, b) })
}

func (c *crashFS) Sync(p string) error { return c.then(func() error { return c.OS.Sync(p) }) }

func (c *crashFS) SyncTree(p string) error { return c.then(func() error { return c.OS.SyncTree(p) }) }

func (c *crashFS) Rename(a, b string) error { return c.then(func() error { return c.OS.Rename(a, b) }) }

func (c *crashFS) Exchange(a, b string) error {
	return c.then(func() error { return c.OS.Exchange(a, b) })
}

func (c *crashFS) RemoveAll(p string) error { return c.then(func() error { return c.OS.RemoveAll(p) }) }

// then runs op unless the crash has come (step's error).
func (c *crashFS) then(op func() error) error {
	if err := c.step(); err != nil {
		return err
	}
	return op()
}

// stepThen runs op unless the crash has come (step's error).
func stepThen[T any](c *crashFS, op func() (T, error)) (T, error) {
	if err := c.step(); err != nil {
		var zero T
		return zero, err
	}
	return op()
}

func (c *crashFS) Lock(p string, wait bool) (func(), error) {
	release, err := stepThen(c, func() (func(), error) { return c.OS.Lock(p, wait) })
	if err == nil {
		c.held = append(c.held, release)
	}
	return release, err
}

// A test bundle: a marker file naming its version beside a few files whose
// contents name it too, so a mix of two versions is visible.
const testMarker = "graph"

func testOwned(p string, fi fs.FileInfo) error {
	if !fi.IsDir() {
		return errors.New("not a directory")
	}
	if _, err := os.Stat(filepath.Join(p, testMarker)); err != nil {
		return errors.New("no " + testMarker + " file")
	}
	return nil
}

func fillVersion(v string) func(string) error {
	return func(tmp string) error {
		if err := os.Mkdir(filepath.Join(tmp, "sub"), 0o755); err != nil {
			return err
		}
		for _, name := range []string{testMarker, "weights", "sub/kernel"} {
			if err := os.WriteFile(filepath.Join(tmp, name), []byte(v), 0o644); err != nil {
				return err
			}
		}
		return nil
	}
}

// version returns the one version the bundle at dst holds whole, "" when
// dst is missing, or an error for a mix or a partial bundle.
func version(dst string) (string, error) {
	if _, err := os.Lstat(dst); errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	var v string
	n := 0
	err := filepath.WalkDir(dst, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if n > 0 && string(b) != v {
			return fmt.Errorf("%s holds %q, another file %q", p, b, v)
		}
		v = string(b)
		n++
		return nil
	})
	if err == nil && n != 3 {
		err = fmt.Errorf("%d files, want 3", n)
	}
	return v, err
}

func entries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

// TestDirCrashAtEveryStep stops a replacement (and a first write) after
// each of its steps in turn: the path then holds the old or the new
// version whole, and the next write leaves no leftovers.
func TestDirCrashAtEveryStep(t *testing.T) {
	for _, withOld := range []bool{true, false} {
		for k := 0; ; k++ {
			parent := t.TempDir()
			dst := filepath.Join(parent, "b")
			if withOld {
				if err := Dir(OS{}, dst, testOwned, fillVersion("old")); err != nil {
					t.Fatal(err)
				}
			}
			c := &crashFS{left: k}
			err := Dir(c, dst, testOwned, fillVersion("new"))
			v, verr := version(dst)
			if verr != nil {
				t.Fatalf("old=%v crash after %d steps: %v", withOld, k, verr)
			}
			if !c.crashed {
				if err != nil || v != "new" {
					t.Fatalf("uncrashed write: %v, version %q", err, v)
				}
				if k < 8 {
					t.Fatalf("only %d steps: the protocol lost steps?", k)
				}
				break
			}
			want := []string{"new", ""}
			if withOld {
				want[1] = "old"
			}
			if !slices.Contains(want, v) {
				t.Fatalf("old=%v crash after %d steps: version %q, want one of %q", withOld, k, v, want)
			}
			if err := Dir(OS{}, dst, testOwned, fillVersion("next")); err != nil {
				t.Fatalf("crash after %d steps: next write: %v", k, err)
			}
			if v, err := version(dst); v != "next" || err != nil {
				t.Fatalf("next write: %q %v", v, err)
			}
			if got := entries(t, parent); !slices.Equal(got, []string{"b"}) {
				t.Fatalf("crash after %d steps: leftovers after the next write: %q", k, got)
			}
		}
	}
}

// TestFileCrashAtEveryStep is the same for a single file.
func TestFileCrashAtEveryStep(t *testing.T) {
	owned := func(string, fs.FileInfo) error { return nil }
	for k := 0; ; k++ {
		parent := t.TempDir()
		dst := filepath.Join(parent, "m.gguf")
		if err := File(OS{}, dst, owned, []byte("old")); err != nil {
			t.Fatal(err)
		}
		c := &crashFS{left: k}
		err := File(c, dst, owned, []byte("new"))
		b, rerr := os.ReadFile(dst)
		if rerr != nil || (string(b) != "old" && string(b) != "new") {
			t.Fatalf("crash after %d steps: %q %v", k, b, rerr)
		}
		if !c.crashed {
			if err != nil || string(b) != "new" {
				t.Fatalf("uncrashed write: %v %q", err, b)
			}
			break
		}
		if err := File(OS{}, dst, owned, []byte("next")); err != nil {
			t.Fatal(err)
		}
		if got := entries(t, parent); !slices.Equal(got, []string{"m.gguf"}) {
			t.Fatalf("crash after %d steps: leftovers after the next write: %q", k, got)
		}
	}
}

func TestRefusesWhatIsNotOurs(t *testing.T) {
	parent := t.TempDir()
	notes := filepath.Join(parent, "notes")
	if err := os.Mkdir(notes, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(notes, "todo.txt"), []byte("keep me"), 0o644)
	err := Dir(OS{}, notes, testOwned, fillVersion("new"))
	if !errors.Is(err, ErrNotOurs) {
		t.Fatalf("got %v, want ErrNotOurs", err)
	}
	if b, _ := os.ReadFile(filepath.Join(notes, "todo.txt")); string(b) != "keep me" {
		t.Fatal("the user's directory changed")
	}
	if got := entries(t, parent); !slices.Equal(got, []string{"notes"}) {
		t.Fatalf("leftovers: %q", got)
	}
}

// TestLiveWritersTempIsKept: a temporary whose writer still holds its lock
// is not a leftover.
func TestLiveWritersTempIsKept(t *testing.T) {
	parent := t.TempDir()
	dst := filepath.Join(parent, "b")
	live, err := OS{}.MkdirTemp(parent, TempPrefix(dst)+"*")
	if err != nil {
		t.Fatal(err)
	}
	release, err := OS{}.Lock(live, false)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if err := Dir(OS{}, dst, testOwned, fillVersion("v")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Fatalf("a live writer's temporary was removed: %v", err)
	}
}

const writerEnv = "ZRT_PUBLISH_TEST_WRITER"

// TestHelperWriter is the process TestKillLoop kills: it replaces the
// bundle at $ZRT_PUBLISH_TEST_WRITER with a new version forever.
func TestHelperWriter(t *testing.T) {
	dst := os.Getenv(writerEnv)
	if dst == "" {
		t.Skip("the child process of TestKillLoop")
	}
	for i := 0; ; i++ {
		if err := Dir(OS{}, dst, testOwned, fillVersion(strconv.Itoa(i))); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
	}
}

// TestKillLoop kills a real writer process with SIGKILL at random moments:
// every time, the path holds one version whole.
func TestKillLoop(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	parent := t.TempDir()
	dst := filepath.Join(parent, "b")
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 20 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperWriter$")
		cmd.Env = append(os.Environ(), writerEnv+"="+dst)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(2+rng.IntN(20)) * time.Millisecond)
		cmd.Process.Signal(syscall.SIGKILL)
		err := cmd.Wait()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != -1 {
			t.Fatalf("kill %d: the writer ended by itself: %v", i, err)
		}
		if _, err := version(dst); err != nil {
			t.Fatalf("kill %d: %v", i, err)
		}
	}
	if err := Dir(OS{}, dst, testOwned, fillVersion("last")); err != nil {
		t.Fatal(err)
	}
	if got := entries(t, parent); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("leftovers after the last write: %q", got)
	}
}
