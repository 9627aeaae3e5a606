package cache_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/specgate/specgate/cache"
)

type fixture struct {
	c     *cache.Cache
	store *cache.MemStore
	index *cache.HNSW
	reg   *prometheus.Registry
	now   *atomic.Int64 // fake clock, unix nanos
}

func newFixture(t *testing.T, cfg cache.Config) *fixture {
	t.Helper()
	f := &fixture{reg: prometheus.NewRegistry(), now: &atomic.Int64{}}
	f.now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	clock := func() time.Time { return time.Unix(0, f.now.Load()) }
	f.store = cache.NewMemStore(clock)
	emb, err := cache.NewLexical(256)
	if err != nil {
		t.Fatal(err)
	}
	f.index, _ = cache.NewHNSW(cache.HNSWConfig{Dim: 256, Seed: 1})
	f.c, err = cache.New(cfg, f.store, f.index, emb, cache.WithRegisterer(f.reg), cache.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.c.Close() })
	return f
}

func (f *fixture) advance(d time.Duration) { f.now.Add(int64(d)) }

// metric returns the value of a counter or gauge with the given labels (0 when absent).
func (f *fixture) metric(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := f.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for k, v := range labels {
				if !hasLabel(m, k, v) {
					continue next
				}
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return 0
}

func hasLabel(m *dto.Metric, k, v string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == k && l.GetValue() == v {
			return true
		}
	}
	return false
}

func user(tenant, text string) *cache.Request {
	return &cache.Request{Tenant: tenant, Model: "llama", Messages: []cache.Message{{Role: "user", Content: text}}}
}

func TestTiersAndHeaders(t *testing.T) {
	f := newFixture(t, cache.DefaultConfig())
	ctx := context.Background()
	q := "How do I reverse a list in Python?"
	l, err := f.c.Get(ctx, user("t", q))
	if err != nil || l.Hit || l.XCache() != "MISS" || l.Headers()[cache.HeaderCacheSimilarity] != "" {
		t.Fatalf("empty cache: %+v %v", l, err)
	}
	if err := f.c.Put(ctx, user("t", q), []byte("A1"), 5); err != nil {
		t.Fatal(err)
	}
	l, _ = f.c.Get(ctx, user("t", "  How do I reverse a   list in Python?\n"))
	if !l.Hit || l.Tier != cache.TierExact || string(l.Response) != "A1" || l.XCache() != "HIT-EXACT" || l.XCacheSimilarity() != "1.0000" {
		t.Fatalf("whitespace variant: %+v", l)
	}
	l, _ = f.c.Get(ctx, user("t", "How can I reverse a Python list?"))
	if !l.Hit || l.Tier != cache.TierSemantic || l.XCache() != "HIT-SEMANTIC" || l.Similarity < 0.55 || l.Similarity >= 1 {
		t.Fatalf("paraphrase: %+v", l)
	}
	// The guard stops a negated near-duplicate and says why.
	l, _ = f.c.Get(ctx, user("t", "How do I not reverse a list in Python?"))
	if l.Hit || l.Reason != cache.GuardNegation {
		t.Fatalf("negated query: %+v", l)
	}
	if got := f.metric(t, "specgate_cache_guard_rejections_total", map[string]string{"reason": "negation"}); got != 1 {
		t.Errorf("guard metric = %v, want 1", got)
	}
	if got := f.metric(t, "specgate_cache_lookups_total", map[string]string{"tier": "exact", "result": "hit", "namespace": "t/llama"}); got != 1 {
		t.Errorf("exact hits metric = %v, want 1", got)
	}
	if got := f.metric(t, "specgate_cache_lookups_total", map[string]string{"tier": "semantic", "result": "hit"}); got != 1 {
		t.Errorf("semantic hits metric = %v, want 1", got)
	}
	if got := f.metric(t, "specgate_cache_lookups_total", map[string]string{"result": "miss"}); got != 2 {
		t.Errorf("misses metric = %v, want 2", got)
	}
	if got := f.metric(t, "specgate_cache_lookup_seconds", map[string]string{"result": "hit-exact"}); got != 1 {
		t.Errorf("latency samples = %v, want 1", got)
	}
	if got := f.metric(t, "specgate_cache_entries", map[string]string{"namespace": "t/llama"}); got != 1 {
		t.Errorf("entries gauge = %v, want 1", got)
	}
	if got := f.metric(t, "specgate_cache_similarity", map[string]string{"outcome": "served"}); got != 1 {
		t.Errorf("similarity samples = %v, want 1", got)
	}
}

