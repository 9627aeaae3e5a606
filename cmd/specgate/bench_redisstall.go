package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

func init() {
	register("bench-redis-stall", "load against `specgate serve` with a Redis-backed cache while Redis is SIGSTOPped: status codes and latency before, during and after the stall", runBenchRedisStall)
}

var errRedisStall = errors.New("bench-redis-stall")

// bench redis-stall starts a private redis-server, a fake OpenAI upstream
// (in process: fixed answers after a fixed delay, so that the gateway is
// what is measured) and `specgate serve` (this binary, a child process)
// with cache store and index in that Redis; drives it from --conns
// connections (3 of 4 requests cacheable JSON with temperature 0 over a
// prompt pool of hot and cold prompts, 1 of 4 streamed, which the cache does
// not see); and SIGSTOPs Redis for --stall in the middle of the run. It
// reports status codes and latency per phase.
func runBenchRedisStall(args []string) error {
	fs := flag.NewFlagSet("bench-redis-stall", flag.ContinueOnError)
	duration := fs.Duration("duration", 3*time.Minute, "length of the run")
	stall := fs.Duration("stall", 20*time.Second, "how long Redis stays SIGSTOPped, starting in the middle of the run")
	conns := fs.Int("conns", 64, "concurrent client connections")
	think := fs.Duration("think", 250*time.Millisecond, "mean pause of a connection between its requests (uniform in [0, 2×think])")
	upDelay := fs.Duration("upstream-delay", 20*time.Millisecond, "fake upstream latency per answer (streams: per event)")
	redisBin := fs.String("redis-server", "redis-server", "redis-server binary")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *duration < 3**stall || *conns < 1 || *stall <= 0 {
		return usageError("bench-redis-stall: want -duration >= 3 x -stall > 0 and -conns >= 1")
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "specgate-redis-stall-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	// Fake upstream.
	upLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if strings.Contains(string(b), `"stream":true`) {
			w.Header().Set("Content-Type", "text/event-stream")
			for i := 0; i < 5; i++ {
				time.Sleep(*upDelay)
				fmt.Fprintf(w, "data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"bench\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t%d \"},\"finish_reason\":null}]}\n\n", i)
				w.(http.Flusher).Flush()
			}
			fmt.Fprint(w, "data: [DONE]\n\n")
			return
		}
		time.Sleep(*upDelay)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"chatcmpl-x","object":"chat.completion","created":1,"model":"bench","choices":[{"index":0,"message":{"role":"assistant","content":"a fixed answer of a few words"},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":7,"total_tokens":19}}`)
	})}
	go func() { _ = up.Serve(upLn) }()
	defer up.Close()

	// Private Redis: SIGSTOP must not hit anyone else's.
	redisAddr, err := freeAddr()
	if err != nil {
		return err
	}
	_, redisPort, _ := net.SplitHostPort(redisAddr)
	rs := exec.Command(*redisBin, "--port", redisPort, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", filepath.Join(dir, "redis.log"))
	if err := rs.Start(); err != nil {
		return fmt.Errorf("%w: starting %s: %w", errRedisStall, *redisBin, err)
	}
	defer func() {
		_ = rs.Process.Signal(syscall.SIGCONT)
		_ = rs.Process.Kill()
		_ = rs.Wait()
	}()

	// The gateway.
	gwAddr, err := freeAddr()
	if err != nil {
		return err
	}
	cfgPath := filepath.Join(dir, "specgate.yaml")
	cfgText := fmt.Sprintf(`server: {addr: %q, data_dir: %q, log_level: warn}
models: []
upstreams:
  - {name: fake, base_url: "http://%s/v1", models: [bench-model], retries: 0}
cache:
  store: redis
  index: redis
  embedder: lexical
  redis: {addr: %q}
`, gwAddr, dir, upLn.Addr(), redisAddr)
	if err := os.WriteFile(cfgPath, []byte(cfgText), 0o600); err != nil {
		return err
	}
	waitRedis(redisAddr)
	gw := exec.Command(self, "serve", "--config", cfgPath)
	gwLog, err := os.Create(filepath.Join(dir, "gateway.log"))
	if err != nil {
		return err
	}
	gw.Stdout, gw.Stderr = gwLog, gwLog
	if err := gw.Start(); err != nil {
		return err
	}
	defer func() {
		_ = gw.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = gw.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = gw.Process.Kill()
		}
	}()
	base := "http://" + gwAddr
	if err := waitReady(base+"/readyz", 60*time.Second); err != nil {
		tail, _ := os.ReadFile(gwLog.Name())
		return fmt.Errorf("%w: gateway not ready: %w\n%s", errRedisStall, err, tail)
	}

	fmt.Printf("bench-redis-stall: %s, %d connections (think time 0-%v), fake upstream %v per answer, Redis SIGSTOPped for %v in the middle; load average at start: %s\n",
		*duration, *conns, 2**think, *upDelay, *stall, loadAvg())
	start := time.Now()
	stallAt := start.Add((*duration - *stall) / 2)
	stallEnd := stallAt.Add(*stall)
	end := start.Add(*duration)
	go func() {
		time.Sleep(time.Until(stallAt))
		_ = rs.Process.Signal(syscall.SIGSTOP)
		time.Sleep(time.Until(stallEnd))
		_ = rs.Process.Signal(syscall.SIGCONT)
	}()

	var mu sync.Mutex
	var samples []stallSample
	var wg sync.WaitGroup
	for w := 0; w < *conns; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			cl := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
			var mine []stallSample
			for time.Now().Before(end) {
				s := oneStallRequest(cl, base, rng)
				mine = append(mine, s)
				if *think > 0 {
					time.Sleep(time.Duration(rng.Int64N(int64(2 * *think))))
				}
			}
			mu.Lock()
			samples = append(samples, mine...)
			mu.Unlock()
		}(w)
	}
	wg.Wait()
	fmt.Printf("load average at end: %s; the machine is shared with other engineers' builds and tests\n", loadAvg())
	report := summarizeStall(samples, stallAt, stallEnd)
	fmt.Print(report.text)
	// When the breaker opened, in seconds from the start of the load (the
	// gateway logs at warn level, so closings are not listed).
	var opens []string
	for _, l := range grepLog(gwLog.Name(), "circuit breaker open") {
		var e struct {
			Time time.Time `json:"time"`
		}
		if json.Unmarshal([]byte(l), &e) == nil {
			opens = append(opens, fmt.Sprintf("%.1f", e.Time.Sub(start).Seconds()))
		}
	}
	fmt.Printf("Redis stopped at %.1f s and resumed at %.1f s; the gateway's circuit breaker opened %d times, at s: %s\n",
		stallAt.Sub(start).Seconds(), stallEnd.Sub(start).Seconds(), len(opens), strings.Join(opens, " "))
	printWarnings(gwLog.Name(), start, stallAt, stallEnd)
	if report.non2xx > 0 {
		return fmt.Errorf("%w: %d non-2xx answers", errRedisStall, report.non2xx)
	}
	return nil
}

