package gateway

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The config file's errors name the file, the key and its line (lines
// counted by hand in the YAML below), relative model paths resolve
// against the file's directory, and Preflight reports every problem.
func TestLoadConfigFileLines(t *testing.T) {
	shipped, err := filepath.Abs("../models/specgate-target")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Symlink(shipped, filepath.Join(dir, "target")); err != nil {
		t.Fatal(err)
	}
	write := func(name, yaml string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct {
		name, yaml string
		want       []string
	}{
		{"unknown.yaml", "server:\n  addr: 127.0.0.1:9000\nmodels:\n  - name: a\n    path: x\n    bakend: cpu\n",
			[]string{"unknown.yaml", `line 6: unknown key "bakend"`}},
		{"type.yaml", "models:\n  - name: m\n    path: target\n    kv_blocks: lots\n",
			[]string{"type.yaml", "line 4: key models[0].kv_blocks", "lots"}},
		{"value.yaml", "server:\n  addr: 127.0.0.1:1\nmodels:\n  - name: m\n    path: target\n    backend: gpu\n",
			[]string{"value.yaml: line 6:", "models[0].backend", `"gpu"`}},
		{"cpu.yaml", "models:\n  - name: m\n    path: target\n    cpu:\n      threads: 1\n      min_parallel_macs: -5\n",
			[]string{"cpu.yaml: line 6:", "models[0].cpu.min_parallel_macs -5"}},
	} {
		_, err := LoadConfigFile(write(c.name, c.yaml))
		if err == nil || !errors.Is(err, ErrConfig) {
			t.Fatalf("%s: %v, want an ErrConfig", c.name, err)
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v\nwant it to contain %q", c.name, err, w)
			}
		}
	}

	good := write("good.yaml", "models:\n  - name: m\n    path: target\n")
	cfg, err := LoadConfigFile(good)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Models[0].Path != filepath.Join(dir, "target") {
		t.Fatalf("model path %q, want it relative to the file's directory %s", cfg.Models[0].Path, dir)
	}
	if errs := cfg.Preflight(func(string) string { return "" }); len(errs) != 0 {
		t.Fatalf("preflight of a good config: %v", errs)
	}

	two := write("two.yaml", "auth:\n  keys:\n    - key_env: SPECGATE_TEST_UNSET_KEY\n      tenant: t\nmodels:\n  - name: m\n    path: nothere\n")
	cfg, err = LoadConfigFile(two)
	if err != nil {
		t.Fatal(err)
	}
	errs := cfg.Preflight(func(string) string { return "" })
	msg := ConfigProblems(two, errs).Error()
	for _, w := range []string{two + ": 2 problem(s):", "line 7: models[0].path", filepath.Join(dir, "nothere"),
		"line 3: auth.keys[0].key_env", "SPECGATE_TEST_UNSET_KEY is not set"} {
		if !strings.Contains(msg, w) {
			t.Errorf("problems: %s\nwant it to contain %q", msg, w)
		}
	}
	if msg := ConfigProblems("", errs).Error(); strings.Contains(msg, "line ") || !strings.HasPrefix(msg, "2 problem(s):") {
		t.Errorf("problems of a config from flags: %s", msg)
	}
	if errs := cfg.Preflight(func(k string) string { return map[string]string{"SPECGATE_TEST_UNSET_KEY": "k"}[k] }); len(errs) != 1 {
		t.Errorf("with the key set: %v, want only the model path", errs)
	}
	// An override from the environment that breaks the config, annotated
	// after the fact.
	err = AnnotateConfigError(good, errors.New(good+": models[0].backend: bad"))
	if !strings.Contains(err.Error(), good+": line 2: models[0].backend") {
		t.Errorf("AnnotateConfigError: %v", err)
	}
}

func TestCreatableDir(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := creatableDir(filepath.Join(dir, "a", "b")); err != nil {
		t.Errorf("new dir under a dir: %v", err)
	}
	if err := creatableDir(filepath.Join(file, "sub")); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("dir under a file: %v", err)
	}
}
