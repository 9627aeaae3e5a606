package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestConfigCheck(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("server:\n  addr: 127.0.0.1:9000\nmodels:\n  - name: a\n    path: x\n    bakend: cpu\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := runConfig([]string{"check", bad})
	if err == nil || !strings.Contains(err.Error(), `line 6: unknown key "bakend"`) || !strings.Contains(err.Error(), bad) {
		t.Errorf("config check bad.yaml = %v, want the file, line 6 and the key", err)
	}
	env := map[string]string{"SPECGATE_KEY_TEAM_A": "a", "SPECGATE_KEY_TEAM_B": "b"}
	for _, f := range []string{"specgate.yaml", "speculative.yaml", "redis.yaml", "milvus.yaml"} {
		err := configCheck("../../configs/"+f, func(k string) string { return env[k] })
		if f == "milvus.yaml" && milvusSupport() != nil {
			// Without -tags milvus, serve would refuse it: so must check.
			if err == nil || !strings.Contains(err.Error(), "cache.index: milvus") || !strings.Contains(err.Error(), "-tags milvus") {
				t.Errorf("config check configs/milvus.yaml in a build without Milvus = %v", err)
			}
			continue
		}
		if err != nil {
			t.Errorf("config check configs/%s = %v", f, err)
		}
	}
	if err := runConfig([]string{"frobnicate"}); err != errUsageConfig {
		t.Errorf("unknown subcommand: %v", err)
	}
}

// TestConfigCheckRefusesWhatServeRefuses: each file is one serve refuses;
// config check must fail naming the key and its line (counted by hand in
// the YAML below), and serve must refuse the same file.
func TestConfigCheckRefusesWhatServeRefuses(t *testing.T) {
	shipped, _ := filepath.Abs("../../models/specgate-target")
	dir := t.TempDir()
	// A relative path resolves against the config file's directory.
	if err := os.Symlink(shipped, filepath.Join(dir, "target")); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, yaml string
		want       []string // substrings of the error
	}{
		{"missing model dir", "server:\n  log_level: warn\nmodels:\n  - name: m\n    path: nothere\n",
			[]string{"line 5: models[0].path", filepath.Join(dir, "nothere")}},
		{"missing draft dir", "models:\n  - name: m\n    path: target\n    draft: nodraft\n",
			[]string{"line 4: models[0].draft", filepath.Join(dir, "nodraft")}},
		{"key_env unset", "auth:\n  keys:\n    - key_env: SPECGATE_TEST_UNSET_KEY\n      tenant: t\nmodels:\n  - name: m\n    path: target\n",
			[]string{"line 3: auth.keys[0].key_env", "SPECGATE_TEST_UNSET_KEY is not set"}},
		{"type error", "models:\n  - name: m\n    path: target\n    kv_blocks: lots\n",
			[]string{"line 4: key models[0].kv_blocks", "lots"}},
		{"bad value", "server:\n  addr: 127.0.0.1:1\nmodels:\n  - name: m\n    path: target\n    backend: gpu\n",
			[]string{"line 6:", "models[0].backend", `"gpu"`}},
		{"bad quantize", "models:\n  - name: m\n    path: target\n    quantize: int4\n",
			[]string{"line 4:", "models[0].quantize", `"int4"`}},
		{"two problems at once", "auth:\n  keys:\n    - key_env: SPECGATE_TEST_UNSET_KEY\n      tenant: t\nmodels:\n  - name: m\n    path: nothere\n",
			[]string{"2 problem(s)", "line 7: models[0].path", "line 3: auth.keys[0].key_env"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_")+".yaml")
			if err := os.WriteFile(path, []byte(c.yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			err := configCheck(path, func(string) string { return "" })
			if err == nil {
				t.Fatal("config check said ok")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("config check: %v\nwant it to contain %q", err, w)
				}
			}
			t.Setenv("SPECGATE_TEST_UNSET_KEY", "")
			if serr := runServe([]string{"--config", path, "--addr", "127.0.0.1:1"}); serr == nil {
				t.Error("serve accepted the file")
			}
		})
	}
	good := filepath.Join(dir, "good.yaml")
	os.WriteFile(good, []byte("models:\n  - name: m\n    path: target\n"), 0o644)
	if err := configCheck(good, func(string) string { return "" }); err != nil {
		t.Errorf("relative model path next to the config: %v", err)
	}
}
