package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/specgate/specgate/cache"
	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/speculative"
)

// observedServer serves the shipped model ("specgate-target", cached) and
// the same model drafting with the shipped draft ("specgate-spec"), samples
// history every 250 ms, and runs mixed traffic for about d: repeated
// prompts (cache hits), fresh ones, streams, /v1/responses, and speculative
// requests that bypass the cache.
func observedServer(t *testing.T, d time.Duration) *testServer {
	t.Helper()
	draftDir := "../models/specgate-draft"
	if _, err := os.Stat(filepath.Join(draftDir, "config.json")); err != nil {
		t.Skipf("shipped draft not present: %v", err)
	}
	old := historyInterval
	historyInterval = 250 * time.Millisecond
	t.Cleanup(func() { historyInterval = old })
	plain := shippedModel(t)
	tm, err := engine.Load(shippedDir, engine.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dm, err := engine.Load(draftDir, engine.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dr, err := speculative.NewDraft(tm, dm, speculative.Config{Method: speculative.MethodChain, K: 3})
	if err != nil {
		t.Fatal(err)
	}
	se := engine.New(tm, dr.EngineOptions(engine.Options{}))
	t.Cleanup(func() { se.Close() })
	spec := &LocalModel{Name: "specgate-spec", Generator: se, Tokenizer: tm.Tokenizer, ContextLength: tm.Config.MaxPositions, KV: tm.KV()}
	// The cache's collectors on the server's registry, as serve wires them.
	reg := prometheus.NewRegistry()
	emb := lexical(t)
	idx, err := cache.NewHNSW(cache.HNSWConfig{Dim: emb.Dim()})
	if err != nil {
		t.Fatal(err)
	}
	c, err := cache.New(cache.DefaultConfig(), cache.NewMemStore(nil), idx, emb, cache.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ts := startServer(t, Options{Models: []*LocalModel{plain, spec}, Embedders: map[string]cache.Embedder{embedModel: emb},
		Cache: c, Registry: reg})
	prompts := speculative.BenchPrompts()
	post := func(path, body string, hdr ...string) {
		req, _ := http.NewRequest("POST", ts.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return
		}
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
		if r.StatusCode != 200 {
			t.Errorf("POST %s: %d", path, r.StatusCode)
		}
	}
	chat := func(model, prompt string, stream bool) string {
		b, _ := json.Marshal(map[string]any{"model": model, "temperature": 0, "max_tokens": 24, "stream": stream,
			"messages": []map[string]string{{"role": "user", "content": prompt}}})
		return string(b)
	}
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	// A third worker sends only speculative requests, so that every history
	// interval of the traffic holds speculation data even when a loaded
	// machine makes the mixed workers slow (with speculative requests only
	// one in five of theirs, some runs left the speculation chart with
	// isolated points and no line).
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; time.Now().Before(end); i++ {
			post("/v1/chat/completions", chat("specgate-spec", prompts[i%len(prompts)], i%2 == 0), "Cache-Control", "no-cache, no-store")
		}
	}()
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; time.Now().Before(end); i += 2 {
				p := prompts[i%len(prompts)]
				switch i % 5 {
				case 0, 1: // a small set of prompts: repeats hit the cache
					post("/v1/chat/completions", chat("specgate-target", prompts[i%6], i%2 == 0))
				case 2:
					post("/v1/chat/completions", chat("specgate-target", p+fmt.Sprint(i), false))
				case 3:
					post("/v1/chat/completions", chat("specgate-spec", p, i%3 == 0), "Cache-Control", "no-cache, no-store")
				case 4:
					post("/v1/responses", fmt.Sprintf(`{"model":"specgate-target","input":%q,"max_output_tokens":16,"temperature":0}`, prompts[i%4]))
				}
			}
		}(w)
	}
	wg.Wait()
	time.Sleep(2 * historyInterval)
	return ts
}

