package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/cmd/internal/exitcode"
	"github.com/zrtdev/zrt/internal/clitest"
)

// zrtcStderr runs the command line in-process and returns its stderr.
func zrtcStderr(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := clitest.Root("zrtc", buildCmd(), synthCmd(), packCmd(), unpackCmd())
	exitcode.Wire(root)
	_, stderr, err := clitest.Exec(root, args...)
	return stderr, err
}

// TestLongWorkSpeaks: synth and unpack say on stderr what they are doing
// and what they wrote, and -q silences them.
func TestLongWorkSpeaks(t *testing.T) {
	dir := t.TempDir()
	at := func(name string) string { return filepath.Join(dir, name) }
	stderr, err := zrtcStderr(t, "synth", "--layers", "3", "-o", at("m.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr, "zrtc: synth: writing") || !strings.Contains(stderr, "zrtc: wrote "+at("m.gguf")) {
		t.Errorf("synth said %q", stderr)
	}
	if stderr, err := zrtcStderr(t, "synth", "-q", "-o", at("q.gguf")); err != nil || stderr != "" {
		t.Errorf("synth -q: %q %v", stderr, err)
	}
	if _, err := zrtcStderr(t, "synth"); exitcode.Code(err) != exitcode.Usage {
		t.Errorf("synth without -o: %v (exit %d)", err, exitcode.Code(err))
	}
	if _, err := zrtcStderr(t, "build", at("m.gguf"), "-q", "-o", at("b")); err != nil {
		t.Fatal(err)
	}
	if _, err := zrtcStderr(t, "pack", at("b"), "-o", at("m.zrtp")); err != nil {
		t.Fatal(err)
	}
	stderr, err = zrtcStderr(t, "unpack", at("m.zrtp"), "-o", at("u"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr, "zrtc: unpacking "+at("m.zrtp")) || !strings.Contains(stderr, "zrtc: unpacked") || !strings.Contains(stderr, at("u")) {
		t.Errorf("unpack said %q", stderr)
	}
	if stderr, err := zrtcStderr(t, "unpack", "-q", at("m.zrtp"), "-o", at("u2")); err != nil || stderr != "" {
		t.Errorf("unpack -q: %q %v", stderr, err)
	}
}
