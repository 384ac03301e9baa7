// Package reference reads llama.cpp's reference outputs in ../shared
// (../shared/reference/README.md) for the tiers' parity tests.
package reference

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// File is one reference: a model, a prompt, and what llama.cpp produced.
type File struct {
	Name         string  `json:"-"` // base name of the file
	Model        string  `json:"model"`
	Prompt       string  `json:"prompt"`
	NVocab       int     `json:"n_vocab"`
	PromptTokens []int32 `json:"prompt_tokens"`
	Steps        []struct {
		Token  int32        `json:"token"`
		Top    [][2]float64 `json:"top"`
		Logits []float32    `json:"logits"`
	} `json:"steps"`
}

// Tokens returns the prompt followed by the generated tokens.
func (f *File) Tokens() []int32 {
	out := append([]int32(nil), f.PromptTokens...)
	for _, s := range f.Steps {
		out = append(out, s.Token)
	}
	return out
}

// SharedDir is $ZRT_SHARED, else the shared folder beside the module root.
func SharedDir() string {
	if d := os.Getenv("ZRT_SHARED"); d != "" {
		return d
	}
	dir, _ := os.Getwd()
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "..", "shared")
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return filepath.Join("..", "shared")
		}
		dir = parent
	}
}

// Load reads every reference file whose name matches glob (e.g. "*.json").
func Load(shared, glob string) ([]*File, error) {
	paths, _ := filepath.Glob(filepath.Join(shared, "reference", glob))
	var out []*File
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		f := &File{Name: filepath.Base(p)}
		if err := json.Unmarshal(b, f); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		out = append(out, f)
	}
	return out, nil
}

// Shared returns the references under SharedDir whose names match glob,
// failing t when one cannot be read and skipping it when there are none.
func Shared(t testing.TB, glob string) []*File {
	t.Helper()
	shared := SharedDir()
	refs, err := Load(shared, glob)
	if err != nil {
		t.Fatal(err)
	}
	if len(refs) == 0 {
		t.Skipf("no reference files %s under %s (set ZRT_SHARED)", glob, shared)
	}
	return refs
}

// Model returns the path of the GGUF a reference was made from, or "".
func Model(shared string, f *File) string {
	name := filepath.Base(f.Model)
	for _, dir := range []string{"models", filepath.Join("models", "synthetic")} {
		p := filepath.Join(shared, dir, name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}
