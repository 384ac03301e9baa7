package server

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestServerDocs holds docs/server.md to the config loader: its complete
// sample loads, and its key tables name every key Config and Tenant
// decode (a key added to the loader and not to the reference fails here).
func TestServerDocs(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "server.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	_, sample, ok := strings.Cut(doc, "### A complete sample")
	if !ok {
		t.Fatal(`docs/server.md has no "### A complete sample"`)
	}
	m := regexp.MustCompile("(?s)```toml\n(.*?)```").FindStringSubmatch(sample)
	if m == nil {
		t.Fatal("docs/server.md: no toml block in the sample section")
	}
	path := filepath.Join(t.TempDir(), "server.toml")
	if err := os.WriteFile(path, []byte(m[1]), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfig(path)
	if err != nil {
		t.Fatalf("the sample in docs/server.md: %v", err)
	}
	// Documented keys: the first cell of each table row, as `key`.
	documented := map[string]bool{}
	for _, row := range regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\|").FindAllStringSubmatch(doc, -1) {
		documented[row[1]] = true
	}
	sampled := map[string]bool{}
	for _, k := range regexp.MustCompile(`(?m)^([a-z_]+) =`).FindAllStringSubmatch(m[1], -1) {
		sampled[k[1]] = true
	}
	for _, typ := range []reflect.Type{reflect.TypeFor[Config](), reflect.TypeFor[Tenant](), reflect.TypeFor[ModelConfig]()} {
		for i := range typ.NumField() {
			key := typ.Field(i).Tag.Get("toml")
			if key == "" || key == "tenant" || key == "model" {
				continue
			}
			if !documented[key] {
				t.Errorf("docs/server.md has no table row for %s's key %q", typ.Name(), key)
			}
			if !sampled[key] {
				t.Errorf("the complete sample in docs/server.md lacks %q", key)
			}
		}
	}
	if len(cfg.Tenants) < 2 {
		t.Errorf("the sample has %d tenants; it should show several", len(cfg.Tenants))
	}
}

// TestMetricsDocs holds docs/metrics.md to the registry: every metric the
// server registers has a row.
func TestMetricsDocs(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := newMetrics(&Server{})
	ch := make(chan *prometheus.Desc, 64)
	for _, c := range []prometheus.Collector{m.ttft, m.itl, m.e2e, m.tenantTokens, m.rejected, m.mask, engineCollector{}} {
		c.Describe(ch)
	}
	close(ch)
	name := regexp.MustCompile(`fqName: "([^"]+)"`)
	n := 0
	for d := range ch {
		f := name.FindStringSubmatch(d.String())
		if f == nil {
			t.Fatalf("no name in %s", d)
		}
		n++
		if !strings.Contains(string(b), "| `"+f[1]+"` |") {
			t.Errorf("docs/metrics.md has no row for %s", f[1])
		}
	}
	if n < 15 {
		t.Errorf("only %d metrics described", n)
	}
}
