package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfigCheckPrintsSpeculationMode: config check prints each model's
// effective speculation mode; without speculative.adaptive it is the
// adaptive budget for method draft and medusa alike, and `adaptive: false`
// prints fixed.
func TestConfigCheckPrintsSpeculationMode(t *testing.T) {
	target, _ := filepath.Abs("../../models/specgate-target")
	draft, _ := filepath.Abs("../../models/specgate-draft")
	heads, _ := filepath.Abs("../../models/specgate-target-medusa")
	dir := t.TempDir()
	cases := []struct{ name, spec, want string }{
		{"draft default", "{method: draft, k: 2}", "(draft " + draft + ", adaptive)"},
		{"draft fixed", "{method: draft, k: 2, adaptive: false}", "(draft " + draft + ", fixed)"},
		{"medusa default", "{method: medusa, heads: " + heads + "}", "(medusa " + heads + ", adaptive)"},
		{"medusa fixed", "{method: medusa, heads: " + heads + ", adaptive: false}", "(medusa " + heads + ", fixed)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_")+".yaml")
			y := "models:\n  - name: m\n    path: " + target + "\n    draft: " + draft + "\n    speculative: " + c.spec + "\ncache:\n  enabled: false\n"
			if err := os.WriteFile(path, []byte(y), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := captureStdout(t, func() error { return configCheck(path, func(string) string { return "" }) })
			if err != nil {
				t.Fatalf("config check: %v", err)
			}
			if !strings.Contains(out, "m = "+target+" "+c.want) {
				t.Errorf("config check printed %q, want it to contain %q", out, c.want)
			}
		})
	}
}