func TestNamespaceParts(t *testing.T) {
	f := newFixture(t, cache.DefaultConfig())
	ctx := context.Background()
	base := func() *cache.Request {
		r := user("t", "What is the capital of France?")
		r.System = "You are terse."
		r.Params = map[string]string{"max_tokens": "64"}
		return r
	}
	if err := f.c.Put(ctx, base(), []byte("Paris"), 1); err != nil {
		t.Fatal(err)
	}
	variants := map[string]func(r *cache.Request){
		"system prompt": func(r *cache.Request) { r.System = "You are verbose." },
		"params":        func(r *cache.Request) { r.Params["max_tokens"] = "65" },
		"extra param":   func(r *cache.Request) { r.Params["seed"] = "1" },
		"model":         func(r *cache.Request) { r.Model = "other" },
		"tenant":        func(r *cache.Request) { r.Tenant = "u" },
	}
	for name, mod := range variants {
		r := base()
		mod(r)
		if l, _ := f.c.Get(ctx, r); l.Hit {
			t.Errorf("%s changed but got a %s hit", name, l.Tier)
		}
	}
	r := base()
	r.Messages = append([]cache.Message{{Role: "user", Content: "hi"}, {Role: "assistant", Content: "hello"}}, r.Messages...)
	if l, _ := f.c.Get(ctx, r); !l.Hit || l.Tier != cache.TierExact {
		t.Errorf("key mode last-user: earlier turns should not matter: %+v", l)
	}
	if a, b := cache.Namespace(&cache.Request{Tenant: "a/b", Model: "c"}), cache.Namespace(&cache.Request{Tenant: "a", Model: "b/c"}); a == b {
		t.Errorf("tenant/model boundary is ambiguous: %s", a)
	}
}

func TestKeyModeConversation(t *testing.T) {
	cfg := cache.DefaultConfig()
	cfg.KeyMode = cache.KeyConversation
	f := newFixture(t, cfg)
	ctx := context.Background()
	conv := func(first string) *cache.Request {
		return &cache.Request{Tenant: "t", Model: "m", Messages: []cache.Message{
			{Role: "user", Content: first}, {Role: "assistant", Content: "ok"}, {Role: "user", Content: "And in Go?"}}}
	}
	if err := f.c.Put(ctx, conv("How do I sort a slice in Python?"), []byte("x"), 1); err != nil {
		t.Fatal(err)
	}
	if l, _ := f.c.Get(ctx, conv("How do I sort a slice in Python?")); !l.Hit {
		t.Fatal("same conversation missed")
	}
	if l, _ := f.c.Get(ctx, conv("How do I open a file in Rust?")); l.Hit {
		t.Fatalf("different conversation hit: %+v", l)
	}
}

func TestControls(t *testing.T) {
	f := newFixture(t, cache.DefaultConfig())
	ctx := context.Background()
	q := user("t", "What is the speed of light?")
	q.NoStore = true
	if err := f.c.Put(ctx, q, []byte("c"), 1); err != nil {
		t.Fatal(err)
	}
	if l, _ := f.c.Get(ctx, user("t", "What is the speed of light?")); l.Hit {
		t.Fatal("no-store request was stored")
	}
	if err := f.c.Put(ctx, user("t", "What is the speed of light?"), []byte("c"), 1); err != nil {
		t.Fatal(err)
	}
	q = user("t", "What is the speed of light?")
	q.NoCache = true
	if l, _ := f.c.Get(ctx, q); l.Hit || l.Reason != "no-cache" {
		t.Fatalf("no-cache request was served: %+v", l)
	}
	// Do with no-cache regenerates and (without no-store) refreshes the entry.
	l, resp, err := f.c.Do(ctx, q, func(context.Context) ([]byte, float64, error) { return []byte("fresh"), 1, nil })
	if err != nil || l.Hit || string(resp) != "fresh" {
		t.Fatalf("Do no-cache: %+v %q %v", l, resp, err)
	}
	if l, _ := f.c.Get(ctx, user("t", "What is the speed of light?")); string(l.Response) != "fresh" {
		t.Fatalf("no-cache response not stored: %q", l.Response)
	}
	if got := f.metric(t, "specgate_cache_lookups_total", map[string]string{"result": "bypass"}); got != 2 {
		t.Errorf("bypass metric = %v, want 2", got)
	}
}

