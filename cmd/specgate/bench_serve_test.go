package main

import (
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
)

// bench serve against its in-process server on the CPU (tiny random shape,
// shipped tokenizer): every request streams to [DONE], the token count is
// the server's usage, and an unknown model is counted as an error with the
// server's message.
func TestBenchServeInProcessCPU(t *testing.T) {
	o := benchServeOpts{levels: []int{2}, maxTokens: 5, promptTokens: 7, temperature: 0.8, backend: "cpu", shape: "tiny",
		tokDir: "../../models/specgate-target", maxBatch: 8, timeout: 60e9}
	url, name, vocab, bt, stop, err := startBenchServer(&o)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	o.url, o.model, o.vocab = url, name, vocab
	r := rand.New(rand.NewPCG(1, 2))
	res, err := runLevel(http.DefaultClient, &o, r, 2, 4, o.maxTokens, o.promptTokens)
	if err != nil {
		t.Fatal(err)
	}
	if res.errors != 0 || len(res.ttft) != 4 {
		t.Fatalf("errors %d (%s), %d TTFTs", res.errors, res.firstErr, len(res.ttft))
	}
	if res.tokens < 4 || res.tokens > 4*o.maxTokens {
		t.Fatalf("%d tokens for 4 requests of max_tokens %d", res.tokens, o.maxTokens)
	}
	if len(bt.calls) == 0 || !strings.Contains(bt.summary(res.wall), "backend:") {
		t.Fatalf("backend calls not timed: %d", len(bt.calls))
	}
	o.model = "no-such-model"
	res, _ = runLevel(http.DefaultClient, &o, r, 1, 1, 2, 3)
	if res.errors != 1 || !strings.Contains(res.firstErr, "HTTP 404") {
		t.Fatalf("unknown model: errors %d, first %q", res.errors, res.firstErr)
	}
}
