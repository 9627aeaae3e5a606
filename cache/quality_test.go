package cache_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/specgate/specgate/cache"
)

func loadPairs(t *testing.T) []cache.Pair {
	t.Helper()
	f, err := os.Open("testdata/paraphrases.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ps, err := cache.LoadPairs(f)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

// TestQuality checks the default pipeline (lexical embedder, default
// threshold, guard) on the labelled paraphrase set: at least 300 pairs with
// every hard-negative family, precision ≥ 0.99 on all pairs and on the
// held-out split, and a recall floor so a pipeline that serves nothing fails.
func TestQuality(t *testing.T) {
	ps := loadPairs(t)
	kinds := map[string]int{}
	for _, p := range ps {
		kinds[p.Kind]++
	}
	if len(ps) < 300 {
		t.Fatalf("quality set has %d pairs, want ≥ 300", len(ps))
	}
	for _, k := range []string{"paraphrase", "negation", "number", "entity", "role", "antonym", "topic"} {
		if kinds[k] < 20 {
			t.Errorf("kind %s has %d pairs, want ≥ 20", k, kinds[k])
		}
	}
	emb, err := cache.NewLexical(0)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	r, err := cache.WriteEvalReport(context.Background(), &out, ps, emb, cache.DefaultThreshold)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	if r.All.Precision < 0.99 || r.Holdout.Precision < 0.99 {
		t.Errorf("precision: all %.4f, held-out %.4f; want ≥ 0.99", r.All.Precision, r.Holdout.Precision)
	}
	if r.All.Recall < 0.5 {
		t.Errorf("recall %.4f < 0.5", r.All.Recall)
	}
}
