package main

import (
	"bufio"
	"context"
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
	"sync/atomic"
	"time"

	"github.com/specgate/specgate/gateway"
)

func init() {
	register("bench-gateway", "gateway overhead on the proxy path at fixed request rates (wrk; apt-get install wrk)", runBenchGateway)
}

var errNoWrk = errors.New("bench-gateway: wrk not found (install it by package name: apt-get install wrk)")

// benchBody is the fixed chat request both paths send.
const benchBody = `{"model":"bench-model","messages":[{"role":"user","content":"What does ephemeral mean?"}],"max_tokens":16}`

// benchReply is the upstream's fixed answer (a typical small completion).
const benchReply = `{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,"model":"bench-model","system_fingerprint":"fp_bench","choices":[{"index":0,"message":{"role":"assistant","content":"Ephemeral: lasting a very short time.","refusal":null},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":17,"completion_tokens":9,"total_tokens":26}}`

// wrkResult is what the Lua done() hook prints: latencies in microseconds.
type wrkResult struct {
	requests  int64
	durationS float64
	errors    int64
	mean, p50 float64
	p90, p99  float64
	// clientCPU is wrk's own CPU time (user + system) over its whole run.
	clientCPU time.Duration
}

func (r wrkResult) rps() float64 { return float64(r.requests) / r.durationS }

// clientUS is wrk's CPU per request in µs (0 when unknown).
func (r wrkResult) clientUS() float64 {
	if r.requests == 0 {
		return 0
	}
	return float64(r.clientCPU.Microseconds()) / float64(r.requests)
}

// wrkScript paces each connection with delay() so that conns connections
// together offer the target rate (wrk has no rate flag; wrk2 is not packaged),
// and prints the summary on one line.
// delayMS 0: no pacing (closed loop: each connection sends its next request
// as soon as the answer arrives).
//
// Pacing "random" (the default) draws each delay uniformly from 0 to
// 2 × delayMS (mean delayMS) from a generator seeded per wrk thread, so the
// connections' requests arrive independently of each other, as a rate from
// many clients does. Pacing "fixed" waits delayMS after every answer: the
// connections all start at once and then stay in step, so their requests
// arrive in bursts of up to conns at a time (measured at 1000 req/s over 10
// connections: 63 % of requests arrived within 100 µs of the previous one,
// against about 20 % with random pacing; the "arrivals ≤ 100 µs apart"
// column).
func wrkScript(delayMS int, random bool) string {
	delay := ""
	switch {
	case delayMS > 0 && random:
		delay = fmt.Sprintf(`local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("thread_id", threads)
end
function init(args)
  math.randomseed(7919 * (thread_id or 1))
end
function delay() return math.random(0, %d) end
`, 2*delayMS)
	case delayMS > 0:
		delay = fmt.Sprintf("function delay() return %d end\n", delayMS)
	}
	return fmt.Sprintf(`wrk.method = "POST"
wrk.body = %q
wrk.headers["Content-Type"] = "application/json"
%sfunction done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("RESULT %%d %%d %%d %%.3f %%.3f %%.3f %%.3f\n", summary.requests, summary.duration,
    e.connect + e.read + e.write + e.status + e.timeout, latency.mean, latency:percentile(50), latency:percentile(90), latency:percentile(99)))
end
`, benchBody, delay)
}

// arrivals counts the requests the bench's upstream receives and those
// that arrived within 100 µs of the one before (a burst: the second one
// waits for the first).
type arrivals struct {
	last         atomic.Int64
	total, close atomic.Int64
}

func (a *arrivals) add() {
	now := time.Now().UnixNano()
	a.total.Add(1)
	if now-a.last.Swap(now) < int64(100*time.Microsecond) {
		a.close.Add(1)
	}
}

// reset starts a new count and returns the fraction of close arrivals of
// the last one.
func (a *arrivals) reset() float64 {
	t, c := a.total.Swap(0), a.close.Swap(0)
	if t == 0 {
		return 0
	}
	return float64(c) / float64(t)
}