type stallSample struct {
	start     time.Time
	latency   time.Duration
	status    int
	cacheable bool
	xcache    string
	err       string
}

var stallHot = []string{"What does ephemeral mean?", "Define ocean.", "How do I reverse a list in Python?", "What is the capital of France?",
	"Explain recursion briefly.", "What is a mutex?", "Name three primary colors.", "What does HTTP stand for?"}

func oneStallRequest(cl *http.Client, base string, rng *rand.Rand) stallSample {
	s := stallSample{cacheable: rng.IntN(4) != 0}
	var body string
	if s.cacheable {
		q := stallHot[rng.IntN(len(stallHot))]
		if rng.IntN(2) == 0 {
			q = fmt.Sprintf("Tell me fact number %d about the number %d.", rng.IntN(1_000_000), rng.IntN(1000))
		}
		body = fmt.Sprintf(`{"model":"bench-model","temperature":0,"messages":[{"role":"user","content":%q}]}`, q)
	} else {
		body = `{"model":"bench-model","stream":true,"messages":[{"role":"user","content":"stream something"}]}`
	}
	s.start = time.Now()
	resp, err := cl.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		s.latency, s.err = time.Since(s.start), err.Error()
		return s
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	s.latency = time.Since(s.start)
	s.status, s.xcache = resp.StatusCode, resp.Header.Get("X-Cache")
	if err != nil {
		s.err = err.Error()
	} else if !s.cacheable && !strings.HasSuffix(string(b), "data: [DONE]\n\n") {
		s.err = "stream without [DONE]"
	} else if !s.cacheable && strings.Contains(string(b), `"error"`) {
		s.err = "stream with an error event"
	}
	return s
}

type stallReport struct {
	text   string
	non2xx int
}

