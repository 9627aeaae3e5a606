package gateway

import (
	"context"
	"encoding/json"
	"runtime"
	"sync"
	"testing"
	"time"
	"weak"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/speculative"
)

// knownCapture is a Generator that records the Known proposer a request
// was given, then answers as fakeGen does.
type knownCapture struct {
	fakeGen
	mu    sync.Mutex
	known []*speculative.Known
}

func (g *knownCapture) Generate(ctx context.Context, req engine.GenerateRequest, emit func(engine.Chunk) error) (engine.Result, error) {
	g.mu.Lock()
	for _, p := range req.Proposers {
		if k, ok := p.(*speculative.Known); ok {
			g.known = append(g.known, k)
		}
	}
	g.mu.Unlock()
	return g.fakeGen.Generate(ctx, req, emit)
}

// TestKnownPerModel: two local models without their own Drafts each get
// one Known proposer of their own (the same for every request of the
// model). Each engine numbers its requests from 1, so a shared one let
// model b's request 1 keep model a's request 1's cursors and, on release,
// drop them: the check below starts request 1 on both, releases b's, and
// a's prediction must still draft.
func TestKnownPerModel(t *testing.T) {
	ga, gb := &knownCapture{fakeGen: fakeGen{Reply: "ok"}}, &knownCapture{fakeGen: fakeGen{Reply: "ok"}}
	ts := startServer(t, Options{Models: []*LocalModel{fakeModel("a", ga), fakeModel("b", gb)}})
	ask := func(model, pred string) {
		t.Helper()
		p, _ := json.Marshal(map[string]any{"type": "content", "content": pred})
		r := post(t, ts.URL+"/v1/chat/completions", "", `{"model":"`+model+`","max_tokens":2,"messages":[{"role":"user","content":"hi"}],"prediction":`+string(p)+`}`, nil)
		if r.status != 200 {
			t.Fatalf("%s: status %d: %s", model, r.status, r.body)
		}
	}
	ask("a", "alpha beta gamma")
	ask("b", "one two three")
	ask("a", "alpha beta gamma")
	if len(ga.known) != 2 || len(gb.known) != 1 {
		t.Fatalf("requests with a Known proposer: a %d, b %d; want 2 and 1", len(ga.known), len(gb.known))
	}
	ka, kb := ga.known[0], gb.known[0]
	if ga.known[1] != ka {
		t.Errorf("model a's two requests got two Known proposers: want one per model")
	}
	if ka == kb {
		t.Errorf("models a and b share one Known proposer: want one per model (their engines both number requests from 1)")
	}

	// both engines' request 1: a's prediction, b's other prediction; b's
	// request ends first.
	predA := []int32{10, 11, 12, 13, 14, 15, 16, 17}
	ka.Start(1, "", []engine.KnownDraft{{Source: speculative.SourcePrediction, Tokens: predA}})
	kb.Start(1, "", []engine.KnownDraft{{Source: speculative.SourcePrediction, Tokens: []int32{90, 91, 92, 93}}})
	kb.Release(1)
	out, err := ka.Propose(context.Background(), []engine.ProposeRequest{{ID: 1, Generated: predA[:1], Budget: 8, MaxDepth: 8}})
	if err != nil {
		t.Fatal(err)
	}
	if len(out[0].Tokens) == 0 || out[0].Tokens[0] != predA[1] {
		t.Fatalf("model a's request 1 after model b's request 1 ended: proposal %v, want its prediction's next tokens %v", out[0].Tokens, predA[1:])
	}
}

// TestKnownPerModelFreed: a model's Known proposer is dropped when the
// model is (servers come and go in tests and on reloads; the map must not
// keep their models or cursors).
func TestKnownPerModelFreed(t *testing.T) {
	m := fakeModel("gone", &fakeGen{Reply: "ok"})
	if modelKnown(m) != modelKnown(m) {
		t.Fatal("one model, two Known proposers")
	}
	wp := weak.Make(m)
	m = nil
	for i := 0; i < 200; i++ {
		runtime.GC()
		if _, ok := modelKnowns.Load(wp); !ok {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("the model is gone but its Known proposer is still held")
}
