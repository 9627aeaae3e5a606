package redisstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/specgate/specgate/cache"
)

func newTestStore(t *testing.T) (*Store, *redis.Client, string) {
	t.Helper()
	rdb, prefix := testClient(t)
	s, err := New(rdb, Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, rdb, prefix
}

func sampleEntry(ns, id string) *cache.Entry {
	return &cache.Entry{
		ID: id, Namespace: ns, Key: "what is " + id + "?",
		Response:  []byte(`{"choices":[{"message":{"content":"answer ` + id + `"}}]}`),
		Vector:    []float32{0.6, -0.8, 0, 1e-7},
		Cost:      12.5,
		CreatedAt: time.Unix(1700000000, 123456789),
		Hits:      3,
	}
}

func TestStorePutGetRoundTrip(t *testing.T) {
	s, _, _ := newTestStore(t)
	ctx := context.Background()
	e := sampleEntry("tenant-a|m|sys|t0", "id-1")
	e.ExpiresAt = time.Now().Add(time.Hour).Truncate(time.Millisecond)
	if err := s.Put(ctx, e); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, e.Namespace, e.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != e.ID || got.Namespace != e.Namespace || got.Key != e.Key || string(got.Response) != string(e.Response) ||
		!slices.Equal(got.Vector, e.Vector) || got.Cost != e.Cost || !got.CreatedAt.Equal(e.CreatedAt) ||
		!got.ExpiresAt.Equal(e.ExpiresAt) || got.Hits != e.Hits {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, e)
	}
	// The caller owns the returned entry: mutating it must not change the store.
	got.Response[0] = 'X'
	again, _ := s.Get(ctx, e.Namespace, e.ID)
	if again.Response[0] != '{' {
		t.Fatal("Get returned shared memory")
	}
	// Replace.
	e2 := sampleEntry(e.Namespace, e.ID)
	e2.Key, e2.Vector = "replaced", nil
	if err := s.Put(ctx, e2); err != nil {
		t.Fatal(err)
	}
	got, _ = s.Get(ctx, e.Namespace, e.ID)
	if got.Key != "replaced" || got.Vector != nil || !got.ExpiresAt.IsZero() {
		t.Fatalf("after replace: %+v", got)
	}
}

func TestStoreNotFoundAndDelete(t *testing.T) {
	s, _, _ := newTestStore(t)
	ctx := context.Background()
	if _, err := s.Get(ctx, "ns", "absent"); !errors.Is(err, cache.ErrNotFound) {
		t.Fatalf("Get absent: %v", err)
	}
	if err := s.Touch(ctx, "ns", "absent"); !errors.Is(err, cache.ErrNotFound) {
		t.Fatalf("Touch absent: %v", err)
	}
	if err := s.Delete(ctx, "ns", "absent"); err != nil {
		t.Fatalf("Delete absent: %v", err)
	}
	e := sampleEntry("ns", "x")
	if err := s.Put(ctx, e); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "ns", "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "ns", "x"); !errors.Is(err, cache.ErrNotFound) {
		t.Fatalf("Get after Delete: %v", err)
	}
	if n, _ := s.Len(ctx, "ns"); n != 0 {
		t.Fatalf("Len after Delete = %d", n)
	}
	if err := s.Put(ctx, &cache.Entry{Namespace: "ns"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Put without id: %v", err)
	}
}

