package speculative

import (
	"context"
	"testing"

	"github.com/specgate/specgate/engine"
)

// BenchmarkSuffixPropose: one request drafting from its own repetitive
// output (prompt lookup over generated code: a line of 12 tokens repeated
// with its counter changing) and a tenant corpus of 12 earlier answers of
// the same shape, Generated growing by 10 tokens a call up to 160, budget
// and depth 64: the per-step proposer time the engine adds to a GPU step
// (~100-300 us) when bench workload's code-edit trace drafts by prompt
// lookup.
func BenchmarkSuffixPropose(b *testing.B) {
	line := func(i int) []int32 {
		return []int32{100, 101, 102, 103, 104, 105, int32(200 + i%3), 106, 107, 108, 109, 110}
	}
	text := func(n, salt int) []int32 {
		var out []int32
		for i := 0; len(out) < n; i++ {
			out = append(out, line(i+salt)...)
		}
		return out[:n]
	}
	s, err := NewSuffix(SuffixConfig{})
	if err != nil {
		b.Fatal(err)
	}
	for d := range 12 {
		s.Learn("t", text(160, d))
	}
	prompt := []int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}
	out := text(170, 1)
	ctx := context.Background()
	b.ReportAllocs()
	id := engine.RequestID(0)
	for b.Loop() {
		id++
		for g := 10; g <= 160; g += 10 {
			if _, err := s.Propose(ctx, []engine.ProposeRequest{{ID: id, Tenant: "t", Prompt: prompt, Generated: out[:g], Budget: 64, MaxDepth: 64}}); err != nil {
				b.Fatal(err)
			}
		}
		s.Release(id)
	}
}
