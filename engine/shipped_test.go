package engine

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/specgate/specgate/engine/cpu"
	"github.com/specgate/specgate/tokenizer"
)

// TestShippedModelGenerate: the shipped target, with its tokenizer and chat
// template, generates through the engine exactly what greedy decoding
// gives, streams the same text the tokenizer decodes, and stops at <|im_end|>
// or the token limit; a repeated system prompt is served from the prefix cache.
func TestShippedModelGenerate(t *testing.T) {
	if testing.Short() {
		t.Skip("loads the shipped model")
	}
	dir := "../models/specgate-target"
	if _, err := os.Stat(dir); err != nil {
		t.Skip("models/specgate-target not present")
	}
	m, err := Load(dir, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if be, ok := m.Backend().(*CPUBackend); ok && cpu.HalfCapable() && !be.HalfWeights() {
		t.Error("shipped fp16 target: CPU backend does not stream binary16 weights")
	}
	e := New(m, Options{})
	defer e.Close()
	msgs := []tokenizer.Message{{Role: "system", Content: "You are a helpful assistant that answers in one sentence about words and Go code."},
		{Role: "user", Content: "What does the word \"ocean\" mean?"}}
	text, err := m.Tokenizer.RenderChat(msgs, true)
	if err != nil {
		t.Fatal(err)
	}
	prompt := m.Tokenizer.Encode(text, false)
	var toks []int32
	var out strings.Builder
	res, err := e.Generate(context.Background(), GenerateRequest{Prompt: prompt, MaxTokens: 48}, func(c Chunk) error {
		toks = append(toks, c.Tokens...)
		out.WriteString(c.Text)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := manualGreedy(t, m, prompt, res.CompletionTokens)
	if res.Finish == FinishStop {
		if last := want[len(want)-1]; !containsID(m.Config.EOS, last) {
			t.Fatalf("finish stop but last greedy token %d is not EOS %v", last, m.Config.EOS)
		}
		want = want[:len(want)-1]
	}
	if fmt.Sprint(toks) != fmt.Sprint(want) {
		t.Fatalf("engine tokens %v\ngreedy        %v", toks, want)
	}
	if dec := m.Tokenizer.Decode(toks, true); out.String() != dec {
		t.Fatalf("streamed %q, decoded %q", out.String(), dec)
	}
	t.Logf("%d prompt tokens -> %q (%s)", len(prompt), out.String(), res.Finish)
	// the same conversation again: the full blocks of the prompt come from the cache.
	res2, err := e.Generate(context.Background(), GenerateRequest{Prompt: prompt, MaxTokens: 4}, func(Chunk) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if want := (len(prompt) - 1) / m.KV().BlockSize() * m.KV().BlockSize(); res2.CachedTokens != want {
		t.Fatalf("cached %d tokens, want %d", res2.CachedTokens, want)
	}
}