func TestTemperature(t *testing.T) {
	cfg := cache.DefaultConfig()
	cfg.Tenants = map[string]cache.NamespaceConfig{"warm": {AllowTemperature: true}}
	f := newFixture(t, cfg)
	ctx := context.Background()
	for _, tenant := range []string{"cold", "warm"} {
		r := user(tenant, "Write a haiku about the sea.")
		r.Temperature = 0.7
		if err := f.c.Put(ctx, r, []byte("waves"), 1); err != nil {
			t.Fatal(err)
		}
		l, _ := f.c.Get(ctx, r)
		if want := tenant == "warm"; l.Hit != want {
			t.Errorf("tenant %s, temperature 0.7: hit=%v, want %v (%s)", tenant, l.Hit, want, l.Reason)
		}
		r.Temperature = 0.2
		if l, _ := f.c.Get(ctx, r); l.Hit {
			t.Errorf("tenant %s: entry stored at temperature 0.7 served at 0.2", tenant)
		}
		r.Temperature = 0
		if l, _ := f.c.Get(ctx, r); l.Hit {
			t.Errorf("tenant %s: entry stored at temperature 0.7 served at 0", tenant)
		}
	}
}

// TestSingleFlight: N concurrent identical misses cause one generation, and
// every caller gets the response.
func TestSingleFlight(t *testing.T) {
	f := newFixture(t, cache.DefaultConfig())
	ctx := context.Background()
	const n = 32
	var calls atomic.Int32
	release := make(chan struct{})
	gen := func(context.Context) ([]byte, float64, error) {
		calls.Add(1)
		<-release
		return []byte("generated"), 10, nil
	}
	var wg, started sync.WaitGroup
	resps := make([]string, n)
	shared := atomic.Int32{}
	for i := range n {
		wg.Add(1)
		started.Add(1)
		go func() {
			defer wg.Done()
			started.Done()
			l, resp, err := f.c.Do(ctx, user("t", "Explain the TCP handshake."), gen)
			if err != nil {
				t.Error(err)
			}
			if l.Shared {
				shared.Add(1)
			}
			resps[i] = string(resp)
		}()
	}
	started.Wait()
	// Late arrivals are fine: after the leader stores, they hit the cache.
	time.Sleep(20 * time.Millisecond)
	close(release)
	wg.Wait()
	if c := calls.Load(); c != 1 {
		t.Fatalf("generator ran %d times, want 1", c)
	}
	for i, r := range resps {
		if r != "generated" {
			t.Fatalf("caller %d got %q", i, r)
		}
	}
	if l, _ := f.c.Get(ctx, user("t", "Explain the TCP handshake.")); !l.Hit {
		t.Fatal("generated response was not stored")
	}
	t.Logf("%d of %d callers joined the in-flight generation", shared.Load(), n)
}

func TestDoErrorNotStored(t *testing.T) {
	f := newFixture(t, cache.DefaultConfig())
	ctx := context.Background()
	boom := errors.New("backend down")
	_, _, err := f.c.Do(ctx, user("t", "q?"), func(context.Context) ([]byte, float64, error) { return nil, 0, boom })
	if !errors.Is(err, boom) {
		t.Fatalf("Do error = %v, want %v", err, boom)
	}
	if l, _ := f.c.Get(ctx, user("t", "q?")); l.Hit {
		t.Fatal("failed generation was stored")
	}
}

