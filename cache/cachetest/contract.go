// Package cachetest holds reusable contract tests for implementations of
// cache.Store and cache.VectorIndex, and a tenant-isolation test of the whole
// pipeline over any store and index. Each store/index package runs them from
// its own tests:
//
//	func TestContract(t *testing.T) {
//		cachetest.StoreContract(t, func(t *testing.T) cache.Store { return newTestStore(t) })
//	}
package cachetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/specgate/specgate/cache"

	"github.com/specgate/specgate/vecmath"
)

// NewStore returns a fresh, empty store for one subtest. The contract closes
// it at the end of the subtest (implementations should tolerate a second
// Close from the caller's own cleanup).
type NewStore func(t *testing.T) cache.Store

// NewIndex returns a fresh, empty index for vectors of dim floats.
type NewIndex func(t *testing.T, dim int) cache.VectorIndex

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func entry(ns, id string) *cache.Entry {
	now := time.Now().Truncate(time.Millisecond)
	return &cache.Entry{
		ID: id, Namespace: ns, Key: "key of " + id,
		Response:  []byte("{\"answer\":\"" + id + "\"}\x00\xff binary"),
		Vector:    []float32{0.6, -0.8, 0, 1e-7},
		Cost:      12.5,
		CreatedAt: now,
	}
}

func sameTime(a, b time.Time) bool {
	return a.Sub(b).Abs() < 2*time.Millisecond
}

func checkEqual(t *testing.T, got, want *cache.Entry) {
	t.Helper()
	if got.ID != want.ID || got.Namespace != want.Namespace || got.Key != want.Key {
		t.Errorf("ids: got (%q, %q, %q), want (%q, %q, %q)", got.ID, got.Namespace, got.Key, want.ID, want.Namespace, want.Key)
	}
	if !bytes.Equal(got.Response, want.Response) {
		t.Errorf("response: got %q, want %q", got.Response, want.Response)
	}
	if len(got.Vector) != len(want.Vector) {
		t.Errorf("vector: got %v, want %v", got.Vector, want.Vector)
	} else {
		for i := range want.Vector {
			if math.Float32bits(got.Vector[i]) != math.Float32bits(want.Vector[i]) {
				t.Errorf("vector[%d]: got %v, want %v", i, got.Vector[i], want.Vector[i])
			}
		}
	}
	if got.Cost != want.Cost {
		t.Errorf("cost: got %v, want %v", got.Cost, want.Cost)
	}
	if !sameTime(got.CreatedAt, want.CreatedAt) {
		t.Errorf("created: got %v, want %v", got.CreatedAt, want.CreatedAt)
	}
	if want.ExpiresAt.IsZero() != got.ExpiresAt.IsZero() || (!want.ExpiresAt.IsZero() && !sameTime(got.ExpiresAt, want.ExpiresAt)) {
		t.Errorf("expires: got %v, want %v", got.ExpiresAt, want.ExpiresAt)
	}
}

func scanIDs(t *testing.T, s cache.Store, ns string) []string {
	t.Helper()
	var ids []string
	if err := s.Scan(ctxT(t), ns, func(e *cache.Entry) error {
		if ns != "" && e.Namespace != ns {
			t.Errorf("Scan(%q) yielded entry of namespace %q", ns, e.Namespace)
		}
		ids = append(ids, e.Namespace+"|"+e.ID)
		return nil
	}); err != nil {
		t.Fatalf("Scan(%q): %v", ns, err)
	}
	sort.Strings(ids)
	return ids
}

