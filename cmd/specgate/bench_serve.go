package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/engine/cuda"
	"github.com/specgate/specgate/engine/model"
	"github.com/specgate/specgate/gateway"
	"github.com/specgate/specgate/tokenizer"
)

func init() {
	register("bench-serve", "drive an OpenAI-compatible server (--url, or one started in this process) at several concurrency levels: aggregate tokens/s, TTFT and ITL percentiles, errors", runBenchServe)
}

// benchServeOpts are bench serve's flags.
type benchServeOpts struct {
	url, model                 string
	levels                     []int
	requests, maxTokens        int
	promptTokens, vocab        int
	temperature                float64
	longPrompt, longReps       int
	seed                       uint64
	timeout                    time.Duration
	backend, shape, tokDir     string
	modelDir                   string
	maxBatch, decodeSteps, kvT int
}

func runBenchServe(args []string) error {
	fs := flag.NewFlagSet("bench-serve", flag.ContinueOnError)
	var o benchServeOpts
	fs.StringVar(&o.url, "url", "", "base URL of a running server's API (e.g. http://127.0.0.1:8080/v1); empty: start one in this process")
	fs.StringVar(&o.model, "model", "", "model name to request (default: the in-process model, or specgate-target with --url)")
	levels := fs.String("concurrency", "1,8,32,64", "comma-separated concurrency levels (streams in flight)")
	fs.IntVar(&o.requests, "requests", 0, "requests per level (0: 4 x concurrency, at least 8)")
	fs.IntVar(&o.maxTokens, "max-tokens", 128, "max_tokens of each request")
	fs.IntVar(&o.promptTokens, "prompt-tokens", 32, "random prompt length in tokens (sent as token ids)")
	fs.IntVar(&o.vocab, "vocab", 0, "prompt token ids are drawn below this (0: the in-process model's tokenizer size, 8192 with --url)")
	fs.Float64Var(&o.temperature, "temperature", 0.8, "sampling temperature")
	fs.IntVar(&o.longPrompt, "long-prompt", 1455, "also time the first token of prompts this long (prefill; 0: skip)")
	fs.IntVar(&o.longReps, "long-reps", 5, "long prompts sent, one at a time")
	seed := fs.Int64("seed", 1, "random seed (prompts, request seeds)")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Minute, "per-request timeout")
	fs.StringVar(&o.backend, "backend", "cuda", "in-process: cuda, cpu or auto")
	fs.StringVar(&o.shape, "shape", "tinyllama-1.1b", "in-process: model shape with random weights ("+strings.Join(shapeNames(), ", ")+"); vocabulary = the tokenizer's")
	fs.StringVar(&o.tokDir, "tokenizer", gateway.DefaultModelPath, "in-process with --shape: directory of the tokenizer.json to serve with")
	fs.StringVar(&o.modelDir, "model-dir", "", "in-process: serve this HF model directory instead of a random-weight shape")
	fs.IntVar(&o.maxBatch, "max-batch", 64, "in-process: engine max batch (requests per step)")
	fs.IntVar(&o.decodeSteps, "decode-steps", 8, "in-process: multi-step greedy decoding for a lone greedy request (what serve sets on CUDA)")
	peer := fs.String("peer", "", "also run a peer on the same shape: hf (HF transformers static batching, python3 tools/bench/hf_serve.py; GPU machine)")
	fs.IntVar(&o.kvT, "kv-tokens", 0, "in-process: KV capacity in tokens (0: enough for every stream's prompt and completion)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	o.seed = uint64(*seed)
	for _, f := range strings.Split(*levels, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("bench-serve: --concurrency %q: want positive integers, e.g. 1,8,32,64", *levels)
		}
		o.levels = append(o.levels, n)
	}
	if *peer != "" && *peer != "hf" {
		return fmt.Errorf("bench-serve: --peer %q: want hf", *peer)
	}
	if o.maxTokens < 1 || o.promptTokens < 1 || o.requests < 0 || o.longPrompt < 0 {
		return errors.New("bench-serve: --max-tokens and --prompt-tokens must be >= 1, --requests and --long-prompt >= 0")
	}
	var stats *backendTimer
	stopServer := func() {}
	if o.url == "" {
		url, name, vocab, bt, stop, err := startBenchServer(&o)
		if err != nil {
			return err
		}
		stopServer = stop
		defer func() { stopServer() }()
		o.url, stats = url, bt
		if o.model == "" {
			o.model = name
		}
		if o.vocab == 0 {
			o.vocab = vocab
		}
	}
	if o.model == "" {
		o.model = "specgate-target"
	}
	if o.vocab == 0 {
		o.vocab = 8192
	}
	o.url = strings.TrimRight(o.url, "/")
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, MaxConnsPerHost: 0, DisableCompression: true}}
	r := rand.New(rand.NewPCG(o.seed, 12))
	// Warm-up (not reported): every level's batch shapes once, short.
	maxC := 0
	for _, c := range o.levels {
		maxC = max(maxC, c)
	}
	for _, c := range o.levels {
		if _, err := runLevel(client, &o, r, c, c, min(16, o.maxTokens), o.promptTokens); err != nil {
			return fmt.Errorf("bench-serve: warm-up: %w", err)
		}
	}
	fmt.Printf("bench-serve: %s model %s, prompts of %d random token ids, max_tokens %d, temperature %g, streaming /completions\n",
		o.url, o.model, o.promptTokens, o.maxTokens, o.temperature)
	var base float64
	for _, c := range o.levels {
		n := o.requests
		if n == 0 {
			n = max(8, 4*c)
		}
		stats.reset()
		res, err := runLevel(client, &o, r, c, n, o.maxTokens, o.promptTokens)
		if err != nil {
			return err
		}
		tps := float64(res.tokens) / res.wall.Seconds()
		if base == 0 {
			base = tps
		}
		fmt.Printf("concurrency %3d: %4d requests, %d errors, %6d tokens in %6.2f s: %8.1f tok/s aggregate (%.2fx the first level), %.1f tok/s per stream (1/mean ITL)\n",
			c, n, res.errors, res.tokens, res.wall.Seconds(), tps, tps/base, 1/mean(res.itl))
		fmt.Printf("                 TTFT ms p50 %.2f p90 %.2f p99 %.2f | ITL ms p50 %.3f p90 %.3f p99 %.3f\n",
			pct(res.ttft, 50)*1e3, pct(res.ttft, 90)*1e3, pct(res.ttft, 99)*1e3, pct(res.itl, 50)*1e3, pct(res.itl, 90)*1e3, pct(res.itl, 99)*1e3)
		if res.errors > 0 {
			fmt.Printf("                 first error: %s\n", res.firstErr)
		}
		if line := stats.summary(res.wall); line != "" {
			fmt.Printf("                 %s\n", line)
		}
	}
	if o.longPrompt > 0 && o.longReps > 0 {
		stats.reset()
		res, err := runLevel(client, &o, r, 1, o.longReps, 1, o.longPrompt)
		if err != nil {
			return err
		}
		fmt.Printf("long prompt %d tokens, max_tokens 1, %d requests one at a time, %d errors: TTFT ms p50 %.2f min %.2f = %.0f prompt tok/s (p50)\n",
			o.longPrompt, o.longReps, res.errors, pct(res.ttft, 50)*1e3, pct(res.ttft, 0)*1e3, float64(o.longPrompt)/pct(res.ttft, 50))
		if line := stats.summary(res.wall); line != "" {
			fmt.Printf("                 %s\n", line)
		}
	}
	if *peer == "hf" {
		// The peer runs after our levels, in its own process; with an
		// in-process server, stop it first so that the GPU is the peer's.
		if stats != nil {
			stopServer()
			stopServer = func() {}
		}
		vocab := o.vocab
		cmd := exec.Command("python3", "tools/bench/hf_serve.py", "--concurrency", *levels, "--max-tokens", strconv.Itoa(o.maxTokens),
			"--prompt-tokens", strconv.Itoa(o.promptTokens), "--vocab", strconv.Itoa(vocab), "--temperature", strconv.FormatFloat(o.temperature, 'g', -1, 64))
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("bench-serve: --peer hf: %w", err)
		}
	}
	return nil
}

