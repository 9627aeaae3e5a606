package speculative

import (
	"fmt"
	"os"
	"testing"
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
