package gateway

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/specgate/specgate/engine"
)

// shippedDir is the model the acceptance tests run against.
const shippedDir = "../models/specgate-target"

type loadedModel struct {
	once sync.Once
	m    *engine.Model
	e    *engine.Engine
	err  error
}

// shipped is shared by the tests; shippedNoPrefix has the prefix cache off
// so that golden usage numbers do not depend on which test ran first.
var shipped, shippedNoPrefix loadedModel

// shippedModel serves the shipped model with the real engine (CPU). It
// skips the test when the model is not in the tree.
func shippedModel(t testing.TB) *LocalModel { return loadShipped(t, &shipped, false) }

func loadShipped(t testing.TB, l *loadedModel, noPrefix bool) *LocalModel {
	t.Helper()
	if _, err := os.Stat(filepath.Join(shippedDir, "config.json")); err != nil {
		t.Skipf("shipped model %s not present: %v", shippedDir, err)
	}
	l.once.Do(func() {
		l.m, l.err = engine.Load(shippedDir, engine.LoadOptions{DisablePrefixCache: noPrefix})
		if l.err == nil {
			l.e = engine.New(l.m, engine.Options{})
		}
	})
	if l.err != nil {
		t.Fatalf("loading %s: %v", shippedDir, l.err)
	}
	return &LocalModel{Name: "specgate-target", Aliases: []string{"specgate"}, Generator: l.e, Tokenizer: l.m.Tokenizer,
		ContextLength: l.m.Config.MaxPositions, KV: l.m.KV(), Created: time.Unix(1700000000, 0)}
}

// randomModel serves a small random-weight Llama with the real engine and
// the byte tokenizer (the engine emits token ids; its text is empty because
// the model has no tokenizer). Used where the engine's mechanics matter
// (KV accounting, cancellation), not its text.
func randomModel(t testing.TB) (*LocalModel, *engine.Model) {
	t.Helper()
	cfg := engine.Config{HiddenSize: 64, IntermediateSize: 128, NumLayers: 2, NumHeads: 4, NumKVHeads: 2, HeadDim: 16,
		RMSNormEps: 1e-5, RopeTheta: 10000, RopeScaling: engine.RopeScaling{Type: engine.RopeDefault}, MaxPositions: 4096,
		VocabSize: 300, BOS: 256, EOS: []int32{299}}
	m := engine.NewRandomModel(cfg, 7, engine.LoadOptions{KVTokens: 8192, Threads: 1})
	e := engine.New(m, engine.Options{})
	t.Cleanup(func() { _ = e.Close(); _ = m.Close() })
	return &LocalModel{Name: "random", Generator: e, Tokenizer: byteTokenizer{}, ContextLength: cfg.MaxPositions, KV: m.KV()}, m
}

// trackedGen wraps a real Generator and records when calls return and how
// many chunks each emitted after a mark.
type trackedGen struct {
	engine.Generator
	active   atomic.Int32
	mu       sync.Mutex
	returned []time.Time
	results  []engine.Result
	errs     []error
	mark     atomic.Int64 // unix nanos; chunks emitted after it are counted
	afterMrk atomic.Int32
	chunks   atomic.Int32
}

func (g *trackedGen) Generate(ctx context.Context, req engine.GenerateRequest, emit func(engine.Chunk) error) (engine.Result, error) {
	g.active.Add(1)
	res, err := g.Generator.Generate(ctx, req, func(c engine.Chunk) error {
		g.chunks.Add(1)
		if m := g.mark.Load(); m != 0 && time.Now().UnixNano() > m {
			g.afterMrk.Add(int32(len(c.Tokens)))
		}
		return emit(c)
	})
	g.mu.Lock()
	g.returned = append(g.returned, time.Now())
	g.results = append(g.results, res)
	g.errs = append(g.errs, err)
	g.mu.Unlock()
	g.active.Add(-1)
	return res, err
}