type levelResult struct {
	tokens, errors int
	wall           time.Duration
	ttft, itl      []float64
	firstErr       string
}

// runLevel sends n requests with c in flight and collects their timings.
func runLevel(client *http.Client, o *benchServeOpts, r *rand.Rand, c, n, maxTokens, promptTokens int) (levelResult, error) {
	type job struct {
		prompt []int32
		seed   int64
	}
	jobs := make(chan job, n)
	for i := 0; i < n; i++ {
		p := make([]int32, promptTokens)
		for k := range p {
			p[k] = int32(r.IntN(o.vocab))
		}
		jobs <- job{p, int64(r.Uint32())}
	}
	close(jobs)
	var mu sync.Mutex
	var res levelResult
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < c; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				ttft, itl, toks, err := streamOne(client, o, j.prompt, j.seed, maxTokens)
				mu.Lock()
				if err != nil {
					res.errors++
					if res.firstErr == "" {
						res.firstErr = err.Error()
					}
				} else {
					res.tokens += toks
					res.ttft = append(res.ttft, ttft)
					res.itl = append(res.itl, itl...)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	res.wall = time.Since(start)
	return res, nil
}

// streamOne sends one streaming completion and times its events: TTFT
// (request sent to the first text event), the gaps between later text
// events (ITL), and the completion tokens (usage).
func streamOne(client *http.Client, o *benchServeOpts, prompt []int32, seed int64, maxTokens int) (ttft float64, itl []float64, tokens int, err error) {
	body, _ := json.Marshal(map[string]any{
		"model": o.model, "prompt": prompt, "max_tokens": maxTokens, "temperature": o.temperature,
		"stream": true, "stream_options": map[string]any{"include_usage": true}, "seed": seed,
	})
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, o.url+"/completions", bytes.NewReader(body))
	if err != nil {
		return 0, nil, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Cache-Control", "no-cache, no-store")
	t0 := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return 0, nil, 0, fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))
	}
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	var last time.Time
	events := 0
	for {
		line, rerr := br.ReadBytes('\n')
		if len(line) > 0 {
			line = bytes.TrimSpace(line)
			if data, ok := bytes.CutPrefix(line, []byte("data:")); ok {
				data = bytes.TrimSpace(data)
				if string(data) == "[DONE]" {
					break
				}
				var ev struct {
					Choices []struct {
						Text string `json:"text"`
					} `json:"choices"`
					Usage *struct {
						CompletionTokens int `json:"completion_tokens"`
					} `json:"usage"`
					Error *struct {
						Message string `json:"message"`
					} `json:"error"`
				}
				if err := json.Unmarshal(data, &ev); err != nil {
					return 0, nil, 0, fmt.Errorf("bad event %q: %w", data, err)
				}
				if ev.Error != nil {
					return 0, nil, 0, fmt.Errorf("stream error: %s", ev.Error.Message)
				}
				if ev.Usage != nil {
					tokens = ev.Usage.CompletionTokens
				}
				if len(ev.Choices) > 0 && ev.Choices[0].Text != "" {
					now := time.Now()
					if events == 0 {
						ttft = now.Sub(t0).Seconds()
					} else {
						itl = append(itl, now.Sub(last).Seconds())
					}
					last = now
					events++
				}
			}
		}
		if rerr != nil {
			if rerr == io.EOF {
				return 0, nil, 0, errors.New("stream ended without [DONE]")
			}
			return 0, nil, 0, rerr
		}
	}
	if events == 0 {
		ttft = time.Since(t0).Seconds() // no text at all (e.g. an immediate stop token)
	}
	if tokens == 0 {
		tokens = events
	}
	return ttft, itl, tokens, nil
}

