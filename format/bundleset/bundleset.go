// Package bundleset reads and writes a bundle set: one directory holding
// a bundle per compile target, all built from one model and config, and
// an index, set.json, that says what each bundle needs of a machine. A
// build pipeline writes one set for every target it ships; a deployment
// box reads the index and opens the bundle its hardware runs best
// (runtime/pick chooses).
//
//	OUT/set.json        the index
//	OUT/cpu/            a bundle (graph.zrg, weights.zrw, kernels/)
//	OUT/cuda_sm_90/     another, named after its target (SanitizeTarget)
//
// The set is written as one directory through format/publish, so a
// reader sees the whole old set or the whole new one. Each member's entry
// records the SHA-256 of its graph file, which ties the graph file by
// hash to its kernels and weights, so the index and the bundles it names
// cannot come from two builds unnoticed.
package bundleset

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/format/publish"
)

// IndexFile is the index's name inside a set directory.
const IndexFile = "set.json"

// The index's format name and version. A reader refuses another format
// and a newer version; a version adds fields only where older readers can
// ignore them.
const (
	FormatName = "zrt-bundle-set"
	Version    = 1
)

// ErrFormat is wrapped by the error for an index that is not valid JSON
// or breaks the index's rules.
var ErrFormat = errors.New("bundle set: malformed index")

// Index is the contents of set.json.
type Index struct {
	Format   string `json:"format"`
	Version  int    `json:"version"`
	Producer string `json:"producer"` // the zrtc that wrote it
	Model    Model  `json:"model"`
	// TPRanks, when above 1, makes the set tensor-parallel: every target
	// has TPRanks members, ranks 0..TPRanks-1 of one split model, and
	// runs only with all of them (zrtc build --tp).
	TPRanks int `json:"tp_ranks,omitempty"`
	// Bundles are the members in the target registry's order (ranks in
	// order within a target).
	Bundles []Member `json:"bundles"`
}

// Model is what every member was built from.
type Model struct {
	Source       string `json:"source"`        // the GGUF's base name
	SHA256       string `json:"sha256"`        // of the GGUF's bytes
	Architecture string `json:"architecture"`  // general.architecture
	ConfigSHA256 string `json:"config_sha256"` // of the effective config, target left out
}

// Member is one bundle of the set.
type Member struct {
	Target string `json:"target"`
	// Dir is the member's directory, a single name inside the set.
	Dir      string   `json:"dir"`
	Requires Requires `json:"requires"`
	// Key is the build cache key of the member (zrtc key).
	Key string `json:"key"`
	// GraphSHA256 is the SHA-256 of the member's graph file.
	GraphSHA256 string `json:"graph_sha256"`
	// Rank is the member's rank in a tensor-parallel set (Index.TPRanks).
	Rank int `json:"rank,omitempty"`
}

// Requires is what a machine must have to run a member.
type Requires struct {
	// Tier is the runtime tier kind that runs it: cpu, cuda, amd.
	Tier string `json:"tier"`
	// CUDAComputeCapability, for the cuda tier, is the lowest compute
	// capability ("9.0") whose devices run its kernels: the PTX targets
	// that architecture and the driver compiles it for the same or a
	// later one.
	CUDAComputeCapability string `json:"cuda_compute_capability,omitempty"`
	// AMDGfx, for the amd tier, is the GPU's gfx target ("gfx1201"): the
	// code objects run on that processor only.
	AMDGfx string `json:"amd_gfx,omitempty"`
	// Devices, for a GPU tier's member of a tensor-parallel set, is the
	// GPUs of one host its ranks need: one each.
	Devices int `json:"devices,omitempty"`
}

// SanitizeTarget names a target's directory: every byte outside
// [A-Za-z0-9._-] becomes '_' (cuda:sm_90 → cuda_sm_90), which any file
// system and archive tool takes.
func SanitizeTarget(target string) string {
	b := []byte(target)
	for i, c := range b {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
		if !ok {
			b[i] = '_'
		}
	}
	if s := string(b); s != "" && s != "." && s != ".." {
		return s
	}
	return "_" + string(b)
}

// Path is the member's bundle directory inside the set at dir.
func (m Member) Path(dir string) string { return filepath.Join(dir, m.Dir) }

// Member returns the member built for target (rank 0 of a
// tensor-parallel set's).
func (x *Index) Member(target string) (Member, bool) {
	return x.Rank(target, 0)
}

// Rank returns rank r of target's members.
func (x *Index) Rank(target string, r int) (Member, bool) {
	for _, m := range x.Bundles {
		if m.Target == target && m.Rank == r {
			return m, true
		}
	}
	return Member{}, false
}

// Ranks returns target's members in rank order: one for a set that is
// not tensor-parallel.
func (x *Index) Ranks(target string) []Member {
	var out []Member
	for r := range max(x.TPRanks, 1) {
		if m, ok := x.Rank(target, r); ok {
			out = append(out, m)
		}
	}
	return out
}

// Targets lists the members' targets in order, each once.
func (x *Index) Targets() []string {
	var out []string
	for _, m := range x.Bundles {
		if m.Rank == 0 {
			out = append(out, m.Target)
		}
	}
	return out
}

