package cache

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"
)

// BenchConfig configures RunBench, the in-process hit-path benchmark behind
// `specgate cache-bench` and the Benchmark functions.
type BenchConfig struct {
	Entries  int    // entries stored in one namespace before measuring
	Queries  int    // timed lookups per tier (latency percentiles)
	Parallel int    // goroutines for the throughput run; 0 = 4
	Dim      int    // lexical embedder dimension; 0 = DefaultLexicalDim
	Store    string // "memory" (default) or "sqlite" (a file in Dir)
	Dir      string // directory for the SQLite file; "" = a temporary one
	Seed     uint64
}

// BenchResult is one row of the benchmark table.
type BenchResult struct {
	Entries    int
	Store      string
	Tier       string // "exact", "semantic", "miss"
	Queries    int
	HitRate    float64
	P50, P99   time.Duration
	Throughput float64 // lookups per second with Parallel goroutines
	Build      time.Duration
}

// SyntheticKeys returns n distinct question-like key texts built from a
// deterministic pseudo-vocabulary (so they share n-grams the way real
// questions do, without being paraphrases of each other).
func SyntheticKeys(n int, seed uint64) []string {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	const syll = "ba be bi bo bu da de di do du ka ke ki ko ku la le li lo lu ma me mi mo mu na ne ni no nu ra re ri ro ru sa se si so su ta te ti to tu va ve vi vo vu za ze zi zo zu"
	ss := strings.Fields(syll)
	vocab := make([]string, 3000)
	for i := range vocab {
		var b strings.Builder
		for range 2 + r.IntN(3) {
			b.WriteString(ss[r.IntN(len(ss))])
		}
		vocab[i] = b.String()
	}
	starts := []string{"How do I", "What is the", "Why does the", "Can you explain the", "Where can I find the", "Which"}
	seen := make(map[string]bool, n)
	out := make([]string, 0, n)
	for len(out) < n {
		var b strings.Builder
		b.WriteString(starts[r.IntN(len(starts))])
		for range 5 + r.IntN(5) {
			b.WriteByte(' ')
			b.WriteString(vocab[r.IntN(len(vocab))])
		}
		b.WriteByte('?')
		if s := b.String(); !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// benchParaphrase is a variant of a synthetic key that misses the exact tier
// and passes the guard: lower-cased, no question mark, a polite prefix.
func benchParaphrase(k string) string {
	return "please " + strings.ToLower(strings.TrimSuffix(k, "?"))
}

// NewBenchCache builds a cache filled with cfg.Entries synthetic entries in
// one namespace. close releases it (and removes a temporary directory).
func NewBenchCache(ctx context.Context, cfg BenchConfig) (c *Cache, keys []string, build time.Duration, closeFn func(), err error) {
	emb, err := NewLexical(cfg.Dim)
	if err != nil {
		return nil, nil, 0, nil, err
	}
	var store Store
	var cleanup []func()
	closeFn = func() {
		for i := len(cleanup) - 1; i >= 0; i-- {
			cleanup[i]()
		}
	}
	switch cfg.Store {
	case "", "memory":
		store = NewMemStore(nil)
	case "sqlite":
		dir := cfg.Dir
		if dir == "" {
			if dir, err = os.MkdirTemp("", "specgate-bench-*"); err != nil {
				return nil, nil, 0, nil, err
			}
			cleanup = append(cleanup, func() { os.RemoveAll(dir) })
		}
		st, err := OpenSQLite(filepath.Join(dir, fmt.Sprintf("bench-%d.db", cfg.Entries)), nil)
		if err != nil {
			closeFn()
			return nil, nil, 0, nil, err
		}
		cleanup = append(cleanup, func() { st.Close() })
		store = st
	default:
		return nil, nil, 0, nil, fmt.Errorf("%w: bench store %q (want memory or sqlite)", ErrConfig, cfg.Store)
	}
	ix, err := NewHNSW(HNSWConfig{Dim: emb.Dim(), Seed: cfg.Seed})
	if err != nil {
		closeFn()
		return nil, nil, 0, nil, err
	}
	c, err = New(DefaultConfig(), store, ix, emb, WithoutRebuild())
	if err != nil {
		closeFn()
		return nil, nil, 0, nil, err
	}
	cleanup = append(cleanup, func() { c.Close() })
	keys = SyntheticKeys(cfg.Entries, cfg.Seed)
	start := time.Now()
	// Embed in parallel, then insert (index writes of one namespace serialize).
	vecs := make([][]float32, len(keys))
	var wg sync.WaitGroup
	workers := max(cfg.Parallel, 2)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(keys); i += workers {
				v, _ := emb.Embed(ctx, []string{Normalize(keys[i], false)})
				vecs[i] = v[0]
			}
		}()
	}
	wg.Wait()
	for i, k := range keys {
		req := benchReq(k)
		p := c.prepare(req)
		if err := c.put(ctx, req, p, vecs[i], []byte(`{"choices":[{"message":{"content":"synthetic answer"}}]}`), 1); err != nil {
			closeFn()
			return nil, nil, 0, nil, err
		}
	}
	return c, keys, time.Since(start), closeFn, nil
}

