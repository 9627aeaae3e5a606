package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/specgate/specgate/medusa"
	"github.com/specgate/specgate/safetensors"
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
	hydra := writeHydraHeads(t)
	cases := []struct{ name, spec, want string }{
		{"hydra", "{method: medusa, heads: " + hydra + "}", "(medusa " + hydra + " [Hydra heads], adaptive)"},
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

// writeHydraHeads writes a minimal Hydra heads directory for the shipped
// target (hidden 384, vocabulary 8192): one head of one block, the compact
// layout with r = 1, the target's lm_head; zero weights (config check reads
// names and shapes only).
func writeHydraHeads(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	ts := []safetensors.Tensor{
		{Name: "hydra_embed_proj.weight", DType: safetensors.F16, Shape: []int64{1, 384}, Data: make([]byte, 2*384)},
		{Name: "hydra_mlp.0.0.linear.weight", DType: safetensors.F16, Shape: []int64{384, 385}, Data: make([]byte, 2*384*385)},
		{Name: "hydra_mlp.0.0.linear.bias", DType: safetensors.F16, Shape: []int64{384}, Data: make([]byte, 2*384)},
	}
	if err := safetensors.Write(filepath.Join(d, medusa.HydraWeightsFile), ts, nil); err != nil {
		t.Fatal(err)
	}
	cfg, _ := json.Marshal(map[string]any{"architectures": []string{"HydraModel"}, "hidden_size": 384, "vocab_size": 8192,
		"hydra_num_heads": 1, "hydra_num_layers": 1, "specgate": map[string]any{"share_lm_head": true, "embed_dim": 1,
			"tree": [][]int{{0}, {1}}}})
	if err := os.WriteFile(filepath.Join(d, medusa.ConfigFile), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	return d
}
