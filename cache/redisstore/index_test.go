package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/specgate/specgate/cache"
)

func newTestIndex(t *testing.T, rdb *redis.Client, prefix string, dim int) *Index {
	t.Helper()
	ix, err := NewIndex(rdb, IndexOptions{Prefix: prefix, Dim: dim})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ix.Close() })
	return ix
}

// bruteForce is the reference: cosine in float64 over a map, best first, ties by id.
func bruteForce(vecs map[string][]float32, q []float32, k int) []cache.Match {
	cos := func(a, b []float32) float64 {
		var d, na, nb float64
		for i := range a {
			d += float64(a[i]) * float64(b[i])
			na += float64(a[i]) * float64(a[i])
			nb += float64(b[i]) * float64(b[i])
		}
		return d / math.Sqrt(na*nb)
	}
	var out []cache.Match
	for id, v := range vecs {
		out = append(out, cache.Match{ID: id, Score: float32(cos(v, q))})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Score != out[j].Score {
			return out[i].Score > out[j].Score
		}
		return out[i].ID < out[j].ID
	})
	if len(out) > k {
		out = out[:k]
	}
	return out
}

func randVec(r *rand.Rand, dim int) []float32 {
	v := make([]float32, dim)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return v
}

func sameIDs(t *testing.T, what string, got, want []cache.Match) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d matches, want %d\n got %v\nwant %v", what, len(got), len(want), got, want)
	}
	for i := range got {
		if got[i].ID != want[i].ID || math.Abs(float64(got[i].Score-want[i].Score)) > 1e-5 {
			t.Fatalf("%s: match %d = %+v, want %+v", what, i, got[i], want[i])
		}
	}
}

func TestIndexBasic(t *testing.T) {
	rdb, prefix := testClient(t)
	ix := newTestIndex(t, rdb, prefix, 3)
	ctx := context.Background()
	add := func(ns, id string, v ...float32) {
		t.Helper()
		if err := ix.Add(ctx, ns, id, v); err != nil {
			t.Fatal(err)
		}
	}
	add("a", "x", 1, 0, 0)
	add("a", "y", 0, 2, 0) // not normalized on purpose
	add("a", "xy", 1, 1, 0)
	got, err := ix.Search(ctx, "a", []float32{1, 0.1, 0}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].ID != "x" || got[1].ID != "xy" {
		t.Fatalf("Search = %v", got)
	}
	if math.Abs(float64(got[0].Score)-1/math.Sqrt(1.01)) > 1e-6 {
		t.Fatalf("cosine of x = %v", got[0].Score)
	}
	if err := ix.Remove(ctx, "a", "x"); err != nil {
		t.Fatal(err)
	}
	if err := ix.Remove(ctx, "a", "never-added"); err != nil {
		t.Fatal(err)
	}
	got, _ = ix.Search(ctx, "a", []float32{1, 0.1, 0}, 5)
	if len(got) != 2 || got[0].ID != "xy" || got[1].ID != "y" {
		t.Fatalf("Search after Remove = %v", got)
	}
	add("a", "y", 1, 0, 0) // replace
	got, _ = ix.Search(ctx, "a", []float32{1, 0, 0}, 1)
	if len(got) != 1 || got[0].ID != "y" || got[0].Score < 0.9999 {
		t.Fatalf("Search after replace = %v", got)
	}
	if got, _ := ix.Search(ctx, "a", []float32{1, 0, 0}, 0); len(got) != 0 {
		t.Fatalf("k=0 gave %v", got)
	}
	if err := ix.Add(ctx, "a", "bad", []float32{1, 2}); !errors.Is(err, cache.ErrDim) {
		t.Fatalf("Add with wrong dim: %v", err)
	}
	if _, err := ix.Search(ctx, "a", []float32{1, 2, 3, 4}, 1); !errors.Is(err, cache.ErrDim) {
		t.Fatalf("Search with wrong dim: %v", err)
	}
	if err := ix.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := ix.Search(ctx, "a", []float32{1, 0, 0}, 1); !errors.Is(err, cache.ErrClosed) {
		t.Fatalf("Search after Close: %v", err)
	}
}

