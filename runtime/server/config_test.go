package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadConfig(t *testing.T) {
	def, err := LoadConfig("")
	if err != nil || len(def.Tenants) != 1 || def.Tenants[0].ID != LocalTenant || def.QueueDepth != 1024 {
		t.Fatalf("default config %+v: %v", def, err)
	}
	for text, want := range map[string]string{
		"slots = 4\nbogus = 1\n":                                               "unknown keys: bogus",
		"[[tenant]]\nid = \"a\"\nqos = \"vip\"\n":                              `unknown QoS class "vip"`,
		"[[tenant]]\nid = \"a\"\nmax_kv_pge = 3\n":                             "unknown keys: tenant.max_kv_pge",
		"[[tenant]]\nid = \"a\"\napi_key_hashes = [\"md5:00\"]\n":              "sha256:<64 hex digits>",
		"[[tenant]]\nid = \"a\"\n[[tenant]]\nid = \"a\"\n":                     `id "a" is empty or repeated`,
		"[[tenant]]\nid = \"a\"\n[[tenant]]\nid = \"b\"\napi_keys = [\"k\"]\n": "every tenant needs an API key",
		"[[tenant]]\nid = \"a\"\ndecode_tokens_per_second = -1\n":              "limits must not be negative",
		"[[tenant]]\nid = \"a\"\nmax_queued = -1\n":                            "limits must not be negative",
	} {
		path := filepath.Join(t.TempDir(), "s.toml")
		os.WriteFile(path, []byte(text), 0o644)
		if _, err := LoadConfig(path); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want an error containing %q", text, err, want)
		}
	}
	path := filepath.Join(t.TempDir(), "s.toml")
	os.WriteFile(path, []byte("[[tenant]]\nid = \"a\"\ndecode_tokens_per_second = 50\nprefill_tokens_per_second = 900\n"), 0o644)
	c, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if lim := NewPolicy(c).EngineConfig(c).Policy.Load().Tenant("a"); lim.DecodeTokensPerSecond != 50 || lim.PrefillTokensPerSecond != 900 {
		t.Fatalf("soft rate limits not passed to the engine: %+v", lim)
	}
	os.WriteFile(path, []byte("prefill_hold = -1\n"), 0o644)
	if c, err = LoadConfig(path); err != nil {
		t.Fatal(err)
	}
	if got := NewPolicy(c).EngineConfig(c).PrefillHold; got != -1 {
		t.Errorf("prefill_hold -1 reaches the engine as %d", got)
	}
}
