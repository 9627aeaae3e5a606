package gateway

import (
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/specgate/specgate/cache"
)

// BenchmarkLocalMissStore measures one generated request's round trip
// over loopback whose answer is written to an SQLite cache (semantic tier
// on), as the drafts pass of `specgate bench workload` sends it
// (Cache-Control: no-cache: looked up for nothing, stored): HTTP, the
// gateway's work before and after a 16-token fake generation, and, when
// the write is on the response path, the write.
func BenchmarkLocalMissStore(b *testing.B) {
	for _, stream := range []bool{false, true} {
		name := "json"
		if stream {
			name = "stream"
		}
		b.Run(name, func(b *testing.B) {
			c, err := cache.OpenDefault(filepath.Join(b.TempDir(), "cache.db"), cache.DefaultConfig(), 0)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			ts := startServer(b, Options{Models: []*LocalModel{fakeModel("m", &fakeGen{Reply: "0123456789abcdef"})}, Cache: c})
			cl := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				body := `{"model":"m","temperature":0,"stream":` + strconv.FormatBool(stream) +
					`,"messages":[{"role":"user","content":"request number ` + strconv.Itoa(i) + `"}]}`
				req, _ := http.NewRequest("POST", ts.URL+"/v1/chat/completions", strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Cache-Control", "no-cache")
				resp, err := cl.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
		})
	}
}
