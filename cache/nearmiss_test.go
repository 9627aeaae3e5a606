package cache_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/specgate/specgate/cache"
)

// TestNearMiss: below the threshold but within the band, refused by the
// guard, from another model's namespace or the same model under other
// parameters (same tenant), never from another tenant; nothing outside the
// band; no hit or statistic recorded.
func TestNearMiss(t *testing.T) {
	f := newFixture(t, cache.DefaultConfig())
	ctx := context.Background()
	if err := f.c.Put(ctx, user("t", "How do I reverse a list in Python?"), []byte("A1"), 5); err != nil {
		t.Fatal(err)
	}
	// a paraphrase further away than the 0.55 threshold: a miss, but a near miss at band 0.3.
	q := user("t", "Python: reversing sequences, lists and strings, explained with examples for beginners")
	l, err := f.c.Get(ctx, q)
	if err != nil || l.Hit {
		t.Fatalf("want a miss: %+v %v", l, err)
	}
	nm, ok, err := f.c.NearMiss(ctx, q, 0.3, nil)
	if err != nil || !ok || string(nm.Response) != "A1" || nm.Reason != "threshold" || nm.Similarity >= 0.55 || nm.Similarity < 0.3 {
		t.Fatalf("near miss below threshold: %+v ok=%v err=%v (similarity of the miss %.3f)", nm, ok, err, l.Similarity)
	}
	// outside a tighter band: none.
	if _, ok, _ := f.c.NearMiss(ctx, q, nm.Similarity+0.01, nil); ok {
		t.Fatal("near miss above the band's bound returned")
	}
	// the guard refuses a negated question as a hit; it is a near miss.
	neg := user("t", "How do I not reverse a list in Python?")
	if l, _ := f.c.Get(ctx, neg); l.Hit {
		t.Fatalf("negation served: %+v", l)
	}
	nm, ok, _ = f.c.NearMiss(ctx, neg, 0.35, nil)
	if !ok || nm.Reason != cache.GuardNegation || nm.Similarity < 0.55 {
		t.Fatalf("guard-refused near miss: %+v %v", nm, ok)
	}
	// a hit is not a near miss.
	if _, ok, _ := f.c.NearMiss(ctx, user("t", "How do I reverse a list in Python?"), 0.35, nil); ok {
		t.Fatal("an exact hit reported as a near miss")
	}
	// another tenant: nothing, even with the model list.
	if _, ok, _ := f.c.NearMiss(ctx, user("u", "Python: reversing sequences, lists and strings, explained with examples for beginners"), 0.1, []string{"llama", "gpt"}); ok {
		t.Fatal("near miss across tenants")
	}
	// another model's answer (an upstream's) serves a local model's request when listed.
	up := &cache.Request{Tenant: "t", Model: "gpt-4o-mini", Messages: []cache.Message{{Role: "user", Content: "What is a monad in Haskell?"}}}
	if err := f.c.Put(ctx, up, []byte("UP"), 9); err != nil {
		t.Fatal(err)
	}
	loc := user("t", "What is a monad in Haskell?")
	if l, _ := f.c.Get(ctx, loc); l.Hit {
		t.Fatal("another model's entry served as a hit")
	}
	if _, ok, _ := f.c.NearMiss(ctx, loc, 0.35, nil); ok {
		t.Fatal("another model's entry without listing the model")
	}
	nm, ok, _ = f.c.NearMiss(ctx, loc, 0.35, []string{"gpt-4o-mini"})
	if !ok || string(nm.Response) != "UP" || nm.Reason != "model" || nm.Similarity < 0.99 {
		t.Fatalf("upstream answer as a near miss: %+v %v", nm, ok)
	}
	// an upstream's answer stored under other parameters (its namespace hashes
	// the body's fields) and the same model under other parameters: found by
	// the tenant's namespaces, labelled.
	up2 := &cache.Request{Tenant: "t", Model: "gpt-4o-mini", Params: map[string]string{"max_tokens": "64"},
		Messages: []cache.Message{{Role: "user", Content: "Explain the Go scheduler's work stealing."}}}
	if err := f.c.Put(ctx, up2, []byte("UP2"), 9); err != nil {
		t.Fatal(err)
	}
	nm, ok, _ = f.c.NearMiss(ctx, user("t", "Explain the Go scheduler's work stealing."), 0.35, []string{"gpt-4o-mini"})
	if !ok || string(nm.Response) != "UP2" || nm.Reason != "model" {
		t.Fatalf("upstream answer under other params: %+v %v", nm, ok)
	}
	own := &cache.Request{Tenant: "t", Model: "llama", Params: map[string]string{"max_tokens": "16"},
		Messages: []cache.Message{{Role: "user", Content: "What is a goroutine leak?"}}}
	if err := f.c.Put(ctx, own, []byte("OWN"), 9); err != nil {
		t.Fatal(err)
	}
	nm, ok, _ = f.c.NearMiss(ctx, user("t", "What is a goroutine leak?"), 0.35, nil)
	if !ok || string(nm.Response) != "OWN" || nm.Reason != "params" {
		t.Fatalf("same model, other params: %+v %v", nm, ok)
	}
	if _, ok, _ := f.c.NearMiss(ctx, user("u", "What is a goroutine leak?"), 0.1, []string{"llama", "gpt-4o-mini"}); ok {
		t.Fatal("near miss across tenants (other params)")
	}
	// the k best, best first, one per entry.
	for i, q := range []string{"How do I sort a slice of strings in Go?", "How do I sort a slice of ints in Go?", "How do I sort a map by value in Go?"} {
		if err := f.c.Put(ctx, user("t", q), []byte{'S', byte('0' + i)}, 1); err != nil {
			t.Fatal(err)
		}
	}
	nms, err := f.c.NearMisses(ctx, user("t", "In Go, what does the sort package offer for strings, integers and maps?"), 0.2, nil, 2)
	if err != nil || len(nms) != 2 || nms[0].Similarity < nms[1].Similarity || nms[0].ID == nms[1].ID {
		t.Fatalf("NearMisses k=2: %+v %v", nms, err)
	}
	// bypassed requests and bad bands.
	if _, ok, _ := f.c.NearMiss(ctx, &cache.Request{Tenant: "t", Model: "llama"}, 0.35, nil); ok {
		t.Fatal("empty key")
	}
	for _, b := range []float32{0, -0.1, 1.5} {
		if _, _, err := f.c.NearMiss(ctx, q, b, nil); !errors.Is(err, cache.ErrNearMissBand) {
			t.Fatalf("band %v: %v", b, err)
		}
	}
	if got := f.metric(t, "specgate_cache_lookups_total", map[string]string{"result": "hit"}); got != 0 {
		t.Fatalf("NearMiss recorded %v hits", got)
	}
}

