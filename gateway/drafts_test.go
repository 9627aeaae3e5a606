package gateway

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/speculative"
)

func TestParsePrediction(t *testing.T) {
	for _, c := range []struct {
		raw, text, param string
	}{
		{`{"type":"content","content":"abc"}`, "abc", ""},
		{`{"type":"content","content":[{"type":"text","text":"ab"},{"type":"text","text":"c"}]}`, "abc", ""},
		{`{"type":"content","content":""}`, "", ""},
		{`{"type":"file","content":"abc"}`, "", "prediction.type"},
		{`{"type":"content"}`, "", "prediction.content"},
		{`{"type":"content","content":null}`, "", "prediction.content"},
		{`{"type":"content","content":5}`, "", "prediction.content"},
		{`{"type":"content","content":[{"type":"image_url","image_url":{"url":"x"}}]}`, "", "prediction.content"},
		{`"abc"`, "", "prediction"},
		{`[1]`, "", "prediction"},
	} {
		text, aerr := parsePrediction(json.RawMessage(c.raw))
		switch {
		case c.param == "" && (aerr != nil || text != c.text):
			t.Errorf("%s: %q %v, want %q", c.raw, text, aerr, c.text)
		case c.param != "" && (aerr == nil || aerr.Param != c.param || aerr.Status != 400):
			t.Errorf("%s: error %+v, want 400 on %s", c.raw, aerr, c.param)
		}
	}
}

func TestAnswerText(t *testing.T) {
	for _, c := range []struct{ body, want string }{
		{`{"choices":[{"index":0,"message":{"role":"assistant","content":"hi there"}}]}`, "hi there"},
		{`{"choices":[{"index":1,"text":"no"},{"index":0,"text":"yes"}]}`, "yes"},
		{"data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"}}]}\n\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"b\"}}]}\n\ndata: [DONE]\n\n", "ab"},
		{`not json`, ""},
	} {
		if got := answerText([]byte(c.body)); got != c.want {
			t.Errorf("answerText(%q) = %q, want %q", c.body, got, c.want)
		}
	}
}

var fixedDraft loadedModel

// fixedDraftModel serves the shipped model from its own engine that
// verifies every proposed draft node (engine.Options.FixedDraft, up to 16
// per step): the tests then see the drafts used whatever the engine's
// adaptive budget would decide on this machine.
func fixedDraftModel(t *testing.T) *LocalModel {
	t.Helper()
	if _, err := os.Stat(filepath.Join(shippedDir, "config.json")); err != nil {
		t.Skipf("shipped model %s not present: %v", shippedDir, err)
	}
	l := &fixedDraft
	l.once.Do(func() {
		l.m, l.err = engine.Load(shippedDir, engine.LoadOptions{})
		if l.err == nil {
			l.e = engine.New(l.m, engine.Options{FixedDraft: true, MaxDraft: 16})
		}
	})
	if l.err != nil {
		t.Fatal(l.err)
	}
	return &LocalModel{Name: "specgate-target", Generator: l.e, Tokenizer: l.m.Tokenizer, ContextLength: l.m.Config.MaxPositions, KV: l.m.KV()}
}

type draftReply struct {
	content string
	usage   *Usage
}

func chatDraft(t *testing.T, url, key, body string, hdr map[string]string) draftReply {
	t.Helper()
	r := post(t, url+"/v1/chat/completions", key, body, hdr)
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	c, u := chatContent(t, r.body)
	return draftReply{c, u}
}

