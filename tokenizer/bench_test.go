package tokenizer

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// benchText is Go source: net/http/server.go from GOROOT when present, else this package.
func benchText(b *testing.B) string {
	if src, err := os.ReadFile(filepath.Join(runtime.GOROOT(), "src", "net", "http", "server.go")); err == nil {
		return string(src)
	}
	files, _ := filepath.Glob("*.go")
	var sb strings.Builder
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			b.Fatal(err)
		}
		sb.Write(src)
	}
	return sb.String()
}

func benchEncode(b *testing.B, name string, cold bool) {
	tk, err := Load(filepath.Join("testdata", name))
	if err != nil {
		b.Fatal(err)
	}
	text := benchText(b)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		if cold {
			tk.model.mu.Lock()
			clear(tk.model.cache)
			tk.model.mu.Unlock()
		}
		n = len(tk.Encode(text, false))
	}
	b.ReportMetric(float64(len(text))/float64(n), "bytes/token")
}

// BenchmarkEncode reports Encode throughput (MB/s) on a Go source file; "warm" reuses the
// word cache across iterations, "cold" clears it each time.
func BenchmarkEncode(b *testing.B) {
	for _, name := range []string{"specgate", "gpt2style", "sentencepiece"} {
		b.Run(name+"/warm", func(b *testing.B) { benchEncode(b, name, false) })
		b.Run(name+"/cold", func(b *testing.B) { benchEncode(b, name, true) })
	}
}

func BenchmarkDecode(b *testing.B) {
	tk, err := Load("testdata/specgate")
	if err != nil {
		b.Fatal(err)
	}
	text := benchText(b)
	ids := tk.Encode(text, false)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		_ = tk.Decode(ids, false)
	}
}
