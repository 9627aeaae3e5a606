package gateway

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// upstreamFrontCfg fronts baseURL with the given timeouts.
func upstreamFrontCfg(t *testing.T, baseURL string, retries int, timeout, idle time.Duration) *testServer {
	cfg := DefaultConfig()
	cfg.Models = nil
	cfg.Upstreams = []UpstreamConfig{{Name: "up", BaseURL: baseURL, Models: []string{"up-model"},
		Retries: retries, Backoff: time.Millisecond, Timeout: timeout, IdleTimeout: idle}}
	if err := cfg.Complete(); err != nil {
		t.Fatal(err)
	}
	return startServer(t, Options{Config: cfg})
}

// sseEvents splits an SSE body into its events.
func sseEvents(b []byte) []string {
	s := strings.TrimSuffix(string(b), "\n\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n\n")
}

// checkBrokenStream wants: the upstream's first event as sent, then an
// error event with the given code, then [DONE].
func checkBrokenStream(t *testing.T, body []byte, first, code string) {
	t.Helper()
	evs := sseEvents(body)
	if len(evs) != 3 || evs[0] != first || evs[2] != "data: [DONE]" {
		t.Fatalf("stream = %q; want the first event, an error event and [DONE]", body)
	}
	var e struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Code    *string `json:"code"`
		} `json:"error"`
	}
	data, _ := strings.CutPrefix(evs[1], "data: ")
	if err := json.Unmarshal([]byte(data), &e); err != nil || e.Error.Code == nil || *e.Error.Code != code || e.Error.Message == "" {
		t.Fatalf("error event %q: want code %s (%v)", evs[1], code, err)
	}
	t.Logf("error event: %s", data)
}

const firstEvent = `data: {"choices":[{"index":0,"delta":{"content":"a"}}]}`

// An upstream that stalls after its first chunk: the client gets an error
// event and [DONE] after idle_timeout instead of waiting for the upstream
// to close (before: held until the upstream closed).
func TestUpstreamStreamStallIdleTimeout(t *testing.T) {
	hold := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, firstEvent+"\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-hold:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(hold)
	ts := upstreamFrontCfg(t, srv.URL+"/v1", 0, 10*time.Second, 300*time.Millisecond)
	cl := &http.Client{Timeout: 20 * time.Second}
	resp, err := cl.Post(ts.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"up-model","stream":true,"messages":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("reading the stream: %v (%q)", err, b)
	}
	checkBrokenStream(t, b, firstEvent, "upstream_timeout")
}

// Streams cut (connection closed, connection reset, or cleanly ended
// without [DONE]) reach the client with an error event and [DONE], never
// as a cleanly ended stream; a half-sent event is not relayed.
func TestUpstreamStreamBroken(t *testing.T) {
	for _, mode := range []string{"close", "reset", "eof-without-done"} {
		t.Run(mode, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				if mode == "eof-without-done" {
					fmt.Fprint(w, firstEvent+"\n\n")
					return
				}
				// Chunked by hand so that the cut lands mid-event.
				c, buf, _ := w.(http.Hijacker).Hijack()
				fmt.Fprintf(buf, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
				ev := firstEvent + "\n\ndata: {\"choices\":[{\"ind"
				fmt.Fprintf(buf, "%x\r\n%s\r\n", len(ev), ev)
				buf.Flush()
				time.Sleep(50 * time.Millisecond)
				if mode == "reset" {
					c.(*net.TCPConn).SetLinger(0)
				}
				c.Close()
			}))
			defer srv.Close()
			ts := upstreamFrontCfg(t, srv.URL+"/v1", 3, 0, 0)
			r := post(t, ts.URL+"/v1/chat/completions", "", `{"model":"up-model","stream":true,"messages":[]}`, nil)
			if r.status != 200 {
				t.Fatalf("status %d", r.status)
			}
			checkBrokenStream(t, r.body, firstEvent, "upstream_error")
		})
	}
}

// An unreachable upstream's error names the cause (before: "Upstream up
// failed: <nil>", lost by errors.Unwrap of a doubly wrapped error).
func TestUpstreamErrorNamesCause(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	ts := upstreamFrontCfg(t, "http://"+addr+"/v1", 1, 0, 0)
	for _, stream := range []string{"false", "true"} {
		r := post(t, ts.URL+"/v1/chat/completions", "", `{"model":"up-model","stream":`+stream+`,"messages":[]}`, nil)
		msg := string(r.body)
		if r.status != 502 || !strings.Contains(msg, "connection refused") || strings.Contains(msg, "<nil>") {
			t.Errorf("stream=%s: %d %s; want 502 naming the refused connection", stream, r.status, msg)
		}
	}
}

// One timeout policy for JSON and streams: upstreams[].timeout bounds the
// wait for the response headers once per request, retries included (before:
// JSON timed out after one timeout, streams after one per attempt).
func TestUpstreamTimeoutPolicy(t *testing.T) {
	var calls atomic.Int32
	hold := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		calls.Add(1)
		_, _ = io.ReadAll(r.Body) // so that the server notices the gateway hanging up
		select {
		case <-hold:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(hold)
	ts := upstreamFrontCfg(t, srv.URL+"/v1", 2, 300*time.Millisecond, time.Minute)
	for _, stream := range []string{"false", "true"} {
		calls.Store(0)
		r := post(t, ts.URL+"/v1/chat/completions", "", `{"model":"up-model","stream":`+stream+`,"messages":[]}`, nil)
		if r.status != 504 || !strings.Contains(string(r.body), `"code":"upstream_timeout"`) {
			t.Errorf("stream=%s: %d %s; want 504 upstream_timeout", stream, r.status, r.body)
		}
		if n := calls.Load(); n != 1 {
			t.Errorf("stream=%s: %d attempts reached the upstream; the timeout covers all of them, want 1", stream, n)
		}
	}
}

// A JSON answer whose body stalls after the headers ends at the timeout
// (before: it could hang on past it when read through net/http).
func TestUpstreamJSONBodyStall(t *testing.T) {
	hold := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", "100")
		fmt.Fprint(w, `{"id":`)
		w.(http.Flusher).Flush()
		select {
		case <-hold:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(hold)
	ts := upstreamFrontCfg(t, srv.URL+"/v1", 0, 500*time.Millisecond, time.Minute)
	conn, err := net.Dial("tcp", strings.TrimPrefix(ts.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	body := `{"model":"up-model","messages":[]}`
	fmt.Fprintf(conn, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 504 || !strings.Contains(string(b), "upstream_timeout") {
		t.Errorf("%d %s; want 504 upstream_timeout", resp.StatusCode, b)
	}
}
