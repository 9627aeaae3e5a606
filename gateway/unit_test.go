package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/specgate/specgate/cache"
)

func TestDecodeUnionFields(t *testing.T) {
	for _, tc := range []struct {
		body string
		want ChatCompletionRequest
	}{
		{`{"stop":"x"}`, ChatCompletionRequest{Stop: &StopList{"x"}}},
		{`{"stop":["a","b"]}`, ChatCompletionRequest{Stop: &StopList{"a", "b"}}},
		{`{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`,
			ChatCompletionRequest{Messages: []ChatMessage{{Role: "user", Content: MessageContent{Parts: []ContentPart{{Type: "text", Text: ptr("hi")}}}}}}},
		{`{"messages":[{"role":"assistant","content":null}]}`, ChatCompletionRequest{Messages: []ChatMessage{{Role: "assistant", Content: MessageContent{Null: true}}}}},
		{`{"temperature":0}`, ChatCompletionRequest{Temperature: ptr(0.0)}},
	} {
		var got ChatCompletionRequest
		if err := decodeJSON([]byte(tc.body), &got); err != nil {
			t.Errorf("%s: %v", tc.body, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %+v, want %+v", tc.body, got, tc.want)
		}
	}
	var p CompletionRequest
	for body, want := range map[string]Prompt{
		`{"prompt":"a"}`:         {Texts: []string{"a"}},
		`{"prompt":["a","b"]}`:   {Texts: []string{"a", "b"}},
		`{"prompt":[1,2]}`:       {Tokens: [][]int32{{1, 2}}},
		`{"prompt":[[1],[2,3]]}`: {Tokens: [][]int32{{1}, {2, 3}}},
	} {
		p = CompletionRequest{}
		if err := decodeJSON([]byte(body), &p); err != nil || !reflect.DeepEqual(*p.Prompt, want) {
			t.Errorf("%s: got %+v, %v", body, p.Prompt, err)
		}
	}
	if err := decodeJSON([]byte(`{"prompt":{"x":1}}`), &p); err == nil || err.Param != "prompt" {
		t.Errorf("object prompt: %v", err)
	}
}

func ptr[T any](v T) *T { return &v }

func TestKeyBuckets(t *testing.T) {
	t0 := time.Unix(1000, 0)
	k := &keyState{lim: Limits{RequestsPerSecond: 2, Burst: 2}, reqTokens: 2}
	for i, want := range []bool{true, true, false} {
		if ok, _, _ := k.admit(t0); ok != want {
			t.Fatalf("request %d at t0: ok=%v want %v", i, ok, want)
		}
	}
	_, which, retry := k.admit(t0)
	if which != "requests" || retry != 500*time.Millisecond {
		t.Errorf("refusal = %s after %v, want requests after 500ms", which, retry)
	}
	if ok, _, _ := k.admit(t0.Add(500 * time.Millisecond)); !ok {
		t.Error("bucket did not refill after 500ms at 2/s")
	}
	tk := &keyState{lim: Limits{TokensPerMinute: 60}, tokTokens: 60}
	if ok, _ := tk.reserve(90, t0); !ok {
		t.Fatal("first request refused by a full bucket")
	}
	ok, retry := tk.reserve(1, t0)
	if ok || retry != 31*time.Second {
		t.Errorf("after 90 of 60 tokens: ok=%v %v, want refused for 31s", ok, retry)
	}
	if ok, _ := tk.reserve(1, t0.Add(31*time.Second)); !ok {
		t.Error("token bucket did not refill")
	}
}

func TestMetricsAndDashboard(t *testing.T) {
	reg := prometheus.NewRegistry()
	emb := lexical(t)
	idx, _ := cache.NewHNSW(cache.HNSWConfig{Dim: emb.Dim()})
	c, err := cache.New(cache.DefaultConfig(), cache.NewMemStore(nil), idx, emb, cache.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	g := &fakeGen{Reply: "ok"}
	ts := startServer(t, Options{Registry: reg, Cache: c, Models: []*LocalModel{fakeModel("m", g)}})
	body := `{"model":"m","temperature":0,"messages":[{"role":"user","content":"hello there"}]}`
	post(t, ts.URL+"/v1/chat/completions", "", body, nil)
	if r := post(t, ts.URL+"/v1/chat/completions", "", body, nil); r.xcache != "HIT-EXACT" {
		t.Fatalf("X-Cache = %q", r.xcache)
	}
	resp, err := http.Get(ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`specgate_cache_lookups_total{namespace="default/m",result="hit",tier="exact"} 1`,
		`specgate_cache_lookups_total{namespace="default/m",result="miss",tier="none"} 1`,
		`specgate_generation_requests_total{model="m",outcome="cache_hit"} 1`,
		`specgate_http_requests_total{code="200",route="/v1/chat/completions"} 2`,
		// One generation of "ok": the cache hit replays its 2 tokens and
		// is not counted again.
		`specgate_tokens_total{kind="completion",model="m"} 2`,
		"go_goroutines",
	} {
		if !strings.Contains(string(m), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	var st Stats
	resp, err = http.Get(ts.URL + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || len(st.Metrics["specgate_cache_lookups_total"]) != 2 {
		t.Errorf("/stats: %v %+v", err, st.Metrics["specgate_cache_lookups_total"])
	}
	resp.Body.Close()
	for _, p := range []string{"/", "/dashboard"} {
		resp, err := http.Get(ts.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), `fetch("/stats/history`) || strings.Contains(string(b), "https://") {
			t.Errorf("%s: status %d, want the self-contained dashboard", p, resp.StatusCode)
		}
	}
}

// A failure injected mid-stream ends the stream with an error event and
// [DONE]; a failure before the first token is a plain JSON error.
func TestEngineFailures(t *testing.T) {
	boom := errors.New("device lost")
	mid := &fakeGen{Reply: "abcdef", Err: boom, FailAfter: 3}
	early := &fakeGen{Reply: "abcdef", Err: boom, FailAfter: 0}
	ts := startServer(t, Options{Models: []*LocalModel{fakeModel("mid", mid), fakeModel("early", early)}})
	r := post(t, ts.URL+"/v1/chat/completions", "", `{"model":"mid","stream":true,"messages":[{"role":"user","content":"x"}]}`, nil)
	s := string(r.body)
	if r.status != 200 || !strings.Contains(s, `"type":"server_error"`) || !strings.HasSuffix(s, "data: [DONE]\n\n") || !strings.Contains(s, `"content":"c"`) {
		t.Errorf("mid-stream failure: %d %q", r.status, s)
	}
	r = post(t, ts.URL+"/v1/chat/completions", "", `{"model":"early","stream":true,"messages":[{"role":"user","content":"x"}]}`, nil)
	if r.status != 500 || !strings.Contains(string(r.body), "device lost") {
		t.Errorf("early failure: %d %s", r.status, r.body)
	}
	r = post(t, ts.URL+"/v1/chat/completions", "", `{"model":"mid","messages":[{"role":"user","content":"x"}]}`, nil)
	if r.status != 500 {
		t.Errorf("non-stream failure: %d %s", r.status, r.body)
	}
}

// Two identical requests share one generation (single-flight); when the
// leader's client disconnects, the follower still gets its answer.
func TestSingleFlightLeaderDisconnect(t *testing.T) {
	g := &fakeGen{Reply: "a slow answer", Delay: 20 * time.Millisecond}
	ts := startServer(t, Options{Models: []*LocalModel{fakeModel("m", g)}, Cache: newTestCache(t)})
	body := `{"model":"m","temperature":0,"messages":[{"role":"user","content":"same question"}]}`
	addr := strings.TrimPrefix(ts.URL, "http://")
	leader, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(leader, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	for g.active.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	follower := make(chan cacheReply, 1)
	go func() { follower <- post(t, ts.URL+"/v1/chat/completions", "", body, nil) }()
	time.Sleep(60 * time.Millisecond)
	leader.Close()
	r := <-follower
	if r.status != 200 || !strings.Contains(string(r.body), "a slow answer") {
		t.Fatalf("follower: %d %s", r.status, r.body)
	}
	if calls := g.calls.Load(); calls != 2 {
		t.Errorf("generations = %d, want 2 (the shared one was cancelled with its leader)", calls)
	}
}

func TestAPIErrorSentinels(t *testing.T) {
	if !errors.Is(errModelNotFound("x"), ErrUnknownModel) || !errors.Is(errInvalid("n", "", "bad"), ErrInvalidParams) ||
		errors.Is(errUnauthorized("no"), ErrInvalidParams) {
		t.Error("APIError does not unwrap to the right sentinel")
	}
	b, _ := json.Marshal(errInvalid("", "invalid_json", "x"))
	if string(b) != `{"error":{"message":"x","type":"invalid_request_error","param":null,"code":"invalid_json"}}` {
		t.Errorf("error body %s", b)
	}
}
