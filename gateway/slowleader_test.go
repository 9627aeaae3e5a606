package gateway

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// A stream's leader whose client stops reading must not hold its flight's
// followers hostage: the flight finishes when the provider's answer is
// complete, whatever the leader's socket does. The leader here sends its
// request on a raw connection with a 4 KiB receive buffer and never reads
// a byte of a ~12 MB answer (far more than the socket buffers hold); the
// follower, an identical request, must still get the whole answer.
func TestSlowLeaderDoesNotStallFollowers(t *testing.T) {
	const parts, partLen = 3000, 4000
	part := strings.Repeat("x", partLen)
	u := &sseUpstream{}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.calls.Add(1)
		if g := u.gate; g != nil {
			select {
			case <-g:
			case <-r.Context().Done():
				return
			}
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; i < parts; i++ {
			fmt.Fprintf(w, "data: {\"id\":\"chatcmpl-up\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"up\",\"choices\":[{\"index\":0,\"delta\":{\"content\":%q},\"finish_reason\":null}]}\n\n", part)
		}
		fmt.Fprint(w, "data: {\"id\":\"chatcmpl-up\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"up\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n")
		fmt.Fprint(w, "data: {\"id\":\"chatcmpl-up\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"up\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":3000,\"total_tokens\":3003}}\n\n")
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	defer up.Close()
	cfg := DefaultConfig()
	cfg.Upstreams = []UpstreamConfig{{Name: "u", BaseURL: up.URL + "/v1", Models: []string{"up"}}}
	if err := cfg.Complete(); err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, Options{Config: cfg, Cache: newTestCache(t)})
	gate, release := gateUntilFollowers(t, ts, 1)
	u.gate = gate
	const body = `{"model":"up","temperature":0,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"a long answer"}]}`

	content := followUnreadLeader(t, ts, body, release)
	if len(content) != parts*partLen || strings.Trim(content, "x") != "" {
		t.Errorf("follower: %d content bytes, want %d", len(content), parts*partLen)
	}
	if c := u.calls.Load(); c != 1 {
		t.Errorf("%d upstream calls, want 1 (the follower shares the leader's)", c)
	}
}

// The same for a local model's stream: the leader's unread stream must not
// hold the engine's generation, nor so its flight.
func TestSlowLocalLeaderDoesNotStallFollowers(t *testing.T) {
	const n = 40000 // one token per byte, ~200 bytes per SSE event: ~8 MB
	g := &fakeGen{Reply: strings.Repeat("y", n)}
	m := fakeModel("m", g)
	m.ContextLength = 2 * n
	ts := startServer(t, Options{Models: []*LocalModel{m}, Cache: newTestCache(t)})
	gate, release := gateUntilFollowers(t, ts, 1)
	g.Gate = gate
	body := fmt.Sprintf(`{"model":"m","temperature":0,"stream":true,"max_tokens":%d,"messages":[{"role":"user","content":"a long answer"}]}`, n)

	content := followUnreadLeader(t, ts, body, release)
	if len(content) != n || strings.Trim(content, "y") != "" {
		t.Errorf("follower: %d content bytes, want %d", len(content), n)
	}
	if c := g.calls.Load(); c != 1 {
		t.Errorf("%d generations, want 1 (the follower shares the leader's)", c)
	}
}

// followUnreadLeader sends body as a stream's leader on a raw connection
// with a 4 KiB receive buffer that never reads, waits until its flight
// runs, then sends body again as a follower, releasing the provider's gate
// (gateUntilFollowers, set up by the caller) once it joined. It returns the
// follower's streamed content; it fails the test when the follower gets no
// 200 answer within 60 s.
func followUnreadLeader(t *testing.T, ts *testServer, body string, release func()) string {
	t.Helper()
	addr := strings.TrimPrefix(ts.URL, "http://")
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if err := conn.(*net.TCPConn).SetReadBuffer(4096); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", addr, len(body), body)
	deadline := time.Now().Add(30 * time.Second)
	for {
		ts.flights.mu.Lock()
		k := len(ts.flights.m)
		ts.flights.mu.Unlock()
		if k == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the leader's flight never started")
		}
		time.Sleep(time.Millisecond)
	}
	got := make(chan cacheReply, 1)
	go func() { got <- post(t, ts.URL+"/v1/chat/completions", "", body, nil) }()
	release()
	select {
	case r := <-got:
		content := sseContent(t, r.body)
		t.Logf("follower: %d %s, %d content bytes", r.status, r.xcache, len(content))
		if r.status != 200 {
			t.Fatalf("follower: status %d %s", r.status, r.body)
		}
		return content
	case <-time.After(60 * time.Second):
		t.Fatal("the follower got no answer in 60 s: the leader's unread stream holds its flight")
	}
	return ""
}
