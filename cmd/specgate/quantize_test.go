package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/engine/model"
)

// `specgate quantize` on the shipped target: the output loads as an int8
// model whose every tensor equals (dtype, int8 values, scales) what loading
// the source with --quantize int8 gives, keeps the tokenizer and the
// source's config keys plus quantization_config. Misuse is refused.
func TestQuantizeCommand(t *testing.T) {
	src := filepath.Join("..", "..", "models", "specgate-target")
	out := filepath.Join(t.TempDir(), "q8")
	if err := runQuantize([]string{"--model", src, "--out", out}); err != nil {
		t.Fatal(err)
	}
	var cj map[string]any
	raw, err := os.ReadFile(filepath.Join(out, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &cj); err != nil {
		t.Fatal(err)
	}
	if _, ok := cj["quantization_config"]; !ok || cj["eos_token_id"] == nil {
		t.Fatalf("config.json keys: %v", cj)
	}
	q, err := engine.Load(out, engine.LoadOptions{KVTokens: 512})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if !engine.Int8Weights(q.Weights) || q.Tokenizer == nil {
		t.Fatalf("int8 %v, tokenizer %v", engine.Int8Weights(q.Weights), q.Tokenizer != nil)
	}
	ref, err := engine.Load(src, engine.LoadOptions{KVTokens: 512, Quantize: engine.QuantInt8})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	for _, s := range model.Tensors(q.Config) {
		a, b := s.Field(q.Weights), s.Field(ref.Weights)
		if a.DType != b.DType || len(a.I8) != len(b.I8) {
			t.Fatalf("%s: %v vs %v", s.Name, a.DType, b.DType)
		}
		for i := range a.I8 {
			if a.I8[i] != b.I8[i] {
				t.Fatalf("%s: q[%d] %d, --quantize int8 gives %d", s.Name, i, a.I8[i], b.I8[i])
			}
		}
		for i := range a.Scales {
			if a.Scales[i] != b.Scales[i] {
				t.Fatalf("%s: scale[%d] differs", s.Name, i)
			}
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--model", src, "--out", out}, "already holds a model"},
		{[]string{"--model", src, "--out", src}, "is the model directory"},
		{[]string{"--model", src}, "--out are required"},
		{[]string{"--model", src, "--out", filepath.Join(t.TempDir(), "x"), "--quantize", "int4"}, "int4"},
	} {
		err := runQuantize(tc.args)
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want a usage error containing %q", tc.args, err, tc.want)
		}
	}
	if err := runGenerate([]string{"--model", src, "--prompt", "x", "--quantize", "int4"}); !errors.Is(err, engine.ErrBadConfig) {
		t.Errorf("generate --quantize int4: %v", err)
	}
}
