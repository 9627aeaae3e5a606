package cachetest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/specgate/specgate/cache"
)

// isolationDim is the embedding dimension TenantIsolation asks newIndex for.
const isolationDim = 256

var isolationQuestions = []string{
	"How do I reverse a list in Python?",
	"What is the boiling point of water at sea level?",
	"Explain the difference between TCP and UDP.",
	"How long should I boil an egg for a runny yolk?",
	"What is the capital city of Australia?",
}

func req(tenant, q string) *cache.Request {
	return &cache.Request{Tenant: tenant, Model: "m", Messages: []cache.Message{{Role: "user", Content: q}}}
}

// TenantIsolation runs the whole pipeline (default config, lexical embedder of
// 256 dimensions) over a fresh store and index and checks that tenant A's
// entries never produce a hit for tenant B, in the exact tier (same text) and
// in the semantic tier (a paraphrase), while A itself hits in both tiers; then
// B stores its own answers and each tenant keeps getting only its own.
func TenantIsolation(t *testing.T, newStore NewStore, newIndex NewIndex) {
	store := newStore(t)
	t.Cleanup(func() { _ = store.Close() })
	index := newIndex(t, isolationDim)
	t.Cleanup(func() { _ = index.Close() })
	emb, err := cache.NewLexical(isolationDim)
	if err != nil {
		t.Fatal(err)
	}
	c, err := cache.New(cache.DefaultConfig(), store, index, emb, cache.WithoutRebuild())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx := ctxT(t)
	paraphrase := func(q string) string { return strings.ToLower(strings.TrimRight(q, "?.")) }
	answer := func(tenant string, i int) string { return fmt.Sprintf(`{"tenant":%q,"q":%d}`, tenant, i) }

	for i, q := range isolationQuestions {
		if err := c.Put(ctx, req("A", q), []byte(answer("A", i)), 1); err != nil {
			t.Fatal(err)
		}
	}
	for i, q := range isolationQuestions {
		for _, text := range []string{q, paraphrase(q)} {
			l, err := c.Get(ctx, req("B", text))
			if err != nil {
				t.Fatal(err)
			}
			if l.Hit {
				t.Fatalf("tenant B got a %s hit on tenant A's entry %d (%q): %s", l.Tier, i, text, l.Response)
			}
		}
		l, err := c.Get(ctx, req("A", q))
		if err != nil {
			t.Fatal(err)
		}
		if !l.Hit || l.Tier != cache.TierExact || string(l.Response) != answer("A", i) {
			t.Fatalf("tenant A exact lookup of %q: got hit=%v tier=%q %s, want exact hit %s", q, l.Hit, l.Tier, l.Response, answer("A", i))
		}
		l, err = c.Get(ctx, req("A", paraphrase(q)))
		if err != nil {
			t.Fatal(err)
		}
		if !l.Hit || l.Tier != cache.TierSemantic || string(l.Response) != answer("A", i) {
			t.Fatalf("tenant A semantic lookup of %q: got hit=%v tier=%q sim=%v reason=%q %s, want semantic hit %s",
				paraphrase(q), l.Hit, l.Tier, l.Similarity, l.Reason, l.Response, answer("A", i))
		}
	}
	for i, q := range isolationQuestions {
		if err := c.Put(ctx, req("B", q), []byte(answer("B", i)), 1); err != nil {
			t.Fatal(err)
		}
	}
	for i, q := range isolationQuestions {
		for _, tenant := range []string{"A", "B"} {
			for _, text := range []string{q, paraphrase(q)} {
				l, err := c.Get(ctx, req(tenant, text))
				if err != nil {
					t.Fatal(err)
				}
				if !l.Hit || string(l.Response) != answer(tenant, i) {
					t.Fatalf("tenant %s lookup of %q: got hit=%v %s, want %s", tenant, text, l.Hit, l.Response, answer(tenant, i))
				}
			}
		}
	}
}