func TestIndexTenantIsolation(t *testing.T) {
	rdb, prefix := testClient(t)
	ix := newTestIndex(t, rdb, prefix, 4)
	ctx := context.Background()
	v := []float32{0.5, 0.5, 0.5, 0.5}
	if err := ix.Add(ctx, "tenant-a", "shared-id", v); err != nil {
		t.Fatal(err)
	}
	if got, _ := ix.Search(ctx, "tenant-b", v, 10); len(got) != 0 {
		t.Fatalf("tenant B found tenant A's vector: %v", got)
	}
	if err := ix.Remove(ctx, "tenant-b", "shared-id"); err != nil {
		t.Fatal(err)
	}
	if got, _ := ix.Search(ctx, "tenant-a", v, 10); len(got) != 1 {
		t.Fatalf("tenant B's Remove affected tenant A: %v", got)
	}
	if err := ix.Add(ctx, "tenant-b", "b1", []float32{-1, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	if got, _ := ix.Search(ctx, "tenant-a", v, 10); len(got) != 1 || got[0].ID != "shared-id" {
		t.Fatalf("tenant A sees %v", got)
	}
}

// TestIndexReplicasShare runs two Index values (two "replicas") on one Redis
// and checks that each sees the other's writes, through the incremental log
// and, after tombstone pruning, through a full reload.
func TestIndexReplicasShare(t *testing.T) {
	rdb, prefix := testClient(t)
	const dim = 16
	r1 := newTestIndex(t, rdb, prefix, dim)
	r2 := newTestIndex(t, rdb, prefix, 0) // dim learnt from first use
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	ref := map[string][]float32{}
	check := func(what string) {
		t.Helper()
		for range 3 {
			q := randVec(rng, dim)
			want := bruteForce(ref, q, 5)
			for i, ix := range []*Index{r1, r2} {
				got, err := ix.Search(ctx, "ns", q, 5)
				if err != nil {
					t.Fatal(err)
				}
				sameIDs(t, fmt.Sprintf("%s replica %d", what, i+1), got, want)
			}
		}
	}
	for i := range 50 {
		id := fmt.Sprint("v", i)
		ref[id] = randVec(rng, dim)
		if err := r1.Add(ctx, "ns", id, ref[id]); err != nil {
			t.Fatal(err)
		}
	}
	check("initial load")
	// Writes through replica 2 must reach replica 1's cached copy incrementally.
	for i := range 20 {
		id := fmt.Sprint("v", i)
		if i%2 == 0 {
			delete(ref, id)
			if err := r2.Remove(ctx, "ns", id); err != nil {
				t.Fatal(err)
			}
		} else {
			ref[id] = randVec(rng, dim)
			if err := r2.Add(ctx, "ns", id, ref[id]); err != nil {
				t.Fatal(err)
			}
		}
	}
	check("incremental")
	// Enough churn to prune tombstones: replica 1 (stale) must fully reload.
	for i := range 1200 {
		id := fmt.Sprint("churn", i)
		if err := r2.Add(ctx, "ns", id, randVec(rng, dim)); err != nil {
			t.Fatal(err)
		}
		if err := r2.Remove(ctx, "ns", id); err != nil {
			t.Fatal(err)
		}
	}
	vmin, _ := rdb.Get(ctx, r2.ks.vmin("ns")).Int64()
	if vmin == 0 {
		t.Fatal("no tombstones were pruned")
	}
	if n := rdb.ZCard(ctx, r2.ks.vlog("ns")).Val(); n > 2*int64(len(ref))+1024+1 {
		t.Fatalf("change log has %d members after pruning", n)
	}
	check("after pruning")
}

func TestIndexMatchesBruteForce(t *testing.T) {
	rdb, prefix := testClient(t)
	const dim, n = 32, 500
	ix := newTestIndex(t, rdb, prefix, dim)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 9))
	ref := map[string][]float32{}
	for i := range n {
		id := fmt.Sprintf("id%04d", i)
		ref[id] = randVec(rng, dim)
		if err := ix.Add(ctx, "ns", id, ref[id]); err != nil {
			t.Fatal(err)
		}
	}
	for range 20 {
		q := randVec(rng, dim)
		got, err := ix.Search(ctx, "ns", q, 10)
		if err != nil {
			t.Fatal(err)
		}
		sameIDs(t, "search", got, bruteForce(ref, q, 10))
	}
	// Exact duplicates: ties are broken by id.
	dup := []float32{1, 2, 3}
	ix3 := newTestIndex(t, rdb, prefix+"-ties", 3)
	for _, id := range []string{"c", "a", "b"} {
		if err := ix3.Add(ctx, "ns", id, dup); err != nil {
			t.Fatal(err)
		}
	}
	got, _ := ix3.Search(ctx, "ns", dup, 3)
	if ids := []string{got[0].ID, got[1].ID, got[2].ID}; !slices.Equal(ids, []string{"a", "b", "c"}) {
		t.Fatalf("tie order = %v", ids)
	}
}

