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
	if err := runConfig([]string{"check", "../../configs/specgate.yaml"}); err != nil {
		t.Errorf("config check configs/specgate.yaml = %v", err)
	}
	if err := runConfig([]string{"frobnicate"}); err != errUsageConfig {
		t.Errorf("unknown subcommand: %v", err)
	}
}
