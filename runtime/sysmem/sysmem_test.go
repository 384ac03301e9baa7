package sysmem

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestMemAvailable(t *testing.T) {
	p := filepath.Join(t.TempDir(), "meminfo")
	os.WriteFile(p, []byte("MemTotal:       24000000 kB\nMemFree:  100 kB\nMemAvailable:   2048 kB\n"), 0o644)
	if n, err := memAvailable(p); err != nil || n != 2048<<10 {
		t.Fatalf("got %d, %v", n, err)
	}
	os.WriteFile(p, []byte("MemTotal: 1 kB\n"), 0o644)
	if _, err := memAvailable(p); err == nil {
		t.Fatal("no MemAvailable line accepted")
	}
}

func TestCgroupRoom(t *testing.T) {
	d := t.TempDir()
	os.WriteFile(filepath.Join(d, "memory.max"), []byte("1000\n"), 0o644)
	os.WriteFile(filepath.Join(d, "memory.current"), []byte("300\n"), 0o644)
	if n, err := cgroupRoom(d); err != nil || n != 700 {
		t.Fatalf("got %d, %v", n, err)
	}
	os.WriteFile(filepath.Join(d, "memory.max"), []byte("max\n"), 0o644)
	if _, err := cgroupRoom(d); err == nil {
		t.Fatal("an unlimited cgroup gave a limit")
	}
}

func TestCheck(t *testing.T) {
	if _, ok := Available(); !ok {
		t.Skip("no /proc/meminfo here")
	}
	err := Check("a test plan", 1<<62)
	if err == nil || !strings.Contains(err.Error(), "a test plan needs 4.0 EiB of memory") {
		t.Fatalf("got %v", err)
	}
	if err := Check("a byte", 1); err != nil {
		t.Fatal(err)
	}
}
