package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/specgate/specgate/cache"
)

// cache-eval: precision/recall of the default semantic-cache pipeline on the
// labelled paraphrase set; cache-bench: in-process hit-path latency and
// throughput. docs/cache.md quotes both.
func init() {
	register("cache-eval", "semantic cache precision/recall on labelled paraphrase pairs", runCacheEval)
	register("cache-bench", "semantic cache hit-path latency p50/p99 and throughput", runCacheBench)
}

func runCacheEval(args []string) error {
	fs := flag.NewFlagSet("cache-eval", flag.ContinueOnError)
	pairs := fs.String("pairs", "cache/testdata/paraphrases.jsonl", "labelled pairs (JSON lines: a, b, label, kind, topic)")
	dim := fs.Int("dim", cache.DefaultLexicalDim, "lexical embedder dimension")
	threshold := fs.Float64("threshold", float64(cache.DefaultThreshold), "cosine threshold of the semantic tier")
	if err := fs.Parse(args); err != nil {
		return err
	}
	f, err := os.Open(*pairs)
	if err != nil {
		return fmt.Errorf("cache-eval: %w", err)
	}
	defer f.Close()
	ps, err := cache.LoadPairs(f)
	if err != nil {
		return fmt.Errorf("cache-eval: %s: %w", *pairs, err)
	}
	emb, err := cache.NewLexical(*dim)
	if err != nil {
		return err
	}
	_, err = cache.WriteEvalReport(context.Background(), os.Stdout, ps, emb, float32(*threshold))
	return err
}

func runCacheBench(args []string) error {
	fs := flag.NewFlagSet("cache-bench", flag.ContinueOnError)
	entries := fs.String("entries", "10000,100000", "comma-separated entry counts")
	queries := fs.Int("queries", 2000, "timed lookups per tier")
	parallel := fs.Int("parallel", 4, "goroutines for the throughput run")
	dim := fs.Int("dim", cache.DefaultLexicalDim, "lexical embedder dimension")
	store := fs.String("store", "memory", "store: memory or sqlite")
	dir := fs.String("dir", "", "directory for the sqlite file (default: temporary)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	for _, s := range strings.Split(*entries, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			return fmt.Errorf("cache-bench: -entries: bad count %q", s)
		}
		rs, err := cache.RunBench(context.Background(), cache.BenchConfig{
			Entries: n, Queries: *queries, Parallel: *parallel, Dim: *dim, Store: *store, Dir: *dir, Seed: 1,
		})
		if err != nil {
			return fmt.Errorf("cache-bench: %d entries: %w", n, err)
		}
		cache.WriteBenchTable(os.Stdout, rs) // one table per size, printed as soon as it is measured
	}
	return nil
}
