// Package arch holds the graph builders: one per architecture family, each
// turning a GGUF model and its config into IR for every ShapeKey variant.
// This is the only place that knows model families; passes and tiers see
// opcodes.
package arch

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/zrtdev/zrt/compiler/config"
	"github.com/zrtdev/zrt/compiler/ir"
	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/format/gguf"
	"github.com/zrtdev/zrt/format/support"
	"github.com/zrtdev/zrt/kernels"
)

// Hparams are the model hyperparameters the graph is built from: the
// bundle's own definition, so the builder, the graph file and the runtime
// share one list of fields.
type Hparams = bundle.Hparams

// Model is a built model: its hyperparameters and one graph per variant.
type Model struct {
	Hparams Hparams
	Config  *config.Config
	Graphs  []*ir.Graph
	// KV is the KV cache's element types, from the config (the zero
	// value, of a model built without a config's types, is F16).
	KV kernels.KVTypes
}

// Builder builds IR for one architecture.
type Builder func(f *gguf.File, c *config.Config) (*Model, error)

// families are the architectures zrtc builds, by GGUF
// general.architecture: one row each, its Family in its lineage's file
// (llama.go, gemma.go, gptoss.go, qwen35.go).
var families = map[string]Family{
	"llama":     llama,
	"qwen2":     qwen2,
	"qwen3":     qwen3,
	"qwen3moe":  qwen3moe,
	"qwen2moe":  qwen2moe,
	"phi3":      phi3,
	"mistral3":  mistral3,
	"gemma2":    gemma2,
	"gemma3":    gemma3,
	"gemma4":    gemma4,
	"gpt-oss":   gptOSS,
	"qwen35":    qwen35,
	"qwen35moe": qwen35moe,
	"qwen3next": qwen3next,
}

// Build dispatches on general.architecture.
func Build(f *gguf.File, c *config.Config) (*Model, error) {
	b, err := builder(f)
	if err != nil {
		return nil, err
	}
	m, err := b(f, c)
	if err != nil {
		a, _ := f.String("general.architecture")
		return nil, fmt.Errorf("arch %s: %w", a, err)
	}
	return m, nil
}

// CheckSupported fails, with a *support.Error, when f's architecture has
// no graph builder: the first thing to tell a user, before any detail of
// a model zrt cannot build anyway.
func CheckSupported(f *gguf.File) error {
	_, err := builder(f)
	return err
}

func builder(f *gguf.File) (Builder, error) {
	fam, err := family(f)
	if err != nil {
		return nil, err
	}
	return specBuilder(fam), nil
}

func family(f *gguf.File) (Family, error) {
	a, err := f.String("general.architecture")
	if err != nil {
		return nil, err
	}
	fam, ok := families[a]
	if !ok {
		return nil, &support.Error{What: "architecture", Value: strconv.Quote(a), Where: support.Key("general.architecture"),
			Detail: "zrtc builds " + strings.Join(Supported(), ", ")}
	}
	return fam, nil
}

// Settle settles in c what the config leaves to the graph builder, as
// Build does, without building a graph: an unset draft_layers
// (config.DefaultDraft). zrtc config prints the result.
func Settle(f *gguf.File, c *config.Config) error {
	fam, err := family(f)
	if err != nil {
		return err
	}
	s, err := fam(f, c)
	if err == nil {
		if err = s.check(); err == nil {
			err = s.settle(c)
		}
	}
	if err != nil {
		a, _ := f.String("general.architecture")
		return fmt.Errorf("arch %s: %w", a, err)
	}
	return nil
}

// Supported lists the architectures with a builder.
func Supported() []string {
	return slices.Sorted(maps.Keys(families))
}
