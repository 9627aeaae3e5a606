package cache_test

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/specgate/specgate/cache"
)

// countingStore counts Get calls on the wrapped store.
type countingStore struct {
	cache.Store
	gets atomic.Int64
}

func (s *countingStore) Get(ctx context.Context, ns, id string) (*cache.Entry, error) {
	s.gets.Add(1)
	return s.Store.Get(ctx, ns, id)
}

func newCounting(t *testing.T, cfg cache.Config, clock func() time.Time) (*cache.Cache, *countingStore, *cache.HNSW) {
	t.Helper()
	st := &countingStore{Store: cache.NewMemStore(clock)}
	emb, err := cache.NewLexical(256)
	if err != nil {
		t.Fatal(err)
	}
	ix, _ := cache.NewHNSW(cache.HNSWConfig{Dim: 256, Seed: 1})
	c, err := cache.New(cfg, st, ix, emb, cache.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, st, ix
}

// TestHotTierServesWithoutStore: after a Put (write-through) or a first store
// read (promotion), exact hits and semantic candidates come from memory, the
// response is the stored bytes, and the renderer's view rides along.
func TestHotTierServesWithoutStore(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	c, st, _ := newCounting(t, cache.DefaultConfig(), clock)
	var renders atomic.Int64
	c.SetRenderer(func(resp []byte) (any, int64) {
		renders.Add(1)
		return "view:" + string(resp), int64(len(resp))
	})
	ctx := context.Background()
	q := "How do I boil an egg?"
	if err := c.Put(ctx, user("t", q), []byte("boil it 9 minutes"), 1); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		l, err := c.Get(ctx, user("t", q))
		if err != nil || !l.Hit || l.Tier != cache.TierExact || string(l.Response) != "boil it 9 minutes" || l.View != "view:boil it 9 minutes" {
			t.Fatalf("exact: %+v, %v", l, err)
		}
	}
	l, err := c.Get(ctx, user("t", "how do i boil an egg"))
	if err != nil || !l.Hit || l.Tier != cache.TierSemantic || l.View != "view:boil it 9 minutes" {
		t.Fatalf("semantic: %+v, %v", l, err)
	}
	// The semantic lookup read the store once: its own exact-tier miss.
	if g := st.gets.Load(); g != 1 {
		t.Errorf("store reads = %d, want 1 (the paraphrase's exact miss)", g)
	}
	if r := renders.Load(); r != 1 {
		t.Errorf("renders = %d, want 1 (once, on entry)", r)
	}
	// Another tenant never sees the hot entry.
	if l, _ := c.Get(ctx, user("u", q)); l.Hit {
		t.Fatal("hot entry served to another tenant")
	}
	// A fresh renderer drops the hot entries; the next hit promotes from the store.
	c.SetRenderer(nil)
	if n, _ := c.HotStats(); n != 0 {
		t.Fatalf("hot entries after SetRenderer = %d", n)
	}
	g0 := st.gets.Load()
	for range 2 {
		if l, _ := c.Get(ctx, user("t", q)); !l.Hit || l.View != nil {
			t.Fatalf("after reset: %+v", l)
		}
	}
	if g := st.gets.Load() - g0; g != 1 {
		t.Errorf("store reads after reset = %d, want 1 (promotion)", g)
	}
}

// TestHotTierBoundAndEviction: the tier holds at most HotBytes; entries the
// cache evicts leave it; expired hot entries are not served.
func TestHotTierBoundAndEviction(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	cfg := cache.DefaultConfig()
	cfg.HotBytes = 16 << 10
	cfg.HotPolicy = "lru"
	cfg.Default.MaxEntries = 50
	cfg.Default.TTL = time.Hour
	c, st, _ := newCounting(t, cfg, clock)
	ctx := context.Background()
	resp := bytes.Repeat([]byte("a"), 1000)
	for i := range 100 {
		if err := c.Put(ctx, user("t", fmt.Sprintf("question number %d about boats", i)), resp, 1); err != nil {
			t.Fatal(err)
		}
		if n, b := c.HotStats(); b > cfg.HotBytes || n > 50 {
			t.Fatalf("after %d puts: %d hot entries, %d bytes > %d", i+1, n, b, cfg.HotBytes)
		}
	}
	n, _ := c.HotStats()
	if n < 5 {
		t.Fatalf("only %d hot entries", n)
	}
	// The newest entries are hot (LRU): hits read no store.
	g0 := st.gets.Load()
	for i := 99; i > 99-n/2; i-- {
		if l, _ := c.Get(ctx, user("t", fmt.Sprintf("question number %d about boats", i))); !l.Hit {
			t.Fatalf("entry %d missed", i)
		}
	}
	if g := st.gets.Load() - g0; g != 0 {
		t.Errorf("%d store reads for hot entries", g)
	}
	// Entries evicted by the namespace policy (MaxEntries 50) are gone from memory too.
	if l, _ := c.Get(ctx, user("t", "question number 3 about boats")); l.Hit && l.Tier == cache.TierExact {
		t.Fatal("evicted entry served")
	}
	// Expired: not served, even from memory.
	now = now.Add(2 * time.Hour)
	if l, _ := c.Get(ctx, user("t", "question number 99 about boats")); l.Hit {
		t.Fatal("expired hot entry served")
	}
}

// TestHotTierStaleness documents the one difference to the store path: an
// entry deleted from a shared store behind this replica's back is still
// served while it is hot here (it is a valid, unexpired answer).
func TestHotTierStaleness(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c, st, _ := newCounting(t, cache.DefaultConfig(), func() time.Time { return now })
	ctx := context.Background()
	r := user("t", "How do I boil an egg?")
	if err := c.Put(ctx, r, []byte("x"), 1); err != nil {
		t.Fatal(err)
	}
	l, _ := c.Get(ctx, r)
	if err := st.Delete(ctx, l.Namespace, l.ID); err != nil {
		t.Fatal(err)
	}
	if l, _ := c.Get(ctx, r); !l.Hit {
		t.Fatal("hot entry not served after a foreign delete")
	}
}

// TestSQLiteAddHits: hits are counted in memory and written in batches; Close
// flushes them.
func TestSQLiteAddHits(t *testing.T) {
	st, err := cache.OpenSQLite(filepath.Join(t.TempDir(), "c.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	c, err := cache.New(cache.DefaultConfig(), st, nil, nil, cache.WithoutRebuild())
	if err == nil {
		t.Fatal("semantic cache without an index accepted")
	}
	cfg := cache.DefaultConfig()
	cfg.DisableSemantic = true
	c, err = cache.New(cfg, st, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r := user("t", "How do I boil an egg?")
	if err := c.Put(ctx, r, []byte("x"), 1); err != nil {
		t.Fatal(err)
	}
	for range 7 {
		if l, _ := c.Get(ctx, r); !l.Hit {
			t.Fatal("miss")
		}
	}
	l, _ := c.Get(ctx, r)
	c.Close()
	e, err := st.Get(ctx, l.Namespace, l.ID)
	if err != nil {
		t.Fatal(err)
	}
	if e.Hits != 8 {
		t.Errorf("hits = %d, want 8", e.Hits)
	}
	if err := st.AddHits(ctx, []cache.Hit{{l.Namespace, l.ID, 5}, {l.Namespace, "absent", 2}}); err != nil {
		t.Fatal(err)
	}
	if e, _ := st.Get(ctx, l.Namespace, l.ID); e.Hits != 13 {
		t.Errorf("hits after AddHits(5) = %d, want 13", e.Hits)
	}
}