// startBenchServer starts the gateway in this process on 127.0.0.1 (random
// port) over one local model without a response cache, with the backend's
// forwards timed (backendTimer). It returns the API base URL, the model's
// name and tokenizer size, and a stop function.
func startBenchServer(o *benchServeOpts) (string, string, int, *backendTimer, func(), error) {
	fail := func(err error) (string, string, int, *backendTimer, func(), error) {
		return "", "", 0, nil, nil, fmt.Errorf("bench-serve: %w", err)
	}
	bt := &backendTimer{}
	streams := 0
	for _, c := range o.levels {
		streams = max(streams, c)
	}
	kv := o.kvT
	if kv == 0 {
		kv = streams*(o.promptTokens+o.maxTokens+32) + 2*o.longPrompt + 4096
	}
	var m *engine.Model
	var err error
	name := "bench"
	var wrapFactory func(engine.BackendFactory) engine.BackendFactory = func(f engine.BackendFactory) engine.BackendFactory {
		return func(cfg engine.Config, w *engine.Weights, numSlots int) (engine.Backend, error) {
			be, err := f(cfg, w, numSlots)
			if err != nil {
				return nil, err
			}
			return bt.wrap(be), nil
		}
	}
	var factory engine.BackendFactory
	if o.backend == "cuda" || o.backend == "auto" {
		factory = cuda.Factory(cuda.Options{Random: o.modelDir == "", Seed: o.seed}.WithEnv(os.Getenv))
	}
	lo := engine.LoadOptions{KVTokens: kv}
	if o.modelDir != "" {
		if factory != nil {
			lo.NewBackend = wrapFactory(factory)
		} else {
			lo.NewBackend = wrapFactory(func(cfg engine.Config, w *engine.Weights, numSlots int) (engine.Backend, error) {
				return engine.NewCPUBackend(cfg, w, numSlots, 0)
			})
		}
		if m, err = engine.Load(o.modelDir, lo); err != nil {
			return fail(err)
		}
		name = o.modelDir
	} else {
		cfg, ok := benchShapes[o.shape]
		if !ok {
			return fail(fmt.Errorf("unknown --shape %q", o.shape))
		}
		tok, err := tokenizer.Load(o.tokDir)
		if err != nil {
			return fail(fmt.Errorf("--tokenizer %s: %w", o.tokDir, err))
		}
		cfg.VocabSize = tok.VocabSize()
		cfg.EOS = append([]int32(nil), tok.EOS()...)
		cfg.MaxPositions = max(cfg.MaxPositions, o.longPrompt+64, o.promptTokens+o.maxTokens+64)
		var w *engine.Weights
		if factory != nil {
			// The CUDA backend draws the weights on the device
			// (cuda.Options.Random); NewModel only checks the host tensors'
			// shapes, which views of one zero buffer satisfy.
			w = shapeOnlyWeights(cfg)
			lo.NewBackend = wrapFactory(factory)
		} else {
			w = engine.RandomWeights(cfg, o.seed)
			lo.NewBackend = wrapFactory(func(cfg engine.Config, w *engine.Weights, numSlots int) (engine.Backend, error) {
				return engine.NewCPUBackend(cfg, w, numSlots, 0)
			})
		}
		if m, err = engine.NewModel(cfg, w, lo); err != nil {
			return fail(err)
		}
		m.Tokenizer = tok
		name = o.shape
	}
	eo := engine.Options{MaxBatch: o.maxBatch}
	if _, gpu := bt.inner.(*cuda.Backend); gpu {
		eo.DecodeSteps = o.decodeSteps
	}
	eng := engine.New(m, eo)
	gcfg := gateway.DefaultConfig()
	off := false
	gcfg.Cache.Enabled = &off
	gcfg.Models = nil
	gcfg.Server.LogLevel = "error"
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := gateway.New(gateway.Options{Config: gcfg, Registry: prometheus.NewRegistry(), Logger: log,
		Models: []*gateway.LocalModel{{Name: name, Generator: eng, Tokenizer: m.Tokenizer, ContextLength: m.Config.MaxPositions,
			KV: m.KV(), Created: time.Now()}}})
	if err != nil {
		_ = eng.Close()
		_ = m.Close()
		return fail(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = eng.Close()
		_ = m.Close()
		return fail(err)
	}
	go func() { _ = srv.Serve(ln) }()
	cfg := m.Config
	ds, _ := m.Backend().(engine.DeviceSampler)
	fmt.Printf("bench-serve: in-process server on %s: %s, %d layers, hidden %d, intermediate %d, heads %d/%d, vocab %d, backend %T, max batch %d, KV %d tokens, sampling on the device %v\n",
		ln.Addr(), name, cfg.NumLayers, cfg.HiddenSize, cfg.IntermediateSize, cfg.NumHeads, cfg.NumKVHeads, cfg.VocabSize, bt.inner, o.maxBatch, kv,
		ds != nil && ds.SamplesOnDevice())
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = srv.Shutdown(ctx)
		cancel()
		_ = eng.Close()
		_ = m.Close()
	}
	return "http://" + ln.Addr().String() + "/v1", name, cfg.VocabSize, bt, stop, nil
}

