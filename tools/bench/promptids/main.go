// Command promptids writes, as JSON on stdout, the prompts of `specgate
// bench spec` (speculative.BenchPrompts, encoded with the target's
// tokenizer, BOS included, as bench spec encodes them) and specgate's own
// greedy continuation of each (engine.Generate, plain decoding, the same
// request bench spec sends), for tools/bench/llamacpp_spec.mjs: llama.cpp
// is then fed exactly these token ids and its outputs are checked against
// ours.
//
//	go run ./tools/bench/promptids -prompts 20 -tokens 64 > prompts.json
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/speculative"
)

func main() {
	target := flag.String("target", "models/specgate-target", "target model directory")
	n := flag.Int("prompts", 20, "prompts (the first n of bench spec's list)")
	tokens := flag.Int("tokens", 64, "new tokens per prompt")
	flag.Parse()
	if err := run(*target, *n, *tokens); err != nil {
		fmt.Fprintln(os.Stderr, "promptids:", err)
		os.Exit(1)
	}
}

func run(target string, n, tokens int) error {
	all := speculative.BenchPrompts()
	if n < 1 || n > len(all) || tokens < 1 {
		return fmt.Errorf("-prompts in [1, %d], -tokens >= 1", len(all))
	}
	m, err := engine.Load(target, engine.LoadOptions{})
	if err != nil {
		return err
	}
	defer m.Close()
	e := engine.New(m, engine.Options{})
	defer e.Close()
	out := struct {
		Target string    `json:"target"`
		Tokens int       `json:"tokens"`
		Text   []string  `json:"text"`
		Ids    [][]int32 `json:"prompts"`
		Plain  [][]int32 `json:"plain"`
	}{Target: target, Tokens: tokens}
	for _, p := range all[:n] {
		ids := m.Tokenizer.Encode(p, true)
		gen := []int32{}
		req := engine.GenerateRequest{Prompt: ids, MaxTokens: tokens}
		if _, err := e.Generate(context.Background(), req, func(ch engine.Chunk) error {
			gen = append(gen, ch.Tokens...)
			return nil
		}); err != nil {
			return err
		}
		out.Text, out.Ids, out.Plain = append(out.Text, p), append(out.Ids, ids), append(out.Plain, gen)
	}
	return json.NewEncoder(os.Stdout).Encode(out)
}
