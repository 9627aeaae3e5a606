package gateway

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// An upstream's 200 that is not a well-formed chat.completion (an error
// JSON, an HTML page, a completion without choices or without a message)
// is relayed to its client but never stored: the next identical request
// goes upstream again and gets the real answer, which is then stored.
func TestUpstreamMalformed200NotCached(t *testing.T) {
	bad := []struct{ name, ctype, body string }{
		{"error JSON", "application/json", `{"error":{"message":"overloaded","type":"server_error"}}`},
		{"HTML page", "text/html", `<html><body>502 Bad Gateway</body></html>`},
		{"no choices", "application/json", `{"id":"x","object":"chat.completion","created":1,"model":"up","choices":[]}`},
		{"choice without message", "application/json", `{"id":"x","object":"chat.completion","created":1,"model":"up","choices":[{"index":0,"finish_reason":"stop"}]}`},
		{"wrong object", "application/json", `{"id":"x","object":"list","choices":[{"index":0,"message":{"role":"assistant","content":"hi"}}]}`},
	}
	const good = `{"id":"chatcmpl-up","object":"chat.completion","created":1,"model":"up","choices":[{"index":0,"message":{"role":"assistant","content":"real answer"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`
	for i, b := range bad {
		t.Run(b.name, func(t *testing.T) {
			var calls atomic.Int32
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := calls.Add(1)
				if n == 1 {
					w.Header().Set("Content-Type", b.ctype)
					fmt.Fprint(w, b.body)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprint(w, good)
			}))
			defer up.Close()
			cfg := DefaultConfig()
			cfg.Upstreams = []UpstreamConfig{{Name: "u", BaseURL: up.URL + "/v1", Models: []string{"up"}}}
			if err := cfg.Complete(); err != nil {
				t.Fatal(err)
			}
			ts := startServer(t, Options{Config: cfg, Cache: newTestCache(t)})
			url := ts.URL + "/v1/chat/completions"
			req := fmt.Sprintf(`{"model":"up","temperature":0,"messages":[{"role":"user","content":"question %d"}]}`, i)
			r := post(t, url, "", req, nil)
			if r.status != 200 || string(r.body) != b.body {
				t.Errorf("first request: %d %q, want the upstream's 200 relayed", r.status, r.body)
			}
			r = post(t, url, "", req, nil)
			got, _ := chatContent(t, r.body)
			t.Logf("second request: %s %q", r.xcache, got)
			if r.status != 200 || r.xcache != "MISS" || got != "real answer" {
				t.Errorf("second request: %d %q %s, want MISS and the real answer (the malformed 200 must not be stored)", r.status, r.xcache, r.body)
			}
			r = post(t, url, "", req, nil)
			if r.status != 200 || r.xcache != "HIT-EXACT" {
				t.Errorf("third request: %d %q, want HIT-EXACT (the well-formed answer is stored)", r.status, r.xcache)
			}
			if c := calls.Load(); c != 2 {
				t.Errorf("%d upstream calls, want 2", c)
			}
		})
	}
}
