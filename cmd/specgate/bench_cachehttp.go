package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/specgate/specgate/cache"
	"github.com/specgate/specgate/gateway"
)

func init() {
	register("bench-cache-http", "cache hit path over HTTP: the real gateway with a pre-filled default cache, driven by wrk (exact and semantic hits)", runBenchCacheHTTP)
}

var (
	errCacheHTTPNamespace = errors.New("bench-cache-http: the gateway's hits do not come from the pre-filled namespace")
	errCacheHTTPProbe     = errors.New("bench-cache-http: probe request did not reach the cache")
)

// The questions are cache.BenchQuestion's (shared with the HNSW recall
// test and benchmark in package cache, so both measure the same data).
func chQuestion(i int) (stored, para string, parts [3]string) { return cache.BenchQuestion(i) }

// chSpace is the number of distinct questions chQuestion can make.
var chSpace = cache.BenchQuestionSpace

// chPick returns n distinct question indices in [0, chSpace), deterministic
// for a seed.
func chPick(n int, seed uint64) []int { return cache.BenchQuestionPick(n, seed) }

// chAnswer renders a realistic stored chat completion for a question, in the
// gateway's own response shape (so hits take the gateway's rewrite path).
// The answer names its entry index, so a replay can be traced to the entry.
func chAnswer(idx int, q string, parts [3]string, model string) ([]byte, int) {
	content := fmt.Sprintf("To %s %s in %s, start from the standard library: it usually has a function for this, "+
		"and it handles the edge cases (empty input, very large input, invalid data) for you. Write a small helper "+
		"that takes the input, checks it, and returns a new value instead of changing the original, so callers "+
		"can rely on it. Test it with an empty case, a single element and a typical case. If performance matters, "+
		"measure before optimizing. [entry %d]", parts[0], parts[1], parts[2], idx)
	completion := len(strings.Fields(content)) * 4 / 3
	prompt := len(strings.Fields(q))*4/3 + 10
	body, _ := json.Marshal(gateway.ChatCompletion{
		ID: fmt.Sprintf("chatcmpl-fill%08d", idx), Object: "chat.completion", Created: 1700000000, Model: model,
		SystemFingerprint: "fp_specgate",
		Choices:           []gateway.ChatChoice{{Index: 0, Message: gateway.AssistantMsg{Role: "assistant", Content: content}, FinishReason: "stop"}},
		Usage: &gateway.Usage{PromptTokens: prompt, CompletionTokens: completion, TotalTokens: prompt + completion,
			PromptTokensDetails: &gateway.PromptTokensDetails{}, CompletionTokensDetails: &gateway.CompletionTokensDetails{}},
	})
	return body, completion
}

// chBody is the HTTP request body for a question: greedy (temperature 0, so
// the cache is used), fixed max_tokens.
func chBody(model, q string) []byte {
	b, _ := json.Marshal(map[string]any{
		"model": model, "temperature": 0, "max_tokens": 128,
		"messages": []map[string]string{{"role": "user", "content": q}},
	})
	return b
}

// captureCache is a gateway.ResponseCache that records the cache request the
// gateway builds for an HTTP request and answers it from a fixed response,
// so the fill can use exactly the gateway's namespace (tenant, model, system
// prompt hash, sampling parameters) without duplicating how it is computed.
type captureCache struct {
	mu   sync.Mutex
	req  *cache.Request
	resp []byte
}

func (c *captureCache) capture(req *cache.Request) cache.Lookup {
	c.mu.Lock()
	defer c.mu.Unlock()
	cp := *req
	cp.Params = make(map[string]string, len(req.Params))
	for k, v := range req.Params {
		cp.Params[k] = v
	}
	cp.Messages = append([]cache.Message(nil), req.Messages...)
	c.req = &cp
	return cache.Lookup{Hit: true, Tier: cache.TierExact, Similarity: 1, Response: append([]byte(nil), c.resp...), Namespace: cache.Namespace(req)}
}

func (c *captureCache) Get(_ context.Context, req *cache.Request) (cache.Lookup, error) {
	return c.capture(req), nil
}
func (c *captureCache) Put(context.Context, *cache.Request, []byte, float64) error { return nil }
func (c *captureCache) Do(_ context.Context, req *cache.Request, _ cache.Generator) (cache.Lookup, []byte, error) {
	l := c.capture(req)
	return l, l.Response, nil
}

var _ gateway.ResponseCache = (*captureCache)(nil)

