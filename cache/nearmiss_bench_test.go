package cache_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/specgate/specgate/cache"
)

// BenchmarkNearMisses: one lookup among 2,000 stored questions of one
// tenant in four wordings of 500 subjects (bench workload's paraphrase
// shape, scaled), band 0.35: the time a drafted request spends finding
// its near miss before generation.
func BenchmarkNearMisses(b *testing.B) {
	t := &testing.T{}
	f := newFixture(t, cache.DefaultConfig())
	ctx := context.Background()
	forms := []string{"What does %s mean?", "Define %s.", "What is the meaning of %s?", "Tell me what %s means."}
	for i := range 500 {
		for j, form := range forms[:4] {
			if err := f.c.Put(ctx, user("t", fmt.Sprintf(form, fmt.Sprintf("word%dx%d", i, i*7%13))), []byte(fmt.Sprintf("A%d.%d", i, j)), 5); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, noCache := range []bool{false, true} {
		b.Run(fmt.Sprintf("no-cache=%v", noCache), func(b *testing.B) {
			q := user("t", "What does the word word42x3 mean?")
			q.NoCache = noCache
			b.ReportAllocs()
			for b.Loop() {
				if _, err := f.c.NearMisses(ctx, q, 0.35, nil, 1); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