func runWrk(wrk, script, url string, conns, threads int, d time.Duration) (wrkResult, error) {
	cmd := exec.Command(wrk, "-t", strconv.Itoa(threads), "-c", strconv.Itoa(conns), "-d", fmt.Sprintf("%ds", int(d.Seconds())),
		"--timeout", "5s", "-s", script, url)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return wrkResult{}, fmt.Errorf("bench-gateway: wrk: %w: %s", err, out)
	}
	return parseWrk(string(out))
}

// parseWrk reads the RESULT line printed by wrkScript's done() hook.
func parseWrk(out string) (wrkResult, error) {
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 8 || f[0] != "RESULT" {
			continue
		}
		var r wrkResult
		var durUS int64
		var perr error
		parseI := func(s string) int64 {
			v, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				perr = err
			}
			return v
		}
		parseF := func(s string) float64 {
			v, err := strconv.ParseFloat(s, 64)
			if err != nil {
				perr = err
			}
			return v
		}
		r.requests, durUS, r.errors = parseI(f[1]), parseI(f[2]), parseI(f[3])
		r.mean, r.p50, r.p90, r.p99 = parseF(f[4]), parseF(f[5]), parseF(f[6]), parseF(f[7])
		r.durationS = float64(durUS) / 1e6
		if perr != nil || r.durationS <= 0 {
			return wrkResult{}, fmt.Errorf("bench-gateway: parsing wrk output %q: %w", sc.Text(), errors.Join(perr, errBadWrk))
		}
		return r, nil
	}
	return wrkResult{}, fmt.Errorf("bench-gateway: no RESULT line in wrk output: %s: %w", out, errBadWrk)
}

var errBadWrk = errors.New("bad wrk output")