// shapeOnlyWeights returns weights of cfg's shapes whose tensors are all
// views of one zero buffer (for a backend that draws its own weights).
func shapeOnlyWeights(cfg engine.Config) *engine.Weights {
	H, I, V := cfg.HiddenSize, cfg.IntermediateSize, cfg.VocabSize
	q, kv := cfg.QDim(), cfg.KVDim()
	buf := make([]float32, max(V*H, I*H, q*H))
	f := func(out, in int) model.Tensor { return model.NewF32(buf[:out*in], out, in) }
	w := &engine.Weights{Embed: f(V, H), Norm: model.NewF32(buf[:H], H), LMHead: f(V, H), Layers: make([]engine.LayerWeights, cfg.NumLayers)}
	for i := range w.Layers {
		w.Layers[i] = engine.LayerWeights{AttnNorm: model.NewF32(buf[:H], H), Wq: f(q, H), Wk: f(kv, H), Wv: f(kv, H), Wo: f(H, q),
			MLPNorm: model.NewF32(buf[:H], H), WGate: f(I, H), WUp: f(I, H), WDown: f(H, I)}
	}
	return w
}

// backendTimer wraps the in-process model's backend and times its calls,
// so that bench serve can say how much of a level's wall time the backend
// was busy and how large its batches were.
type backendTimer struct {
	inner engine.Backend
	mu    sync.Mutex
	calls []fwdCall
}

