package gateway

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/speculative"
)

// decodeForwards counts the target's decode forwards: backend requests
// that hold a draft tree (parents) or one token. Prefill chunks (several
// tokens, no parents) are not counted.
type decodeForwards struct {
	engine.Backend
	n atomic.Int64
}

func (b *decodeForwards) Forward(reqs []*engine.ForwardRequest) error {
	for _, r := range reqs {
		if r.Parents != nil || len(r.Tokens) == 1 {
			b.n.Add(1)
		}
	}
	return b.Backend.Forward(reqs)
}

// TestSpecTokensPerStep: specgate_spec_tokens_per_step (the dashboard's
// "speculation: tokens per target step") is the decode tokens of the
// requests that speculated over their target decode steps, against a
// reference counted at the target's backend: two requests, one whose
// prediction is the whole answer (every step verifies a tree), one whose
// prediction is its first third (then also plain one-token steps: nothing
// left to draft), and the decode forwards each took. The engine's step costs are fixed
// (StepCost), so no calibration forward reaches the backend.
func TestSpecTokensPerStep(t *testing.T) {
	fb, ts := decodeForwardsServer(t, 16)
	const maxTokens = 40
	noCache := map[string]string{"Cache-Control": "no-cache, no-store"}
	// the first bench prompt whose plain answer runs to max_tokens: every
	// token the engine generated is then the client's (no end token inside
	// an accepted path)
	var base string
	var plain draftReply
	for _, prompt := range speculative.BenchPrompts() {
		b, _ := json.Marshal(map[string]any{"model": "specgate-target", "temperature": 0, "max_tokens": maxTokens,
			"messages": []map[string]string{{"role": "user", "content": prompt}}})
		base = string(b[:len(b)-1])
		plain = chatDraft(t, ts.URL, "", base+`}`, map[string]string{"Cache-Control": "no-cache, no-store", HeaderSpeculation: "off"})
		if plain.usage.CompletionTokens == maxTokens {
			break
		}
	}
	if plain.usage.CompletionTokens != maxTokens {
		t.Skipf("no bench prompt's plain answer runs to %d tokens", maxTokens)
	}
	half := []rune(plain.content)
	predictions := []string{plain.content, string(half[:len(half)/3])}
	var decTokens, forwards float64
	for _, p := range predictions {
		pred, _ := json.Marshal(map[string]any{"type": "content", "content": p})
		before := fb.n.Load()
		got := chatDraft(t, ts.URL, "", base+`,"prediction":`+string(pred)+`}`, noCache)
		fw := fb.n.Load() - before
		sp := got.usage.Speculative
		if got.content != plain.content || sp == nil || sp.Steps == 0 || got.usage.CompletionTokens != maxTokens {
			t.Fatalf("prediction %q: %q, usage %+v spec %+v", p, got.content, got.usage, sp)
		}
		t.Logf("prediction of %d chars: %d decode forwards for %d decode tokens; usage steps %d accepted %d",
			len(p), fw, got.usage.CompletionTokens-1, sp.Steps, sp.Accepted)
		decTokens += float64(got.usage.CompletionTokens - 1)
		forwards += float64(fw)
	}
	want := decTokens / forwards
	v := regexp.MustCompile(`(?m)^specgate_spec_tokens_per_step\{model="specgate-target"\} (\S+)$`).FindStringSubmatch(metricsText(t, ts.URL))
	if v == nil {
		t.Fatal("/metrics lacks specgate_spec_tokens_per_step")
	}
	got, err := strconv.ParseFloat(v[1], 64)
	if err != nil || math.Abs(got-want) > 1e-9*want {
		t.Fatalf("specgate_spec_tokens_per_step %s, want %.6f (%.0f decode tokens in %.0f target decode forwards)", v[1], want, decTokens, forwards)
	}
}

// decodeForwardsServer serves the shipped model with speculation on fixed
// draft trees of up to maxDraft nodes behind a backend that counts decode
// forwards; the step costs are fixed (StepCost), so no calibration forward
// reaches the backend. It skips without the shipped model.
func decodeForwardsServer(t *testing.T, maxDraft int) (*decodeForwards, *testServer) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(shippedDir, "config.json")); err != nil {
		t.Skipf("shipped model %s not present: %v", shippedDir, err)
	}
	var fb *decodeForwards
	m, err := engine.Load(shippedDir, engine.LoadOptions{DisablePrefixCache: true,
		NewBackend: func(cfg engine.Config, w *engine.Weights, slots int) (engine.Backend, error) {
			b, err := engine.NewCPUBackend(cfg, w, slots, 2)
			if err != nil {
				return nil, err
			}
			fb = &decodeForwards{Backend: b}
			return fb, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	e := engine.New(m, engine.Options{FixedDraft: true, MaxDraft: maxDraft,
		StepCost: func(n int) time.Duration { return time.Millisecond + time.Duration(n)*100*time.Microsecond }})
	t.Cleanup(func() { e.Close() })
	lm := &LocalModel{Name: "specgate-target", Generator: e, Tokenizer: m.Tokenizer, ContextLength: m.Config.MaxPositions, KV: m.KV()}
	return fb, startServer(t, Options{Models: []*LocalModel{lm}})
}