// serveGateway starts a gateway on a loopback port; stop shuts it down.
func serveGateway(opts gateway.Options) (url string, stop func(), err error) {
	srv, err := gateway.New(opts)
	if err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

// chPost sends one chat request and returns the X-Cache header and the
// answer text. Like the wrk requests it says Cache-Control: no-store, so a
// miss (generated by the model) is not stored and cannot turn a later
// paraphrase into an exact hit.
func chPost(client *http.Client, url string, body []byte) (xcache, content string, err error) {
	hreq, err := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return "", "", err
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Cache-Control", "no-store")
	resp, err := client.Do(hreq)
	if err != nil {
		return "", "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", "", fmt.Errorf("bench-cache-http: status %d: %s", resp.StatusCode, b)
	}
	var cc gateway.ChatCompletion
	if err := json.Unmarshal(b, &cc); err != nil || len(cc.Choices) == 0 {
		return "", "", fmt.Errorf("bench-cache-http: bad response %q: %w", b, errors.Join(err, errBadWrk))
	}
	return resp.Header.Get(cache.HeaderCache), cc.Choices[0].Message.Content, nil
}

// cacheWrkScript cycles each wrk thread through the request bodies in file
// (one JSON body per line), starting at a thread-specific offset, counts the
// X-Cache values it gets back and prints them with the latency summary.
func cacheWrkScript(file string) string {
	return fmt.Sprintf(`local threads = {}
function setup(thread)
  thread:set("tid", #threads)
  table.insert(threads, thread)
end
function init(args)
  reqs = {}
  local hdrs = {["Content-Type"] = "application/json", ["Cache-Control"] = "no-store"}
  for line in io.lines(%q) do reqs[#reqs + 1] = wrk.format("POST", "/v1/chat/completions", hdrs, line) end
  idx = (tid * 7919) %% #reqs
  exact, semantic, miss, other = 0, 0, 0, 0
end
function request()
  idx = idx %% #reqs + 1
  return reqs[idx]
end
function response(status, headers, body)
  local x = headers["X-Cache"] or headers["x-cache"]
  if status ~= 200 then other = other + 1
  elseif x == "HIT-EXACT" then exact = exact + 1
  elseif x == "HIT-SEMANTIC" then semantic = semantic + 1
  elseif x == "MISS" then miss = miss + 1
  else other = other + 1 end
end
function done(summary, latency, requests)
  local e = summary.errors
  local ex, se, mi, ot = 0, 0, 0, 0
  for _, t in ipairs(threads) do
    ex = ex + t:get("exact"); se = se + t:get("semantic"); mi = mi + t:get("miss"); ot = ot + t:get("other")
  end
  io.write(string.format("RESULT %%d %%d %%d %%.3f %%.3f %%.3f %%.3f\n", summary.requests, summary.duration,
    e.connect + e.read + e.write + e.status + e.timeout, latency.mean, latency:percentile(50), latency:percentile(90), latency:percentile(99)))
  io.write(string.format("XCACHE %%d %%d %%d %%d\n", ex, se, mi, ot))
end
`, file)
}

// xcacheCounts are the X-Cache values wrk saw.
type xcacheCounts struct{ exact, semantic, miss, other int64 }

func (x xcacheCounts) total() int64 { return x.exact + x.semantic + x.miss + x.other }

// parseXCache reads the XCACHE line of cacheWrkScript's done() hook.
func parseXCache(out string) (xcacheCounts, error) {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) != 5 || f[0] != "XCACHE" {
			continue
		}
		var v [4]int64
		for i := range v {
			n, err := strconv.ParseInt(f[i+1], 10, 64)
			if err != nil || n < 0 {
				return xcacheCounts{}, fmt.Errorf("bench-cache-http: parsing %q: %w", line, errBadWrk)
			}
			v[i] = n
		}
		return xcacheCounts{v[0], v[1], v[2], v[3]}, nil
	}
	return xcacheCounts{}, fmt.Errorf("bench-cache-http: no XCACHE line in wrk output: %s: %w", out, errBadWrk)
}