func runBenchGateway(args []string) error {
	fs := flag.NewFlagSet("bench-gateway", flag.ContinueOnError)
	ratesFlag := fs.String("rates", "1000,5000", "target request rates (requests/s), comma separated")
	dur := fs.Duration("duration", 10*time.Second, "measurement time per rate and path")
	warm := fs.Duration("warmup", 2*time.Second, "warm-up time per rate and path (not measured)")
	threads := fs.Int("threads", 2, "wrk threads")
	pace := fs.Int("pace-ms", 10, "per-connection delay between requests; connections = rate × pace")
	pacing := fs.String("pacing", "random", "random: each delay uniform in [0, 2×pace-ms] (connections independent); fixed: pace-ms after every answer (connections in step: bursts)")
	wrkPath := fs.String("wrk", "wrk", "wrk binary")
	c1 := fs.Bool("c1", true, "also measure one connection, unpaced (closed loop: the per-request latency without queueing)")
	var prof benchProfile
	prof.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	wrk, err := exec.LookPath(*wrkPath)
	if err != nil {
		return errNoWrk
	}
	var rates []int
	for _, s := range strings.Split(*ratesFlag, ",") {
		r, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || r <= 0 || r > 100000 {
			return fmt.Errorf("bench-gateway: --rates: bad rate %q", s)
		}
		rates = append(rates, r)
	}
	if *pacing != "random" && *pacing != "fixed" {
		return fmt.Errorf("bench-gateway: --pacing must be random or fixed, got %q", *pacing)
	}
	if *dur < time.Second || *dur > 10*time.Minute || *pace < 1 {
		return fmt.Errorf("bench-gateway: --duration must be in [1s, 10m] and --pace-ms ≥ 1")
	}

	// The upstream: a fixed body, as fast as net/http serves it.
	upLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	reply := []byte(benchReply)
	var arr arrivals
	upSrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arr.add()
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(reply)
	})}
	go func() { _ = upSrv.Serve(upLn) }()
	defer upSrv.Close()
	upURL := "http://" + upLn.Addr().String()

	// The gateway in front of it: proxy path, no cache, no keys; request
	// logs formatted at info level (discarded) as in production.
	cfg := gateway.DefaultConfig()
	cfg.Models = nil
	disabled := false
	cfg.Cache.Enabled = &disabled
	cfg.Upstreams = []gateway.UpstreamConfig{{Name: "bench", BaseURL: upURL + "/v1", Models: []string{"bench-model"}, Timeout: 10 * time.Second}}
	if err := cfg.Complete(); err != nil {
		return err
	}
	srv, err := gateway.New(gateway.Options{Config: cfg, Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	if err != nil {
		return err
	}
	gwLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go func() { _ = srv.Serve(gwLn) }()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}()
	gwURL := "http://" + gwLn.Addr().String()

	dir, err := os.MkdirTemp("", "specgate-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	script := filepath.Join(dir, "bench.lua")
	if err := os.WriteFile(script, []byte(wrkScript(*pace, *pacing == "random")), 0o644); err != nil {
		return err
	}
	script1 := filepath.Join(dir, "bench-c1.lua")
	if err := os.WriteFile(script1, []byte(wrkScript(0, false)), 0o644); err != nil {
		return err
	}

	fmt.Printf("bench-gateway: POST /v1/chat/completions, %d-byte request, %d-byte reply; wrk %d threads, %v per point, %s pacing (mean %d ms); GOMAXPROCS %d\n",
		len(benchBody), len(benchReply), *threads, *dur, *pacing, *pace, runtime.GOMAXPROCS(0))
	fmt.Println("process CPU = this process (upstream, plus the gateway on the gateway path; wrk is another process), per request")
	fmt.Println()
	fmt.Println("arrivals ≤ 100 µs apart = share of the upstream's requests that came within 100 µs of the one before (bursts)")
	fmt.Println()
	fmt.Println("| point | conns | path | achieved rps | errors | mean µs | p50 µs | p90 µs | p99 µs | process CPU µs/req | allocs/req | arrivals ≤ 100 µs apart |")
	fmt.Println("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	type point struct {
		name           string
		rate           int // 0 = unpaced
		conns, threads int
		script         string
	}
	var points []point
	for _, rate := range rates {
		points = append(points, point{strconv.Itoa(rate) + " rps", rate, max(rate**pace/1000, 1), *threads, script})
	}
	if *c1 {
		points = append(points, point{"c=1", 0, 1, 1, script1})
	}
	type measured struct {
		r             wrkResult
		cpuUS, allocs float64
	}
	type pair struct{ direct, gw measured }
	var results []pair
	for _, pt := range points {
		var p pair
		for _, path := range []struct {
			name string
			url  string
			dst  *measured
		}{{"direct", upURL + "/v1/chat/completions", &p.direct}, {"gateway", gwURL + "/v1/chat/completions", &p.gw}} {
			threads := min(pt.threads, pt.conns)
			if *warm >= time.Second {
				if _, err := runWrk(wrk, pt.script, path.url, pt.conns, threads, *warm); err != nil {
					return err
				}
			}
			name := strings.ReplaceAll(strings.ReplaceAll(pt.name, " ", ""), "=", "")
			stop, err := prof.start(name + "-" + path.name)
			if err != nil {
				return err
			}
			arr.reset()
			r, err := runWrk(wrk, pt.script, path.url, pt.conns, threads, *dur)
			st, perr := stop()
			burst := arr.reset()
			if err != nil {
				return err
			}
			if perr != nil {
				return perr
			}
			cpuUS, allocs, _ := st.perReq(r.requests)
			*path.dst = measured{r, cpuUS, allocs}
			fmt.Printf("| %s | %d | %s | %.0f | %d | %.0f | %.0f | %.0f | %.0f | %.1f | %.1f | %.0f %% |\n", pt.name, pt.conns, path.name, r.rps(), r.errors,
				r.mean, r.p50, r.p90, r.p99, cpuUS, allocs, 100*burst)
		}
		results = append(results, p)
	}
	fmt.Println()
	fmt.Println("| point | mean overhead µs | p50 overhead µs | p99 overhead µs | gateway CPU µs/req | gateway allocs/req |")
	fmt.Println("|---|---:|---:|---:|---:|---:|")
	for i, p := range results {
		fmt.Printf("| %s | %.0f | %.0f | %.0f | %.1f | %.1f |\n", points[i].name, p.gw.r.mean-p.direct.r.mean, p.gw.r.p50-p.direct.r.p50,
			p.gw.r.p99-p.direct.r.p99, p.gw.cpuUS-p.direct.cpuUS, p.gw.allocs-p.direct.allocs)
	}
	return nil
}
