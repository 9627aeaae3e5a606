package cache_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/specgate/specgate/cache"
)

var (
	benchMu     sync.Mutex
	benchCaches = map[int]*benchState{}
)

type benchState struct {
	c    *cache.Cache
	keys []string
}

// benchCache builds (once per size) a cache of n synthetic entries.
func benchCache(b *testing.B, n int) *benchState {
	if n > 10000 && testing.Short() {
		b.Skip("100k-entry build skipped under -short")
	}
	benchMu.Lock()
	defer benchMu.Unlock()
	if s := benchCaches[n]; s != nil {
		return s
	}
	c, keys, _, _, err := cache.NewBenchCache(context.Background(), cache.BenchConfig{Entries: n, Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	s := &benchState{c, keys}
	benchCaches[n] = s
	return s
}

func benchLookup(b *testing.B, n int, text func(s *benchState, i int) string, wantTier string) {
	s := benchCache(b, n)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	hits := 0
	for i := 0; b.Loop(); i++ {
		l, err := s.c.Get(ctx, &cache.Request{Tenant: "bench", Model: "m", Messages: []cache.Message{{Role: "user", Content: text(s, i)}}})
		if err != nil {
			b.Fatal(err)
		}
		if l.Hit && l.Tier == wantTier {
			hits++
		}
	}
	b.ReportMetric(float64(hits)/float64(b.N), "hit-rate")
}

func exactText(s *benchState, i int) string { return s.keys[(i*7919)%len(s.keys)] }
func semanticText(s *benchState, i int) string {
	return "please " + strings.ToLower(strings.TrimSuffix(s.keys[(i*7919)%len(s.keys)], "?"))
}
func missText(_ *benchState, i int) string {
	return fmt.Sprintf("What is the unrelated question number %d?", i)
}

func BenchmarkHitExact10k(b *testing.B)    { benchLookup(b, 10_000, exactText, cache.TierExact) }
func BenchmarkHitSemantic10k(b *testing.B) { benchLookup(b, 10_000, semanticText, cache.TierSemantic) }
func BenchmarkMiss10k(b *testing.B)        { benchLookup(b, 10_000, missText, "") }
func BenchmarkHitExact100k(b *testing.B)   { benchLookup(b, 100_000, exactText, cache.TierExact) }
func BenchmarkHitSemantic100k(b *testing.B) {
	benchLookup(b, 100_000, semanticText, cache.TierSemantic)
}
func BenchmarkMiss100k(b *testing.B) { benchLookup(b, 100_000, missText, "") }

func BenchmarkLexicalEmbed(b *testing.B) {
	e, _ := cache.NewLexical(0)
	ctx := context.Background()
	for b.Loop() {
		_, _ = e.Embed(ctx, []string{"How do I reverse a list in Python without copying it?"})
	}
}

func BenchmarkGuard(b *testing.B) {
	for b.Loop() {
		cache.Guard("How do I reverse a list in Python without copying it?", "How can I reverse a Python list without copying it?")
	}
}

func TestRunBenchSmall(t *testing.T) {
	rs, err := cache.RunBench(context.Background(), cache.BenchConfig{Entries: 300, Queries: 50, Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 3 {
		t.Fatalf("got %d rows", len(rs))
	}
	want := map[string]float64{"exact": 1, "semantic": 0.9, "miss": 0}
	for _, r := range rs {
		if r.Tier == "miss" && r.HitRate != 0 {
			t.Errorf("miss tier hit rate %v", r.HitRate)
		}
		if r.Tier != "miss" && r.HitRate < want[r.Tier] {
			t.Errorf("%s tier hit rate %v < %v", r.Tier, r.HitRate, want[r.Tier])
		}
		if r.P50 <= 0 || r.P99 < r.P50 || r.Throughput <= 0 {
			t.Errorf("bad row %+v", r)
		}
	}
}