func TestStoreTenantIsolation(t *testing.T) {
	s, rdb, prefix := newTestStore(t)
	ctx := context.Background()
	a, b := "tenant-a|llama|sys1|t0", "tenant-b|llama|sys1|t0"
	ea := sampleEntry(a, "same-id")
	if err := s.Put(ctx, ea); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, b, "same-id"); !errors.Is(err, cache.ErrNotFound) {
		t.Fatalf("tenant B read tenant A's entry: %v", err)
	}
	if err := s.Touch(ctx, b, "same-id"); !errors.Is(err, cache.ErrNotFound) {
		t.Fatalf("tenant B touched tenant A's entry: %v", err)
	}
	if err := s.Delete(ctx, b, "same-id"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, a, "same-id"); err != nil {
		t.Fatalf("tenant B's Delete removed tenant A's entry: %v", err)
	}
	eb := sampleEntry(b, "same-id")
	eb.Response = []byte("B")
	if err := s.Put(ctx, eb); err != nil {
		t.Fatal(err)
	}
	got, _ := s.Get(ctx, a, "same-id")
	if string(got.Response) == "B" {
		t.Fatal("tenant B's Put overwrote tenant A's entry")
	}
	var seen []string
	if err := s.Scan(ctx, b, func(e *cache.Entry) error { seen = append(seen, e.Namespace+"/"+string(e.Response)); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 1 || seen[0] != b+"/B" {
		t.Fatalf("Scan(B) = %v", seen)
	}
	// Keys carry the prefix and the namespace hash, never the raw namespace.
	keys := prefixKeys(t, rdb, prefix)
	if len(keys) == 0 {
		t.Fatal("no keys under the test prefix")
	}
	for _, k := range keys {
		if strings.Contains(k, "tenant-") {
			t.Errorf("key %q contains the raw namespace", k)
		}
		if !strings.HasPrefix(k, prefix+":{"+nsHash(a)+"}:") && !strings.HasPrefix(k, prefix+":{"+nsHash(b)+"}:") {
			t.Errorf("key %q lacks prefix and namespace hash", k)
		}
	}
}

func TestStoreTouchAndLRU(t *testing.T) {
	s, _, _ := newTestStore(t)
	ctx := context.Background()
	clock := time.Unix(1800000000, 0)
	s.opt.Now = func() time.Time { return clock }
	for i := range 4 {
		clock = clock.Add(time.Second)
		if err := s.Put(ctx, sampleEntry("ns", fmt.Sprint("e", i))); err != nil {
			t.Fatal(err)
		}
	}
	clock = clock.Add(time.Second)
	if err := s.Touch(ctx, "ns", "e0"); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(time.Second)
	if err := s.Touch(ctx, "ns", "e0"); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, "ns", "e0")
	if err != nil {
		t.Fatal(err)
	}
	if got.Hits != 3+2 {
		t.Fatalf("Hits after 2 touches = %d, want 5", got.Hits)
	}
	lr, err := s.LeastRecent(ctx, "ns", 3)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"e1", "e2", "e3"}; !slices.Equal(lr, want) {
		t.Fatalf("LeastRecent = %v, want %v", lr, want)
	}
	lr, _ = s.LeastRecent(ctx, "ns", 10)
	if want := []string{"e1", "e2", "e3", "e0"}; !slices.Equal(lr, want) {
		t.Fatalf("LeastRecent(10) = %v, want %v", lr, want)
	}
}

