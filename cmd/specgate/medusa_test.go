package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/gateway"
	"github.com/specgate/specgate/speculative"
)

// TestMedusaConfig: configs/medusa.yaml passes config check; broken Medusa
// settings fail naming the key, its line and the problem, and serve refuses
// the same files.
func TestMedusaConfig(t *testing.T) {
	if err := configCheck("../../configs/medusa.yaml", func(string) string { return "" }); err != nil {
		t.Fatalf("configs/medusa.yaml: %v", err)
	}
	shipped, _ := filepath.Abs("../../models")
	dir := t.TempDir()
	if err := os.Symlink(shipped, filepath.Join(dir, "models")); err != nil {
		t.Fatal(err)
	}
	head := "models:\n  - name: m\n    path: models/specgate-target\n    speculative:\n      method: medusa\n"
	for _, c := range []struct {
		name, yaml string
		want       []string
	}{
		{"no heads", head, []string{"models[0].speculative.heads: required"}},
		{"missing dir", head + "      heads: nowhere\n", []string{"line 6: models[0].speculative.heads", "nowhere", "not found"}},
		{"bad tree", head + "      heads: models/specgate-target-medusa\n      tree: chain:9\n", []string{"line 6: models[0].speculative.heads", `tree "chain:9"`}},
		{"other model's heads", "models:\n  - name: m\n    path: models/specgate-draft\n    speculative:\n      method: medusa\n      heads: models/specgate-target-medusa\n",
			[]string{"line 6: models[0].speculative.heads", "hidden_size 192"}},
		{"negative vocab limit", head + "      heads: models/specgate-target-medusa\n      vocab_limit: -1\n", []string{"vocab_limit -1"}},
	} {
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
			if serr := runServe([]string{"--config", path, "--addr", "127.0.0.1:1"}); serr == nil {
				t.Error("serve accepted the file")
			}
		})
	}
}

// TestMedusaServeModels: serve's model loading with speculative.method
// medusa gives an engine that drafts with the heads (usage by source
// "medusa", tokens accepted) and answers exactly as plain decoding.
func TestMedusaServeModels(t *testing.T) {
	fixedStepCosts(t)
	cfg, err := gateway.ParseConfig([]byte("models:\n  - name: m\n    path: ../../models/specgate-target\n    backend: cpu\n" +
		"    speculative:\n      method: medusa\n      heads: ../../models/specgate-target-medusa\n      tree: \"4\"\n      vocab_limit: 2048\n"))
	if err != nil {
		t.Fatal(err)
	}
	models, closeAll, err := loadModels(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll()
	plainModel, err := engine.Load("../../models/specgate-target", engine.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer plainModel.Close()
	plain := engine.New(plainModel, engine.Options{})
	defer plain.Close()
	gen := func(g engine.Generator, prompt []int32) ([]int32, engine.Result) {
		var toks []int32
		res, err := g.Generate(context.Background(), engine.GenerateRequest{Prompt: prompt, MaxTokens: 48}, func(c engine.Chunk) error {
			toks = append(toks, c.Tokens...)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return toks, res
	}
	accepted := 0
	for i, text := range speculative.BenchPrompts()[:8] {
		prompt := plainModel.Tokenizer.Encode(text, true)
		want, _ := gen(plain, prompt)
		got, res := gen(models[0].Generator, prompt)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("prompt %d: medusa %v\nplain %v", i, got, want)
		}
		if res.Spec != nil {
			accepted += res.Spec.BySource["medusa"].Accepted
		}
	}
	if accepted == 0 {
		t.Fatal("the served model never accepted a Medusa token: the heads are not wired")
	}
	t.Logf("8 prompts equal to plain; %d Medusa tokens accepted", accepted)
}

// TestGenerateMedusaFlags: generate --spec medusa --medusa DIR runs; the
// flag combinations that make no sense are usage errors.
func TestGenerateMedusaFlags(t *testing.T) {
	base := []string{"--model", "../../models/specgate-target", "--prompt", "func main() {", "--max-tokens", "8"}
	if err := runGenerate(append(base, "--spec", "medusa", "--medusa", "../../models/specgate-target-medusa", "--medusa-tree", "chain:2")); err != nil {
		t.Fatalf("generate --spec medusa: %v", err)
	}
	for _, bad := range [][]string{
		{"--spec", "medusa"},
		{"--spec", "chain", "--medusa", "../../models/specgate-target-medusa"},
		{"--draft", "../../models/specgate-draft", "--medusa", "../../models/specgate-target-medusa", "--spec", "medusa"},
	} {
		if err := runGenerate(append(append([]string{}, base...), bad...)); err == nil || !strings.Contains(err.Error(), "medusa") {
			t.Errorf("generate %v: err = %v, want a usage error naming medusa", bad, err)
		}
	}
	if err := runGenerate(append(base, "--spec", "medusa", "--medusa", "../../models/specgate-target-medusa", "--medusa-tree", "chain:9")); err == nil || !strings.Contains(err.Error(), "chain:9") {
		t.Errorf("bad --medusa-tree: %v", err)
	}
}
