package gateway

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/speculative"
)

// TestSpecTokensPerStepStopInPath: specgate_spec_tokens_per_step when the
// caller stops inside an accepted path (a stop string in the middle of a
// prediction of the whole answer): the last forward's own token is not
// taken, and the engine may have run one more step ahead of the caller.
// The reference is again the decode forwards counted at the target's
// backend for these requests; the gauge was decode tokens over
// (decode tokens - accepted), which drops every such forward.
func TestSpecTokensPerStepStopInPath(t *testing.T) {
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
	e := engine.New(m, engine.Options{FixedDraft: true, MaxDraft: 8,
		StepCost: func(n int) time.Duration { return time.Millisecond + time.Duration(n)*100*time.Microsecond }})
	t.Cleanup(func() { e.Close() })
	lm := &LocalModel{Name: "specgate-target", Generator: e, Tokenizer: m.Tokenizer, ContextLength: m.Config.MaxPositions, KV: m.KV()}
	ts := startServer(t, Options{Models: []*LocalModel{lm}})
	const maxTokens = 40
	noCache := map[string]string{"Cache-Control": "no-cache, no-store"}
	var dec, forwards float64
	tried := 0
	for _, prompt := range speculative.BenchPrompts() {
		if tried == 3 {
			break
		}
		b, _ := json.Marshal(map[string]any{"model": "specgate-target", "temperature": 0, "max_tokens": maxTokens,
			"messages": []map[string]string{{"role": "user", "content": prompt}}})
		base := string(b[:len(b)-1])
		plain := chatDraft(t, ts.URL, "", base+`}`, map[string]string{"Cache-Control": "no-cache, no-store", HeaderSpeculation: "off"})
		words := strings.Fields(plain.content)
		if len(words) < 8 {
			continue
		}
		// a stop string past the first tree: a word of the last third
		// that does not occur before it
		stop := ""
		for _, w := range words[2*len(words)/3:] {
			if i := strings.Index(plain.content, w); i > len(plain.content)/2 {
				stop = w
				break
			}
		}
		if stop == "" {
			continue
		}
		tried++
		want := plain.content[:strings.Index(plain.content, stop)]
		pred, _ := json.Marshal(map[string]any{"type": "content", "content": plain.content})
		st, _ := json.Marshal([]string{stop})
		before := fb.n.Load()
		got := chatDraft(t, ts.URL, "", base+`,"stop":`+string(st)+`,"prediction":`+string(pred)+`}`, noCache)
		fw := fb.n.Load() - before
		sp := got.usage.Speculative
		if got.content != want || sp == nil || sp.Steps == 0 {
			t.Fatalf("stop %q: %q (want %q), usage %+v spec %+v", stop, got.content, want, got.usage, sp)
		}
		t.Logf("stop %q after %d of %d chars: %d decode tokens in %d backend decode forwards; usage steps %d accepted %d",
			stop, len(want), len(plain.content), got.usage.CompletionTokens-1, fw, sp.Steps, sp.Accepted)
		dec += float64(got.usage.CompletionTokens - 1)
		forwards += float64(fw)
	}
	if tried == 0 {
		t.Skip("no bench prompt with a usable stop word")
	}
	want := dec / forwards
	v := regexp.MustCompile(`(?m)^specgate_spec_tokens_per_step\{model="specgate-target"\} (\S+)$`).FindStringSubmatch(metricsText(t, ts.URL))
	if v == nil {
		t.Fatalf("/metrics lacks specgate_spec_tokens_per_step (want %.6f: %.0f decode tokens in %.0f target decode forwards)", want, dec, forwards)
	}
	got, err := strconv.ParseFloat(v[1], 64)
	if err != nil || math.Abs(got-want) > 1e-9*want {
		t.Fatalf("specgate_spec_tokens_per_step %s, want %.6f (%.0f decode tokens in %.0f target decode forwards)", v[1], want, dec, forwards)
	}
}
