package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/specgate/specgate/cache"
)

// metricValue reads one series of /metrics (0 when absent).
func metricValue(t *testing.T, url, series string) float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := regexp.MustCompile("(?m)^" + regexp.QuoteMeta(series) + ` (\S+)$`).FindSubmatch(b)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}

// A user message without content was accepted; it is a 400 naming the field.
func TestMessageWithoutContent(t *testing.T) {
	ts := startServer(t, Options{Models: []*LocalModel{fakeModel("m", &fakeGen{Reply: "ok"})}})
	for _, msgs := range []string{`[{"role":"user"}]`, `[{"role":"system","content":"s"},{"role":"assistant"}]`} {
		r := post(t, ts.URL+"/v1/chat/completions", "", `{"model":"m","messages":`+msgs+`}`, nil)
		if r.status != 400 || !strings.Contains(string(r.body), `"code":"missing_required_parameter"`) || !strings.Contains(string(r.body), `.content"`) {
			t.Errorf("%s: %d %s; want 400 missing messages[i].content", msgs, r.status, r.body)
		}
	}
	if r := post(t, ts.URL+"/v1/chat/completions", "", `{"model":"m","messages":[{"role":"assistant","content":null},{"role":"user","content":"x"}]}`, nil); r.status != 200 {
		t.Errorf("assistant content null: %d %s", r.status, r.body)
	}
}

// A 3 MB user field was accepted and logged verbatim; now it is a 400, and
// client strings in log lines are bounded.
func TestUserAndLogFieldsBounded(t *testing.T) {
	var logs bytes.Buffer
	var mu sync.Mutex
	w := writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return logs.Write(p) })
	ts := startServer(t, Options{Models: []*LocalModel{fakeModel("m", &fakeGen{Reply: "ok"})}, Logger: slog.New(slog.NewJSONHandler(w, nil))})
	big := strings.Repeat("u", 3<<20)
	r := post(t, ts.URL+"/v1/chat/completions", "", `{"model":"m","user":"`+big+`","messages":[{"role":"user","content":"x"}]}`, nil)
	if r.status != 400 || !strings.Contains(string(r.body), `"param":"user"`) {
		t.Fatalf("3 MB user: %d %.200s", r.status, r.body)
	}
	if len(r.body) > 1024 {
		t.Errorf("error body of %d bytes echoes the field", len(r.body))
	}
	okUser := strings.Repeat("v", 256)
	if r := post(t, ts.URL+"/v1/chat/completions", "", `{"model":"m","user":"`+okUser+`","messages":[{"role":"user","content":"x"}]}`, nil); r.status != 200 {
		t.Fatalf("256-byte user: %d %s", r.status, r.body)
	}
	r = post(t, ts.URL+"/v1/chat/completions", "", `{"model":"`+big+`","messages":[{"role":"user","content":"x"}]}`, nil)
	if r.status != 404 || len(r.body) > 1024 {
		t.Errorf("3 MB model name: %d, %d-byte body", r.status, len(r.body))
	}
	time.Sleep(50 * time.Millisecond) // the request log line is written after the response
	mu.Lock()
	defer mu.Unlock()
	for i, line := range strings.Split(logs.String(), "\n") {
		if len(line) > 2048 {
			t.Errorf("log line %d has %d bytes: %.200s", i, len(line), line)
		}
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// A client that leaves during prefill is outcome "disconnected" (and a
// client disconnect), not an engine error.
func TestDisconnectDuringPrefillOutcome(t *testing.T) {
	g := &fakeGen{Reply: "abc", Delay: 2 * time.Second}
	ts := startServer(t, Options{Models: []*LocalModel{fakeModel("m", g)}})
	addr := strings.TrimPrefix(ts.URL, "http://")
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	for g.active.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	conn.Close()
	deadline := time.Now().Add(5 * time.Second)
	for metricValue(t, ts.URL, `specgate_generation_requests_total{model="m",outcome="disconnected"}`) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("no disconnected outcome; error outcome = %v",
				metricValue(t, ts.URL, `specgate_generation_requests_total{model="m",outcome="error"}`))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if v := metricValue(t, ts.URL, `specgate_generation_requests_total{model="m",outcome="error"}`); v != 0 {
		t.Errorf("outcome error = %v, want 0", v)
	}
	if v := metricValue(t, ts.URL, `specgate_client_disconnects_total`); v != 1 {
		t.Errorf("client_disconnects_total = %v, want 1", v)
	}
}

// slowPutCache delays Put, as a slow or unreachable Redis does.
type slowPutCache struct {
	ResponseCache
	delay time.Duration
}

func (c slowPutCache) Put(ctx context.Context, req *cache.Request, response []byte, cost float64) error {
	time.Sleep(c.delay)
	return c.ResponseCache.Put(ctx, req, response, cost)
}

// client_disconnects_total rose by hundreds with Redis down though no
// client left: clients that closed after [DONE] while the gateway was still
// storing the answer were counted. They are not disconnects.
func TestNoDisconnectAfterCompleteStream(t *testing.T) {
	ts := startServer(t, Options{Models: []*LocalModel{fakeModel("m", &fakeGen{Reply: "ok"})}, Cache: slowPutCache{newTestCache(t), 300 * time.Millisecond}})
	addr := strings.TrimPrefix(ts.URL, "http://")
	for i := 0; i < 3; i++ {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		body := fmt.Sprintf(`{"model":"m","stream":true,"temperature":0,"messages":[{"role":"user","content":"question %d"}]}`, i)
		fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		rd := bufio.NewReader(conn)
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				t.Fatalf("stream %d: %v", i, err)
			}
			if strings.HasPrefix(line, "data: [DONE]") {
				break
			}
		}
		conn.Close()
	}
	time.Sleep(500 * time.Millisecond)
	if v := metricValue(t, ts.URL, `specgate_client_disconnects_total`); v != 0 {
		t.Errorf("client_disconnects_total = %v after 3 complete streams, want 0", v)
	}
	if v := metricValue(t, ts.URL, `specgate_generation_requests_total{model="m",outcome="ok"}`); v != 3 {
		t.Errorf("outcome ok = %v, want 3", v)
	}
}

