// Package config is the model config: the settings zrtc compiles with.
// Every field has a default from the GGUF metadata; an optional TOML file
// overrides them. `zrtc config MODEL.gguf` prints the effective result.
package config

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/zrtdev/zrt/format/gguf"
	"github.com/zrtdev/zrt/format/support"
)

// Config is the effective model config.
type Config struct {
	// Target is the compile target: cpu, cuda:sm_90, amd:gfx1201.
	Target string `toml:"target"`
	// ContextLength is the longest sequence one slot holds, in tokens.
	ContextLength int `toml:"context_length"`
	// MaxSlots is how many sequences one decode step serves.
	MaxSlots int `toml:"max_slots"`
	// PrefillChunk is how many prompt tokens one prefill step evaluates.
	PrefillChunk int    `toml:"prefill_chunk"`
	Rope         Rope   `toml:"rope"`
	ChatTemplate string `toml:"chat_template"`

	// scalingFrom names where Rope.Scaling came from (a GGUF key or the
	// TOML file), so an unsupported value is reported where the user can
	// find it.
	scalingFrom string
}

// Rope holds the rotary-embedding settings.
type Rope struct {
	FreqBase float64 `toml:"freq_base"`
	// Scaling is one of llama.cpp's RoPE scaling types; zrt computes
	// "none" and "linear" (FreqScale applies to linear).
	Scaling   string  `toml:"scaling"`
	FreqScale float64 `toml:"freq_scale"`
}

// Defaults for settings GGUF does not carry.
const (
	DefaultMaxSlots     = 1
	DefaultPrefillChunk = 128
	DefaultMaxContext   = 4096 // cap on the GGUF's training context, to bound KV memory
	DefaultRopeFreqBase = 10000
	DefaultTarget       = "cpu"
)

// FromGGUF returns the defaults for a model.
func FromGGUF(f *gguf.File) (*Config, error) {
	arch, err := f.String("general.architecture")
	if err != nil {
		return nil, err
	}
	c := &Config{Target: DefaultTarget, MaxSlots: DefaultMaxSlots, PrefillChunk: DefaultPrefillChunk}
	c.ContextLength = DefaultMaxContext
	if n, err := f.Uint(arch + ".context_length"); err == nil && n > 0 && n < DefaultMaxContext {
		c.ContextLength = int(n)
	}
	c.Rope.FreqBase = DefaultRopeFreqBase
	if x, err := f.Float(arch + ".rope.freq_base"); err == nil {
		c.Rope.FreqBase = x
	}
	c.Rope.Scaling, c.Rope.FreqScale = "none", 1
	if s, err := f.String(arch + ".rope.scaling.type"); err == nil && s != "none" {
		c.Rope.Scaling, c.scalingFrom = s, arch+".rope.scaling.type"
		if x, err := f.Float(arch + ".rope.scaling.factor"); err == nil && x > 0 {
			c.Rope.FreqScale = 1 / x
		}
	}
	if s, err := f.String("tokenizer.chat_template"); err == nil {
		c.ChatTemplate = s
	}
	return c, nil
}

// Load returns the defaults for f overridden by the TOML file at path
// (none when path is empty). Unknown keys are an error, so a typo cannot
// silently do nothing.
func Load(f *gguf.File, path string) (*Config, error) {
	c, err := FromGGUF(f)
	if err != nil {
		return nil, err
	}
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		md, err := toml.Decode(string(b), c)
		if err != nil {
			return nil, fmt.Errorf("config: %s: %w", path, err)
		}
		if und := md.Undecoded(); len(und) > 0 {
			keys := make([]string, len(und))
			for i, k := range und {
				keys[i] = k.String()
			}
			return nil, fmt.Errorf("config: %s: unknown keys: %s", path, strings.Join(keys, ", "))
		}
		if md.IsDefined("rope", "scaling") {
			c.scalingFrom = "rope.scaling in " + path
		}
	}
	return c, c.Validate()
}

// ropeScalings are llama.cpp's RoPE scaling types, true where zrt
// computes them.
var ropeScalings = map[string]bool{"none": true, "linear": true, "yarn": false, "longrope": false}

// Validate checks ranges. A valid setting zrt cannot compute yet is a
// *support.Error.
func (c *Config) Validate() error {
	switch {
	case c.ContextLength < 1 || c.ContextLength > 1<<20:
		return fmt.Errorf("config: context_length %d out of range [1, 1048576]", c.ContextLength)
	case c.MaxSlots < 1 || c.MaxSlots > 1024:
		return fmt.Errorf("config: max_slots %d out of range [1, 1024]", c.MaxSlots)
	case c.PrefillChunk < 1 || c.PrefillChunk > 8192:
		return fmt.Errorf("config: prefill_chunk %d out of range [1, 8192]", c.PrefillChunk)
	case c.Rope.FreqBase <= 0:
		return fmt.Errorf("config: rope.freq_base %v must be positive", c.Rope.FreqBase)
	case !ropeScalings[c.Rope.Scaling]:
		from := c.scalingFrom
		if from == "" {
			from = "rope.scaling"
		}
		if _, known := ropeScalings[c.Rope.Scaling]; known {
			return &support.Error{What: "rope scaling", Value: strconv.Quote(c.Rope.Scaling), Where: support.Key(from),
				Detail: "zrt computes none and linear"}
		}
		return fmt.Errorf("config: %s: unknown rope scaling %q (llama.cpp's types: none, linear, yarn, longrope)", from, c.Rope.Scaling)
	case c.Rope.FreqScale <= 0:
		return fmt.Errorf("config: rope.freq_scale %v must be positive", c.Rope.FreqScale)
	}
	return nil
}

// TOML renders the config as a TOML document.
func (c *Config) TOML() string {
	var b bytes.Buffer
	if err := toml.NewEncoder(&b).Encode(c); err != nil {
		panic(err) // Config holds only encodable fields
	}
	return b.String()
}
