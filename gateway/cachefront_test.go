package gateway

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// sseUpstream serves chat streams of fixed chunks (and a JSON answer for
// stream=false), counting calls per question.
type sseUpstream struct {
	calls atomic.Int32
	delay time.Duration
	gate  chan struct{} // when set, every call waits for it to close first
}

func (u *sseUpstream) handler(w http.ResponseWriter, r *http.Request) {
	u.calls.Add(1)
	if g := u.gate; g != nil {
		select {
		case <-g:
		case <-r.Context().Done():
			return
		}
	}
	var req ChatCompletionRequest
	if err := decodeJSON(readAll(r), &req); err != nil {
		http.Error(w, "bad", 400)
		return
	}
	q := req.Messages[len(req.Messages)-1].Content.Text
	if req.Stream == nil || !*req.Stream {
		w.Header().Set("Content-Type", "application/json")
		if strings.Contains(q, "tool") {
			fmt.Fprint(w, `{"id":"chatcmpl-up","object":"chat.completion","created":1,"model":"up","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`)
			return
		}
		fmt.Fprint(w, `{"id":"chatcmpl-up","object":"chat.completion","created":1,"model":"up","choices":[{"index":0,"message":{"role":"assistant","content":"json answer"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	chunk := func(delta, finish string) {
		fmt.Fprintf(w, "data: {\"id\":\"chatcmpl-up\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"up\",\"choices\":[{\"index\":0,\"delta\":%s,\"logprobs\":null,\"finish_reason\":%s}]}\n\n", delta, finish)
		w.(http.Flusher).Flush()
		time.Sleep(u.delay)
	}
	chunk(`{"role":"assistant","content":""}`, "null")
	if strings.Contains(q, "tool") {
		chunk(`{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]}`, "null")
		chunk(`{}`, `"tool_calls"`)
	} else {
		for _, part := range []string{"Serendipity ", "is luck ", "in \"finding\" things."} {
			chunk(fmt.Sprintf(`{"content":%q}`, part), "null")
		}
		chunk(`{}`, `"stop"`)
	}
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage != nil && *req.StreamOptions.IncludeUsage {
		fmt.Fprint(w, "data: {\"id\":\"chatcmpl-up\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"up\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4,\"total_tokens\":7}}\n\n")
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// gateUntilFollowers returns a gate for a provider and a function that
// waits (up to 30 s) until n more requests have joined a running flight of
// ts as followers, then opens the gate: the leader's provider cannot finish
// before every follower joined, whatever the machine's load (before, the
// tests relied on followers arriving within the provider's delay). The gate
// is also opened at the test's end.
func gateUntilFollowers(t *testing.T, ts *testServer, n int) (gate chan struct{}, release func()) {
	t.Helper()
	ts.flights.mu.Lock()
	start := ts.flights.followers
	ts.flights.mu.Unlock()
	gate = make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(open)
	return gate, func() {
		t.Helper()
		defer open()
		deadline := time.Now().Add(30 * time.Second)
		for {
			ts.flights.mu.Lock()
			got := ts.flights.followers - start
			ts.flights.mu.Unlock()
			if got >= n {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("%d followers joined in 30 s, want %d", got, n)
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
}

func readAll(r *http.Request) []byte {
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := r.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return []byte(b.String())
		}
	}
}

// Upstream streams go through the cache like local ones: teed into it
// (assembled into the chat completion they add up to), replayed as
// streams and as JSON on later hits, shared among identical concurrent
// streams; answers a replay would not reproduce (tool calls) are neither
// stored from a stream nor replayed as one.
func TestUpstreamStreamTeedIntoCache(t *testing.T) {
	u := &sseUpstream{}
	up := httptest.NewServer(http.HandlerFunc(u.handler))
	defer up.Close()
	cfg := DefaultConfig()
	cfg.Upstreams = []UpstreamConfig{{Name: "u", BaseURL: up.URL + "/v1", Models: []string{"up"}}}
	if err := cfg.Complete(); err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, Options{Config: cfg, Cache: newTestCache(t)})
	url := ts.URL + "/v1/chat/completions"
	// Streams ask for usage: only those are stored (TestUpstreamStreamWithoutUsageNotStored).
	req := func(q string, stream bool) string {
		if stream {
			return fmt.Sprintf(`{"model":"up","temperature":0,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":%q}]}`, q)
		}
		return fmt.Sprintf(`{"model":"up","temperature":0,"stream":false,"messages":[{"role":"user","content":%q}]}`, q)
	}
	const want = `Serendipity is luck in "finding" things.`

	r := post(t, url, "", req("What is serendipity?", true), nil)
	if r.status != 200 || r.xcache != "MISS" || sseContent(t, r.body) != want {
		t.Fatalf("first stream: %d %q %q", r.status, r.xcache, r.body)
	}
	r = post(t, url, "", req("What is serendipity?", true), nil)
	if r.status != 200 || r.xcache != "HIT-EXACT" || sseContent(t, r.body) != want {
		t.Fatalf("repeated stream: %d %q %q", r.status, r.xcache, r.body)
	}
	r = post(t, url, "", req("What is serendipity?", false), nil)
	if got, u := chatContent(t, r.body); r.status != 200 || r.xcache != "HIT-EXACT" || got != want ||
		u == nil || u.PromptTokens != 3 || u.CompletionTokens != 4 || u.TotalTokens != 7 {
		t.Fatalf("JSON after the stream: %d %q %q", r.status, r.xcache, r.body)
	}
	if n := u.calls.Load(); n != 1 {
		t.Errorf("upstream called %d times, want 1", n)
	}

	// A stored JSON answer replays as a stream.
	u.calls.Store(0)
	post(t, url, "", req("What is a monad?", false), nil)
	r = post(t, url, "", req("What is a monad?", true), nil)
	if r.status != 200 || r.xcache != "HIT-EXACT" || sseContent(t, r.body) != "json answer" || u.calls.Load() != 1 {
		t.Fatalf("stream after JSON: %d %q %q (%d upstream calls)", r.status, r.xcache, r.body, u.calls.Load())
	}

	// Concurrent identical streams: one upstream call.
	u.calls.Store(0)
	const n = 4
	gate, release := gateUntilFollowers(t, ts, n-1)
	u.gate = gate
	replies := make(chan cacheReply, n)
	for i := 0; i < n; i++ {
		go func() { replies <- post(t, url, "", req("What is ephemeral?", true), nil) }()
	}
	release()
	for i := 0; i < n; i++ {
		r := <-replies
		if r.status != 200 || r.xcache != "MISS" || sseContent(t, r.body) != want {
			t.Errorf("concurrent stream %d: %d %q %q", i, r.status, r.xcache, r.body)
		}
	}
	if c := u.calls.Load(); c != 1 {
		t.Errorf("%d concurrent identical streams made %d upstream calls, want 1", n, c)
	}

	// JSON requests and streams share one flight: two of each, concurrent,
	// make one upstream call and get one answer.
	u.calls.Store(0)
	gate, release = gateUntilFollowers(t, ts, 3)
	u.gate = gate
	texts := make(chan string, 4)
	for i := 0; i < 4; i++ {
		go func(stream bool) {
			r := post(t, url, "", req("What is a quokka?", stream), nil)
			if r.status != 200 {
				t.Errorf("mixed: %d %s", r.status, r.body)
				texts <- ""
				return
			}
			if stream {
				texts <- sseContent(t, r.body)
			} else {
				got, _ := chatContent(t, r.body)
				texts <- got
			}
		}(i%2 == 0)
	}
	release()
	var first string
	for i := 0; i < 4; i++ {
		tx := <-texts
		if i == 0 {
			first = tx
		}
		if tx == "" || tx != first {
			t.Errorf("mixed JSON and stream answers differ: %q vs %q", tx, first)
		}
	}
	if c := u.calls.Load(); c != 1 {
		t.Errorf("2 JSON requests and 2 streams, concurrent: %d upstream calls, want 1", c)
	}
	u.gate = nil

	// Tool calls: a stream is relayed but not stored; a stored JSON answer
	// with tool calls is not replayed as a stream.
	u.calls.Store(0)
	for i := 0; i < 2; i++ {
		r := post(t, url, "", req("call a tool", true), nil)
		if r.status != 200 || r.xcache != "MISS" || !strings.Contains(string(r.body), `"tool_calls"`) {
			t.Fatalf("tool stream %d: %d %q %q", i, r.status, r.xcache, r.body)
		}
	}
	if c := u.calls.Load(); c != 2 {
		t.Errorf("tool-call streams: %d upstream calls, want 2 (not stored)", c)
	}
	post(t, url, "", req("use a tool", false), nil)
	r = post(t, url, "", req("use a tool", true), nil)
	if r.status != 200 || r.xcache != "BYPASS" || !strings.Contains(string(r.body), `"tool_calls"`) {
		t.Fatalf("stream after a tool-call JSON answer: %d %q %q", r.status, r.xcache, r.body)
	}
}

