package gateway

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

type cacheReply struct {
	status     int
	xcache     string
	similarity string
	body       []byte
}

func post(t *testing.T, url, key, body string, hdr map[string]string) cacheReply {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return cacheReply{resp.StatusCode, resp.Header.Get("X-Cache"), resp.Header.Get("X-Cache-Similarity"), b}
}

func chatContent(t *testing.T, b []byte) (string, *Usage) {
	t.Helper()
	var r ChatCompletion
	if err := json.Unmarshal(b, &r); err != nil || len(r.Choices) == 0 {
		t.Fatalf("bad chat body %s: %v", b, err)
	}
	return r.Choices[0].Message.Content, r.Usage
}

// sseContent joins the content deltas of an SSE chat stream and checks it ends with [DONE].
func sseContent(t *testing.T, b []byte) string {
	t.Helper()
	s := string(b)
	if !strings.HasSuffix(s, "data: [DONE]\n\n") {
		t.Fatalf("stream does not end with [DONE]: %q", s)
	}
	var out strings.Builder
	for _, ev := range strings.Split(s, "\n\n") {
		data, ok := strings.CutPrefix(ev, "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var c ChatCompletionChunk
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("bad chunk %q: %v", data, err)
		}
		for _, ch := range c.Choices {
			if ch.Delta.Content != nil {
				out.WriteString(*ch.Delta.Content)
			}
		}
	}
	return out.String()
}