func runCacheWrk(wrk, script, url string, conns, threads int, d time.Duration) (wrkResult, xcacheCounts, error) {
	cmd := exec.Command(wrk, "-t", strconv.Itoa(threads), "-c", strconv.Itoa(conns), "-d", fmt.Sprintf("%ds", int(d.Seconds())),
		"--timeout", "5s", "-s", script, url)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return wrkResult{}, xcacheCounts{}, fmt.Errorf("bench-cache-http: wrk: %w: %s", err, out)
	}
	r, err := parseWrk(string(out))
	if err != nil {
		return wrkResult{}, xcacheCounts{}, err
	}
	r.clientCPU = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	x, err := parseXCache(string(out))
	return r, x, err
}

type cacheHTTPRow struct {
	entries int
	tier    string
	fill    time.Duration
	fillCPU time.Duration
	conns   int
	cpuUS   float64 // gateway process CPU per request during the measurement, µs
	allocs  float64 // heap allocations per request during the measurement
	check   string  // sample check: hits / sent, and served-intended-entry count
	r       wrkResult
	x       xcacheCounts
}

func runBenchCacheHTTP(args []string) error {
	fs := flag.NewFlagSet("bench-cache-http", flag.ContinueOnError)
	entriesFlag := fs.String("entries", "10000,100000", "cache sizes to fill and measure, comma separated")
	queries := fs.Int("queries", 5000, "distinct request bodies wrk cycles through per tier (at most the entries)")
	dur := fs.Duration("duration", 10*time.Second, "measurement time per size and tier")
	warm := fs.Duration("warmup", 2*time.Second, "warm-up per size and tier (not measured; 0 = none)")
	connsFlag := fs.String("conns", "1,16", "wrk connections (the fixed concurrency), comma separated: one row per value")
	threads := fs.Int("threads", 2, "wrk threads")
	sample := fs.Int("sample", 200, "requests per tier checked one by one (X-Cache and the served entry) before wrk runs")
	modelPath := fs.String("model", gateway.DefaultModelPath, "local model the gateway serves (never called on hits)")
	wrkPath := fs.String("wrk", "wrk", "wrk binary")
	seed := fs.Uint64("seed", 1, "question selection seed")
	var prof benchProfile
	prof.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	wrk, err := exec.LookPath(*wrkPath)
	if err != nil {
		return errNoWrk
	}
	var sizes []int
	for _, s := range strings.Split(*entriesFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > chSpace {
			return fmt.Errorf("bench-cache-http: -entries: %q not in [1, %d]", s, chSpace)
		}
		sizes = append(sizes, n)
	}
	var connsList []int
	for _, s := range strings.Split(*connsFlag, ",") {
		c, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || c < 1 || c > 10000 {
			return fmt.Errorf("bench-cache-http: -conns: %q not in [1, 10000]", s)
		}
		connsList = append(connsList, c)
	}
	if *dur < time.Second || *dur > 10*time.Minute || *threads < 1 || *queries < 1 || *sample < 0 || *sample > 100000 {
		return fmt.Errorf("bench-cache-http: flags: want -duration in [1s, 10m], -threads ≥ 1 (capped at the connections), -queries ≥ 1, -sample in [0, 100000]")
	}

	dir, err := os.MkdirTemp("", "specgate-cachehttp-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	logger := slog.New(slog.NewJSONHandler(io.Discard, nil))

	cfg := gateway.DefaultConfig()
	cfg.Models[0].Path = *modelPath
	if err := cfg.Complete(); err != nil {
		return err
	}
	models, closeModels, err := loadModels(cfg, logger)
	if err != nil {
		return err
	}
	defer closeModels()
	model := cfg.Models[0].Name

	fmt.Printf("bench-cache-http: gateway on loopback, %s on %s (never called on hits), cache %s+%s+%s in a temp dir; "+
		"wrk -t%d (at most one per connection) -c%s, %v per tier (after %v warm-up), cycling up to %d distinct bodies per tier; GOMAXPROCS %d\n",
		model, cfg.Models[0].Backend, cfg.Cache.Store, cfg.Cache.Index, cfg.Cache.Embedder, *threads, *connsFlag, *dur, *warm, *queries, runtime.GOMAXPROCS(0))

	var rows []cacheHTTPRow
	for _, n := range sizes {
		rs, err := benchCacheHTTPSize(cfg, models, logger, filepath.Join(dir, strconv.Itoa(n)), wrk, n,
			min(*queries, n), *sample, connsList, *threads, *dur, *warm, *seed, &prof)
		if err != nil {
			return err
		}
		rows = append(rows, rs...)
	}
	fmt.Println()
	fmt.Println("| entries | fill (CPU) | tier | sample check | conns | requests/s | p50 µs | p90 µs | p99 µs | gateway CPU µs/req | wrk CPU µs/req | allocs/req | errors | hit fraction (wrk) |")
	fmt.Println("|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
	for _, r := range rows {
		t := r.x.total()
		frac := "n/a"
		if t > 0 {
			hits := r.x.exact
			if r.tier == "semantic" {
				hits = r.x.semantic
			}
			frac = fmt.Sprintf("%.4f (%d exact, %d semantic, %d miss, %d other of %d)", float64(hits)/float64(t),
				r.x.exact, r.x.semantic, r.x.miss, r.x.other, t)
		}
		fmt.Printf("| %d | %v (%v) | %s | %s | %d | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.1f | %d | %s |\n", r.entries, r.fill.Round(100*time.Millisecond),
			r.fillCPU.Round(100*time.Millisecond), r.tier, r.check, r.conns, r.r.rps(), r.r.p50, r.r.p90, r.r.p99, r.cpuUS, r.r.clientUS(), r.allocs, r.r.errors, frac)
	}
	return nil
}

// benchCacheHTTPSize fills a fresh default cache in dataDir with n entries,
// serves it and measures both tiers.
func benchCacheHTTPSize(base *gateway.Config, models []*gateway.LocalModel, logger *slog.Logger, dataDir, wrk string,
	n, nq, sample int, connsList []int, threads int, dur, warm time.Duration, seed uint64, prof *benchProfile) ([]cacheHTTPRow, error) {
	cfg := *base
	cfg.Server.DataDir = dataDir
	reg := prometheus.NewRegistry()
	c, emb, closeCache, err := gateway.OpenCache(&cfg, reg, logger)
	if err != nil {
		return nil, err
	}
	defer closeCache()

	idx := chPick(n, seed+uint64(n))
	stored0, _, parts0 := chQuestion(idx[0])
	probeResp, _ := chAnswer(idx[0], stored0, parts0, cfg.Models[0].Name)

	// 1. Learn the gateway's cache request for our request shape.
	cc := &captureCache{resp: probeResp}
	url, stop, err := serveGateway(gateway.Options{Config: &cfg, Models: models, Cache: cc, Logger: logger})
	if err != nil {
		return nil, err
	}
	client := &http.Client{Timeout: 10 * time.Second}
	_, _, err = chPost(client, url, chBody(cfg.Models[0].Name, stored0))
	stop()
	if err != nil {
		return nil, err
	}
	cc.mu.Lock()
	tmpl := cc.req
	cc.mu.Unlock()
	if tmpl == nil || len(tmpl.Messages) != 1 || tmpl.Messages[0].Content != stored0 {
		return nil, errCacheHTTPProbe
	}
	tmpl.NoCache, tmpl.NoStore, tmpl.Stream = false, false, false // request controls, not part of the namespace
	ns := cache.Namespace(tmpl)

	// 2. Fill through the cache's API: workers each Put a strided share
	// (embedding and SQLite writes run in parallel; HNSW inserts of one
	// namespace serialize on the graph lock).
	fmt.Printf("  %d entries: filling namespace %s\n", n, ns)
	start, cpu0 := time.Now(), processCPU()
	var wg sync.WaitGroup
	var fillErr atomic.Pointer[error]
	var filled atomic.Int64
	progress := time.NewTicker(30 * time.Second)
	stopProgress := make(chan struct{})
	go func() {
		for {
			select {
			case <-progress.C:
				fmt.Printf("    %d/%d after %v\n", filled.Load(), n, time.Since(start).Round(time.Second))
			case <-stopProgress:
				return
			}
		}
	}()
	workers := max(2, runtime.GOMAXPROCS(0))
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n && fillErr.Load() == nil; i += workers {
				q, _, parts := chQuestion(idx[i])
				req := *tmpl
				req.Messages = []cache.Message{{Role: "user", Content: q}}
				resp, cost := chAnswer(idx[i], q, parts, cfg.Models[0].Name)
				if err := c.Put(context.Background(), &req, resp, float64(cost)); err != nil {
					fillErr.Store(&err)
				}
				filled.Add(1)
			}
		}()
	}
	wg.Wait()
	progress.Stop()
	close(stopProgress)
	if p := fillErr.Load(); p != nil {
		return nil, fmt.Errorf("bench-cache-http: fill: %w", *p)
	}
	fill, fillCPU := time.Since(start), processCPU()-cpu0
	got := 0
	for _, s := range c.Stats() {
		if s.Namespace == ns {
			got = s.Entries
		}
	}
	fmt.Printf("  %d entries: filled in %v (%.0f entries/s; %v CPU, %.0f µs CPU per entry), %d entries in the namespace\n", n,
		fill.Round(100*time.Millisecond), float64(n)/fill.Seconds(), fillCPU.Round(100*time.Millisecond),
		float64(fillCPU.Microseconds())/float64(n), got)
	if got != n {
		return nil, fmt.Errorf("bench-cache-http: filled %d entries, namespace %s holds %d: %w", n, ns, got, errCacheHTTPNamespace)
	}

	// 3. The real gateway over the filled cache.
	url, stop, err = serveGateway(gateway.Options{Config: &cfg, Models: models, Cache: c,
		Embedders: map[string]cache.Embedder{cfg.Cache.EmbeddingModel: emb}, Registry: reg, Logger: logger})
	if err != nil {
		return nil, err
	}
	defer stop()

	// Query lists: the first nq picked entries, as stored and paraphrased.
	var exactBodies, paraBodies bytes.Buffer
	for i := range nq {
		q, p, _ := chQuestion(idx[i])
		exactBodies.Write(chBody(cfg.Models[0].Name, q))
		exactBodies.WriteByte('\n')
		paraBodies.Write(chBody(cfg.Models[0].Name, p))
		paraBodies.WriteByte('\n')
	}
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return nil, err
	}
	var rows []cacheHTTPRow
	for _, tier := range []struct {
		name   string
		bodies []byte
		want   string
	}{{"exact", exactBodies.Bytes(), cache.HitExact}, {"semantic", paraBodies.Bytes(), cache.HitSemantic}} {
		// Sample check, one request at a time: the X-Cache header and whether
		// the answer is the intended entry's.
		hits, intended := 0, 0
		for i := range min(sample, nq) {
			q, p, _ := chQuestion(idx[i])
			text := q
			if tier.name == "semantic" {
				text = p
			}
			x, content, err := chPost(client, url, chBody(cfg.Models[0].Name, text))
			if err != nil {
				return nil, err
			}
			if x == tier.want {
				hits++
			}
			if strings.HasSuffix(content, fmt.Sprintf("[entry %d]", idx[i])) {
				intended++
			}
		}
		check := fmt.Sprintf("%d/%d %s, %d intended entry", hits, min(sample, nq), tier.want, intended)
		fmt.Printf("  %d entries, %s: sample %s\n", n, tier.name, check)
		if tier.name == "exact" && hits != min(sample, nq) {
			return nil, fmt.Errorf("bench-cache-http: %s: %w", check, errCacheHTTPNamespace)
		}
		file := filepath.Join(dataDir, tier.name+".jsonl")
		if err := os.WriteFile(file, tier.bodies, 0o644); err != nil {
			return nil, err
		}
		script := filepath.Join(dataDir, tier.name+".lua")
		if err := os.WriteFile(script, []byte(cacheWrkScript(file)), 0o644); err != nil {
			return nil, err
		}
		for _, conns := range connsList {
			threads := min(threads, conns)
			if warm >= time.Second {
				if _, _, err := runCacheWrk(wrk, script, url, conns, threads, warm); err != nil {
					return nil, err
				}
			}
			stop, err := prof.start(fmt.Sprintf("%d-%s-c%d", n, tier.name, conns))
			if err != nil {
				return nil, err
			}
			r, x, err := runCacheWrk(wrk, script, url, conns, threads, dur)
			st, perr := stop()
			if err != nil {
				return nil, err
			}
			if perr != nil {
				return nil, perr
			}
			cpuUS, allocs, _ := st.perReq(r.requests)
			fmt.Printf("  %d entries, %s, c=%d: %.0f requests/s, p50 %.0f µs, p99 %.0f µs, %.0f µs gateway CPU/request, %.0f µs wrk CPU/request, %.1f allocs/request, X-Cache %d exact / %d semantic / %d miss / %d other\n",
				n, tier.name, conns, r.rps(), r.p50, r.p99, cpuUS, r.clientUS(), allocs, x.exact, x.semantic, x.miss, x.other)
			rows = append(rows, cacheHTTPRow{entries: n, tier: tier.name, fill: fill, fillCPU: fillCPU, conns: conns, cpuUS: cpuUS, allocs: allocs,
				check: check, r: r, x: x})
		}
	}
	return rows, nil
}
