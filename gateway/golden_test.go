package gateway

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/specgate/specgate/cache"
)

var update = flag.Bool("update", false, "rewrite testdata/golden/*.response from the server's answers (then check them by hand)")

// goldenRequest is testdata/golden/NAME.request.json.
type goldenRequest struct {
	Method  string            `json:"method"`
	Path    string            `json:"path"`
	Headers map[string]string `json:"headers"`
	// Body is sent verbatim (it may be invalid JSON on purpose).
	Body string `json:"body"`
	// DeclaredLength, when set, is sent as Content-Length with no body (to
	// test the body limit without pushing megabytes through the socket).
	DeclaredLength int `json:"declared_length"`
}

// headersShown are the response headers recorded in goldens.
var headersShown = []string{"Content-Type", "X-Cache", "X-Cache-Similarity", "X-Request-Id", "Retry-After"}

var (
	reID      = regexp.MustCompile(`"id":"(chatcmpl|cmpl)-[0-9a-f]+"`)
	reCreated = regexp.MustCompile(`"created":[0-9]+`)
)

// normalize replaces the per-response id and created time.
func normalize(b []byte) []byte {
	b = reID.ReplaceAll(b, []byte(`"id":"$1-ID"`))
	return reCreated.ReplaceAll(b, []byte(`"created":0`))
}

// renderResponse writes status, the shown headers and the normalized body
// (JSON bodies indented; SSE events one per line, indented).
func renderResponse(resp *http.Response, body []byte) []byte {
	var out bytes.Buffer
	fmt.Fprintf(&out, "HTTP %d\n", resp.StatusCode)
	for _, h := range headersShown {
		if v := resp.Header.Get(h); v != "" {
			fmt.Fprintf(&out, "%s: %s\n", h, v)
		}
	}
	out.WriteString("\n")
	body = normalize(body)
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		for _, ev := range sortEvents(strings.Split(string(body), "\n\n")) {
			if ev == "" {
				continue
			}
			data, ok := strings.CutPrefix(ev, "data: ")
			if !ok || data == "[DONE]" {
				out.WriteString(ev + "\n\n")
				continue
			}
			var ind bytes.Buffer
			if json.Indent(&ind, []byte(data), "", "  ") != nil {
				out.WriteString(ev + "\n\n")
				continue
			}
			out.WriteString("data: " + ind.String() + "\n\n")
		}
		return out.Bytes()
	}
	var ind bytes.Buffer
	if json.Indent(&ind, body, "", "  ") == nil {
		out.Write(ind.Bytes())
		out.WriteString("\n")
		return out.Bytes()
	}
	out.Write(body)
	return out.Bytes()
}

// sortEvents orders SSE events by choice index, keeping each choice's own
// order: with n > 1 the choices run in parallel and interleave differently
// from run to run. Events without choices (usage) and [DONE] stay last.
func sortEvents(evs []string) []string {
	key := func(ev string) int {
		data, ok := strings.CutPrefix(ev, "data: ")
		if !ok || data == "[DONE]" {
			return 1 << 30
		}
		var c struct {
			Choices []struct {
				Index int `json:"index"`
			} `json:"choices"`
		}
		if json.Unmarshal([]byte(data), &c) != nil || len(c.Choices) == 0 {
			return 1 << 29
		}
		return c.Choices[0].Index
	}
	sort.SliceStable(evs, func(i, j int) bool { return key(evs[i]) < key(evs[j]) })
	return evs
}

// sendRaw sends a golden request over a raw connection and reads the answer.
func sendRaw(t *testing.T, addr string, gr *goldenRequest) (*http.Response, []byte) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(120 * time.Second))
	var req bytes.Buffer
	fmt.Fprintf(&req, "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n", gr.Method, gr.Path, addr)
	keys := make([]string, 0, len(gr.Headers))
	for k := range gr.Headers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&req, "%s: %s\r\n", k, gr.Headers[k])
	}
	if gr.DeclaredLength > 0 {
		fmt.Fprintf(&req, "Content-Length: %d\r\n\r\n", gr.DeclaredLength)
	} else {
		fmt.Fprintf(&req, "Content-Length: %d\r\n\r\n%s", len(gr.Body), gr.Body)
	}
	if _, err := conn.Write(req.Bytes()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("reading response: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	return resp, body
}

func newTestCache(t testing.TB) *cache.Cache {
	t.Helper()
	emb, err := cache.NewLexical(cache.DefaultLexicalDim)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := cache.NewHNSW(cache.HNSWConfig{Dim: emb.Dim()})
	if err != nil {
		t.Fatal(err)
	}
	c, err := cache.New(cache.DefaultConfig(), cache.NewMemStore(nil), idx, emb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestGolden replays testdata/golden/*.request.json against the gateway
// serving the shipped model (with a fresh cache) and compares the answers
// with the checked-in *.response files.
func TestGolden(t *testing.T) {
	lm := loadShipped(t, &shippedNoPrefix, true)
	cfg := DefaultConfig()
	cfg.Server.MaxBodyBytes = 64 << 10
	ts := startServer(t, Options{Config: cfg, Models: []*LocalModel{lm}, Cache: newTestCache(t)})
	addr := strings.TrimPrefix(ts.URL, "http://")
	files, _ := filepath.Glob("testdata/golden/*.request.json")
	if len(files) < 10 {
		t.Fatalf("found %d golden requests, want at least 10", len(files))
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".request.json")
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var gr goldenRequest
			if err := json.Unmarshal(raw, &gr); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			resp, body := sendRaw(t, addr, &gr)
			got := renderResponse(resp, body)
			want := strings.TrimSuffix(f, ".request.json") + ".response"
			if *update {
				if err := os.WriteFile(want, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			exp, err := os.ReadFile(want)
			if err != nil {
				t.Fatalf("%v (run go test -run TestGolden -update, then check the file by hand)", err)
			}
			// Logprobs are compared within 1e-4: the engine's float summation
			// order may change (SIMD kernels) without changing the API's shape.
			if !logprobsClose(got, exp, 1e-4) {
				t.Errorf("%s differs from %s:\n--- got ---\n%s\n--- want ---\n%s", name, want, got, exp)
			}
		})
	}
}

var logprobNumber = regexp.MustCompile(`("logprob": )(-?[0-9][0-9.eE+-]*)`)

// logprobsClose reports whether a and b are equal once every "logprob"
// number is taken out, and those numbers pairwise differ by at most tol
// (rounding both to fixed decimals would fail on values that straddle a
// rounding boundary).
func logprobsClose(a, b []byte, tol float64) bool {
	nums := func(x []byte) ([]byte, []float64) {
		var vs []float64
		rest := logprobNumber.ReplaceAllFunc(x, func(m []byte) []byte {
			sub := logprobNumber.FindSubmatch(m)
			v, err := strconv.ParseFloat(string(sub[2]), 64)
			if err != nil {
				return m
			}
			vs = append(vs, v)
			return append(append([]byte(nil), sub[1]...), '#')
		})
		return rest, vs
	}
	ra, va := nums(a)
	rb, vb := nums(b)
	if !bytes.Equal(ra, rb) || len(va) != len(vb) {
		return false
	}
	for i := range va {
		if math.Abs(va[i]-vb[i]) > tol {
			return false
		}
	}
	return true
}
