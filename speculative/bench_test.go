package speculative

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/specgate/specgate/engine"
)

// BenchmarkChainK2 decodes 6 bench prompts × 64 tokens with chain k=2 on
// the shipped pair (the `go test -cpuprofile` target for the speculative
// overhead). SPECGATE_BENCH_MODE=plain runs the baseline instead;
// SPECGATE_BENCH_CONCURRENCY=N keeps N requests in flight.
func BenchmarkChainK2(b *testing.B) {
	target, draft := shippedPair(b)
	var ps [][]int32
	for _, p := range BenchPrompts()[:6] {
		ps = append(ps, target.Tokenizer.Encode(p, true))
	}
	mode := BenchMode{Name: "chain k=2", Config: &Config{Method: MethodChain, K: 2}}
	if os.Getenv("SPECGATE_BENCH_MODE") == "plain" {
		mode = BenchMode{Name: "plain"}
	}
	conc := 1
	if v := os.Getenv("SPECGATE_BENCH_CONCURRENCY"); v != "" {
		if _, err := fmt.Sscanf(v, "%d", &conc); err != nil || conc < 1 {
			b.Fatalf("SPECGATE_BENCH_CONCURRENCY=%q", v)
		}
	}
	b.ResetTimer()
	for range b.N {
		if _, err := Bench(target, draft, BenchOptions{Prompts: ps, MaxNew: 64, Runs: 1, Modes: []BenchMode{mode}, Concurrency: []int{conc}}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDraftForward: one draft forward of one token at context 128 on
// the shipped draft, as the proposer runs it: logits over the whole
// vocabulary (vocab=all), or the final hidden row projected onto the 2048
// / 1024 most frequent tokens' rows (FR-Spec). cpu-ns/op is the work; in a
// decode loop the target's weights evict the draft's from the caches, so
// there each forward costs more than here.
func BenchmarkDraftForward(b *testing.B) {
	target, draft := shippedPair(b)
	for _, limit := range []int{0, 2048, 1024} {
		name := "vocab=all"
		if limit > 0 {
			name = fmt.Sprintf("vocab=%d", limit)
		}
		b.Run(name, func(b *testing.B) {
			d, err := NewDraft(target, draft, Config{Method: MethodChain, K: 1, VocabLimit: limit, TokenFrequency: shippedFrequency})
			if err != nil {
				b.Fatal(err)
			}
			s := draft.NewSequence()
			defer s.Free()
			ctx := make([]int32, 128)
			for i := range ctx {
				ctx[i] = int32(i*53%8000 + 5)
			}
			if _, err := s.Forward(ctx, nil, []int32{}); err != nil {
				b.Fatal(err)
			}
			c0 := processCPU()
			for b.Loop() {
				if s.Len() >= 192 {
					s.Truncate(128)
				}
				it := []engine.BatchItem{{Seq: s, Tokens: []int32{5}, HiddenOnly: d.head != nil}}
				if err := draft.ForwardBatch(it); err != nil {
					b.Fatal(err)
				}
				if _, rows := d.logits(it); len(rows[0]) == 0 {
					b.Fatal("no logits")
				}
			}
			b.ReportMetric(float64(processCPU()-c0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// TestBenchEngineSteps: at concurrency 1 a plain request takes one engine
// step per generated token (its prefill gives the first), so a row's
// EngineSteps equals its generated tokens, counted from the results; a
// lone request's step never leaves a request out (SatOut 0). At
// concurrency 3 the requests may share steps (on this tiny model one may
// also finish before the next is submitted): between a third of the
// tokens and all of them.
func TestBenchEngineSteps(t *testing.T) {
	target, draft := tinyPair()
	ps := [][]int32{{1, 2, 3}, {4, 5, 6, 7}, {8, 9}}
	rows, err := Bench(target, draft, BenchOptions{Prompts: ps, MaxNew: 12, Runs: 3, WarmRuns: 1,
		Modes: []BenchMode{{Name: "plain"}}, Concurrency: []int{1, 3}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 {
		t.Fatalf("%d rows", len(rows))
	}
	if r := rows[0]; r.EngineSteps != int64(r.Tokens) || r.SatOut != 0 {
		t.Fatalf("concurrency 1: %d engine steps, %d sat out; want %d (the generated tokens), 0", r.EngineSteps, r.SatOut, r.Tokens)
	}
	if r := rows[1]; r.EngineSteps > int64(r.Tokens) || r.EngineSteps < int64(r.Tokens/len(ps)) {
		t.Fatalf("concurrency 3: %d engine steps for %d tokens of %d requests", r.EngineSteps, r.Tokens, len(ps))
	}
	if s := FormatBench(rows); !strings.Contains(s, "| engine steps | sat out |") || !strings.Contains(s, fmt.Sprintf("| %d | 0 |\n", rows[0].EngineSteps)) {
		t.Fatalf("FormatBench:\n%s", s)
	}
}