// TestPredictionLossless: over HTTP with the shipped model, a chat or
// completion request with a `prediction` (exact, edited, unrelated, as a
// string and as text parts) returns exactly the answer without one, and
// reports OpenAI's accepted/rejected prediction tokens and the per-source
// split; a request without a prediction reports neither.
func TestPredictionLossless(t *testing.T) {
	lm := fixedDraftModel(t)
	ts := startServer(t, Options{Models: []*LocalModel{lm}})
	base := `{"model":"specgate-target","temperature":0,"max_tokens":48,"messages":[{"role":"user","content":"Write a short Go function that adds two integers."}]`
	plain := chatDraft(t, ts.URL, "", base+`}`, nil)
	if plain.usage.CompletionTokensDetails.AcceptedPredictionTokens != nil || plain.usage.Speculative != nil {
		t.Fatalf("no prediction, yet prediction usage or speculation: %+v", plain.usage)
	}
	raw := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	words := strings.Fields(plain.content)
	edited := strings.Replace(plain.content, words[len(words)/2], "banana", 1)
	ntok := len(lm.Tokenizer.Encode(plain.content, false))
	for _, c := range []struct {
		name, pred string
		minAcc     int
	}{
		{"exact", raw(map[string]any{"type": "content", "content": plain.content}), ntok / 2},
		{"parts", raw(map[string]any{"type": "content", "content": []map[string]string{{"type": "text", "text": plain.content[:10]}, {"type": "text", "text": plain.content[10:]}}}), ntok / 2},
		{"edited", raw(map[string]any{"type": "content", "content": edited}), ntok / 4},
		{"unrelated", raw(map[string]any{"type": "content", "content": "The quick brown fox jumps over the lazy dog."}), 0},
	} {
		got := chatDraft(t, ts.URL, "", base+`,"prediction":`+c.pred+`}`, nil)
		if got.content != plain.content {
			t.Fatalf("%s: content %q, want %q", c.name, got.content, plain.content)
		}
		d := got.usage.CompletionTokensDetails
		if d.AcceptedPredictionTokens == nil || d.RejectedPredictionTokens == nil {
			t.Fatalf("%s: usage without prediction tokens: %+v", c.name, d)
		}
		acc, rej := *d.AcceptedPredictionTokens, *d.RejectedPredictionTokens
		if acc < c.minAcc || acc > got.usage.CompletionTokens {
			t.Fatalf("%s: accepted_prediction_tokens %d, want >= %d (completion %d)", c.name, acc, c.minAcc, got.usage.CompletionTokens)
		}
		sp := got.usage.Speculative
		if c.minAcc > 0 && (sp == nil || sp.BySource[speculative.SourcePrediction].Accepted == 0 || sp.BySource[speculative.SourcePrediction].Accepted > acc) {
			t.Fatalf("%s: usage.speculative %+v, want 0 < by_source.prediction.accepted <= %d", c.name, sp, acc)
		}
		if c.name == "exact" && (acc != ntok || rej != 0) {
			t.Fatalf("exact prediction: accepted %d rejected %d, want %d and 0 (every prediction token is in the completion)", acc, rej, ntok)
		}
		t.Logf("%s: accepted %d rejected %d, speculative %+v", c.name, acc, rej, sp)
	}
	// completions accept it too (an extension: OpenAI has it on chat only).
	cbase := `{"model":"specgate-target","temperature":0,"max_tokens":40,"prompt":"func main() {"`
	r := post(t, ts.URL+"/v1/completions", "", cbase+`}`, nil)
	var c0, c1 Completion
	if err := json.Unmarshal(r.body, &c0); err != nil || r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	r = post(t, ts.URL+"/v1/completions", "", cbase+`,"prediction":`+raw(map[string]any{"type": "content", "content": c0.Choices[0].Text})+`}`, nil)
	if err := json.Unmarshal(r.body, &c1); err != nil || r.status != 200 || c1.Choices[0].Text != c0.Choices[0].Text {
		t.Fatalf("completions with prediction: %d %s, want text %q", r.status, r.body, c0.Choices[0].Text)
	}
	var u Usage
	_ = json.Unmarshal(c1.Usage, &u)
	if u.CompletionTokensDetails == nil || u.CompletionTokensDetails.AcceptedPredictionTokens == nil || *u.CompletionTokensDetails.AcceptedPredictionTokens == 0 {
		t.Fatalf("completions usage %s", c1.Usage)
	}
	// streamed: same text.
	sr := post(t, ts.URL+"/v1/chat/completions", "", base+`,"stream":true,"stream_options":{"include_usage":true},"prediction":`+raw(map[string]any{"type": "content", "content": plain.content})+`}`, nil)
	if got := sseContent(t, sr.body); got != plain.content {
		t.Fatalf("stream with prediction: %q, want %q", got, plain.content)
	}
	if !strings.Contains(string(sr.body), `"accepted_prediction_tokens"`) {
		t.Fatalf("stream usage lacks accepted_prediction_tokens: %s", sr.body)
	}
	// bad predictions: OpenAI error JSON, 400, param named.
	bad := post(t, ts.URL+"/v1/chat/completions", "", base+`,"prediction":{"type":"content","content":7}}`, nil)
	if bad.status != 400 || !strings.Contains(string(bad.body), `"param":"prediction.content"`) {
		t.Fatalf("bad prediction: %d %s", bad.status, bad.body)
	}
}