// A stream without stream_options.include_usage carries no usage, so its
// answer is relayed but not stored: a JSON request must never get a
// chat.completion with "usage": null from the cache (before: the second
// stream and the JSON request were HIT-EXACT, the JSON one with usage null).
func TestUpstreamStreamWithoutUsageNotStored(t *testing.T) {
	u := &sseUpstream{}
	up := httptest.NewServer(http.HandlerFunc(u.handler))
	defer up.Close()
	cfg := DefaultConfig()
	cfg.Upstreams = []UpstreamConfig{{Name: "u", BaseURL: up.URL + "/v1", Models: []string{"up"}}}
	if err := cfg.Complete(); err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, Options{Config: cfg, Cache: newTestCache(t)})
	url := ts.URL + "/v1/chat/completions"
	const q = `"messages":[{"role":"user","content":"What is serendipity?"}]}`
	for i := 0; i < 2; i++ {
		r := post(t, url, "", `{"model":"up","temperature":0,"stream":true,`+q, nil)
		t.Logf("stream %d without usage: %s", i, r.xcache)
		if r.status != 200 || r.xcache != "MISS" || sseContent(t, r.body) != `Serendipity is luck in "finding" things.` {
			t.Errorf("stream %d without usage: %d %q %q", i, r.status, r.xcache, r.body)
		}
	}
	r := post(t, url, "", `{"model":"up","temperature":0,`+q, nil)
	got, usage := chatContent(t, r.body)
	t.Logf("JSON after them: %s %s", r.xcache, r.body)
	if r.status != 200 || r.xcache != "MISS" || got != "json answer" || usage == nil || usage.TotalTokens != 5 {
		t.Errorf("JSON after streams without usage: %d %q %s", r.status, r.xcache, r.body)
	}
	if c := u.calls.Load(); c != 3 {
		t.Errorf("%d upstream calls, want 3 (nothing stored from the streams)", c)
	}
	// The JSON answer (with usage) is stored and serves the stream.
	r = post(t, url, "", `{"model":"up","temperature":0,"stream":true,`+q, nil)
	if r.status != 200 || r.xcache != "HIT-EXACT" || sseContent(t, r.body) != "json answer" {
		t.Errorf("stream after the JSON answer: %d %q %q", r.status, r.xcache, r.body)
	}
}

