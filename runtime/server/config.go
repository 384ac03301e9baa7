package server

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/zrtdev/zrt/runtime/engine"
)

// Config is the server's TOML configuration. Every key is optional; with
// no file there is one local tenant with no API key.
type Config struct {
	// Slots is the requests the engine runs at once (default: the
	// bundle's max_slots).
	Slots int `toml:"slots"`
	// ChunkCap is the query rows per step (default: the bundle's largest
	// prefill variant).
	ChunkCap int `toml:"chunk_cap"`
	// InteractiveSlack is how much longer than a step without prefill a
	// step may take while an interactive request decodes, as a fraction
	// (engine.Config.InteractiveSlack; default 0.2, negative: no limit).
	InteractiveSlack float64 `toml:"interactive_slack"`
	// PrefillHold bounds the steps a new prompt may wait while others
	// decode, for more to share its prefill steps or a chunk a step
	// (engine.Config.PrefillHold; default 4, negative: none).
	PrefillHold int `toml:"prefill_hold"`
	// QueueDepth bounds waiting requests; beyond it: 503 (default 1024).
	QueueDepth int `toml:"queue_depth"`
	// Ledger is the usage ledger's path ("": none), one record per
	// finished request, read back at start.
	Ledger string `toml:"ledger"`
	// CORSOrigins are the browser origins ("https://app.example", or "*"
	// for any) whose pages may call the API from another origin. Empty:
	// CORS is off, so a browser lets only the server's own page (GET /)
	// call it.
	CORSOrigins []string `toml:"cors_origins"`
	// Speculative is every model's speculative decoding (off,
	// ngram[:K[:fixed]] or self[:K[:fixed]]; default off), unless its [[model]] table or
	// zrt-run serve's --speculative says otherwise.
	Speculative string `toml:"speculative"`
	// HostKVMiB is each model's host-memory tier of the prefix cache, in
	// MiB (engine.Config.HostKVBytes): KV pages the device's pool evicts
	// keep their bytes in RAM up to that bound and come back on a prefix
	// hit, so conversations that resend their history do not compute it
	// again (llama.cpp's --cache-ram). Default 0, off: the RAM is the
	// operator's to give, and on T-CPU the KV pool is in RAM already, so
	// kv_pages is the better knob there. zrt-run serve's --host-kv-mib
	// overrides it.
	HostKVMiB int           `toml:"host_kv_mib"`
	Models    []ModelConfig `toml:"model"`
	Tenants   []Tenant      `toml:"tenant"`

	speculative engine.Speculation
}

// ModelConfig is one [[model]] table: settings of the model of that name.
type ModelConfig struct {
	Name string `toml:"name"`
	// Speculative is the model's speculative decoding, as the top-level
	// key.
	Speculative string `toml:"speculative"`

	speculative engine.Speculation
}

// Tenant is one [[tenant]] table.
type Tenant struct {
	ID string `toml:"id"`
	// APIKeys are accepted keys; APIKeyHashes the same as "sha256:HEX" so
	// the file need not hold secrets.
	APIKeys      []string `toml:"api_keys"`
	APIKeyHashes []string `toml:"api_key_hashes"`
	QoS          string   `toml:"qos"`
	// Scheduling limits: over them a request waits.
	MaxConcurrent   int `toml:"max_concurrent"`
	MaxKVPages      int `toml:"max_kv_pages"`
	ReservedKVPages int `toml:"reserved_kv_pages"`
	// Soft rate limits, smoothed over 5 s: over them the tenant's
	// requests wait while other tenants' of the same class do, and run
	// when the engine has room (engine.TenantPolicy).
	DecodeTokensPerSecond  int `toml:"decode_tokens_per_second"`
	PrefillTokensPerSecond int `toml:"prefill_tokens_per_second"`
	// MaxContextTokens refuses longer prompts with 400.
	MaxContextTokens int `toml:"max_context_tokens"`
	// MaxQueued refuses a request with 429 while that many of the
	// tenant's requests wait for a slot.
	MaxQueued int `toml:"max_queued"`
	// Rate limits: over them a request is refused with 429 and
	// Retry-After. Tokens count the prompt plus max_tokens.
	TokensPerMinute   int `toml:"tokens_per_minute"`
	RequestsPerMinute int `toml:"requests_per_minute"`
	// IsolationGroup names the tenants that may share prefix-cache pages
	// (default: the tenant alone).
	IsolationGroup string `toml:"isolation_group"`
	// Admin may read every tenant's usage.
	Admin bool `toml:"admin"`

	qos    engine.QoS
	hashes [][32]byte
}

