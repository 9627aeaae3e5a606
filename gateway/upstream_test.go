package gateway

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// recordingUpstream is an OpenAI-compatible test server that fails the
// first Fail requests with 503 and records every body it receives.
type recordingUpstream struct {
	Fail   int32
	calls  atomic.Int32
	mu     sync.Mutex
	bodies []string
	auth   []string
}

func (u *recordingUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	n := u.calls.Add(1)
	u.mu.Lock()
	u.bodies = append(u.bodies, string(b))
	u.auth = append(u.auth, r.Header.Get("Authorization"))
	u.mu.Unlock()
	if n <= u.Fail {
		http.Error(w, `{"error":{"message":"overloaded","type":"server_error","param":null,"code":null}}`, http.StatusServiceUnavailable)
		return
	}
	if strings.Contains(string(b), `"stream":true`) {
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		for i := 0; i < 3; i++ {
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"p%d\"}}]}\n\n", i)
			fl.Flush()
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprint(w, `{"id":"chatcmpl-up","object":"chat.completion","created":1,"model":"up-model","choices":[{"index":0,"message":{"role":"assistant","content":"from upstream"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}`)
}

func upstreamFront(t *testing.T, baseURL string, retries int) *testServer {
	cfg := DefaultConfig()
	cfg.Models = nil
	cfg.Upstreams = []UpstreamConfig{{Name: "up", BaseURL: baseURL, APIKeyEnv: "UP_KEY", Models: []string{"up-model"},
		Aliases: map[string]string{"alias": "up-model"}, Retries: retries, Backoff: time.Millisecond}}
	cfg.applyDefaults()
	return startServer(t, Options{Config: cfg, Getenv: func(k string) string {
		if k == "UP_KEY" {
			return "sk-upstream"
		}
		return ""
	}})
}

func TestUpstreamForwardsUntouchedAndRetries(t *testing.T) {
	up := &recordingUpstream{Fail: 2}
	srv := httptest.NewServer(up)
	defer srv.Close()
	ts := upstreamFront(t, srv.URL+"/v1", 2)
	body := `{"model":"up-model","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f"}}],  "x_vendor":1}`
	r := post(t, ts.URL+"/v1/chat/completions", "", body, map[string]string{"Authorization": "Bearer client-key"})
	if r.status != 200 || !strings.Contains(string(r.body), "from upstream") {
		t.Fatalf("status %d body %s", r.status, r.body)
	}
	if up.calls.Load() != 3 {
		t.Errorf("upstream calls = %d, want 3 (2 failures retried)", up.calls.Load())
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	if up.bodies[2] != body {
		t.Errorf("forwarded body changed:\n got %s\nwant %s", up.bodies[2], body)
	}
	if up.auth[2] != "Bearer sk-upstream" {
		t.Errorf("upstream Authorization = %q, want the upstream's key", up.auth[2])
	}
}

func TestUpstreamRetriesExhausted(t *testing.T) {
	up := &recordingUpstream{Fail: 100}
	srv := httptest.NewServer(up)
	defer srv.Close()
	ts := upstreamFront(t, srv.URL+"/v1", 1)
	r := post(t, ts.URL+"/v1/chat/completions", "", `{"model":"up-model","messages":[]}`, nil)
	if r.status != 503 || up.calls.Load() != 2 {
		t.Errorf("status %d after %d calls; want the upstream's 503 after 2", r.status, up.calls.Load())
	}
}

func TestUpstreamConnectionErrorRetriedThen502(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close() // connection reset before any response
		}
	}()
	defer ln.Close()
	ts := upstreamFront(t, "http://"+ln.Addr().String()+"/v1", 2)
	r := post(t, ts.URL+"/v1/chat/completions", "", `{"model":"up-model","messages":[]}`, nil)
	if r.status != 502 || !strings.Contains(string(r.body), `"code":"upstream_error"`) {
		t.Errorf("status %d body %s, want 502 upstream_error", r.status, r.body)
	}
	if accepted.Load() != 3 {
		t.Errorf("connections = %d, want 3 (1 + 2 retries)", accepted.Load())
	}
}

func TestUpstreamStreamPassthroughAndAlias(t *testing.T) {
	up := &recordingUpstream{}
	srv := httptest.NewServer(up)
	defer srv.Close()
	ts := upstreamFront(t, srv.URL+"/v1", 0)
	r := post(t, ts.URL+"/v1/chat/completions", "", `{"model":"alias","stream":true,"messages":[]}`, nil)
	want := "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"p0\"}}]}\n\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"p1\"}}]}\n\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"p2\"}}]}\n\ndata: [DONE]\n\n"
	if r.status != 200 || string(r.body) != want {
		t.Errorf("stream passthrough: %d %q", r.status, r.body)
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	if !strings.Contains(up.bodies[0], `"model":"up-model"`) {
		t.Errorf("alias not rewritten: %s", up.bodies[0])
	}
}

// A stream that breaks after it started is not retried.
func TestUpstreamNoRetryAfterStreamStarted(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[]}\n\n")
		w.(http.Flusher).Flush()
		hj, _ := w.(http.Hijacker)
		c, _, _ := hj.Hijack()
		c.Close()
	}))
	defer srv.Close()
	ts := upstreamFront(t, srv.URL+"/v1", 3)
	r := post(t, ts.URL+"/v1/chat/completions", "", `{"model":"up-model","stream":true,"messages":[]}`, nil)
	if calls.Load() != 1 {
		t.Errorf("upstream calls = %d, want 1", calls.Load())
	}
	if r.status != 200 || !strings.HasPrefix(string(r.body), "data: {\"choices\":[]}") {
		t.Errorf("got %d %q", r.status, r.body)
	}
}

// A client that leaves an upstream stream cancels the upstream request.
func TestUpstreamStreamClientDisconnect(t *testing.T) {
	cancelled := make(chan time.Duration, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		start := time.Now()
		for i := 0; i < 1000; i++ {
			fmt.Fprintf(w, "data: {\"i\":%d}\n\n", i)
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				cancelled <- time.Since(start)
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
		cancelled <- -1
	}))
	defer srv.Close()
	ts := upstreamFront(t, srv.URL+"/v1", 0)
	addr := strings.TrimPrefix(ts.URL, "http://")
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	body := `{"model":"up-model","stream":true,"messages":[]}`
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	buf := make([]byte, 512)
	if _, err := conn.Read(buf); err != nil {
		t.Fatal(err)
	}
	time.Sleep(30 * time.Millisecond)
	closed := time.Now()
	conn.Close()
	select {
	case d := <-cancelled:
		if d < 0 {
			t.Fatal("upstream stream ran to the end after the client left")
		}
		t.Logf("upstream request cancelled %v after the client closed", time.Since(closed))
	case <-time.After(5 * time.Second):
		t.Fatal("upstream request not cancelled 5s after the client closed")
	}
}