// A local model's JSON requests and streams share one flight too.
func TestLocalJSONAndStreamShareOneGeneration(t *testing.T) {
	g := &fakeGen{Reply: "a shared answer"}
	ts := startServer(t, Options{Models: []*LocalModel{fakeModel("m", g)}, Cache: newTestCache(t)})
	gate, release := gateUntilFollowers(t, ts, 3)
	g.Gate = gate
	url := ts.URL + "/v1/chat/completions"
	texts := make(chan string, 4)
	for i := 0; i < 4; i++ {
		stream := i%2 == 1
		go func() {
			r := post(t, url, "", fmt.Sprintf(`{"model":"m","temperature":0,"stream":%v,"messages":[{"role":"user","content":"share me"}]}`, stream), nil)
			if r.status != 200 || r.xcache != "MISS" {
				t.Errorf("%d %q %s", r.status, r.xcache, r.body)
				texts <- ""
				return
			}
			if stream {
				texts <- sseContent(t, r.body)
			} else {
				got, _ := chatContent(t, r.body)
				texts <- got
			}
		}()
	}
	release()
	for i := 0; i < 4; i++ {
		if tx := <-texts; tx != "a shared answer" {
			t.Errorf("answer %d: %q", i, tx)
		}
	}
	if n := g.calls.Load(); n != 1 {
		t.Errorf("2 JSON requests and 2 streams, concurrent: %d generations, want 1", n)
	}
}