func TestIndexNamespaceCacheBound(t *testing.T) {
	rdb, prefix := testClient(t)
	ix, err := NewIndex(rdb, IndexOptions{Prefix: prefix, Dim: 2, MaxNamespaces: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer ix.Close()
	ctx := context.Background()
	for i := range 10 {
		ns := fmt.Sprint("ns", i)
		if err := ix.Add(ctx, ns, "x", []float32{1, float32(i)}); err != nil {
			t.Fatal(err)
		}
		if got, err := ix.Search(ctx, ns, []float32{1, float32(i)}, 1); err != nil || len(got) != 1 || got[0].ID != "x" {
			t.Fatalf("ns%d: %v %v", i, got, err)
		}
	}
	if len(ix.nss) != 3 || ix.order.Len() != 3 {
		t.Fatalf("cached namespaces = %d, want 3", len(ix.nss))
	}
	// An evicted namespace is reloaded on demand.
	if got, _ := ix.Search(ctx, "ns0", []float32{1, 0}, 1); len(got) != 1 || got[0].ID != "x" {
		t.Fatalf("ns0 after eviction: %v", got)
	}
}

func TestIndexCorruptStoredVector(t *testing.T) {
	rdb, prefix := testClient(t)
	ix := newTestIndex(t, rdb, prefix, 2)
	ctx := context.Background()
	rdb.HSet(ctx, ix.ks.vec("ns"), "bad", "\x00\x00\x80\x3f\x00") // 5 bytes
	rdb.Set(ctx, ix.ks.vver("ns"), 1, 0)
	if _, err := ix.Search(ctx, "ns", []float32{1, 0}, 1); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Search over a corrupt vector: %v", err)
	}
	rdb.HSet(ctx, ix.ks.vec("ns"), "bad", "\x00\x00\x80\x3f") // 1 float, index dim 2
	if _, err := ix.Search(ctx, "ns", []float32{1, 0}, 1); !errors.Is(err, cache.ErrDim) {
		t.Fatalf("Search over a short vector: %v", err)
	}
}

func BenchmarkIndexSearch10k(b *testing.B) {
	rdb, prefix := testClient(b)
	const dim, n = 384, 10000
	ix, _ := NewIndex(rdb, IndexOptions{Prefix: prefix, Dim: dim})
	defer ix.Close()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 1))
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range n {
			p.HSet(ctx, ix.ks.vec("ns"), fmt.Sprint(i), encodeVector(randVec(rng, dim)))
		}
		p.Set(ctx, ix.ks.vver("ns"), 1, 0)
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	q := randVec(rng, dim)
	b.ResetTimer()
	for b.Loop() {
		if _, err := ix.Search(ctx, "ns", q, 5); err != nil {
			b.Fatal(err)
		}
	}
}

// TestIndexConcurrent: writers on two replicas and concurrent searches; at
// the end both replicas see exactly the surviving vectors.
func TestIndexConcurrent(t *testing.T) {
	rdb, prefix := testClient(t)
	const dim = 8
	reps := []*Index{newTestIndex(t, rdb, prefix, dim), newTestIndex(t, rdb, prefix, dim)}
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 4 {
		wg.Add(2)
		go func() { // writer: adds 40 ids, removes the odd ones
			defer wg.Done()
			ix := reps[w%2]
			rng := rand.New(rand.NewPCG(uint64(w), 9))
			for i := range 40 {
				if err := ix.Add(ctx, "ns", fmt.Sprintf("w%d-%d", w, i), randVec(rng, dim)); err != nil {
					errs <- err
					return
				}
				if i%2 == 1 {
					if err := ix.Remove(ctx, "ns", fmt.Sprintf("w%d-%d", w, i)); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
		go func() { // reader
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 10))
			for range 40 {
				if _, err := reps[(w+1)%2].Search(ctx, "ns", randVec(rng, dim), 5); err != nil {
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
	for r, ix := range reps {
		got, err := ix.Search(ctx, "ns", []float32{1, 0, 0, 0, 0, 0, 0, 0}, 1000)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, m := range got {
			ids = append(ids, m.ID)
		}
		slices.Sort(ids)
		var want []string
		for w := range 4 {
			for i := 0; i < 40; i += 2 {
				want = append(want, fmt.Sprintf("w%d-%d", w, i))
			}
		}
		slices.Sort(want)
		if !slices.Equal(ids, want) {
			t.Fatalf("replica %d sees %d ids, want %d", r, len(ids), len(want))
		}
	}
}
