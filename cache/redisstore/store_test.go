package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/specgate/specgate/cache"
)

func newTestStore(t *testing.T) (*Store, string) {
	t.Helper()
	rdb, prefix := testClient(t)
	s, err := New(rdb, Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, prefix
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
	s, _ := newTestStore(t)
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
	s, _ := newTestStore(t)
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
	s, prefix := newTestStore(t)
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
	// Keys carry the namespace hash, never the raw namespace.
	for _, k := range prefixKeys(t, s.rdb.(interface {
		Scan(context.Context, uint64, string, int64) *redisScanCmd
	}), prefix) {
		_ = k
	}
}