// LocalTenant is the tenant of a server started without a config.
const LocalTenant = "local"

// LoadConfig reads a server config; path "" gives the default. Unknown
// keys are errors naming the key and its table.
func LoadConfig(path string) (*Config, error) {
	c := &Config{}
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("server config: %w", err)
		}
		md, err := toml.NewDecoder(bytes.NewReader(b)).Decode(c)
		if err != nil {
			return nil, fmt.Errorf("server config %s: %w", path, err)
		}
		if und := md.Undecoded(); len(und) > 0 {
			keys := make([]string, len(und))
			for i, k := range und {
				keys[i] = k.String()
			}
			return nil, fmt.Errorf("server config %s: unknown keys: %s", path, strings.Join(keys, ", "))
		}
	}
	if len(c.Tenants) == 0 {
		c.Tenants = []Tenant{{ID: LocalTenant, QoS: "interactive", Admin: true}}
	}
	return c, c.validate()
}

func (c *Config) validate() error {
	if c.QueueDepth == 0 {
		c.QueueDepth = 1024
	}
	if c.Slots < 0 || c.ChunkCap < 0 || c.QueueDepth < 0 || c.HostKVMiB < 0 {
		return fmt.Errorf("server config: slots, chunk_cap, queue_depth and host_kv_mib must not be negative")
	}
	if math.IsNaN(c.InteractiveSlack) || math.IsInf(c.InteractiveSlack, 0) {
		return fmt.Errorf("server config: interactive_slack must be a finite number")
	}
	var err error
	if c.speculative, err = engine.ParseSpeculation(c.Speculative); err != nil {
		return fmt.Errorf("server config: speculative: %w", err)
	}
	names := map[string]bool{}
	for i := range c.Models {
		m := &c.Models[i]
		if m.Name == "" || names[m.Name] {
			return fmt.Errorf("server config: model %d: name %q is empty or repeated", i, m.Name)
		}
		names[m.Name] = true
		if m.speculative, err = engine.ParseSpeculation(m.Speculative); err != nil {
			return fmt.Errorf("server config: model %s: speculative: %w", m.Name, err)
		}
		if m.Speculative == "" {
			m.speculative = c.speculative
		}
	}
	for _, o := range c.CORSOrigins {
		if err := checkOrigin(o); err != nil {
			return fmt.Errorf("server config: cors_origins entry %q: %w", o, err)
		}
	}
	seen := map[string]bool{}
	keyless := 0
	for i := range c.Tenants {
		t := &c.Tenants[i]
		if t.ID == "" || seen[t.ID] {
			return fmt.Errorf("server config: tenant %d: id %q is empty or repeated", i, t.ID)
		}
		seen[t.ID] = true
		if t.QoS == "" {
			t.QoS = "standard"
		}
		q, err := engine.ParseQoS(t.QoS)
		if err != nil {
			return fmt.Errorf("server config: tenant %s: %w", t.ID, err)
		}
		t.qos = q
		for _, k := range t.APIKeys {
			t.hashes = append(t.hashes, sha256.Sum256([]byte(k)))
		}
		for _, h := range t.APIKeyHashes {
			raw, err := hex.DecodeString(strings.TrimPrefix(h, "sha256:"))
			if err != nil || len(raw) != 32 || !strings.HasPrefix(h, "sha256:") {
				return fmt.Errorf("server config: tenant %s: api_key_hashes entry is not sha256:<64 hex digits>", t.ID)
			}
			t.hashes = append(t.hashes, [32]byte(raw))
		}
		if len(t.hashes) == 0 {
			keyless++
		}
		if t.MaxConcurrent < 0 || t.MaxKVPages < 0 || t.ReservedKVPages < 0 || t.DecodeTokensPerSecond < 0 || t.PrefillTokensPerSecond < 0 ||
			t.MaxContextTokens < 0 || t.MaxQueued < 0 || t.TokensPerMinute < 0 || t.RequestsPerMinute < 0 {
			return fmt.Errorf("server config: tenant %s: limits must not be negative", t.ID)
		}
	}
	if keyless > 0 && len(c.Tenants) > 1 {
		return fmt.Errorf("server config: with several tenants every tenant needs an API key (a request must say whose it is)")
	}
	return nil
}