func TestStoreScan(t *testing.T) {
	s, _, _ := newTestStore(t)
	ctx := context.Background()
	s.opt.ScanCount = 7 // force many SCAN rounds
	want := map[string][]string{}
	for n := range 3 {
		ns := fmt.Sprintf("tenant-%d", n)
		for i := range 40 + n {
			id := fmt.Sprintf("id-%d", i)
			if err := s.Put(ctx, sampleEntry(ns, id)); err != nil {
				t.Fatal(err)
			}
			want[ns] = append(want[ns], id)
		}
	}
	collect := func(ns string) map[string][]string {
		got := map[string][]string{}
		if err := s.Scan(ctx, ns, func(e *cache.Entry) error {
			got[e.Namespace] = append(got[e.Namespace], e.ID)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		for k := range got {
			slices.Sort(got[k])
		}
		return got
	}
	for k := range want {
		slices.Sort(want[k])
	}
	got := collect("tenant-1")
	if len(got) != 1 || !slices.Equal(got["tenant-1"], want["tenant-1"]) {
		t.Fatalf("Scan(tenant-1) = %v", got)
	}
	got = collect("")
	for ns, ids := range want {
		if !slices.Equal(got[ns], ids) {
			t.Fatalf("Scan(all)[%s] = %v, want %v", ns, got[ns], ids)
		}
	}
	stop := errors.New("stop")
	n := 0
	err := s.Scan(ctx, "", func(*cache.Entry) error { n++; return stop })
	if !errors.Is(err, stop) || n != 1 {
		t.Fatalf("Scan with failing fn: err=%v calls=%d", err, n)
	}
}

// TestStoreTTL uses real expiry in Redis with short TTLs.
func TestStoreTTL(t *testing.T) {
	if testing.Short() {
		t.Skip("sleeps ~1s")
	}
	s, rdb, _ := newTestStore(t)
	ctx := context.Background()
	short := sampleEntry("ns", "short")
	short.ExpiresAt = time.Now().Add(400 * time.Millisecond)
	long := sampleEntry("ns", "long")
	long.ExpiresAt = time.Now().Add(time.Hour)
	never := sampleEntry("ns", "never")
	for _, e := range []*cache.Entry{short, long, never} {
		if err := s.Put(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	pttl := rdb.PTTL(ctx, s.ks.entry("ns", "short")).Val()
	if pttl <= 0 || pttl > 400*time.Millisecond {
		t.Fatalf("PTTL of short entry = %v, want native expiry in (0,400ms]", pttl)
	}
	if d := rdb.PTTL(ctx, s.ks.entry("ns", "never")).Val(); d != -1 {
		t.Fatalf("PTTL of never-expiring entry = %v, want -1 (no TTL)", d)
	}
	if _, err := s.Get(ctx, "ns", "short"); err != nil {
		t.Fatalf("short entry before expiry: %v", err)
	}
	time.Sleep(600 * time.Millisecond)
	if _, err := s.Get(ctx, "ns", "short"); !errors.Is(err, cache.ErrNotFound) {
		t.Fatalf("short entry after expiry: %v", err)
	}
	if n := rdb.Exists(ctx, s.ks.entry("ns", "short")).Val(); n != 0 {
		t.Fatal("Redis still holds the expired key")
	}
	for _, id := range []string{"long", "never"} {
		if _, err := s.Get(ctx, "ns", id); err != nil {
			t.Fatalf("%s entry: %v", id, err)
		}
	}
	var ids []string
	_ = s.Scan(ctx, "ns", func(e *cache.Entry) error { ids = append(ids, e.ID); return nil })
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"long", "never"}) {
		t.Fatalf("Scan after expiry = %v", ids)
	}
	lr, _ := s.LeastRecent(ctx, "ns", 10)
	slices.Sort(lr)
	if !slices.Equal(lr, []string{"long", "never"}) {
		t.Fatalf("LeastRecent after expiry = %v (expired id not pruned)", lr)
	}
	// An entry already expired is not stored.
	past := sampleEntry("ns", "past")
	past.ExpiresAt = time.Now().Add(-time.Second)
	if err := s.Put(ctx, past); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "ns", "past"); !errors.Is(err, cache.ErrNotFound) {
		t.Fatalf("expired Put: %v", err)
	}
}

// TestStoreLRUSetExpiresWithEntries checks that the LRU bookkeeping of a
// namespace whose entries all expire does not outlive them.
func TestStoreLRUSetExpiresWithEntries(t *testing.T) {
	s, rdb, _ := newTestStore(t)
	ctx := context.Background()
	e := sampleEntry("ns", "a")
	e.ExpiresAt = time.Now().Add(time.Minute)
	if err := s.Put(ctx, e); err != nil {
		t.Fatal(err)
	}
	if d := rdb.PTTL(ctx, s.ks.lru("ns")).Val(); d <= 0 || d > time.Minute {
		t.Fatalf("LRU set PTTL = %v, want (0, 1m]", d)
	}
	e2 := sampleEntry("ns", "b") // never expires: the set must persist
	if err := s.Put(ctx, e2); err != nil {
		t.Fatal(err)
	}
	if d := rdb.PTTL(ctx, s.ks.lru("ns")).Val(); d != -1 {
		t.Fatalf("LRU set PTTL with a non-expiring member = %v, want -1", d)
	}
}

func TestStoreLimitsAndCorruption(t *testing.T) {
	s, rdb, _ := newTestStore(t)
	ctx := context.Background()
	s.opt.MaxEntryBytes = 100
	big := sampleEntry("ns", "big")
	big.Response = make([]byte, 200)
	if err := s.Put(ctx, big); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized Put: %v", err)
	}
	rdb.HSet(ctx, s.ks.entry("ns", "bad"), "ns", "ns", "id", "bad", "vec", "abc")
	if _, err := s.Get(ctx, "ns", "bad"); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Get of a 3-byte vector: %v", err)
	}
	rdb.HSet(ctx, s.ks.entry("ns", "bad2"), "ns", "ns", "id", "bad2", "hits", "many")
	if _, err := s.Get(ctx, "ns", "bad2"); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Get with non-numeric hits: %v", err)
	}
	if _, err := New(rdb, Options{Prefix: "a{b"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("prefix with brace: %v", err)
	}
}

