package gateway

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseConfigUnknownKeyNamesLine(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"top level", "server:\n  addr: 127.0.0.1:9\nmodelz: []\n", `line 3: unknown key "modelz"`},
		{"nested", "models:\n  - name: a\n    path: x\n    bakend: cpu\n", `line 4: unknown key "bakend"`},
		{"cache inline", "cache:\n  default:\n    treshold: 0.9\n", `line 3: unknown key "treshold"`},
		{"upstream", "upstreams:\n  - name: u\n    base_url: http://x\n    models: [m]\n    retry: 2\n", `line 5: unknown key "retry"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tc.yaml))
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrConfig containing %q", err, tc.want)
			}
		})
	}
}

func TestParseConfigValidation(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"server:\n  addr: nope\n", "server.addr"},
		{"models:\n  - name: a\n    path: x\n    backend: tpu\n", "models[0].backend"},
		{"models:\n  - name: a\n    path: x\n    quantize: int4\n", "models[0].quantize"},
		{"models:\n  - name: a\n    path: x\n    cpu: {min_parallel_macs: -1}\n", "models[0].cpu.min_parallel_macs"},
		{"models:\n  - name: a\n    path: x\n    cpu: {threads: -2}\n", "models[0].cpu.threads"},
		{"models:\n  - name: a\n    path: x\n    speculative: {method: draft}\n", "models[0].draft"},
		{"models:\n  - name: a\n    path: x\n  - name: a\n    path: y\n", "models[1].name"},
		{"upstreams:\n  - name: u\n    base_url: ftp://x\n    models: [m]\n", "upstreams[0].base_url"},
		{"auth:\n  keys:\n    - key: k\n", "auth.keys[0].tenant"},
		{"cache:\n  store: postgres\n", "cache.store"},
		{"cache:\n  store: redis\n", "cache.redis.addr"},
		{"server:\n  max_n: 0\n  max_body_bytes: 10\n", "server.max_body_bytes"},
	} {
		_, err := ParseConfig([]byte(tc.yaml))
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err = %v, want it to name %s", tc.yaml, err, tc.want)
		}
	}
}

func TestConfigEnvOverrides(t *testing.T) {
	c := DefaultConfig()
	env := map[string]string{"SPECGATE_ADDR": "0.0.0.0:9999", "SPECGATE_DATA_DIR": "/tmp/sg", "SPECGATE_API_KEYS": "k1=tenantA, k2=tenantB"}
	if err := c.ApplyEnv(func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if c.Server.Addr != "0.0.0.0:9999" || c.Server.DataDir != "/tmp/sg" {
		t.Fatalf("server = %+v", c.Server)
	}
	if len(c.Auth.Keys) != 2 || c.Auth.Keys[0] != (KeyConfig{Key: "k1", Tenant: "tenantA"}) || c.Auth.Keys[1] != (KeyConfig{Key: "k2", Tenant: "tenantB"}) {
		t.Fatalf("keys = %+v", c.Auth.Keys)
	}
	if err := c.ApplyEnv(func(k string) string {
		if k == "SPECGATE_API_KEYS" {
			return "k1"
		}
		return ""
	}); err == nil || !strings.Contains(err.Error(), "SPECGATE_API_KEYS entry 1") {
		t.Fatalf("bad SPECGATE_API_KEYS: err = %v", err)
	}
}

func TestDefaultConfig(t *testing.T) {
	c := DefaultConfig()
	if c.Server.Addr != "127.0.0.1:8080" || c.Server.DataDir != "./data" || len(c.Models) != 1 ||
		c.Models[0].Path != DefaultModelPath || c.Models[0].Backend != "cpu" || c.Cache.Store != "sqlite" || !c.Cache.CacheEnabled() {
		t.Fatalf("default config = %+v", c)
	}
}

// The example configs in configs/ must stay valid.
func TestExampleConfigs(t *testing.T) {
	files, _ := filepath.Glob("../configs/*.yaml")
	if len(files) == 0 {
		t.Fatal("no example configs in ../configs")
	}
	for _, f := range files {
		c, err := LoadConfig(f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if err := c.ApplyEnv(func(string) string { return "" }); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	if _, err := LoadConfig(filepath.Join(t.TempDir(), "missing.yaml")); !errors.Is(err, ErrConfig) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}