// checkOrigin accepts "*" or an origin as a browser sends it in its
// Origin header (scheme://host[:port], nothing after): anything else could
// never equal an Origin header, so a typo would silently turn CORS off.
func checkOrigin(o string) error {
	if o == "*" {
		return nil
	}
	u, err := url.Parse(o)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		u.Path != "" || u.RawQuery != "" || u.Fragment != "" || strings.HasSuffix(o, "?") || strings.HasSuffix(o, "#") {
		return errors.New(`want "*" or scheme://host[:port] with no path, such as https://app.example`)
	}
	return nil
}

// EnginePolicy is the engines' policy under c: the queue's bound and each
// tenant's limits, rates, reservation, prefix-cache scope and class, as
// the config's keys give them. It is the one place a tenant key meets the
// engine: a new tenant limit is a key here and a field of
// engine.TenantPolicy.
func (c *Config) EnginePolicy() engine.Policy {
	p := engine.Policy{QueueDepth: c.QueueDepth, Tenants: map[string]engine.TenantPolicy{}}
	for _, t := range c.Tenants {
		scope := "tenant:" + t.ID
		if t.IsolationGroup != "" {
			scope = "group:" + t.IsolationGroup
		}
		p.Tenants[t.ID] = engine.TenantPolicy{
			Class:                  t.qos,
			MaxContext:             t.MaxContextTokens,
			MaxQueued:              t.MaxQueued,
			TokensPerMinute:        t.TokensPerMinute,
			RequestsPerMinute:      t.RequestsPerMinute,
			MaxSlots:               t.MaxConcurrent,
			MaxPages:               t.MaxKVPages,
			DecodeTokensPerSecond:  t.DecodeTokensPerSecond,
			PrefillTokensPerSecond: t.PrefillTokensPerSecond,
			ReservedPages:          t.ReservedKVPages,
			Scope:                  scope,
		}
	}
	return p
}

// Policy is the policy the server's engines follow, as the current config
// gives it (EnginePolicy). Engines read it at every admission and step, so
// Update — a config reloaded on SIGHUP — takes effect at the next request
// and step without dropping running requests.
type Policy struct {
	live *engine.LivePolicy
}

// NewPolicy returns the policy of c.
func NewPolicy(c *Config) *Policy {
	return &Policy{live: engine.NewLivePolicy(c.EnginePolicy())}
}

// Update replaces the policy with c's.
func (p *Policy) Update(c *Config) { p.live.Store(c.EnginePolicy()) }

// tenant is tenant id's policy in force.
func (p *Policy) tenant(id string) engine.TenantPolicy { return p.live.Load().Tenant(id) }

// EngineConfig is an engine's configuration under c: slots and chunk_cap
// (0 where the file leaves them to the bundle), and the policy, read from
// p as it is updated (reserved pages are fixed when the engine starts).
func (p *Policy) EngineConfig(c *Config) engine.Config {
	return engine.Config{Slots: c.Slots, ChunkCap: c.ChunkCap, InteractiveSlack: c.InteractiveSlack, PrefillHold: c.PrefillHold, Policy: p.live, Speculative: c.speculative,
		HostKVBytes: int64(c.HostKVMiB) << 20}
}

// SpeculationFor is model name's speculative decoding under c: its
// [[model]] table's, else the top-level key's.
func (c *Config) SpeculationFor(name string) engine.Speculation {
	for _, m := range c.Models {
		if m.Name == name {
			return m.speculative
		}
	}
	return c.speculative
}