func TestStoreClosed(t *testing.T) {
	s, _, _ := newTestStore(t)
	ctx := context.Background()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := s.Put(ctx, sampleEntry("ns", "x")); !errors.Is(err, cache.ErrClosed) {
		t.Fatalf("Put after Close: %v", err)
	}
	if _, err := s.Get(ctx, "ns", "x"); !errors.Is(err, cache.ErrClosed) {
		t.Fatalf("Get after Close: %v", err)
	}
}

func TestGlobEscape(t *testing.T) {
	for in, want := range map[string]string{"plain": "plain", "a*b": `a\*b`, "[x]?": `\[x\]\?`, `a\b`: `a\\b`} {
		if got := globEscape(in); got != want {
			t.Errorf("globEscape(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestStoreReopen: entries written through one Store (one "process") are
// read, scanned and touched through a second one dialed afresh, as after a
// gateway restart or by another replica.
func TestStoreReopen(t *testing.T) {
	_, _, prefix := newTestStore(t)
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	ctx := context.Background()
	s1, err := Dial(ctx, "redis://"+addr+"/0", Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := s1.Put(ctx, sampleEntry("ns", fmt.Sprint("r", i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s1.Client().Ping(ctx).Err(); err == nil {
		t.Fatal("Close of a dialed store left its client open")
	}
	s2, err := Dial(ctx, addr, Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	var ids []string
	if err := s2.Scan(ctx, "ns", func(e *cache.Entry) error { ids = append(ids, e.ID); return nil }); err != nil {
		t.Fatal(err)
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"r0", "r1", "r2"}) {
		t.Fatalf("after reopen Scan = %v", ids)
	}
	if err := s2.Touch(ctx, "ns", "r1"); err != nil {
		t.Fatal(err)
	}
	if _, err := Dial(ctx, "127.0.0.1:1", Options{}); err == nil {
		t.Fatal("Dial of a closed port succeeded")
	}
}

// BenchmarkStoreGet is one Get of a 1 KiB entry with a 384-float vector.
func BenchmarkStoreGet(b *testing.B) {
	rdb, prefix := testClient(b)
	s, err := New(rdb, Options{Prefix: prefix})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	e := sampleEntry("ns", "bench")
	e.Response = make([]byte, 1024)
	e.Vector = make([]float32, 384)
	if err := s.Put(ctx, e); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := s.Get(ctx, "ns", "bench"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStorePut is one Put (Lua script: hash, expiry, LRU set).
func BenchmarkStorePut(b *testing.B) {
	rdb, prefix := testClient(b)
	s, err := New(rdb, Options{Prefix: prefix})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	e := sampleEntry("ns", "bench")
	e.Response = make([]byte, 1024)
	e.Vector = make([]float32, 384)
	e.ExpiresAt = time.Now().Add(time.Hour)
	b.ResetTimer()
	for b.Loop() {
		if err := s.Put(ctx, e); err != nil {
			b.Fatal(err)
		}
	}
}