// TestNearMissSubjectFirst: among near misses, the one about the request's
// subject ranks above a more similar key in the same wording about another
// subject (whose answer would be rejected as a draft at its first token);
// a request that does not read the cache (no-cache) gets the answer a hit
// would have served, reason "no-cache", and one that reads it does not.
func TestNearMissSubjectFirst(t *testing.T) {
	f := newFixture(t, cache.DefaultConfig())
	ctx := context.Background()
	for _, e := range []struct{ q, a string }{
		{"Define arduous.", "ARDUOUS"}, {"Define ubiquitous.", "UBIQUITOUS"},
		{"Tell me what lucid means.", "LUCID"}, {"What is the meaning of candid?", "CANDID"},
	} {
		if err := f.c.Put(ctx, user("t", e.q), []byte(e.a), 1); err != nil {
			t.Fatal(err)
		}
	}
	q := user("t", "Define lucid.")
	// the premise: by similarity alone, another subject's key in the same wording comes first.
	if nms, err := f.c.NearMisses(ctx, q, 0.3, nil, 4); err != nil || len(nms) < 2 {
		t.Fatalf("near misses: %+v %v", nms, err)
	} else {
		most := nms[0]
		for _, nm := range nms {
			if nm.Similarity > most.Similarity {
				most = nm
			}
		}
		if string(most.Response) == "LUCID" {
			t.Fatalf("premise: the most similar key is the same subject's (%+v); the test shows nothing", nms)
		}
		if string(nms[0].Response) != "LUCID" {
			t.Fatalf("the same subject's answer does not rank first: %+v", nms)
		}
	}
	// a would-be hit is a near miss only for a request that skips reading the cache.
	hit := user("t", "Tell me what lucid means!")
	if l, _ := f.c.Get(ctx, hit); !l.Hit {
		t.Fatalf("premise: want a hit, got %+v", l)
	}
	if nms, _ := f.c.NearMisses(ctx, hit, 0.35, nil, 4); len(nms) > 0 && string(nms[0].Response) == "LUCID" {
		t.Fatalf("a hit offered as a near miss to a request that reads the cache: %+v", nms)
	}
	hit.NoCache = true
	nm, ok, err := f.c.NearMiss(ctx, hit, 0.35, nil)
	if err != nil || !ok || string(nm.Response) != "LUCID" || nm.Reason != cache.NearMissNoCache {
		t.Fatalf("no-cache request: %+v ok=%v err=%v", nm, ok, err)
	}
}

// TestNearMissesBoundedReads: a tenant with entries in band under 17
// namespaces (one system prompt each) costs at most maxNearMissFetches (24)
// store reads per NearMisses call, not 17 × 8 = 136 (hot tier off: the reads
// of entries the hot tier has evicted), and still yields a near miss.
func TestNearMissesBoundedReads(t *testing.T) {
	cfg := cache.DefaultConfig()
	cfg.HotBytes = -1 // every read goes to the store, as for entries the hot tier has evicted
	c, store, _ := newCounting(t, cfg, time.Now)
	ctx := context.Background()
	req := func(sys int, text string) *cache.Request {
		return &cache.Request{Tenant: "t", Model: "llama", System: fmt.Sprintf("You are helper number %d.", sys),
			Messages: []cache.Message{{Role: "user", Content: text}}}
	}
	for sys := 0; sys < 17; sys++ {
		for j := 0; j < 9; j++ {
			q := fmt.Sprintf("How do I reverse a list in Python, case %d of %d?", j, sys)
			if err := c.Put(ctx, req(sys, q), []byte(fmt.Sprintf("A%d.%d", sys, j)), 5); err != nil {
				t.Fatal(err)
			}
		}
	}
	store.gets.Store(0)
	q := req(0, "Python: reversing sequences, lists and strings, explained with examples for beginners")
	nms, err := c.NearMisses(ctx, q, 0.05, nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	if n := store.gets.Load(); n > 24 {
		t.Fatalf("NearMisses read the store %d times, want at most 24", n)
	} else {
		t.Logf("%d store reads, %d near misses", n, len(nms))
	}
	if len(nms) != 1 || !strings.HasPrefix(string(nms[0].Response), "A") {
		t.Fatalf("want one near miss, got %+v", nms)
	}
}