type fwdCall struct {
	tokens int
	dur    time.Duration
}

func (t *backendTimer) wrap(be engine.Backend) engine.Backend {
	t.inner = be
	if _, ok := be.(engine.GreedyStepper); ok {
		return &timedStepper{timedBackend{t}}
	}
	return &timedBackend{t}
}

func (t *backendTimer) record(tokens int, d time.Duration) {
	t.mu.Lock()
	t.calls = append(t.calls, fwdCall{tokens, d})
	t.mu.Unlock()
}

func (t *backendTimer) reset() {
	if t == nil {
		return
	}
	t.mu.Lock()
	t.calls = t.calls[:0]
	t.mu.Unlock()
}

// summary: backend calls, busy share of wall, tokens per call and the
// median call duration for decode-only calls of a few sizes.
func (t *backendTimer) summary(wall time.Duration) string {
	if t == nil {
		return ""
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.calls) == 0 {
		return ""
	}
	var busy time.Duration
	toks := make([]float64, 0, len(t.calls))
	durs := make([]float64, 0, len(t.calls))
	for _, c := range t.calls {
		busy += c.dur
		toks = append(toks, float64(c.tokens))
		durs = append(durs, c.dur.Seconds())
	}
	return fmt.Sprintf("backend: %d calls, busy %.0f%% of wall, tokens per call p50 %.0f max %.0f, call ms p50 %.3f p90 %.3f max %.3f",
		len(t.calls), 100*busy.Seconds()/wall.Seconds(), pct(toks, 50), pct(toks, 100), pct(durs, 50)*1e3, pct(durs, 90)*1e3, pct(durs, 100)*1e3)
}

type timedBackend struct{ t *backendTimer }

func (b *timedBackend) Forward(reqs []*engine.ForwardRequest) error {
	n := 0
	for _, r := range reqs {
		n += len(r.Tokens)
	}
	s := time.Now()
	err := b.t.inner.Forward(reqs)
	b.t.record(n, time.Since(s))
	return err
}

func (b *timedBackend) CopySlots(src, dst []int32) error { return b.t.inner.CopySlots(src, dst) }

// SamplesOnDevice passes the inner backend's engine.DeviceSampler through
// (ForwardRequest.Sample reaches it unchanged).
func (b *timedBackend) SamplesOnDevice() bool {
	ds, ok := b.t.inner.(engine.DeviceSampler)
	return ok && ds.SamplesOnDevice()
}
func (b *timedBackend) Close() error { return b.t.inner.Close() }

// timedStepper also passes engine.GreedyStepper through.
type timedStepper struct{ timedBackend }

func (b *timedStepper) DecodeGreedy(token, pos int32, cached, slots []int32, out []int32) error {
	s := time.Now()
	err := b.t.inner.(engine.GreedyStepper).DecodeGreedy(token, pos, cached, slots, out)
	b.t.record(len(slots), time.Since(s))
	return err
}

// pct is the p-th percentile (nearest rank) of xs (sorted in place); 0 for none.
func pct(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	sort.Float64s(xs)
	i := int(p / 100 * float64(len(xs)-1))
	return xs[min(max(i, 0), len(xs)-1)]
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}
