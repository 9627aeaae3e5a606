package gateway

import (
	"encoding/json"
	"io"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"testing"
)

// TestSpecSavedSplit checks the estimate on hand-computed numbers: plain
// decoding ran at 10 ms per token; a 41-token completion that speculated
// decoded in 200 ms, so it saved 40 x 10 - 200 = 200 ms. Its overhead is
// 30 accepted x 10 ms - 200 ms = 100 ms, charged 3/4 to the prediction (30
// of 40 proposed nodes) and 1/4 to the suffix: prediction 280 - 75 = 205
// ms, suffix 20 - 25 = -5 ms.
func TestSpecSavedSplit(t *testing.T) {
	u := &Usage{CompletionTokens: 41, Speculative: &SpeculativeUsage{Steps: 10, Proposed: 40, Accepted: 30,
		BySource: map[string]SpeculativeSource{"prediction": {Proposed: 30, Accepted: 28}, "suffix": {Proposed: 10, Accepted: 2}}}}
	var g genTotals
	g.addSpecSaved(u, 0.2)
	if g.specSaved != nil {
		t.Fatalf("estimate without a plain baseline: %v", g.specSaved)
	}
	g.plainSecs, g.plainTokens = 1.0, 100
	g.addSpecSaved(u, 0.2)
	for src, want := range map[string]float64{"prediction": 0.205, "suffix": -0.005} {
		if got := g.specSaved[src]; math.Abs(got-want) > 1e-12 {
			t.Errorf("%s: saved %v, want %v", src, got, want)
		}
	}
	if len(g.specSaved) != 2 {
		t.Errorf("sources %v", g.specSaved)
	}
	// no draft step: nothing (the request decoded plainly)
	g.addSpecSaved(&Usage{CompletionTokens: 9, Speculative: &SpeculativeUsage{}}, 1)
	if len(g.specSaved) != 2 || math.Abs(g.specSaved["prediction"]-0.205) > 1e-12 {
		t.Errorf("a request without draft steps changed the estimate: %v", g.specSaved)
	}
}

// TestSpecSavedServed: after a plain request and one with an exact
// prediction, /metrics carries the per-source estimate and /stats/history
// its totals (which the dashboard shows).
func TestSpecSavedServed(t *testing.T) {
	lm := fixedDraftModel(t)
	ts := startServer(t, Options{Models: []*LocalModel{lm}})
	base := `{"model":"specgate-target","temperature":0,"max_tokens":48,"messages":[{"role":"user","content":"Write a short Go function that subtracts two integers."}]`
	noCache := map[string]string{"Cache-Control": "no-cache, no-store"}
	plain := chatDraft(t, ts.URL, "", base+`}`, map[string]string{"Cache-Control": "no-cache, no-store", HeaderSpeculation: "off"})
	pred, _ := json.Marshal(map[string]any{"type": "content", "content": plain.content})
	got := chatDraft(t, ts.URL, "", base+`,"prediction":`+string(pred)+`}`, noCache)
	if got.content != plain.content || got.usage.Speculative == nil || got.usage.Speculative.BySource["prediction"].Accepted == 0 {
		t.Fatalf("prediction request: %q %+v", got.content, got.usage.Speculative)
	}
	m := regexp.MustCompile(`(?m)^specgate_spec_saved_seconds\{model="specgate-target",source="prediction"\} (\S+)$`).FindStringSubmatch(metricsText(t, ts.URL))
	if m == nil {
		t.Fatalf("/metrics lacks specgate_spec_saved_seconds for the prediction")
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil || math.IsNaN(v) {
		t.Fatalf("saved seconds %q", m[1])
	}
	resp, err := http.Get(ts.URL + "/stats/history")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var h History
	if err := json.Unmarshal(b, &h); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	if s, ok := h.Totals.SpecSaved["prediction"]; !ok || math.Abs(s-v) > 1e-9 || math.Abs(h.Totals.SpecSavedSeconds-v) > 1e-9 {
		t.Fatalf("history totals %+v, want prediction %v", h.Totals, v)
	}
	t.Logf("prediction saved %.2f ms (estimate against the plain request)", v*1e3)
}
