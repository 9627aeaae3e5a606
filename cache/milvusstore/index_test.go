package milvusstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"

	"github.com/milvus-io/milvus/client/v2/milvusclient"

	"github.com/specgate/specgate/cache"
)

func newClient(t testing.TB, addr string) *milvusclient.Client {
	t.Helper()
	cli, err := milvusclient.New(context.Background(), &milvusclient.ClientConfig{Address: addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close(context.Background()) })
	return cli
}

func newTestIndex(t testing.TB, addr string, dim int) *Index {
	t.Helper()
	ix, err := New(newClient(t, addr), IndexOptions{Dim: dim})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ix.Close() })
	return ix
}

func bruteForce(vecs map[string][]float32, q []float32, k int) []cache.Match {
	var out []cache.Match
	for id, v := range vecs {
		out = append(out, cache.Match{ID: id, Score: fakeCosine(q, v)})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Score != out[j].Score {
			return out[i].Score > out[j].Score
		}
		return out[i].ID < out[j].ID
	})
	return out[:min(k, len(out))]
}

func randVec(r *rand.Rand, dim int) []float32 {
	v := make([]float32, dim)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return v
}

func TestIndexLifecycle(t *testing.T) {
	fake, addr := startFakeMilvus(t)
	ix := newTestIndex(t, addr, 3)
	ctx := context.Background()
	for id, v := range map[string][]float32{"x": {1, 0, 0}, "y": {0, 2, 0}, "xy": {1, 1, 0}} {
		if err := ix.Add(ctx, "ns", id, v); err != nil {
			t.Fatal(err)
		}
	}
	got, err := ix.Search(ctx, "ns", []float32{1, 0.1, 0}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].ID != "x" || got[1].ID != "xy" {
		t.Fatalf("Search = %v", got)
	}
	if math.Abs(float64(got[0].Score)-1/math.Sqrt(1.01)) > 1e-6 {
		t.Fatalf("score = %v", got[0].Score)
	}
	if err := ix.Remove(ctx, "ns", "x"); err != nil {
		t.Fatal(err)
	}
	if err := ix.Remove(ctx, "ns", "absent"); err != nil {
		t.Fatal(err)
	}
	got, _ = ix.Search(ctx, "ns", []float32{1, 0.1, 0}, 5)
	if len(got) != 2 || got[0].ID != "xy" || got[1].ID != "y" {
		t.Fatalf("after Remove: %v", got)
	}
	if err := ix.Add(ctx, "ns", "y", []float32{1, 0, 0}); err != nil { // upsert
		t.Fatal(err)
	}
	got, _ = ix.Search(ctx, "ns", []float32{1, 0, 0}, 1)
	if len(got) != 1 || got[0].ID != "y" {
		t.Fatalf("after upsert: %v", got)
	}
	if err := ix.Add(ctx, "ns", "bad", []float32{1, 2}); !errors.Is(err, cache.ErrDim) {
		t.Fatalf("wrong dim: %v", err)
	}
	if got, _ := ix.Search(ctx, "ns", []float32{1, 0, 0}, 0); len(got) != 0 {
		t.Fatalf("k=0: %v", got)
	}
	if ix.Collection() != "specgate_cache_d3" {
		t.Fatalf("collection %q", ix.Collection())
	}
	fake.mu.Lock()
	c := fake.colls["specgate_cache_d3"]
	if c == nil || !c.loaded || c.indexes[FieldVector] == nil {
		t.Fatalf("collection not created, indexed and loaded: %+v", c)
	}
	creates := fake.calls["CreateCollection"]
	fake.mu.Unlock()
	if creates != 1 {
		t.Fatalf("CreateCollection called %d times", creates)
	}
	// A second index (another replica) reuses the existing collection.
	ix2 := newTestIndex(t, addr, 3)
	got, err = ix2.Search(ctx, "ns", []float32{0, 0, 1}, 10)
	if err != nil || len(got) != 2 {
		t.Fatalf("second replica: %v %v", got, err)
	}
	if err := ix.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := ix.Search(ctx, "ns", []float32{1, 0, 0}, 1); !errors.Is(err, cache.ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

// TestIndexTenantIsolation includes namespaces that try to break out of the
// filter's string literal.
func TestIndexTenantIsolation(t *testing.T) {
	_, addr := startFakeMilvus(t)
	ix := newTestIndex(t, addr, 4)
	ctx := context.Background()
	nss := []string{
		"tenant-a", "tenant-b", "",
		`evil" || namespace != "`, `evil\" || namespace != \"`, `back\slash\`, `quote"`, `tab	nl
cr` + "\r", "ünïcødé 中文 \"x\"", `' or '1'=='1`, `a" && pk in ["x`,
	}
	rng := rand.New(rand.NewPCG(3, 4))
	vecs := map[string]map[string][]float32{}
	for _, ns := range nss {
		vecs[ns] = map[string][]float32{}
		for i := range 5 {
			id := fmt.Sprint("shared-", i) // the same ids in every namespace
			v := randVec(rng, 4)
			vecs[ns][id] = v
			if err := ix.Add(ctx, ns, id, v); err != nil {
				t.Fatalf("Add(%q): %v", ns, err)
			}
		}
	}
	for _, ns := range nss {
		q := randVec(rng, 4)
		got, err := ix.Search(ctx, ns, q, 5) // k = rows per namespace: an unfiltered search would return fewer after the pk-prefix check
		if err != nil {
			t.Fatalf("Search(%q): %v", ns, err)
		}
		want := bruteForce(vecs[ns], q, 5)
		if len(got) != len(want) {
			t.Fatalf("Search(%q): %d matches, want %d: %v", ns, len(got), len(want), got)
		}
		for i := range got {
			if got[i].ID != want[i].ID || math.Abs(float64(got[i].Score-want[i].Score)) > 1e-5 {
				t.Fatalf("Search(%q)[%d] = %v, want %v (another tenant's vector?)", ns, i, got[i], want[i])
			}
		}
	}
	if got, _ := ix.Search(ctx, "tenant-c", []float32{1, 1, 1, 1}, 10); len(got) != 0 {
		t.Fatalf("empty tenant sees %v", got)
	}
	// Removing in one namespace leaves the same id in the others.
	if err := ix.Remove(ctx, `evil" || namespace != "`, "shared-0"); err != nil {
		t.Fatal(err)
	}
	for _, ns := range nss {
		got, _ := ix.Search(ctx, ns, []float32{1, 1, 1, 1}, 100)
		want := 5
		if ns == `evil" || namespace != "` {
			want = 4
		}
		if len(got) != want {
			t.Fatalf("after Remove, namespace %q has %d vectors, want %d", ns, len(got), want)
		}
	}
	if err := ix.Add(ctx, "bell\a", "x", []float32{1, 0, 0, 0}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("control character in namespace: %v", err)
	}
	if err := ix.Add(ctx, "ns", strings.Repeat("x", MaxIDBytes+1), []float32{1, 0, 0, 0}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("id too long: %v", err)
	}
	if _, err := ix.Search(ctx, "bad\xff", []float32{1, 0, 0, 0}, 1); !errors.Is(err, ErrInvalid) {
		t.Fatalf("invalid UTF-8 namespace: %v", err)
	}
}

func TestIndexMatchesBruteForce(t *testing.T) {
	_, addr := startFakeMilvus(t)
	const dim = 24
	ix := newTestIndex(t, addr, 0) // dim from first use
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(5, 6))
	ref := map[string][]float32{}
	for i := range 300 {
		id := fmt.Sprintf("id%03d", i)
		ref[id] = randVec(rng, dim)
		if err := ix.Add(ctx, "ns", id, ref[id]); err != nil {
			t.Fatal(err)
		}
	}
	for range 10 {
		q := randVec(rng, dim)
		got, err := ix.Search(ctx, "ns", q, 7)
		if err != nil {
			t.Fatal(err)
		}
		want := bruteForce(ref, q, 7)
		for i := range want {
			if got[i].ID != want[i].ID {
				t.Fatalf("match %d = %v, want %v", i, got[i], want[i])
			}
		}
	}
}

func TestQuoteLiteral(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain", `"plain"`},
		{`a"b`, `"a\"b"`},
		{`a\b`, `"a\\b"`},
		{"a\nb\tc\rd\fe", `"a\nb\tc\rd\fe"`},
		{"中文", `"中文"`},
		{"", `""`},
	} {
		got, err := quoteLiteral(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("quoteLiteral(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"\x00", "a\x1bb", "\x7f", "\xff"} {
		if _, err := quoteLiteral(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("quoteLiteral(%q): %v, want ErrInvalid", bad, err)
		}
	}
}

// FuzzQuoteLiteral checks that a quoted literal parses back (with the
// Milvus literal grammar of the fake) to exactly the input.
func FuzzQuoteLiteral(f *testing.F) {
	for _, s := range []string{"", `"`, `\`, `\"`, `" && x == "`, "中\n文"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q, err := quoteLiteral(s)
		if err != nil {
			return
		}
		p := &fakeParser{s: q}
		got, err := p.literal()
		if err != nil || got != s || !p.eof() {
			t.Fatalf("quoteLiteral(%q) = %q parses to %q, %v (eof %v)", s, q, got, err, p.eof())
		}
	})
}

func TestNewValidation(t *testing.T) {
	_, addr := startFakeMilvus(t)
	cli := newClient(t, addr)
	for _, p := range []string{"1abc", "a-b", "a b", `x"`} {
		if _, err := New(cli, IndexOptions{Prefix: p}); !errors.Is(err, ErrInvalid) {
			t.Errorf("prefix %q: %v", p, err)
		}
	}
	if _, err := New(nil, IndexOptions{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("nil client: %v", err)
	}
}

func TestExistingCollectionWithOtherSchema(t *testing.T) {
	_, addr := startFakeMilvus(t)
	cli := newClient(t, addr)
	ctx := context.Background()
	if err := cli.CreateCollection(ctx, milvusclient.SimpleCreateCollectionOptions("specgate_cache_d2", 2)); err != nil {
		t.Fatal(err)
	}
	ix, _ := New(cli, IndexOptions{Dim: 2})
	if err := ix.Add(ctx, "ns", "x", []float32{1, 0}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("foreign schema: %v", err)
	}
}

func TestDial(t *testing.T) {
	fake, addr := startFakeMilvus(t)
	ctx := context.Background()
	ix, err := Dial(ctx, &milvusclient.ClientConfig{Address: addr}, IndexOptions{Prefix: "tenant_cache", Dim: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := ix.Add(ctx, "ns", "x", []float32{1, 0}); err != nil {
		t.Fatal(err)
	}
	if err := ix.Close(); err != nil {
		t.Fatal(err)
	}
	fake.mu.Lock()
	_, ok := fake.colls["tenant_cache_d2"]
	connects := fake.calls["Connect"]
	fake.mu.Unlock()
	if !ok || connects != 1 {
		t.Fatalf("collection created: %v, Connect calls: %d", ok, connects)
	}
	// Remove before any Add on a fresh index with a known dimension reaches the server.
	replica := func() *Index {
		ix, err := New(newClient(t, addr), IndexOptions{Prefix: "tenant_cache", Dim: 2})
		if err != nil {
			t.Fatal(err)
		}
		return ix
	}
	ix2, ix3 := replica(), replica()
	if got, _ := ix3.Search(ctx, "ns", []float32{1, 0}, 5); len(got) != 1 || got[0].ID != "x" {
		t.Fatalf("another replica sees %v, want x", got)
	}
	if err := ix2.Remove(ctx, "ns", "x"); err != nil {
		t.Fatal(err)
	}
	if got, _ := ix3.Search(ctx, "ns", []float32{1, 0}, 5); len(got) != 0 {
		t.Fatalf("after Remove from another replica: %v", got)
	}
}
