package gateway

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// BenchmarkProxyPath measures one request through the gateway's proxy path
// to a local upstream that returns a fixed body (compare with
// BenchmarkDirect; `specgate bench-gateway` does the same at fixed rates).
func BenchmarkProxyPath(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","choices":[]}`)
	}))
	defer up.Close()
	cfg := DefaultConfig()
	cfg.Models = nil
	cfg.Upstreams = []UpstreamConfig{{Name: "up", BaseURL: up.URL + "/v1", Models: []string{"m"}, Timeout: 10 * time.Second}}
	if err := cfg.Complete(); err != nil {
		b.Fatal(err)
	}
	ts := startServer(b, Options{Config: cfg})
	b.Run("direct", func(b *testing.B) { benchPost(b, up.URL+"/v1/chat/completions") })
	b.Run("gateway", func(b *testing.B) { benchPost(b, ts.URL+"/v1/chat/completions") })
}

func benchPost(b *testing.B, url string) {
	cl := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		resp, err := cl.Post(url, "application/json", strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
}

// BenchmarkCacheHitHandler measures the gateway's own work for one exact
// cache hit of a local model, without sockets: fiber's handler on an
// in-memory request (routing, request id, auth, the body's decode,
// validation, the cache key and lookup, metrics, the two info-level log
// lines formatted as JSON, the pre-rendered answer). `specgate bench
// cache-http` measures the same path over loopback with wrk.
func BenchmarkCacheHitHandler(b *testing.B) {
	s, err := New(Options{Config: DefaultConfig(), Models: []*LocalModel{fakeModel("m", &fakeGen{Reply: "Ephemeral: lasting a very short time."})},
		Cache: newTestCache(b), Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	h := s.App().Handler()
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"What does ephemeral mean?"}],"max_tokens":16,"temperature":0}`)
	var rctx fasthttp.RequestCtx
	do := func() string {
		rctx.Request.Reset()
		rctx.Response.Reset()
		rctx.Request.Header.SetMethod(fasthttp.MethodPost)
		rctx.Request.SetRequestURI("/v1/chat/completions")
		rctx.Request.Header.SetContentType("application/json")
		rctx.Request.SetBody(body)
		h(&rctx)
		if rctx.Response.StatusCode() != 200 {
			b.Fatalf("status %d: %s", rctx.Response.StatusCode(), rctx.Response.Body())
		}
		return string(rctx.Response.Header.Peek("X-Cache"))
	}
	if x := do(); x != "MISS" {
		b.Fatalf("first request: X-Cache %q, want MISS", x)
	}
	if x := do(); x != "HIT-EXACT" {
		b.Fatalf("second request: X-Cache %q, want HIT-EXACT", x)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		do()
	}
}