func TestCacheHeadersAndReplay(t *testing.T) {
	cfg := DefaultConfig()
	keys, _ := ParseAPIKeys("ka=tenantA,kb=tenantB")
	cfg.Auth.Keys = keys
	ts := startServer(t, Options{Config: cfg, Models: []*LocalModel{shippedModel(t)}, Cache: newTestCache(t)})
	url := ts.URL + "/v1/chat/completions"
	q := func(text string, extra string) string {
		return `{"model":"specgate-target","messages":[{"role":"user","content":` + strconv.Quote(text) + `}],"temperature":0,"max_tokens":20` + extra + `}`
	}

	first := post(t, url, "ka", q("What does ephemeral mean?", ""), nil)
	if first.status != 200 || first.xcache != "MISS" || first.similarity != "" {
		t.Fatalf("first: %d %q %q %s", first.status, first.xcache, first.similarity, first.body)
	}
	text, _ := chatContent(t, first.body)

	exact := post(t, url, "ka", q("What does ephemeral mean?", ""), nil)
	gotText, usage := chatContent(t, exact.body)
	if exact.xcache != "HIT-EXACT" || exact.similarity != "1.0000" || gotText != text {
		t.Errorf("exact repeat: %q %q %q (want HIT-EXACT, 1.0000, %q)", exact.xcache, exact.similarity, gotText, text)
	}
	if usage == nil || usage.PromptTokensDetails.CachedTokens != usage.PromptTokens {
		t.Errorf("hit usage = %+v: want every prompt token cached", usage)
	}

	// A paraphrase hits the semantic tier with its similarity.
	para := post(t, url, "ka", q("what does ephemeral mean", ""), nil)
	if !strings.HasPrefix(para.xcache, "HIT-") {
		t.Errorf("paraphrase: X-Cache = %q, want a hit", para.xcache)
	} else if para.xcache == "HIT-SEMANTIC" {
		if s, err := strconv.ParseFloat(para.similarity, 64); err != nil || s <= 0 || s > 1 {
			t.Errorf("paraphrase similarity %q", para.similarity)
		}
	}

	// Another tenant never sees tenant A's entry.
	other := post(t, url, "kb", q("What does ephemeral mean?", ""), nil)
	if other.xcache != "MISS" {
		t.Errorf("tenant B: X-Cache = %q, want MISS", other.xcache)
	}

	// Streaming replay of a hit: same text, SSE shape.
	st := post(t, url, "ka", q("What does ephemeral mean?", `,"stream":true,"stream_options":{"include_usage":true}`), nil)
	if st.xcache != "HIT-EXACT" || sseContent(t, st.body) != text {
		t.Errorf("stream replay: %q %q, want HIT-EXACT %q", st.xcache, sseContent(t, st.body), text)
	}

	// no-cache: skip the read (MISS) but the answer is the same.
	nc := post(t, url, "ka", q("What does ephemeral mean?", ""), map[string]string{"Cache-Control": "no-cache"})
	if nc.xcache != "BYPASS" {
		t.Errorf("no-cache: X-Cache = %q, want BYPASS", nc.xcache)
	}
	// no-store: a new question is not written.
	ns := post(t, url, "ka", q("What does lucid mean?", ""), map[string]string{"Cache-Control": "no-store"})
	again := post(t, url, "ka", q("What does lucid mean?", ""), nil)
	if ns.xcache != "MISS" || again.xcache != "MISS" {
		t.Errorf("no-store: %q then %q, want MISS then MISS", ns.xcache, again.xcache)
	}
	// A streamed miss is stored when it completes; the next request hits.
	sm := post(t, url, "ka", q("What does candid mean?", `,"stream":true`), nil)
	after := post(t, url, "ka", q("What does candid mean?", ""), nil)
	if sm.xcache != "MISS" || after.xcache != "HIT-EXACT" {
		t.Errorf("stream store: %q then %q, want MISS then HIT-EXACT", sm.xcache, after.xcache)
	}
	if txt, _ := chatContent(t, after.body); txt != sseContent(t, sm.body) {
		t.Errorf("stored stream %q != replay %q", sseContent(t, sm.body), txt)
	}
	// Sampled requests bypass the cache by default.
	hot := post(t, url, "ka", strings.Replace(q("What does ephemeral mean?", ""), `"temperature":0`, `"temperature":0.9`, 1), nil)
	if hot.xcache != "BYPASS" {
		t.Errorf("temperature 0.9: X-Cache = %q, want BYPASS", hot.xcache)
	}

	// The cache's collectors are not on this registry (the test cache has
	// none); the gateway's own counters record the hits.
	st2, err := ts.stats()
	if err != nil {
		t.Fatal(err)
	}
	hits := 0.0
	for _, s := range st2.Metrics["specgate_generation_requests_total"] {
		if s.Labels["outcome"] == "cache_hit" {
			hits += s.Value
		}
	}
	if hits < 3 {
		t.Errorf("cache_hit outcomes = %v, want ≥ 3", hits)
	}
}

// Identical concurrent streaming misses share one generation of the real
// engine: the followers replay the leader's answer.
func TestStreamSingleFlight(t *testing.T) {
	lm := shippedModel(t)
	g := &trackedGen{Generator: lm.Generator}
	lm.Generator = g
	ts := startServer(t, Options{Models: []*LocalModel{lm}, Cache: newTestCache(t)})
	body := `{"model":"specgate-target","stream":true,"temperature":0,"max_tokens":40,"messages":[{"role":"user","content":"What does serendipity mean?"}]}`
	const n = 4
	replies := make(chan cacheReply, n)
	for i := 0; i < n; i++ {
		go func() { replies <- post(t, ts.URL+"/v1/chat/completions", "", body, nil) }()
	}
	var texts []string
	for i := 0; i < n; i++ {
		r := <-replies
		if r.status != 200 || r.xcache != "MISS" {
			t.Fatalf("reply %d: %d %q", i, r.status, r.xcache)
		}
		texts = append(texts, sseContent(t, r.body))
	}
	for _, tx := range texts[1:] {
		if tx != texts[0] || tx == "" {
			t.Errorf("shared replies differ: %q", texts)
		}
	}
	g.mu.Lock()
	calls := len(g.returned)
	g.mu.Unlock()
	if calls != 1 {
		t.Errorf("%d concurrent identical streams ran %d generations, want 1", n, calls)
	}
}
