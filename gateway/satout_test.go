package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/specgate/specgate/engine"
)

// slowFirstReader is the engine with its first request's caller slow: it
// sleeps before emitting each chunk of that request, so the engine's steps
// run on for the other requests while that one sits out (Stats.SatOut).
type slowFirstReader struct {
	*engine.Engine
	delay time.Duration
	calls atomic.Int32
}

func (s *slowFirstReader) Generate(ctx context.Context, req engine.GenerateRequest, emit func(engine.Chunk) error) (engine.Result, error) {
	if s.calls.Add(1) != 1 {
		return s.Engine.Generate(ctx, req, emit)
	}
	return s.Engine.Generate(ctx, req, func(c engine.Chunk) error {
		time.Sleep(s.delay)
		return emit(c)
	})
}

// TestSatOutMetric: the engine's Stats.SatOut (running requests a step did
// not serve because their caller was behind) is on /metrics as
// specgate_engine_sat_out_total{model} (a counter, with its help text),
// scraped through a real HTTP client after a slow reader and a fast
// request shared the engine; its value is the engine's own count, above
// zero; promtool accepts the exposition; /stats/history (the dashboard's
// source) carries the total and a per-step rate.
func TestSatOutMetric(t *testing.T) {
	if _, err := os.Stat(filepath.Join(shippedDir, "config.json")); err != nil {
		t.Skipf("shipped model %s not present: %v", shippedDir, err)
	}
	old := historyInterval
	historyInterval = 100 * time.Millisecond
	t.Cleanup(func() { historyInterval = old })
	m, err := engine.Load(shippedDir, engine.LoadOptions{DisablePrefixCache: true})
	if err != nil {
		t.Fatal(err)
	}
	e := engine.New(m, engine.Options{})
	t.Cleanup(func() { e.Close() })
	gen := &slowFirstReader{Engine: e, delay: 40 * time.Millisecond}
	lm := &LocalModel{Name: "specgate-target", Generator: gen, Tokenizer: m.Tokenizer, ContextLength: m.Config.MaxPositions, KV: m.KV()}
	ts := startServer(t, Options{Models: []*LocalModel{lm}})
	body := func(content string, maxTokens int, stream bool) string {
		b, _ := json.Marshal(map[string]any{"model": "specgate-target", "temperature": 0, "max_tokens": maxTokens, "stream": stream,
			"messages": []map[string]string{{"role": "user", "content": content}}})
		return string(b)
	}
	post := func(b string) *http.Response {
		req, _ := http.NewRequest("POST", ts.URL+"/v1/chat/completions", strings.NewReader(b))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Cache-Control", "no-cache, no-store")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("HTTP %d: %s", resp.StatusCode, b)
		}
		return resp
	}
	// the slow reader: streamed, so that its first chunk shows it runs
	slow := post(body("Write a short Go function that adds two integers.", 12, true))
	rd := bufio.NewReader(slow.Body)
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("slow stream ended before its first chunk: %v", err)
		}
		if strings.HasPrefix(line, "data: {") {
			break
		}
	}
	// the fast request runs its steps while the slow one's caller sleeps
	fast := post(body("List three prime numbers and explain why each is prime.", 48, false))
	io.Copy(io.Discard, fast.Body)
	fast.Body.Close()
	io.Copy(io.Discard, rd)
	slow.Body.Close()
	want := e.Stats().SatOut
	if want <= 0 {
		t.Fatalf("engine SatOut %d after a slow reader beside a fast request: the case is not exercised", want)
	}

	resp, err := http.Get(ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/metrics: HTTP %d", resp.StatusCode)
	}
	help := regexp.MustCompile(`(?m)^# HELP specgate_engine_sat_out_total (.+)$`).FindSubmatch(text)
	if help == nil || !strings.Contains(string(help[1]), "slow reader") {
		t.Errorf("help line of specgate_engine_sat_out_total: %q", help)
	}
	if !regexp.MustCompile(`(?m)^# TYPE specgate_engine_sat_out_total counter$`).Match(text) {
		t.Errorf("specgate_engine_sat_out_total is not typed counter")
	}
	v := regexp.MustCompile(`(?m)^specgate_engine_sat_out_total\{model="specgate-target"\} (\S+)$`).FindSubmatch(text)
	if v == nil {
		t.Fatalf("/metrics lacks specgate_engine_sat_out_total{model=\"specgate-target\"}")
	}
	got, err := strconv.ParseFloat(string(v[1]), 64)
	if err != nil || got != float64(want) {
		t.Fatalf("specgate_engine_sat_out_total %q, engine Stats.SatOut %d", v[1], want)
	}
	if promtool, err := exec.LookPath("promtool"); err == nil {
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = bytes.NewReader(text)
		if out, err := cmd.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
			t.Errorf("promtool check metrics: %v\n%s", err, out)
		}
	} else {
		t.Log("promtool not installed: exposition not linted")
	}

	time.Sleep(3 * historyInterval)
	resp, err = http.Get(ts.URL + "/stats/history?window=60")
	if err != nil {
		t.Fatal(err)
	}
	var h History
	err = json.NewDecoder(resp.Body).Decode(&h)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if h.Totals.SatOut != float64(want) {
		t.Errorf("/stats/history totals sat_out %v, engine %d", h.Totals.SatOut, want)
	}
	perStep := 0.0
	for _, p := range h.Points {
		if p.SatOut != nil {
			perStep = max(perStep, *p.SatOut)
		}
	}
	if perStep <= 0 {
		t.Errorf("no history point with requests sat out per step (%d points)", len(h.Points))
	}
	t.Logf("sat out %d; at most %.2f per step in a %.1f s interval", want, perStep, h.Interval)
}