func benchReq(text string) *Request {
	return &Request{Tenant: "bench", Model: "m", Messages: []Message{{Role: "user", Content: text}}}
}

// RunBench measures hit-path latency (p50, p99 of sequential lookups) and
// throughput (cfg.Parallel goroutines) for exact hits, semantic hits and
// misses at cfg.Entries entries.
func RunBench(ctx context.Context, cfg BenchConfig) ([]BenchResult, error) {
	if cfg.Entries <= 0 || cfg.Queries <= 0 {
		return nil, fmt.Errorf("%w: bench needs entries > 0 and queries > 0", ErrConfig)
	}
	if cfg.Parallel == 0 {
		cfg.Parallel = 4
	}
	c, keys, build, closeFn, err := NewBenchCache(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer closeFn()
	r := rand.New(rand.NewPCG(cfg.Seed+1, 1))
	misses := SyntheticKeys(cfg.Queries, cfg.Seed+12345)
	tiers := []struct {
		name string
		text func(i int) string
	}{
		{"exact", func(int) string { return keys[r.IntN(len(keys))] }},
		{"semantic", func(int) string { return benchParaphrase(keys[r.IntN(len(keys))]) }},
		{"miss", func(i int) string { return misses[i%len(misses)] }},
	}
	store := cfg.Store
	if store == "" {
		store = "memory"
	}
	var out []BenchResult
	for _, tier := range tiers {
		texts := make([]string, cfg.Queries)
		for i := range texts {
			texts[i] = tier.text(i)
		}
		lat := make([]time.Duration, len(texts))
		hits := 0
		for i, t := range texts {
			start := time.Now()
			l, err := c.Get(ctx, benchReq(t))
			lat[i] = time.Since(start)
			if err != nil {
				return nil, err
			}
			if l.Hit && l.Tier == tier.name {
				hits++
			}
		}
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		var done atomic.Int64
		start := time.Now()
		var wg sync.WaitGroup
		for w := range cfg.Parallel {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < len(texts); i += cfg.Parallel {
					if _, err := c.Get(ctx, benchReq(texts[i])); err == nil {
						done.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		el := time.Since(start)
		out = append(out, BenchResult{
			Entries: cfg.Entries, Store: store, Tier: tier.name, Queries: len(texts),
			HitRate: float64(hits) / float64(len(texts)),
			P50:     lat[len(lat)/2], P99: lat[min(len(lat)-1, len(lat)*99/100)],
			Throughput: float64(done.Load()) / el.Seconds(), Build: build,
		})
	}
	return out, nil
}

// WriteBenchTable prints results as an aligned table.
func WriteBenchTable(w io.Writer, rs []BenchResult) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "entries\tstore\ttier\tqueries\thit rate\tp50\tp99\tlookups/s\tbuild\t")
	for _, r := range rs {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%.3f\t%s\t%s\t%.0f\t%s\t\n", r.Entries, r.Store, r.Tier, r.Queries, r.HitRate,
			r.P50.Round(time.Microsecond/10), r.P99.Round(time.Microsecond/10), r.Throughput, r.Build.Round(time.Millisecond))
	}
	tw.Flush()
}