// StoreContract checks the cache.Store contract: round trip of every field,
// ErrNotFound for absent, expired and other-namespace ids, overwrite, Delete,
// Touch counting hits, Scan per namespace and in all, early stop of Scan,
// TTL expiry, concurrent use, and ErrClosed after Close.
func StoreContract(t *testing.T, newStore NewStore) {
	open := func(t *testing.T) cache.Store {
		s := newStore(t)
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	t.Run("RoundTrip", func(t *testing.T) {
		s, ctx := open(t), ctxT(t)
		want := entry("tenantA/m/1", "id1")
		want.ExpiresAt = time.Now().Add(time.Hour).Truncate(time.Millisecond)
		if err := s.Put(ctx, want); err != nil {
			t.Fatal(err)
		}
		got, err := s.Get(ctx, want.Namespace, want.ID)
		if err != nil {
			t.Fatal(err)
		}
		checkEqual(t, got, want)
		// Entries without a vector round-trip too.
		nv := entry("tenantA/m/1", "novec")
		nv.Vector = nil
		if err := s.Put(ctx, nv); err != nil {
			t.Fatal(err)
		}
		got, err = s.Get(ctx, nv.Namespace, nv.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Vector) != 0 {
			t.Errorf("vector: got %v, want none", got.Vector)
		}
	})
	t.Run("NotFound", func(t *testing.T) {
		s, ctx := open(t), ctxT(t)
		if _, err := s.Get(ctx, "ns", "absent"); !errors.Is(err, cache.ErrNotFound) {
			t.Fatalf("Get absent: got %v, want ErrNotFound", err)
		}
		if err := s.Put(ctx, entry("tenantA/m/1", "shared")); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(ctx, "tenantB/m/1", "shared"); !errors.Is(err, cache.ErrNotFound) {
			t.Fatalf("Get from another namespace: got %v, want ErrNotFound", err)
		}
	})
	t.Run("Overwrite", func(t *testing.T) {
		s, ctx := open(t), ctxT(t)
		e := entry("ns", "x")
		if err := s.Put(ctx, e); err != nil {
			t.Fatal(err)
		}
		e2 := entry("ns", "x")
		e2.Response = []byte("second")
		e2.Cost = 3
		if err := s.Put(ctx, e2); err != nil {
			t.Fatal(err)
		}
		got, err := s.Get(ctx, "ns", "x")
		if err != nil {
			t.Fatal(err)
		}
		checkEqual(t, got, e2)
		if n := len(scanIDs(t, s, "ns")); n != 1 {
			t.Fatalf("after overwrite Scan found %d entries, want 1", n)
		}
	})
	t.Run("Delete", func(t *testing.T) {
		s, ctx := open(t), ctxT(t)
		for _, id := range []string{"a", "b"} {
			if err := s.Put(ctx, entry("ns", id)); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Delete(ctx, "other", "a"); err != nil && !errors.Is(err, cache.ErrNotFound) {
			t.Fatalf("Delete in another namespace: %v", err)
		}
		if _, err := s.Get(ctx, "ns", "a"); err != nil {
			t.Fatalf("Delete in another namespace removed the entry: %v", err)
		}
		if err := s.Delete(ctx, "ns", "a"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(ctx, "ns", "a"); !errors.Is(err, cache.ErrNotFound) {
			t.Fatalf("Get after Delete: got %v, want ErrNotFound", err)
		}
		if _, err := s.Get(ctx, "ns", "b"); err != nil {
			t.Fatalf("Delete removed a sibling: %v", err)
		}
		if err := s.Delete(ctx, "ns", "a"); err != nil && !errors.Is(err, cache.ErrNotFound) {
			t.Fatalf("second Delete: %v", err)
		}
	})
	t.Run("Touch", func(t *testing.T) {
		s, ctx := open(t), ctxT(t)
		if err := s.Put(ctx, entry("ns", "t")); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if err := s.Touch(ctx, "ns", "t"); err != nil {
				t.Fatal(err)
			}
		}
		got, err := s.Get(ctx, "ns", "t")
		if err != nil {
			t.Fatal(err)
		}
		if got.Hits != 3 {
			t.Fatalf("Hits after 3 touches: got %d, want 3", got.Hits)
		}
		if err := s.Touch(ctx, "ns", "absent"); err != nil && !errors.Is(err, cache.ErrNotFound) {
			t.Fatalf("Touch absent: %v", err)
		}
	})
	t.Run("Scan", func(t *testing.T) {
		s, ctx := open(t), ctxT(t)
		for _, e := range []*cache.Entry{entry("A", "1"), entry("A", "2"), entry("B", "3")} {
			if err := s.Put(ctx, e); err != nil {
				t.Fatal(err)
			}
		}
		exp := entry("A", "expired")
		exp.ExpiresAt = time.Now().Add(-time.Second)
		if err := s.Put(ctx, exp); err != nil {
			t.Fatal(err)
		}
		if got, want := fmt.Sprint(scanIDs(t, s, "A")), "[A|1 A|2]"; got != want {
			t.Errorf("Scan(A): got %s, want %s", got, want)
		}
		if got, want := fmt.Sprint(scanIDs(t, s, "B")), "[B|3]"; got != want {
			t.Errorf("Scan(B): got %s, want %s", got, want)
		}
		if got, want := fmt.Sprint(scanIDs(t, s, "")), "[A|1 A|2 B|3]"; got != want {
			t.Errorf("Scan(all): got %s, want %s", got, want)
		}
		stop := errors.New("stop")
		n := 0
		err := s.Scan(ctx, "", func(*cache.Entry) error { n++; return stop })
		if !errors.Is(err, stop) || n != 1 {
			t.Errorf("Scan stopping: got err %v after %d calls, want the callback's error after 1", err, n)
		}
	})
	t.Run("TTL", func(t *testing.T) {
		s, ctx := open(t), ctxT(t)
		past := entry("ns", "past")
		past.ExpiresAt = time.Now().Add(-time.Minute)
		if err := s.Put(ctx, past); err != nil {
			t.Fatalf("Put of an already expired entry: %v", err)
		}
		if _, err := s.Get(ctx, "ns", "past"); !errors.Is(err, cache.ErrNotFound) {
			t.Fatalf("Get expired: got %v, want ErrNotFound", err)
		}
		soon := entry("ns", "soon")
		soon.ExpiresAt = time.Now().Add(1200 * time.Millisecond)
		if err := s.Put(ctx, soon); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(ctx, "ns", "soon"); err != nil {
			t.Fatalf("Get before expiry: %v", err)
		}
		time.Sleep(1500 * time.Millisecond)
		if _, err := s.Get(ctx, "ns", "soon"); !errors.Is(err, cache.ErrNotFound) {
			t.Fatalf("Get after expiry: got %v, want ErrNotFound", err)
		}
	})
	t.Run("Concurrent", func(t *testing.T) {
		s, ctx := open(t), ctxT(t)
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ns := fmt.Sprintf("ns%d", w%2)
				for i := range 25 {
					id := fmt.Sprintf("w%d-%d", w, i)
					if err := s.Put(ctx, entry(ns, id)); err != nil {
						errs <- err
						return
					}
					if _, err := s.Get(ctx, ns, id); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if n := len(scanIDs(t, s, "")); n != 200 {
			t.Fatalf("after concurrent puts Scan found %d entries, want 200", n)
		}
	})
	t.Run("Closed", func(t *testing.T) {
		s, ctx := newStore(t), ctxT(t)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(ctx, "ns", "x"); !errors.Is(err, cache.ErrClosed) {
			t.Errorf("Get after Close: got %v, want ErrClosed", err)
		}
		if err := s.Put(ctx, entry("ns", "x")); !errors.Is(err, cache.ErrClosed) {
			t.Errorf("Put after Close: got %v, want ErrClosed", err)
		}
	})
}

func unit(r *rand.Rand, dim int) []float32 {
	v := make([]float32, dim)
	var ss float64
	for i := range v {
		v[i] = float32(r.NormFloat64())
		ss += float64(v[i]) * float64(v[i])
	}
	inv := float32(1 / math.Sqrt(ss))
	for i := range v {
		v[i] *= inv
	}
	return v
}

// IndexContract checks the cache.VectorIndex contract: search finds the exact
// vector first with score ≈ 1, results are ordered best first and limited to
// k, namespaces never leak, Remove hides a vector, re-Add replaces it, dimension
// mismatches fail with ErrDim, empty namespaces return nothing, and calls
// after Close fail with ErrClosed.
func IndexContract(t *testing.T, newIndex NewIndex) {
	const dim = 16
	open := func(t *testing.T) cache.VectorIndex {
		ix := newIndex(t, dim)
		t.Cleanup(func() { _ = ix.Close() })
		return ix
	}
	t.Run("SearchAndIsolation", func(t *testing.T) {
		ix, ctx := open(t), ctxT(t)
		r := rand.New(rand.NewPCG(1, 2))
		vecs := map[string][]float32{}
		for i := range 40 {
			ns := "A"
			if i%2 == 1 {
				ns = "B"
			}
			id := fmt.Sprintf("%s-%d", ns, i)
			vecs[id] = unit(r, dim)
			if err := ix.Add(ctx, ns, id, vecs[id]); err != nil {
				t.Fatal(err)
			}
		}
		for id, v := range vecs {
			ns := id[:1]
			ms, err := ix.Search(ctx, ns, v, 5)
			if err != nil {
				t.Fatal(err)
			}
			if len(ms) == 0 || ms[0].ID != id || math.Abs(float64(ms[0].Score)-1) > 1e-3 {
				t.Fatalf("Search(%s, vec of %s): got %v, want %s first with score 1", ns, id, ms, id)
			}
			if len(ms) > 5 {
				t.Fatalf("Search k=5 returned %d", len(ms))
			}
			for i, m := range ms {
				if m.ID[:1] != ns {
					t.Fatalf("Search in %s returned %s of another namespace", ns, m.ID)
				}
				if i > 0 && m.Score > ms[i-1].Score+1e-6 {
					t.Fatalf("results not best first: %v", ms)
				}
				if want := vecmath.Dot(v, vecs[m.ID]); math.Abs(float64(m.Score-want)) > 1e-3 {
					t.Fatalf("score of %s: got %v, want cosine %v", m.ID, m.Score, want)
				}
			}
		}
		// Searching B with an A vector never yields the A id.
		ms, err := ix.Search(ctx, "B", vecs["A-0"], 40)
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) != 20 {
			t.Fatalf("Search(B, k=40): got %d matches, want all 20 of B", len(ms))
		}
		for _, m := range ms {
			if m.ID[:1] != "B" {
				t.Fatalf("Search(B) returned %s", m.ID)
			}
		}
	})
	t.Run("RemoveAndReplace", func(t *testing.T) {
		ix, ctx := open(t), ctxT(t)
		r := rand.New(rand.NewPCG(3, 4))
		a, b := unit(r, dim), unit(r, dim)
		for _, id := range []string{"x", "y"} {
			if err := ix.Add(ctx, "ns", id, a); err != nil {
				t.Fatal(err)
			}
		}
		if err := ix.Remove(ctx, "ns", "x"); err != nil {
			t.Fatal(err)
		}
		ms, err := ix.Search(ctx, "ns", a, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) != 1 || ms[0].ID != "y" {
			t.Fatalf("after Remove(x): got %v, want only y", ms)
		}
		if err := ix.Remove(ctx, "ns", "absent"); err != nil && !errors.Is(err, cache.ErrNotFound) {
			t.Fatalf("Remove absent: %v", err)
		}
		if err := ix.Remove(ctx, "other", "y"); err != nil && !errors.Is(err, cache.ErrNotFound) {
			t.Fatalf("Remove in another namespace: %v", err)
		}
		if ms, _ := ix.Search(ctx, "ns", a, 10); len(ms) != 1 {
			t.Fatalf("Remove in another namespace removed y: %v", ms)
		}
		// Re-adding y with vector b replaces it.
		if err := ix.Add(ctx, "ns", "y", b); err != nil {
			t.Fatal(err)
		}
		ms, err = ix.Search(ctx, "ns", b, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) != 1 || ms[0].ID != "y" || math.Abs(float64(ms[0].Score)-1) > 1e-3 {
			t.Fatalf("after replace: got %v, want y with score 1", ms)
		}
	})
	t.Run("Edges", func(t *testing.T) {
		ix, ctx := open(t), ctxT(t)
		ms, err := ix.Search(ctx, "empty", make([]float32, dim), 3)
		if err != nil || len(ms) != 0 {
			t.Fatalf("Search of an empty namespace: got %v, %v; want nothing, nil", ms, err)
		}
		if err := ix.Add(ctx, "ns", "bad", make([]float32, dim+1)); !errors.Is(err, cache.ErrDim) {
			t.Fatalf("Add with wrong dim: got %v, want ErrDim", err)
		}
		if _, err := ix.Search(ctx, "ns", make([]float32, dim-1), 3); !errors.Is(err, cache.ErrDim) {
			t.Fatalf("Search with wrong dim: got %v, want ErrDim", err)
		}
	})
	t.Run("Closed", func(t *testing.T) {
		ix, ctx := newIndex(t, dim), ctxT(t)
		if err := ix.Close(); err != nil {
			t.Fatal(err)
		}
		if err := ix.Add(ctx, "ns", "x", make([]float32, dim)); !errors.Is(err, cache.ErrClosed) {
			t.Errorf("Add after Close: got %v, want ErrClosed", err)
		}
		if _, err := ix.Search(ctx, "ns", make([]float32, dim), 1); !errors.Is(err, cache.ErrClosed) {
			t.Errorf("Search after Close: got %v, want ErrClosed", err)
		}
	})
}