func summarizeStall(all []stallSample, stallAt, stallEnd time.Time) stallReport {
	var b strings.Builder
	var r stallReport
	phases := []struct {
		name string
		in   func(time.Time) bool
	}{
		{"before", func(t time.Time) bool { return t.Before(stallAt) }},
		{"during stall", func(t time.Time) bool { return !t.Before(stallAt) && t.Before(stallEnd) }},
		{"after", func(t time.Time) bool { return !t.Before(stallEnd) }},
		{"all", func(time.Time) bool { return true }},
	}
	fmt.Fprintf(&b, "%-13s %8s %7s %7s %8s %8s %8s %8s %8s  %s\n", "phase", "requests", "req/s", "non-2xx", "p50 ms", "p90 ms", "p99 ms", "max ms", "streams", "X-Cache of cacheable")
	first, last := all[0].start, all[0].start
	for _, s := range all {
		if s.start.Before(first) {
			first = s.start
		}
		if s.start.After(last) {
			last = s.start
		}
	}
	for _, ph := range phases {
		var lat []time.Duration
		n, bad, streams := 0, 0, 0
		xc := map[string]int{}
		var lo, hi time.Time
		for _, s := range all {
			if !ph.in(s.start) {
				continue
			}
			if lo.IsZero() || s.start.Before(lo) {
				lo = s.start
			}
			if s.start.After(hi) {
				hi = s.start
			}
			n++
			if s.status < 200 || s.status > 299 || s.err != "" {
				bad++
				if ph.name == "all" && bad <= 5 {
					fmt.Fprintf(&b, "  failure: status %d %s\n", s.status, s.err)
				}
			}
			if s.cacheable {
				lat = append(lat, s.latency)
				xc[s.xcache]++
			} else {
				streams++
			}
		}
		if ph.name == "all" {
			r.non2xx = bad
		}
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		pct := func(p float64) float64 {
			if len(lat) == 0 {
				return 0
			}
			return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
		}
		rate := 0.0
		if span := hi.Sub(lo).Seconds(); span > 0 {
			rate = float64(n) / span
		}
		var keys []string
		for k := range xc {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var xs []string
		for _, k := range keys {
			xs = append(xs, fmt.Sprintf("%s %d", k, xc[k]))
		}
		fmt.Fprintf(&b, "%-13s %8d %7.1f %7d %8.1f %8.1f %8.1f %8.1f %8d  %s\n", ph.name, n, rate, bad, pct(0.5), pct(0.9), pct(0.99), pct(1), streams, strings.Join(xs, ", "))
	}
	fmt.Fprintf(&b, "latency percentiles are of the cacheable (JSON, temperature 0) requests, by the phase in which they started\n")
	r.text = b.String()
	return r
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func waitRedis(addr string) {
	for i := 0; i < 100; i++ {
		if c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond); err == nil {
			c.Close()
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func waitReady(url string, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func grepLog(path, needle string) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), needle) {
			out = append(out, sc.Text())
		}
	}
	return out
}

// printWarnings counts the gateway's warnings by kind (message, digits
// removed) and phase: what the cache's Redis calls failed with.
func printWarnings(path string, start, stallAt, stallEnd time.Time) {
	noise := regexp.MustCompile(`"[^"]*"|tcp [0-9.:]+->[0-9.:]+|[0-9]+`)
	type key struct{ phase, kind string }
	counts := map[key]int{}
	for _, l := range grepLog(path, `"level":"WARN"`) {
		var e struct {
			Time time.Time `json:"time"`
			Msg  string    `json:"msg"`
			Err  string    `json:"err"`
		}
		if json.Unmarshal([]byte(l), &e) != nil {
			continue
		}
		phase := "before"
		if !e.Time.Before(stallEnd) {
			phase = "after"
		} else if !e.Time.Before(stallAt) {
			phase = "during"
		}
		kind := noise.ReplaceAllString(e.Msg+" "+e.Err, "_")
		if len(kind) > 150 {
			kind = kind[:150]
		}
		counts[key{phase, kind}]++
	}
	keys := make([]key, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].phase != keys[j].phase {
			return keys[i].phase < keys[j].phase
		}
		return counts[keys[i]] > counts[keys[j]]
	})
	for _, k := range keys {
		fmt.Printf("gateway warnings %-6s %6d  %s\n", k.phase, counts[k], k.kind)
	}
}