// TestMetricsPromtool: after mixed traffic, /metrics passes `promtool check
// metrics` (Debian's prometheus package) and carries the new series with
// the values the traffic implies.
func TestMetricsPromtool(t *testing.T) {
	ts := observedServer(t, 3*time.Second)
	r, err := http.Get(ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(r.Body)
	r.Body.Close()
	value := func(series string) float64 {
		re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`)
		m := re.FindSubmatch(body)
		if m == nil {
			t.Errorf("/metrics lacks %s", series)
			return 0
		}
		v, _ := strconv.ParseFloat(string(m[1]), 64)
		return v
	}
	for _, s := range []string{
		`specgate_e2e_request_latency_seconds_count{model="specgate-target",source="engine"}`,
		`specgate_e2e_request_latency_seconds_count{model="specgate-target",source="cache"}`,
		`specgate_time_to_first_token_seconds_count{model="specgate-target",source="engine"}`,
		`specgate_time_to_first_token_seconds_count{model="specgate-target",source="cache"}`,
		`specgate_inter_token_latency_seconds_count{model="specgate-target"}`,
		`specgate_request_queue_time_seconds_count{model="specgate-spec"}`,
		`specgate_cache_saved_tokens_total{model="specgate-target"}`,
		`specgate_cache_saved_seconds_total{model="specgate-target"}`,
	} {
		if v := value(s); v <= 0 {
			t.Errorf("%s = %v, want > 0", s, v)
		}
	}
	if v := value(`specgate_spec_tokens_per_step{model="specgate-spec"}`); v <= 1 {
		t.Errorf("speculation tokens per step %v, want > 1 (the shipped draft is accepted often)", v)
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (Debian: apt-get install prometheus); series checked, lint not run")
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(body)
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

// TestHistoryQuantile checks quantile interpolation on a hand-made
// histogram: 10 observations in (0,1], 10 in (1,2], none above.
func TestHistoryQuantile(t *testing.T) {
	a := hist{bounds: []float64{1, 2, 4}, counts: []float64{0, 0, 0}}
	b := hist{bounds: []float64{1, 2, 4}, counts: []float64{10, 20, 20}, count: 20}
	for _, c := range []struct{ q, want float64 }{{0.5, 1}, {0.25, 0.5}, {0.75, 1.5}, {1, 2}} {
		if got := quantile(a, b, c.q); got != c.want {
			t.Errorf("q%.2f = %v, want %v", c.q, got, c.want)
		}
	}
	if got := quantile(b, b, 0.5); got == got {
		t.Errorf("no observations: %v, want NaN", got)
	}
}

func findChromium() string {
	for _, n := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	return ""
}

// TestDashboardChromium loads the dashboard in headless Chromium after
// mixed traffic and checks the rendered page: every chart has axes with
// tick labels and a drawn line, the headline tiles show numbers, the
// speculation table lists a source. With SPECGATE_DASHBOARD_SCREENSHOT=FILE
// it also writes a screenshot (docs/dashboard.png comes from this).
func TestDashboardChromium(t *testing.T) {
	chromium := findChromium()
	if chromium == "" {
		t.Skip("chromium not installed (Debian: apt-get install chromium)")
	}
	// The page shows the last 30 s: the 8 s of traffic stay inside it even
	// when chromium starts slowly on a loaded machine.
	traffic, window := 8*time.Second, 30
	shot := os.Getenv("SPECGATE_DASHBOARD_SCREENSHOT")
	if shot != "" { // a fuller picture for docs/dashboard.png
		traffic, window = 50*time.Second, 60
	}
	ts := observedServer(t, traffic)
	url := fmt.Sprintf("%s/?window=%d", ts.URL, window)
	flags := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-dev-shm-usage",
		"--no-first-run", "--disable-extensions", "--hide-scrollbars", "--mute-audio", "--window-size=1400,1500",
		"--user-data-dir=" + t.TempDir(), "--virtual-time-budget=6000"}
	run := func(extra ...string) []byte {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		args := append(append(append([]string{}, flags...), extra...), url)
		out, err := exec.CommandContext(ctx, chromium, args...).Output()
		if err != nil {
			t.Fatalf("chromium %v: %v", extra, err)
		}
		return out
	}
	dom := string(run("--dump-dom"))
	if !strings.Contains(dom, `data-rendered="1"`) {
		t.Fatalf("the page never rendered /stats/history:\n%.2000s", dom)
	}
	for _, id := range []string{"c-rps", "c-hit", "c-e2e", "c-ttft", "c-tok", "c-itl", "c-spec"} {
		i := strings.Index(dom, `id="`+id+`"`)
		if i < 0 {
			t.Errorf("chart %s missing", id)
			continue
		}
		svg := dom[i:]
		svg = svg[:strings.Index(svg, "</svg>")]
		if !strings.Contains(svg, `class="series"`) || !regexp.MustCompile(`d="M[^"]*L`).MatchString(svg) {
			t.Errorf("chart %s has no line", id)
		}
		if n := strings.Count(svg, "<text"); n < 4 {
			t.Errorf("chart %s has %d tick labels, want axes with labels", id, n)
		}
		if !regexp.MustCompile(`\d\d:\d\d:\d\d</text>`).MatchString(svg) {
			t.Errorf("chart %s has no time axis labels", id)
		}
	}
	for _, id := range []string{"t-req", "t-hit", "t-saved", "t-gen", "t-tps", "t-satout"} {
		m := regexp.MustCompile(`id="` + id + `">([^<]*)<`).FindStringSubmatch(dom)
		if m == nil || m[1] == "–" || m[1] == "" {
			t.Errorf("tile %s shows %v", id, m)
		}
	}
	if !regexp.MustCompile(`id="l-run">.*sat out per step [0-9]`).MatchString(dom) {
		t.Error("the engine chart's legend has no number of requests sat out per step")
	}
	if !regexp.MustCompile(`<tbody><tr><td>[a-z_]+</td>`).MatchString(dom) {
		t.Error("speculation table has no source row")
	}
	if shot != "" {
		abs, _ := filepath.Abs(shot)
		run("--screenshot=" + abs)
		if st, err := os.Stat(abs); err != nil || st.Size() < 10000 {
			t.Errorf("screenshot %s: %v", abs, err)
		}
	}
}