func TestEvictionPerNamespace(t *testing.T) {
	cfg := cache.DefaultConfig()
	cfg.Default.MaxEntries = 3
	cfg.Tenants = map[string]cache.NamespaceConfig{"big": {MaxEntries: 100}}
	f := newFixture(t, cfg)
	ctx := context.Background()
	for _, tenant := range []string{"small", "big"} {
		for i := range 5 {
			if err := f.c.Put(ctx, user(tenant, fmt.Sprintf("question number %d about llamas", i)), []byte{byte(i)}, 1); err != nil {
				t.Fatal(err)
			}
		}
	}
	// LRU: the two oldest of "small" are gone from policy, store and index.
	for i := range 5 {
		l, _ := f.c.Get(ctx, user("small", fmt.Sprintf("question number %d about llamas", i)))
		if want := i >= 2; l.Hit != want || (l.Hit && l.Tier != cache.TierExact) {
			t.Errorf("small %d: hit=%v tier=%s, want hit=%v", i, l.Hit, l.Tier, want)
		}
		if l, _ := f.c.Get(ctx, user("big", fmt.Sprintf("question number %d about llamas", i))); !l.Hit {
			t.Errorf("big %d evicted by another tenant's capacity", i)
		}
	}
	n := 0
	_ = f.store.Scan(ctx, "", func(*cache.Entry) error { n++; return nil })
	if n != 8 || f.index.Len("") != 8 || f.c.Len() != 8 {
		t.Fatalf("store %d, index %d, policy %d entries; want 8 each", n, f.index.Len(""), f.c.Len())
	}
	if got := f.metric(t, "specgate_cache_evictions_total", map[string]string{"reason": "capacity"}); got != 2 {
		t.Errorf("capacity evictions = %v, want 2", got)
	}
	if got := f.metric(t, "specgate_cache_entries", map[string]string{"namespace": "small/llama"}); got != 3 {
		t.Errorf("entries gauge = %v, want 3", got)
	}
}

func TestEvictionBytes(t *testing.T) {
	cfg := cache.DefaultConfig()
	cfg.Default.MaxBytes = 6000 // each entry: ~1 KiB vector + 2000-byte response
	f := newFixture(t, cfg)
	ctx := context.Background()
	for i := range 4 {
		if err := f.c.Put(ctx, user("t", fmt.Sprintf("bytes question %d", i)), make([]byte, 2000), 1); err != nil {
			t.Fatal(err)
		}
	}
	st := f.c.Stats()
	if len(st) != 1 || st[0].Bytes > 6000 || st[0].Entries != 1 {
		t.Fatalf("stats %+v; want one entry within 6000 bytes", st)
	}
	if got := f.metric(t, "specgate_cache_bytes", map[string]string{"namespace": "t/llama"}); got != float64(st[0].Bytes) {
		t.Errorf("bytes gauge = %v, want %d", got, st[0].Bytes)
	}
}

func TestTTL(t *testing.T) {
	cfg := cache.DefaultConfig()
	cfg.Default.TTL = time.Minute
	f := newFixture(t, cfg)
	ctx := context.Background()
	if err := f.c.Put(ctx, user("t", "What is the tallest building?"), []byte("x"), 1); err != nil {
		t.Fatal(err)
	}
	f.advance(59 * time.Second)
	if l, _ := f.c.Get(ctx, user("t", "What is the tallest building?")); !l.Hit {
		t.Fatal("entry expired early")
	}
	f.advance(2 * time.Second)
	if l, _ := f.c.Get(ctx, user("t", "What is the tallest building?")); l.Hit {
		t.Fatal("expired entry served")
	}
	// The semantic probe found the expired vector and dropped it.
	if f.index.Len("") != 0 || f.c.Len() != 0 {
		t.Fatalf("after expiry: index %d, policy %d", f.index.Len(""), f.c.Len())
	}
	// Entries nobody asks for leave with the sweep.
	for i := range 3 {
		if err := f.c.Put(ctx, user("t", fmt.Sprintf("sweep me %d", i)), []byte("x"), 1); err != nil {
			t.Fatal(err)
		}
	}
	f.advance(time.Minute)
	if n := f.c.Sweep(ctx); n != 3 {
		t.Fatalf("Sweep removed %d, want 3", n)
	}
	n := 0
	_ = f.store.Scan(ctx, "", func(*cache.Entry) error { n++; return nil })
	if f.index.Len("") != 0 || f.c.Len() != 0 || n != 0 {
		t.Fatalf("after sweep: index %d, policy %d, store %d", f.index.Len(""), f.c.Len(), n)
	}
	if got := f.metric(t, "specgate_cache_evictions_total", map[string]string{"reason": "ttl"}); got != 4 {
		t.Errorf("ttl evictions = %v, want 4", got)
	}
}

