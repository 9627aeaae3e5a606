package speculative

import (
	"fmt"
	"os"
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