// TTFT was observed only for streams.
func TestTTFTForJSON(t *testing.T) {
	ts := startServer(t, Options{Models: []*LocalModel{fakeModel("m", &fakeGen{Reply: "ok"})}})
	if r := post(t, ts.URL+"/v1/chat/completions", "", `{"model":"m","messages":[{"role":"user","content":"x"}]}`, nil); r.status != 200 {
		t.Fatal(r.status)
	}
	if v := metricValue(t, ts.URL, `specgate_time_to_first_token_seconds_count{model="m",source="engine"}`); v != 1 {
		t.Errorf("TTFT observations after one JSON generation = %v, want 1", v)
	}
}

// Requests sent with Cache-Control no-store or no-cache are never coalesced
// with identical concurrent requests (streams and JSON).
func TestNoCoalescingNoStore(t *testing.T) {
	for _, cc := range []string{"no-store", "no-cache", "no-cache, no-store"} {
		for _, stream := range []string{"true", "false"} {
			g := &fakeGen{Reply: "abcdef", Delay: 30 * time.Millisecond}
			ts := startServer(t, Options{Models: []*LocalModel{fakeModel("m", g)}, Cache: newTestCache(t)})
			body := `{"model":"m","stream":` + stream + `,"temperature":0,"messages":[{"role":"user","content":"same question"}]}`
			var wg sync.WaitGroup
			for i := 0; i < 3; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if r := post(t, ts.URL+"/v1/chat/completions", "", body, map[string]string{"Cache-Control": cc}); r.status != 200 {
						t.Errorf("%d %s", r.status, r.body)
					}
				}()
			}
			wg.Wait()
			if n := g.calls.Load(); n != 3 {
				t.Errorf("Cache-Control %q stream=%s: 3 concurrent requests ran %d generations, want 3", cc, stream, n)
			}
		}
	}
}