// TestStaleIndexEntry: a vector whose entry vanished from the store (another
// replica evicted it) is dropped on first sight, not served. The store path
// only: an entry in this replica's hot tier is served until it leaves it
// (TestHotTierStaleness).
func TestStaleIndexEntry(t *testing.T) {
	cfg := cache.DefaultConfig()
	cfg.HotBytes = -1
	f := newFixture(t, cfg)
	ctx := context.Background()
	r := user("t", "How do I boil an egg?")
	if err := f.c.Put(ctx, r, []byte("x"), 1); err != nil {
		t.Fatal(err)
	}
	l, _ := f.c.Get(ctx, r)
	if err := f.store.Delete(ctx, l.Namespace, l.ID); err != nil {
		t.Fatal(err)
	}
	if l, _ := f.c.Get(ctx, user("t", "how do i boil an egg")); l.Hit {
		t.Fatal("stale entry served")
	}
	if f.index.Len("") != 0 {
		t.Fatal("stale vector kept")
	}
	if got := f.metric(t, "specgate_cache_evictions_total", map[string]string{"reason": "stale"}); got != 1 {
		t.Errorf("stale evictions = %v, want 1", got)
	}
}

// TestRebuildEnforcesCapacity: New over a store with more entries than the
// configured capacity evicts the oldest ones at start-up.
func TestRebuildEnforcesCapacity(t *testing.T) {
	ctx := context.Background()
	store := cache.NewMemStore(nil)
	emb, _ := cache.NewLexical(64)
	base := time.Now()
	for i := range 10 {
		e := &cache.Entry{ID: fmt.Sprint(i), Namespace: "t/m/x", Key: fmt.Sprintf("q %d", i), Response: []byte("r"), CreatedAt: base.Add(time.Duration(i) * time.Second)}
		_ = store.Put(ctx, e)
	}
	cfg := cache.DefaultConfig()
	cfg.Default.MaxEntries = 4
	ix, _ := cache.NewHNSW(cache.HNSWConfig{Dim: 64})
	c, err := cache.New(cfg, store, ix, emb)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Len() != 4 || ix.Len("") != 4 {
		t.Fatalf("after rebuild: policy %d, index %d; want 4", c.Len(), ix.Len(""))
	}
	for i := range 10 {
		_, err := store.Get(ctx, "t/m/x", fmt.Sprint(i))
		if want := i >= 6; (err == nil) != want {
			t.Errorf("entry %d present=%v, want %v", i, err == nil, want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	bad := []cache.Config{
		{Default: cache.NamespaceConfig{Threshold: -1}},
		{Default: cache.NamespaceConfig{Policy: "random"}},
		{KeyMode: "first"},
		{TopK: 1000},
		{Tenants: map[string]cache.NamespaceConfig{"x": {MaxEntries: -1}}},
	}
	for i, cfg := range bad {
		if err := cfg.Validate(); !errors.Is(err, cache.ErrConfig) {
			t.Errorf("config %d: got %v, want ErrConfig", i, err)
		}
	}
	good := cache.DefaultConfig()
	good.Tenants = map[string]cache.NamespaceConfig{"x": {Policy: "s3fifo", Threshold: 0.9}}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	if n := good.For("x"); n.Policy != "s3fifo" || n.Threshold != 0.9 {
		t.Fatalf("override: %+v", n)
	}
	if n := good.For("y"); n.Threshold != cache.DefaultThreshold {
		t.Fatalf("default: %+v", n)
	}
}
