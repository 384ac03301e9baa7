package bundle

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
)

// Section is one entry of a graph file's section table, as `zrtc dump
// graph` shows it.
type Section struct {
	Tag          string
	Flags        uint32
	Offset, Size uint64
	CRC          uint32 // CRC-32C of the section's bytes
}

// Sections checks a graph file the way DecodeGraph does (header, version,
// table checksum, every section's checksum and coverage) and returns its
// version and section table in table order.
func Sections(b []byte) (major, minor uint16, _ []Section, _ error) {
	major, minor, _, err := sectionTable(b)
	if err != nil {
		return major, minor, nil, err
	}
	n := int(binary.LittleEndian.Uint32(b[8:]))
	out := make([]Section, n)
	for i := range out {
		e := b[headerBytes+i*entryBytes:]
		out[i] = Section{Tag: string(e[:4]), Flags: binary.LittleEndian.Uint32(e[4:]), Offset: binary.LittleEndian.Uint64(e[8:]),
			Size: binary.LittleEndian.Uint64(e[16:]), CRC: binary.LittleEndian.Uint32(e[24:])}
	}
	return major, minor, out, nil
}

// ReadGraph reads and decodes the graph file of a bundle directory, or a
// graph file named directly, without opening the rest of the bundle: for
// inspecting a bundle whose blobs or weights are missing or broken. It
// returns the raw bytes too.
func ReadGraph(path string) (*Graph, []byte, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		path = filepath.Join(path, GraphFile)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	g, err := DecodeGraph(raw)
	if err != nil {
		return nil, raw, fmt.Errorf("%s: %w", path, err)
	}
	return g, raw, nil
}
