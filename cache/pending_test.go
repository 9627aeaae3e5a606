package cache

import (
	"context"
	"sync/atomic"
	"testing"
)

// countingEmbedder counts the texts it embeds.
type countingEmbedder struct {
	Embedder
	n atomic.Int32
}

func (e *countingEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	e.n.Add(int32(len(texts)))
	return e.Embedder.Embed(ctx, texts)
}

// A miss stored through its Pending embeds the key once (the lookup's
// vector); Put embeds it again. Both store an entry a later lookup hits.
func TestPendingReusesTheLookupVector(t *testing.T) {
	lex, err := NewLexical(DefaultLexicalDim)
	if err != nil {
		t.Fatal(err)
	}
	emb := &countingEmbedder{Embedder: lex}
	idx, err := NewHNSW(HNSWConfig{Dim: emb.Dim()})
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(DefaultConfig(), NewMemStore(nil), idx, emb)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	req := func(q string) *Request {
		return &Request{Tenant: "t", Model: "m", Messages: []Message{{Role: "user", Content: q}}, Params: map[string]string{}}
	}
	for _, tc := range []struct {
		q      string
		viaPut bool
		embeds int32
	}{{"What is a monad?", false, 1}, {"How do tides work?", true, 2}} {
		emb.n.Store(0)
		l, pend, err := c.GetPending(ctx, req(tc.q))
		if err != nil || l.Hit || pend == nil {
			t.Fatalf("%q: first lookup %+v %v %v", tc.q, l, pend, err)
		}
		if tc.viaPut {
			err = c.Put(ctx, req(tc.q), []byte(`{"a":1}`), 1)
		} else {
			err = pend.Put(ctx, []byte(`{"a":1}`), 1)
		}
		if err != nil {
			t.Fatal(err)
		}
		if n := emb.n.Load(); n != tc.embeds {
			t.Errorf("%q (Put %v): %d embeddings, want %d", tc.q, tc.viaPut, n, tc.embeds)
		}
		l, pend, err = c.GetPending(ctx, req(tc.q))
		if err != nil || !l.Hit || l.Tier != TierExact || pend != nil || string(l.Response) != `{"a":1}` {
			t.Errorf("%q: second lookup %+v %v %v", tc.q, l, pend, err)
		}
	}
}