// Check validates an index as Read does: its format and version, and
// members with distinct targets and plain, distinct directory names.
func (x *Index) Check() error {
	if x.Format != FormatName {
		return fmt.Errorf("%s: %w: format %q, not a %s index", IndexFile, ErrFormat, x.Format, FormatName)
	}
	if x.Version < 1 || x.Version > Version {
		return fmt.Errorf("%s: version %d, this zrt reads 1–%d: use a newer zrt-run or rebuild the set with this zrtc", IndexFile, x.Version, Version)
	}
	if len(x.Bundles) == 0 {
		return fmt.Errorf("%s: %w: the set has no bundles", IndexFile, ErrFormat)
	}
	if x.TPRanks < 0 || x.TPRanks == 1 {
		return fmt.Errorf("%s: %w: tp_ranks %d (a tensor-parallel set has 2 or more)", IndexFile, ErrFormat, x.TPRanks)
	}
	type member struct {
		target string
		rank   int
	}
	targets, dirs, ranks := map[member]bool{}, map[string]bool{}, map[string]int{}
	for _, m := range x.Bundles {
		if m.Rank < 0 || m.Rank >= max(x.TPRanks, 1) {
			return fmt.Errorf("%s: %w: member %s: rank %d of a set of %d", IndexFile, ErrFormat, m.Target, m.Rank, max(x.TPRanks, 1))
		}
		if m.Target == "" || targets[member{m.Target, m.Rank}] {
			return fmt.Errorf("%s: %w: target %q (rank %d) empty or listed twice", IndexFile, ErrFormat, m.Target, m.Rank)
		}
		targets[member{m.Target, m.Rank}] = true
		ranks[m.Target]++
		// A member's directory is one name inside the set: never a path
		// that climbs out of it.
		if m.Dir == "" || m.Dir == "." || m.Dir == ".." || strings.ContainsAny(m.Dir, `/\`) || dirs[m.Dir] {
			return fmt.Errorf("%s: %w: member %s: directory %q is not a plain name unique in the set", IndexFile, ErrFormat, m.Target, m.Dir)
		}
		dirs[m.Dir] = true
	}
	// A tensor-parallel set runs only with every rank: a target missing
	// one is refused here rather than at load.
	for t, n := range ranks {
		if n != max(x.TPRanks, 1) {
			return fmt.Errorf("%s: %w: target %s has %d of the set's %d ranks", IndexFile, ErrFormat, t, n, x.TPRanks)
		}
	}
	return nil
}

// Encode renders the index as indented JSON with a final newline; the
// same index always gives the same bytes, so a set built twice is
// byte-identical.
func (x *Index) Encode() ([]byte, error) {
	b, err := json.MarshalIndent(x, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// Read reads and checks the index of the set at dir.
func Read(dir string) (*Index, error) {
	b, err := os.ReadFile(filepath.Join(dir, IndexFile))
	if err != nil {
		return nil, fmt.Errorf("bundle set %s: %w", dir, err)
	}
	var x Index
	d := json.NewDecoder(bytes.NewReader(b))
	if err := d.Decode(&x); err != nil {
		return nil, fmt.Errorf("bundle set %s: %s: %w: %v", dir, IndexFile, ErrFormat, err)
	}
	if err := x.Check(); err != nil {
		return nil, fmt.Errorf("bundle set %s: %w", dir, err)
	}
	return &x, nil
}

// IsSet reports whether dir is a bundle set directory (it holds an
// index). It does not check the index; Read does.
func IsSet(dir string) bool {
	fi, err := os.Stat(filepath.Join(dir, IndexFile))
	return err == nil && fi.Mode().IsRegular()
}

// IsOutput accepts, for replacement by a build, what zrtc build writes: a
// bundle set or a bundle. Anything else is refused (format/publish).
func IsOutput(path string, fi fs.FileInfo) error {
	if fi.IsDir() && IsSet(path) {
		return nil
	}
	if err := bundle.IsBundle(path, fi); err != nil {
		return fmt.Errorf("it is neither a zrt bundle nor a bundle set (no %s or %s)", bundle.GraphFile, IndexFile)
	}
	return nil
}

// Write builds the set at dst atomically: fill writes each member of x
// into its directory under a fresh temporary (creating it), then Write
// records every member's graph-file digest and writes the index. dst must
// be missing or accepted by IsOutput; on any error it is unchanged.
func Write(dst string, x *Index, fill func(tmp string) error) error {
	x.Format, x.Version = FormatName, Version
	if err := x.Check(); err != nil {
		return err
	}
	return publish.Dir(publish.OS{}, dst, IsOutput, func(tmp string) error {
		if err := fill(tmp); err != nil {
			return err
		}
		for i := range x.Bundles {
			m := &x.Bundles[i]
			sum, err := graphDigest(m.Path(tmp))
			if err != nil {
				return fmt.Errorf("member %s: %w", m.Target, err)
			}
			m.GraphSHA256 = sum
		}
		b, err := x.Encode()
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(tmp, IndexFile), b, 0o644)
	})
}

// VerifyMember checks that the member's graph file is the one the index
// recorded: a set whose index and bundles come from different builds (a
// hand-copied member, or a set replaced while it was being opened) is
// refused rather than run.
func VerifyMember(dir string, m Member) error {
	sum, err := graphDigest(m.Path(dir))
	if err != nil {
		return fmt.Errorf("bundle set %s: member %s: %w", dir, m.Target, err)
	}
	if sum != m.GraphSHA256 {
		return fmt.Errorf("bundle set %s: member %s: %s does not match the index (the set was changed or replaced while it was opened: retry, or rebuild the set)", dir, m.Target, bundle.GraphFile)
	}
	return nil
}

// graphDigest is the hex SHA-256 of a bundle directory's graph file.
func graphDigest(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, bundle.GraphFile))
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("%s is missing", filepath.Join(dir, bundle.GraphFile))
	}
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}
