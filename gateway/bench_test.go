package gateway

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
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
