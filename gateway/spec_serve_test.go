package gateway

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/speculative"
)

// TestSpeculativeServeConcurrentLossless: 16 concurrent greedy chat
// requests to a server whose model drafts with the shipped draft model
// (the engine verifies all their trees in its batched steps) return
// exactly the texts of a server without speculation, and report the
// speculation in usage.
func TestSpeculativeServeConcurrentLossless(t *testing.T) {
	draftDir := "../models/specgate-draft"
	if _, err := os.Stat(filepath.Join(draftDir, "config.json")); err != nil {
		t.Skipf("shipped draft not present: %v", err)
	}
	plain := shippedModel(t)
	tm, err := engine.Load(shippedDir, engine.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dm, err := engine.Load(draftDir, engine.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range []speculative.Config{
		{Method: speculative.MethodChain, K: 4},
		{Method: speculative.MethodDynamic, K: 4, Width: 3, Budget: 8, Adaptive: true},
	} {
		t.Run(string(cfg.Method), func(t *testing.T) {
			d, err := speculative.NewDraft(tm, dm, cfg)
			if err != nil {
				t.Fatal(err)
			}
			se := engine.New(tm, d.EngineOptions(engine.Options{}))
			defer se.Close()
			spec := &LocalModel{Name: "specgate-target", Generator: se, Tokenizer: tm.Tokenizer,
				ContextLength: tm.Config.MaxPositions, KV: tm.KV(), Created: time.Unix(1700000000, 0)}
			ps := startServer(t, Options{Models: []*LocalModel{plain}})
			ss := startServer(t, Options{Models: []*LocalModel{spec}})
			prompts := speculative.BenchPrompts()[:16]
			type answer struct {
				text  string
				usage map[string]any
				err   error
			}
			ask := func(url, prompt string) answer {
				body, _ := json.Marshal(map[string]any{"model": "specgate-target", "temperature": 0, "max_tokens": 48,
					"messages": []map[string]string{{"role": "user", "content": prompt}}})
				req, _ := http.NewRequest("POST", url+"/v1/chat/completions", strings.NewReader(string(body)))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Cache-Control", "no-store, no-cache")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					return answer{err: err}
				}
				defer resp.Body.Close()
				raw, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != 200 {
					return answer{err: fmt.Errorf("status %d: %s", resp.StatusCode, raw)}
				}
				var out struct {
					Choices []struct {
						Message struct{ Content string } `json:"message"`
					} `json:"choices"`
					Usage map[string]any `json:"usage"`
				}
				if err := json.Unmarshal(raw, &out); err != nil || len(out.Choices) != 1 {
					return answer{err: fmt.Errorf("bad response %s: %v", raw, err)}
				}
				return answer{text: out.Choices[0].Message.Content, usage: out.Usage}
			}
			run := func(url string) []answer {
				out := make([]answer, len(prompts))
				var wg sync.WaitGroup
				for i, p := range prompts {
					wg.Add(1)
					go func() { defer wg.Done(); out[i] = ask(url, p) }()
				}
				wg.Wait()
				return out
			}
			want, got := run(ps.URL), run(ss.URL)
			accepted := 0.0
			for i := range prompts {
				if want[i].err != nil || got[i].err != nil {
					t.Fatalf("prompt %d: plain %v, speculative %v", i, want[i].err, got[i].err)
				}
				if got[i].text != want[i].text {
					t.Fatalf("prompt %d %q:\nspeculative %q\nplain       %q", i, prompts[i], got[i].text, want[i].text)
				}
				sp, ok := got[i].usage["speculative"].(map[string]any)
				if !ok {
					t.Fatalf("prompt %d: no usage.speculative in %v", i, got[i].usage)
				}
				if sp["exact"] != true {
					t.Fatalf("prompt %d: usage.speculative.exact = %v", i, sp["exact"])
				}
				accepted += sp["accepted"].(float64)
			}
			if accepted == 0 && !cfg.Adaptive {
				t.Fatal("no draft token accepted over 16 requests: speculation untested")
			}
			// /metrics: target forwards per step and accepted tokens per depth.
			resp, err := http.Get(ss.URL + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			series := map[string]float64{}
			for _, line := range strings.Split(string(raw), "\n") {
				var name string
				var v float64
				if strings.HasPrefix(line, "specgate_") {
					if _, err := fmt.Sscanf(line[strings.LastIndex(line, " ")+1:], "%g", &v); err == nil {
						name = line[:strings.LastIndex(line, " ")]
						series[name] = v
					}
				}
			}
			steps := series[`specgate_engine_steps_total{model="specgate-target"}`]
			fwd := series[`specgate_engine_target_forwards_total{model="specgate-target"}`]
			if steps == 0 || fwd == 0 || fwd > steps {
				t.Fatalf("/metrics: %v steps, %v target forwards", steps, fwd)
			}
			if d1 := series[`specgate_spec_accepted_at_depth_total{depth="1",model="specgate-target"}`]; accepted > 0 && d1 == 0 {
				t.Fatalf("/metrics: no accepted tokens at depth 1 (%d accepted)", int(accepted))
			}
			st := se.Stats()
			t.Logf("%s: 16 concurrent requests equal; %d accepted; engine: %d steps, %d forwards, %d verified trees, %d proposed, %d accepted",
				cfg.Method, int(accepted), st.Steps, st.Forwards, st.SpecSteps, st.SpecProposed, st.SpecAccepted)
		})
	}
}