// TestNearMissDraftAndTenants: a paraphrase below the cache threshold is a
// miss, but the stored answer drafts its generation (usage by_source
// near_miss, the near-miss metric); the output equals plain decoding
// without the cache. The tenant's earlier answers draft its later
// requests, never another tenant's.
func TestNearMissDraftAndTenants(t *testing.T) {
	plainTS := startServer(t, Options{Models: []*LocalModel{shippedModel(t)}})
	cfg := DefaultConfig()
	keys, _ := ParseAPIKeys("ka=tenantA,kb=tenantB")
	cfg.Auth.Keys = keys
	cfg.Auth.PublicMetrics = true // the test reads /metrics without the admin key
	// the engine of fixedDraftModel gives a request's whole draft budget to
	// its first proposer: one server per source keeps the test independent
	// of how the adaptive engine would split it.
	lm := fixedDraftModel(t)
	lm.Drafts = &Drafts{NearMissBand: 0.3}
	ts := startServer(t, Options{Config: cfg, Models: []*LocalModel{lm}, Cache: newTestCache(t)})
	body := func(q string) string {
		return fmt.Sprintf(`{"model":"specgate-target","temperature":0,"max_tokens":48,"messages":[{"role":"user","content":%q}]}`, q)
	}
	q1 := "How do I reverse a list in Python?"
	q2 := "Python: reversing sequences, lists and strings, explained with examples for beginners"
	a1 := chatDraft(t, ts.URL, "ka", body(q1), nil)
	r2 := post(t, ts.URL+"/v1/chat/completions", "ka", body(q2), nil)
	if r2.status != 200 || r2.xcache != "MISS" {
		t.Fatalf("paraphrase below threshold: %d %s %s", r2.status, r2.xcache, r2.body)
	}
	c2, u2 := chatContent(t, r2.body)
	want2 := chatDraft(t, plainTS.URL, "", body(q2), nil)
	if c2 != want2.content {
		t.Fatalf("near-miss drafted answer %q differs from plain %q", c2, want2.content)
	}
	if u2.Speculative == nil || u2.Speculative.BySource[speculative.SourceNearMiss].Proposed == 0 {
		t.Fatalf("near miss not drafted: %+v (first answer %q)", u2.Speculative, a1.content)
	}
	t.Logf("near miss: %+v", u2.Speculative.BySource)
	m := metricsText(t, ts.URL)
	if !strings.Contains(m, `specgate_cache_near_miss_drafts_total{model="specgate-target",reason="threshold"} 1`) ||
		!strings.Contains(m, `specgate_spec_source_tokens_total{kind="proposed",model="specgate-target",source="near_miss"}`) {
		t.Fatalf("metrics lack the near-miss series:\n%s", grepLines(m, "near_miss"))
	}
	// a request that sends a prediction skips the near-miss lookup: q2
	// again, no-cache (without the prediction its would-be hit drafts,
	// reason no-cache), predicted with q1's answer.
	pb := fmt.Sprintf(`{"model":"specgate-target","temperature":0,"max_tokens":48,"messages":[{"role":"user","content":%q}],"prediction":{"type":"content","content":%q}}`, q2, a1.content)
	r3 := post(t, ts.URL+"/v1/chat/completions", "ka", pb, map[string]string{"Cache-Control": "no-cache"})
	if r3.status != 200 {
		t.Fatalf("predicted request: %d %s", r3.status, r3.body)
	}
	if c3, u3 := chatContent(t, r3.body); c3 != want2.content || u3.Speculative == nil ||
		u3.Speculative.BySource[speculative.SourceNearMiss].Proposed != 0 || u3.Speculative.BySource[speculative.SourcePrediction].Proposed == 0 {
		t.Fatalf("predicted request: %q (want %q), %+v: want prediction drafts and no near miss", c3, want2.content, u3.Speculative)
	}
	if m := metricsText(t, ts.URL); strings.Contains(m, `specgate_cache_near_miss_drafts_total{model="specgate-target",reason="no-cache"}`) {
		t.Fatalf("a predicted request looked its near miss up:\n%s", grepLines(m, "near_miss_drafts"))
	}
	// tenants: the same question twice from tenant A, then once from tenant B
	// (no near misses: no cache). A's earlier answer drafts A's second
	// request through the suffix proposer; B gets nothing of A's.
	lm2 := fixedDraftModel(t)
	suffix, err := speculative.NewSuffix(speculative.SuffixConfig{NoPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	lm2.Drafts = &Drafts{Suffix: suffix}
	ts2 := startServer(t, Options{Config: cfg, Models: []*LocalModel{lm2}})
	if first := chatDraft(t, ts2.URL, "ka", body(q1), nil); first.content != a1.content {
		t.Fatalf("answers differ: %q / %q", first.content, a1.content)
	}
	a := chatDraft(t, ts2.URL, "ka", body(q1), nil)
	b := chatDraft(t, ts2.URL, "kb", body(q1), nil)
	if a.content != a1.content || b.content != a1.content {
		t.Fatalf("answers differ: %q / %q / %q", a1.content, a.content, b.content)
	}
	if a.usage.Speculative == nil || a.usage.Speculative.BySource[speculative.SourceSuffix].Accepted == 0 {
		t.Fatalf("tenant A: own earlier answer not drafted: %+v", a.usage.Speculative)
	}
	if b.usage.Speculative != nil && b.usage.Speculative.BySource[speculative.SourceSuffix].Proposed > 0 {
		t.Fatalf("tenant B drafted from tenant A's answer: %+v", b.usage.Speculative)
	}
}

func metricsText(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestCommonTokens(t *testing.T) {
	for _, c := range []struct {
		a, b []int32
		want int
	}{
		{nil, []int32{1}, 0},
		{[]int32{1, 2, 3}, []int32{1, 2, 3}, 3},
		{[]int32{1, 2, 3, 4, 5}, []int32{1, 9, 3, 4, 8, 5}, 4},
		{[]int32{5, 4, 3}, []int32{3, 4, 5}, 1},
		{[]int32{1, 2, 1, 2}, []int32{2, 1, 2, 1}, 3},
	} {
		if got, ok := commonTokens(c.a, c.b); !ok || got != c.want {
			t.Errorf("commonTokens(%v, %v) = %d %v, want %d", c.a, c.b, got, ok, c.want)
		}
	}
	ones := make([]int32, 1<<13)
	for i := range ones {
		ones[i] = 1
	}
	if _, ok := commonTokens(make([]int32, 1<<13), ones); ok {
		t.Error("2^26 cells accepted")
	}
	if n, ok := commonTokens(make([]int32, 1<<13), make([]int32, 1<<13)); !ok || n != 1<<13 {
		t.Errorf("equal lists of 2^13: %d %v, want all (no table needed)", n, ok)
	}
	// against the full dynamic-programming table (no prefix/suffix
	// shortcut), on random lists over a small alphabet
	ref := func(a, b []int32) int {
		d := make([][]int, len(a)+1)
		for i := range d {
			d[i] = make([]int, len(b)+1)
		}
		for i := 1; i <= len(a); i++ {
			for j := 1; j <= len(b); j++ {
				if a[i-1] == b[j-1] {
					d[i][j] = d[i-1][j-1] + 1
				} else {
					d[i][j] = max(d[i-1][j], d[i][j-1])
				}
			}
		}
		return d[len(a)][len(b)]
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for it := range 2000 {
		gen := func() []int32 {
			x := make([]int32, rng.IntN(12))
			for i := range x {
				x[i] = int32(rng.IntN(3))
			}
			return x
		}
		a, b := gen(), gen()
		if it%3 == 0 { // shared prefix and suffix
			pre, suf := gen(), gen()
			a = append(append(append([]int32(nil), pre...), a...), suf...)
			b = append(append(append([]int32(nil), pre...), b...), suf...)
		}
		if got, ok := commonTokens(a, b); !ok || got != ref(a, b) {
			t.Fatalf("commonTokens(%v, %v) = %d %v, want %d", a, b, got, ok, ref(a, b))
		}
	}
}

// TestUpstreamAnswerDraftsLocal: an upstream model's cached answer drafts
// the same tenant's request to a local model (cache.NearMiss across model
// names; the two namespaces differ in model and parameters). The local
// answer is the local model's own (equal to a server without cache or
// upstream) and the drafted tokens came from the near miss.
func TestUpstreamAnswerDraftsLocal(t *testing.T) {
	q := "Write a short Go function that adds two integers."
	body := func(model string) string {
		return fmt.Sprintf(`{"model":%q,"temperature":0,"max_tokens":48,"messages":[{"role":"user","content":%q}]}`, model, q)
	}
	plainTS := startServer(t, Options{Models: []*LocalModel{fixedDraftModel(t)}})
	want := chatDraft(t, plainTS.URL, "", body("specgate-target"), map[string]string{HeaderSpeculation: "off"})
	// the upstream happens to answer what the local model would.
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		b, _ := json.Marshal(map[string]any{"id": "chatcmpl-up", "object": "chat.completion", "created": 1, "model": "up-model",
			"choices": []any{map[string]any{"index": 0, "message": map[string]string{"role": "assistant", "content": want.content}, "finish_reason": "stop"}},
			"usage":   map[string]int{"prompt_tokens": 5, "completion_tokens": 9, "total_tokens": 14}})
		_, _ = w.Write(b)
	}))
	defer up.Close()
	cfg := DefaultConfig()
	cfg.Models = nil
	cfg.Upstreams = []UpstreamConfig{{Name: "up", BaseURL: up.URL, Models: []string{"up-model"}}}
	cfg.applyDefaults()
	lm := fixedDraftModel(t)
	lm.Drafts = &Drafts{NearMissBand: 0.35, NearMissModels: []string{"up-model"}}
	ts := startServer(t, Options{Config: cfg, Models: []*LocalModel{lm}, Cache: newTestCache(t), Getenv: func(string) string { return "" }})
	if r := post(t, ts.URL+"/v1/chat/completions", "", body("up-model"), nil); r.status != 200 {
		t.Fatalf("upstream: %d %s", r.status, r.body)
	}
	r := post(t, ts.URL+"/v1/chat/completions", "", body("specgate-target"), nil)
	if r.status != 200 || r.xcache != "MISS" {
		t.Fatalf("local: %d %s %s", r.status, r.xcache, r.body)
	}
	got, u := chatContent(t, r.body)
	if got != want.content {
		t.Fatalf("local answer %q, want the plain %q", got, want.content)
	}
	if u.Speculative == nil || u.Speculative.BySource[speculative.SourceNearMiss].Accepted == 0 {
		t.Fatalf("the upstream's answer did not draft: %+v", u.Speculative)
	}
	if m := metricsText(t, ts.URL); !strings.Contains(m, `specgate_cache_near_miss_drafts_total{model="specgate-target",reason="model"} 1`) {
		t.Fatalf("near-miss metric:\n%s", grepLines(m, "near_miss"))
	}
	t.Logf("by source %+v", u.Speculative.BySource)
}

// FuzzPrediction: any bytes as a prediction or as a stored response:
// parsePrediction returns text or a 400 naming a prediction field, and
// answerText never panics.
func FuzzPrediction(f *testing.F) {
	for _, s := range []string{`{"type":"content","content":"abc"}`, `{"type":"content","content":[{"type":"text","text":"a"}]}`,
		`{"type":"x"}`, `null`, `[]`, `{"type":"content","content":[null]}`, "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		_ = answerText(b)
		text, aerr := parsePrediction(json.RawMessage(b))
		if aerr != nil {
			if aerr.Status != 400 || !strings.HasPrefix(aerr.Param, "prediction") {
				t.Fatalf("%q: %+v", b, aerr)
			}
			return
		}
		if !json.Valid(b) {
			t.Fatalf("invalid JSON %q accepted as %q", b, text)
		}
	})
}