// A bypassed cache said MISS; it says BYPASS and why.
func TestCacheBypassHeader(t *testing.T) {
	ts := startServer(t, Options{Models: []*LocalModel{fakeModel("m", &fakeGen{Reply: "ok"})}, Cache: newTestCache(t)})
	get := func(body string, hdr map[string]string) (string, string) {
		req, _ := http.NewRequest("POST", ts.URL+"/v1/chat/completions", strings.NewReader(body))
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.Header.Get("X-Cache"), resp.Header.Get("X-Cache-Bypass-Reason")
	}
	for _, stream := range []string{"false", "true"} {
		sampled := `{"model":"m","stream":` + stream + `,"messages":[{"role":"user","content":"hello"}]}`
		if x, why := get(sampled, nil); x != "BYPASS" || why != "temperature" {
			t.Errorf("stream=%s default temperature: X-Cache %q reason %q, want BYPASS temperature", stream, x, why)
		}
		greedy := `{"model":"m","stream":` + stream + `,"temperature":0,"messages":[{"role":"user","content":"hello ` + stream + `"}]}`
		if x, why := get(greedy, map[string]string{"Cache-Control": "no-cache"}); x != "BYPASS" || why != "no-cache" {
			t.Errorf("stream=%s no-cache: X-Cache %q reason %q, want BYPASS no-cache", stream, x, why)
		}
		if x, why := get(greedy, nil); x != "HIT-EXACT" || why != "" {
			t.Errorf("stream=%s greedy after a stored answer: X-Cache %q reason %q, want HIT-EXACT", stream, x, why)
		}
	}
}

// /metrics, /stats and the dashboard answered without a key and showed
// tenant names. With API keys configured they are closed unless an admin key
// is given, and the admin key opens them as a bearer token (Prometheus) or
// as the Basic-auth password (browsers); tenants' API keys do not.
func TestAdminKey(t *testing.T) {
	paths := []string{"/metrics", "/stats", "/stats/history", "/", "/dashboard"}
	status := func(url, auth string) (int, string) {
		req, _ := http.NewRequest("GET", url, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b) + " " + resp.Header.Get("WWW-Authenticate")
	}
	keys, _ := ParseAPIKeys("ka=tenantA")

	// API keys, no admin key: closed.
	cfg := DefaultConfig()
	cfg.Auth.Keys = keys
	ts := startServer(t, Options{Config: cfg})
	for _, p := range paths {
		if st, body := status(ts.URL+p, "Bearer ka"); st != 401 || !strings.Contains(body, "admin_key") {
			t.Errorf("keys, no admin key: GET %s with a tenant key = %d %s, want 401", p, st, body)
		}
	}
	if st, _ := status(ts.URL+"/healthz", ""); st != 200 {
		t.Errorf("/healthz = %d, want open", st)
	}

	// Admin key from the environment.
	cfg = DefaultConfig()
	cfg.Auth.Keys = keys
	if err := cfg.ApplyEnv(func(k string) string {
		if k == "SPECGATE_ADMIN_KEY" {
			return "adm-secret"
		}
		return ""
	}); err != nil {
		t.Fatal(err)
	}
	ts = startServer(t, Options{Config: cfg})
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("anyone:adm-secret"))
	for _, p := range paths {
		if st, body := status(ts.URL+p, ""); st != 401 || !strings.Contains(body, `Basic realm="specgate admin"`) {
			t.Errorf("GET %s without a key = %d %s, want 401 with a Basic challenge", p, st, body)
		}
		if st, _ := status(ts.URL+p, "Bearer ka"); st != 401 {
			t.Errorf("GET %s with a tenant's API key = %d, want 401", p, st)
		}
		if st, _ := status(ts.URL+p, "Bearer adm-secret"); st != 200 {
			t.Errorf("GET %s with the admin key as bearer = %d, want 200", p, st)
		}
		if st, _ := status(ts.URL+p, basic); st != 200 {
			t.Errorf("GET %s with the admin key as Basic password = %d, want 200", p, st)
		}
	}

	// No keys at all (local use): open, as before.
	ts = startServer(t, Options{})
	for _, p := range paths {
		if st, _ := status(ts.URL+p, ""); st != 200 {
			t.Errorf("no keys: GET %s = %d, want 200", p, st)
		}
	}
}
