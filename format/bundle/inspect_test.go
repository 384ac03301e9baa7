package bundle

import (
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"
)

func TestSections(t *testing.T) {
	enc := sampleGraph().Encode()
	major, minor, secs, err := Sections(enc)
	if err != nil {
		t.Fatal(err)
	}
	if major != VersionMajor || minor != VersionMinor || len(secs) != len(requiredSections) {
		t.Fatalf("version %d.%d, %d sections", major, minor, len(secs))
	}
	end := uint64(0)
	for i, s := range secs {
		if i > 0 && s.Tag <= secs[i-1].Tag {
			t.Errorf("section %s out of tag order", s.Tag)
		}
		if s.Offset%8 != 0 || s.Offset < end {
			t.Errorf("section %s at %d", s.Tag, s.Offset)
		}
		if crc32.Checksum(enc[s.Offset:s.Offset+s.Size], castagnoli) != s.CRC {
			t.Errorf("section %s checksum", s.Tag)
		}
		end = s.Offset + s.Size
	}
	if end != uint64(len(enc)) {
		t.Errorf("sections end at %d of %d bytes", end, len(enc))
	}
	enc[len(enc)-1] ^= 1
	if _, _, _, err := Sections(enc); !errors.Is(err, ErrFormat) {
		t.Errorf("corrupt file: %v", err)
	}
}

func TestReadGraph(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, GraphFile), sampleGraph().Encode(), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, filepath.Join(dir, GraphFile)} {
		if g, raw, err := ReadGraph(p); err != nil || g.Kernels[0].Name != "embed.f32" || len(raw) == 0 {
			t.Errorf("%s: %v", p, err)
		}
	}
	os.WriteFile(filepath.Join(dir, GraphFile), []byte("nope"), 0o644)
	if _, _, err := ReadGraph(dir); !errors.Is(err, ErrFormat) {
		t.Errorf("bad graph file: %v", err)
	}
	if _, _, err := ReadGraph(filepath.Join(dir, "missing")); err == nil {
		t.Error("missing file accepted")
	}
}
