package cache_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/specgate/specgate/cache"
)

// soleCounting is a counting SQLite store that keeps the SoleWriter
// capability visible through the wrapper.
type soleCounting struct{ countingStore }

func (s *soleCounting) SoleWriter() bool { return true }

// TestSoleWriterExactMiss: over a SoleWriter store, an exact lookup of an id
// the cache never stored reads no store (a semantic hit's exact-tier miss),
// stored and rebuilt entries are still found (after the hot tier drops
// them too), and WithoutRebuild keeps the store read (the eviction state
// then does not know older entries).
func TestSoleWriterExactMiss(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "c.db")
	sq, err := cache.OpenSQLite(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sq.Close()
	st := &soleCounting{countingStore{Store: sq}}
	cfg := cache.DefaultConfig()
	cfg.DisableSemantic = true
	cfg.HotBytes = -1 // every hit reads the store: the counts below are exact
	c, err := cache.New(cfg, st, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	stored := user("t", "How do I boil an egg?")
	if err := c.Put(ctx, stored, []byte("9 minutes"), 1); err != nil {
		t.Fatal(err)
	}
	if l, _ := c.Get(ctx, user("t", "How do I poach an egg?")); l.Hit {
		t.Fatal("unknown question hit")
	}
	if l, _ := c.Get(ctx, user("u", "How do I boil an egg?")); l.Hit {
		t.Fatal("other tenant hit")
	}
	if n := st.gets.Load(); n != 0 {
		t.Errorf("exact misses of unknown ids read the store %d times, want 0", n)
	}
	if l, _ := c.Get(ctx, stored); !l.Hit || string(l.Response) != "9 minutes" {
		t.Fatalf("stored entry: hit %v %q", l.Hit, l.Response)
	}
	if n := st.gets.Load(); n != 1 {
		t.Errorf("store reads after one known hit: %d, want 1", n)
	}
	c.Close()

	// A new cache over the same file rebuilds its eviction state and finds it.
	c2, err := cache.New(cfg, st, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if l, _ := c2.Get(ctx, stored); !l.Hit {
		t.Fatal("entry not found after rebuild")
	}
	// WithoutRebuild: the eviction state is empty, the store is asked.
	c3, err := cache.New(cfg, st, nil, nil, cache.WithoutRebuild())
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if l, _ := c3.Get(ctx, stored); !l.Hit {
		t.Fatal("WithoutRebuild: stored entry not found")
	}
	// A store without the capability is always asked.
	plain := &countingStore{Store: sq}
	c4, err := cache.New(cfg, plain, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c4.Close()
	c4.Get(ctx, user("t", "How do I poach an egg?"))
	if plain.gets.Load() != 1 {
		t.Errorf("store without SoleWriter: %d reads for an exact miss, want 1", plain.gets.Load())
	}
}
