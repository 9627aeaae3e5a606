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
	"maps"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/specgate/specgate/cache"
	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/engine/cuda"
	"github.com/specgate/specgate/gateway"
	"github.com/specgate/specgate/serving"
)

func init() {
	register("bench-workload", "drafts the gateway already holds: tau and speedup over plain on paraphrase, code-edit and multi-turn traces", runBenchWorkload)
}

// wlRequest is one request of a trace: the endpoint's JSON body.
type wlRequest struct {
	path string // /v1/chat/completions or /v1/completions
	body map[string]any
}

// wlTrace is a trace: warm-up requests (answers the gateway then holds:
// cache entries, the tenant's earlier answers) and the measured ones. A
// measured request may depend on warm-up answers (prediction, quotes):
// build fills it from them.
type wlTrace struct {
	name, what string
	warm       []wlRequest
	build      func(warmAnswers []string) []wlRequest
}

var wlWords = []string{"ephemeral", "ubiquitous", "candid", "lucid", "arduous", "benevolent", "frugal", "gregarious",
	"meticulous", "obscure", "pragmatic", "resilient", "serene", "tenacious", "verbose", "whimsical"}

func chatBody(model string, maxTok int, msgs ...string) map[string]any {
	var m []map[string]string
	for i, c := range msgs {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		m = append(m, map[string]string{"role": role, "content": c})
	}
	return map[string]any{"model": model, "temperature": 0, "max_tokens": maxTok, "messages": m}
}

// wlTraces builds the three traces of issue #11 for the shipped model (a
// toy that writes Go-looking code and answers "what does X mean" with
// dictionary glosses), n items each.
func wlTraces(model string, n int) []wlTrace {
	words := wlWords[:min(n, len(wlWords))]
	para := []string{"What is the meaning of %s?", "Define %s.", "What does the word %s mean?", "Tell me what %s means."}
	a := wlTrace{name: "paraphrase", what: "paraphrased repeats of earlier questions (near misses)"}
	for _, w := range words {
		a.warm = append(a.warm, wlRequest{"/v1/chat/completions", chatBody(model, 64, fmt.Sprintf("What does %s mean?", w))})
	}
	// every question comes back in each of the paraphrases, in rounds (FAQ
	// traffic): a paraphrase finds the earlier wordings' answers as near misses.
	a.build = func([]string) []wlRequest {
		var out []wlRequest
		for r := range para {
			for i, w := range words {
				out = append(out, wlRequest{"/v1/chat/completions", chatBody(model, 64, fmt.Sprintf(para[(i+r)%len(para)], w))})
			}
		}
		return out
	}

	// code edits: the client asks for a file again after an edit and sends
	// the unchanged file (the earlier answer) as its prediction. Two edits
	// in three change only the header (year, license line); every third
	// renames the receiver, which changes this toy model's output more.
	funcs := []string{"func (srv *Server) Close() error {", "func (b *Buffer) Len() int {", "func (r *Reader) Read(p []byte) (n int, err error) {",
		"func (c *Client) Do(req *Request) (*Response, error) {", "func (t *Tree) Insert(key string, value int) {", "func (w *Writer) Flush() error {",
		"func (d *Decoder) Decode(v any) error {", "func (s *Scanner) Scan() bool {", "func (m *Map) Load(key any) (value any, ok bool) {",
		"func (l *List) PushBack(v any) *Element {", "func (p *Pool) Get() any {", "func (q *Queue) Pop() int {"}
	funcs = funcs[:min(n, len(funcs))]
	header := func(year int, license string) string {
		return fmt.Sprintf("// Copyright %d The Go Authors. All rights reserved.\n// Use of this source code is governed by a %s\n// license that can be found in the LICENSE file.\n\npackage main\n\n", year, license)
	}
	comp := func(prompt string) map[string]any {
		return map[string]any{"model": model, "temperature": 0, "max_tokens": 160, "prompt": prompt}
	}
	b := wlTrace{name: "code-edit", what: "code-edit requests with a prediction of the unchanged file"}
	for _, f := range funcs {
		b.warm = append(b.warm, wlRequest{"/v1/completions", comp(header(2024, "BSD-style") + f)})
	}
	b.build = func(ans []string) []wlRequest {
		var out []wlRequest
		for i, f := range funcs {
			var p string
			switch i % 3 {
			case 0:
				p = header(2025, "BSD-style") + f
			case 1:
				p = header(2024, "MIT-style") + f
			default: // rename the receiver
				o := strings.Index(f, "(")
				sp := o + strings.Index(f[o:], " ")
				p = header(2024, "BSD-style") + f[:o+1] + "self" + f[sp:]
			}
			body := comp(p)
			body["prediction"] = map[string]any{"type": "content", "content": ans[i]}
			out = append(out, wlRequest{"/v1/completions", body})
		}
		return out
	}

	// multi-turn: the second turn comes back to the first answer (asks for
	// it again, or for a neighbour), with the first answer in the history.
	c := wlTrace{name: "multi-turn", what: "multi-turn conversations quoting earlier answers"}
	for _, w := range words {
		c.warm = append(c.warm, wlRequest{"/v1/chat/completions", chatBody(model, 64, fmt.Sprintf("What does %s mean?", w))})
	}
	c.build = func(ans []string) []wlRequest {
		var out []wlRequest
		for i, w := range words {
			follow := []string{"Say that again: what does %s mean?", "Repeat the definition of %s.", "And what does %s mean, once more?"}[i%3]
			out = append(out, wlRequest{"/v1/chat/completions", chatBody(model, 64, fmt.Sprintf("What does %s mean?", w), ans[i], fmt.Sprintf(follow, w))})
		}
		return out
	}
	return []wlTrace{a, b, c}
}

// wlReply is what one response told.
type wlReply struct {
	text       string
	completion int
	spec       *gateway.SpeculativeUsage
	xcache     string
	dur        time.Duration
	bd         wlBreakdown // where the request's time went (in-process servers)
}

// wlBreakdown is one request's share of the in-process engine's counters
// (requests run one at a time, so the deltas around a request are its own):
// scheduler steps, host time inside steps (of it: proposing, forwards),
// graphs captured and replayed, and with --device-times the device time of
// its forwards. The rest of the request's wall time is outside the engine's
// steps: HTTP, the gateway's work before and after generation (cache,
// tokenization, drafts), and the hand-offs between steps.
type wlBreakdown struct {
	steps, graphs, replays         int64
	step, propose, forward, device time.Duration
	verify, keep                   time.Duration // of the step's rest: after the forward; of it, KV compaction
	// pre: from the request's send to the engine's Generate call (HTTP,
	// the gateway's cache lookup, tokenization, drafts); post: from
	// Generate's return to the response read (rendering, the cache
	// store, HTTP); gen: inside Generate.
	pre, gen, post time.Duration
}

func (b *wlBreakdown) add(o wlBreakdown) {
	b.steps += o.steps
	b.graphs += o.graphs
	b.replays += o.replays
	b.step += o.step
	b.propose += o.propose
	b.forward += o.forward
	b.device += o.device
	b.verify += o.verify
	b.keep += o.keep
	b.pre += o.pre
	b.gen += o.gen
	b.post += o.post
}

// wlTimedGen records when the in-process engine's Generate was entered
// and returned (requests run one at a time). The server's goroutine
// writes the times while the client's reads them (span): mu guards them.
type wlTimedGen struct {
	g           engine.Generator
	mu          sync.Mutex
	enter, exit time.Time // exit zero while a Generate runs
}

func (t *wlTimedGen) Generate(ctx context.Context, req engine.GenerateRequest, emit func(engine.Chunk) error) (engine.Result, error) {
	t.mu.Lock()
	t.enter, t.exit = time.Now(), time.Time{}
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		t.exit = time.Now()
		t.mu.Unlock()
	}()
	return t.g.Generate(ctx, req, emit)
}

// span returns the last Generate's entry and return times (exit zero while
// it runs).
func (t *wlTimedGen) span() (enter, exit time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.enter, t.exit
}

// wlGen is the current in-process server's timed generator (nil: remote).
var wlGen *wlTimedGen

// line formats b over n requests of total wall time wall: per request,
// milliseconds.
func (b wlBreakdown) line(wall time.Duration, n int) string {
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(max(n, 1)) }
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(max(b.steps, 1)) }
	dev := "-"
	if b.device > 0 {
		dev = fmt.Sprintf("%.3f ms (%.0f µs/step)", ms(b.device), per(b.device))
	}
	return fmt.Sprintf("wall %.3f ms = before Generate %.3f + Generate %.3f (steps %.3f, between steps %.3f) + after %.3f; %.1f steps, %.0f µs/step: propose %.0f, forward %.0f, rest %.0f (after the forward %.0f, of it KV keep %.0f); device %s; graphs +%.1f, replays %.1f",
		ms(wall), ms(b.pre), ms(b.gen), ms(b.step), ms(b.gen-b.step), ms(b.post), float64(b.steps)/float64(max(n, 1)), per(b.step), per(b.propose), per(b.forward),
		per(b.step-b.propose-b.forward), per(b.verify), per(b.keep), dev, float64(b.graphs)/float64(max(n, 1)), float64(b.replays)/float64(max(n, 1)))
}

// wlProbe snapshots the in-process server's counters (nil: a remote server).
var wlProbe func() wlBreakdown

// wlDeviceTimes: --device-times (cuda.Options.TimeSteps in the in-process server).
var wlDeviceTimes bool

func wlPost(ctx context.Context, url, key string, r wlRequest, hdr map[string]string) (wlReply, error) {
	b, _ := json.Marshal(r.body)
	req, err := http.NewRequestWithContext(ctx, "POST", url+r.path, bytes.NewReader(b))
	if err != nil {
		return wlReply{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	var before wlBreakdown
	if wlProbe != nil {
		before = wlProbe()
	}
	t0 := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return wlReply{}, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	t1 := time.Now()
	dur := t1.Sub(t0)
	var bd wlBreakdown
	if wlProbe != nil {
		after := wlProbe()
		bd = wlBreakdown{steps: after.steps - before.steps, graphs: after.graphs - before.graphs, replays: after.replays - before.replays,
			step: after.step - before.step, propose: after.propose - before.propose, forward: after.forward - before.forward,
			device: after.device - before.device, verify: after.verify - before.verify, keep: after.keep - before.keep}
		if g := wlGen; g != nil {
			if enter, exit := g.span(); enter.After(t0) && exit.After(enter) && t1.After(exit) {
				bd.pre, bd.gen, bd.post = enter.Sub(t0), exit.Sub(enter), t1.Sub(exit)
			}
		}
	}
	if err != nil {
		return wlReply{}, err
	}
	if resp.StatusCode != 200 {
		return wlReply{}, fmt.Errorf("%s: status %d: %s", r.path, resp.StatusCode, body)
	}
	var out struct {
		Choices []struct {
			Text    string `json:"text"`
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
		Usage gateway.Usage `json:"usage"`
	}
	if err := json.Unmarshal(body, &out); err != nil || len(out.Choices) == 0 {
		return wlReply{}, fmt.Errorf("%s: bad body %.200s: %v", r.path, body, err)
	}
	text := out.Choices[0].Message.Content + out.Choices[0].Text
	return wlReply{text: text, completion: out.Usage.CompletionTokens, spec: out.Usage.Speculative, xcache: resp.Header.Get("X-Cache"), dur: dur, bd: bd}, nil
}

// wlResult sums one trace over one repetition.
type wlResult struct {
	reqs, tokens       int
	plain, drafts      time.Duration
	steps, gen         int
	draftSteps         int // verification steps with a draft (usage.speculative.steps)
	proposed, accepted int // draft nodes verified and accepted (usage.speculative)
	bySource           map[string]gateway.SpeculativeSource
	nearMiss, wouldHit int
	mismatches         int
	bdPlain, bdDrafts  wlBreakdown
}

func runBenchWorkload(args []string) error {
	fs := flag.NewFlagSet("bench-workload", flag.ContinueOnError)
	url := fs.String("url", "", "a running specgate server (default: start one in-process with --model on --backend)")
	backendFlag := fs.String("backend", "cpu", "in-process: cpu or cuda (the model on the GPU, multi-step greedy decoding for plain requests as serve sets it)")
	modelDir := fs.String("model", "models/specgate-target", "model directory for the in-process server")
	model := fs.String("model-name", "specgate-target", "model name in requests")
	key := fs.String("key", "", "API key (with --url)")
	n := fs.Int("n", 12, "items per trace")
	reps := fs.Int("reps", 3, "repetitions (in-process: each on a fresh server; medians are printed)")
	only := fs.String("traces", "paraphrase,code-edit,multi-turn", "traces to run")
	maxDraft := fs.Int("max-draft", 0, "in-process: the engine's per-request draft cap (0: what serve sets for drafts, 64)")
	verbose = fs.Bool("v", false, "print every measured request")
	fixed := fs.Bool("fixed", false, "in-process: verify every proposed node (engine FixedDraft) instead of the adaptive budget")
	devTimes := fs.Bool("device-times", false, "in-process, cuda: record each forward's device time (cuda TimeSteps) for the per-request breakdown")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	warmup := fs.Bool("graph-warmup", true, "in-process, cuda: capture the step shapes' CUDA graphs at start, as serve does (graph_warmup)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: specgate bench workload [--url URL | --backend cpu|cuda] [--n 12] [--reps 3] [--traces a,b,c]")
		fmt.Fprintln(fs.Output(), "Per trace: warm-up requests, then each measured request twice, interleaved: plain (X-Specgate-Speculation: off,")
		fmt.Fprintln(fs.Output(), "Cache-Control: no-cache, no-store) and with drafts (Cache-Control: no-cache: the response cache serves nothing,")
		fmt.Fprintln(fs.Output(), "its near misses draft); outputs must be equal. A cache-on pass before them counts the answers the cache would serve.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *backendFlag != "cpu" && *backendFlag != "cuda" {
		return fmt.Errorf("bench-workload: --backend %q: want cpu or cuda", *backendFlag)
	}
	backend := "server at " + *url
	if *url == "" {
		backend = *backendFlag + " (in-process)"
	} else {
		*reps = 1
	}
	want := map[string]bool{}
	for _, t := range strings.Split(*only, ",") {
		want[strings.TrimSpace(t)] = true
	}
	ctx := context.Background()
	results := map[string][]wlResult{}
	var names []string
	wlGraphWarmup = *warmup
	wlDeviceTimes = *devTimes
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return fmt.Errorf("cpuprofile: %w", err)
		}
		defer f.Close()
		// 1 kHz instead of pprof's 100 Hz: a drafted request's steps take a
		// few ms on the GPU, too few samples otherwise. (The runtime then
		// prints that the rate was already set; the profile's period says
		// 10 ms, so read shares, not absolute times.)
		runtime.SetCPUProfileRate(1000)
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	for rep := range *reps {
		base, stop := *url, func() {}
		if base == "" {
			var err error
			if base, stop, err = wlServer(*modelDir, *model, *backendFlag, *maxDraft, *fixed); err != nil {
				return err
			}
		}
		for ti, tr := range wlTraces(*model, *n) {
			if !want[tr.name] {
				continue
			}
			if rep == 0 {
				names = append(names, tr.name)
			}
			res, err := wlRun(ctx, base, *key, tr, rep+ti)
			if err != nil {
				stop()
				return fmt.Errorf("%s: %w", tr.name, err)
			}
			results[tr.name] = append(results[tr.name], res)
			fmt.Fprintf(os.Stderr, "rep %d %-10s plain %v drafts %v (%.2fx) tau %.2f\n", rep+1, tr.name,
				res.plain.Round(time.Millisecond), res.drafts.Round(time.Millisecond), float64(res.plain)/float64(res.drafts), wlTau(res))
		}
		stop()
	}
	fmt.Printf("specgate bench workload: backend %s, %d items per trace, %d repetition(s), greedy; medians over repetitions\n", backend, *n, *reps)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	var differ []string
	fmt.Fprintln(tw, "trace\tbackend\trequests\ttokens\ttau\tplain tok/s\tdrafts tok/s\tspeedup\tdraft steps\tnodes/step\taccepted/step\tnear-miss drafts\tcache-hit answers avoided\tsaved ms/req\taccepted/proposed by source (all reps)\t")
	for _, name := range names {
		rs := results[name]
		r := rs[0] // requests, tokens and the counts of the first repetition
		sp := make([]float64, len(rs))
		pt, dt, taus, saved := make([]float64, len(rs)), make([]float64, len(rs)), make([]float64, len(rs)), make([]float64, len(rs))
		for i, x := range rs {
			sp[i] = float64(x.plain) / float64(x.drafts)
			pt[i] = float64(x.tokens) / x.plain.Seconds()
			dt[i] = float64(x.tokens) / x.drafts.Seconds()
			taus[i] = wlTau(x)
			saved[i] = float64((x.plain - x.drafts).Microseconds()) / 1000 / float64(max(x.reqs, 1))
		}
		tot := map[string]gateway.SpeculativeSource{}
		for _, x := range rs {
			for k, s := range x.bySource {
				t := tot[k]
				t.Proposed += s.Proposed
				t.Accepted += s.Accepted
				tot[k] = t
			}
		}
		var src []string
		for _, k := range slices.Sorted(maps.Keys(tot)) {
			s := tot[k]
			src = append(src, fmt.Sprintf("%s %d/%d", k, s.Accepted, s.Proposed))
		}
		ds, nodes, accs := 0, 0, 0
		for _, x := range rs {
			ds, nodes, accs = ds+x.draftSteps, nodes+x.proposed, accs+x.accepted
		}
		perStep := func(v int) float64 { return float64(v) / float64(max(ds, 1)) }
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.2f\t%.1f\t%.1f\t%.2fx\t%d\t%.1f\t%.2f\t%d\t%d\t%.1f\t%s\t\n", name, strings.Fields(backend)[0], r.reqs, r.tokens,
			med(taus), med(pt), med(dt), med(sp), r.draftSteps, perStep(nodes), perStep(accs), r.nearMiss, r.wouldHit, med(saved), strings.Join(src, ", "))
		for _, x := range rs {
			if x.mismatches > 0 {
				differ = append(differ, fmt.Sprintf("%s: %d", name, x.mismatches))
			}
		}
	}
	tw.Flush()
	if wlProbe != nil {
		fmt.Println("where the time went, per request (all repetitions; host time of the engine's steps, device time with --device-times):")
		for _, name := range names {
			var bp, bdr wlBreakdown
			var wp, wd time.Duration
			n := 0
			for _, x := range results[name] {
				bp.add(x.bdPlain)
				bdr.add(x.bdDrafts)
				wp += x.plain
				wd += x.drafts
				n += x.reqs
			}
			fmt.Printf("  %-10s plain  %s\n  %-10s drafts %s\n", name, bp.line(wp, n), "", bdr.line(wd, n))
		}
	}
	fmt.Println("tau = completion tokens after the first / target decode steps (drafts run); speedup = plain time / drafts time, same requests,")
	fmt.Println("each pair interleaved; draft steps = verification steps with a draft (first repetition); nodes/step and accepted/step = draft")
	fmt.Println("nodes the engine's budget granted and verified, and of them accepted, per draft step (all repetitions);")
	fmt.Println("saved = (plain - drafts time) per request; near-miss drafts = requests drafted from a cache near miss;")
	fmt.Println("cache-hit answers avoided = requests a cache-on pass answers from the cache, unverified, and which this run generated")
	fmt.Println("(verified against its drafts) instead; the response cache serves nothing in the measured passes.")
	if len(differ) > 0 {
		return fmt.Errorf("outputs differ between plain and drafts (%s)", strings.Join(differ, ", "))
	}
	return nil
}

func wlTau(r wlResult) float64 { return float64(r.gen) / float64(max(r.steps, 1)) }

func med(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

var verbose *bool

// wlRun runs one trace: warm-up, a cache-on pass that only counts hits,
// then every measured request plain and with drafts (which first
// alternates).
func wlRun(ctx context.Context, base, key string, tr wlTrace, seed int) (wlResult, error) {
	res := wlResult{bySource: map[string]gateway.SpeculativeSource{}}
	var answers []string
	for _, r := range tr.warm {
		rep, err := wlPost(ctx, base, key, r, nil)
		if err != nil {
			return res, err
		}
		answers = append(answers, rep.text)
	}
	plainHdr := map[string]string{gateway.HeaderSpeculation: "off", "Cache-Control": "no-cache, no-store"}
	draftHdr := map[string]string{"Cache-Control": "no-cache"}
	measured := tr.build(answers)
	// what a cache-on gateway would do with these requests now: answers it
	// would serve from the cache, unverified (plain and no-store, so that
	// this pass changes neither the cache nor the tenant's answers).
	for _, r := range measured {
		rep, err := wlPost(ctx, base, key, r, map[string]string{gateway.HeaderSpeculation: "off", "Cache-Control": "no-store"})
		if err != nil {
			return res, err
		}
		if strings.HasPrefix(rep.xcache, "HIT") {
			res.wouldHit++
		}
	}
	for i, r := range measured {
		var p, d wlReply
		var err error
		if (i+seed)%2 == 0 {
			if p, err = wlPost(ctx, base, key, r, plainHdr); err == nil {
				d, err = wlPost(ctx, base, key, r, draftHdr)
			}
		} else {
			if d, err = wlPost(ctx, base, key, r, draftHdr); err == nil {
				p, err = wlPost(ctx, base, key, r, plainHdr)
			}
		}
		if err != nil {
			return res, err
		}
		if p.text != d.text {
			res.mismatches++
			fmt.Fprintf(os.Stderr, "%s request %d: outputs differ:\nplain  %q\ndrafts %q\n", tr.name, i, p.text, d.text)
		}
		if *verbose {
			acc := 0
			if d.spec != nil {
				acc = d.spec.Accepted
			}
			fmt.Fprintf(os.Stderr, "  %s %2d: %3d tokens, plain %6.1f ms, drafts %6.1f ms (%.2fx), accepted %d %v\n", tr.name, i, d.completion,
				float64(p.dur.Microseconds())/1000, float64(d.dur.Microseconds())/1000, float64(p.dur)/float64(d.dur), acc, d.spec)
			if wlProbe != nil {
				fmt.Fprintf(os.Stderr, "      plain  %s\n      drafts %s\n", p.bd.line(p.dur, 1), d.bd.line(d.dur, 1))
			}
		}
		res.bdPlain.add(p.bd)
		res.bdDrafts.add(d.bd)
		res.reqs++
		res.tokens += d.completion
		res.plain += p.dur
		res.drafts += d.dur
		res.gen += max(d.completion-1, 0)
		res.steps += max(d.completion-1, 0) // minus the accepted draft tokens below: one target step per other token
		if d.spec != nil {
			res.draftSteps += d.spec.Steps
			res.proposed += d.spec.Proposed
			res.accepted += d.spec.Accepted
			res.steps -= d.spec.Accepted
			for k, s := range d.spec.BySource {
				t := res.bySource[k]
				t.Proposed += s.Proposed
				t.Accepted += s.Accepted
				res.bySource[k] = t
			}
			if d.spec.BySource["near_miss"].Proposed > 0 {
				res.nearMiss++
			}
		}
	}
	return res, nil
}

// wlGraphWarmup: wlServer's CUDA backend captures its graphs at start
// (--graph-warmup).
var wlGraphWarmup = true

// wlServer starts an in-process gateway on a loopback port: the model on
// backend ("cpu" or "cuda") with its model-free drafts (as serve configures
// them), and a fresh in-memory semantic cache (lexical embedder, HNSW).
func wlServer(dir, name, backend string, maxDraft int, fixed bool) (string, func(), error) {
	lo := engine.LoadOptions{}
	eo := engine.Options{}
	if backend == "cuda" {
		lo.NewBackend = cuda.Factory(cuda.Options{TimeSteps: wlDeviceTimes}.WithEnv(os.Getenv))
		eo.DecodeSteps = 8 // as serve sets it on the GPU
	}
	m, err := engine.Load(dir, lo)
	if err != nil {
		return "", nil, err
	}
	mc := gateway.ModelConfig{Name: name, Path: dir}
	ds, err := serving.ModelDrafts(mc, nil, &eo)
	drafts := gateway.NewDrafts(ds)
	if err != nil {
		return "", nil, err
	}
	if maxDraft > 0 {
		eo.MaxDraft = maxDraft
	}
	eo.FixedDraft = fixed
	if testEngineOptions != nil {
		testEngineOptions(&eo)
	}
	if backend == "cuda" && wlGraphWarmup {
		// as serving.Load does (progress on stderr)
		serving.WarmupGraphs(slog.New(slog.NewTextHandler(os.Stderr, nil)), mc, "target", m.Backend(), eo, m.Config, true)
	}
	eng := engine.New(m, eo)
	wlGen = &wlTimedGen{g: eng}
	var devSum time.Duration
	wlProbe = func() wlBreakdown {
		st := eng.Stats()
		b := wlBreakdown{steps: st.Steps, step: st.StepTime, propose: st.ProposeTime, forward: st.ForwardTime, verify: st.VerifyTime, keep: st.KeepTime}
		if gs, ok := m.Backend().(interface{ Stats() (int, int) }); ok {
			g, r := gs.Stats()
			b.graphs, b.replays = int64(g), int64(r)
		}
		if ts, ok := m.Backend().(interface{ StepTimes() []float64 }); ok && wlDeviceTimes {
			for _, s := range ts.StepTimes() {
				devSum += time.Duration(s * 1e9)
			}
		}
		b.device = devSum
		return b
	}
	emb, err := cache.NewLexical(cache.DefaultLexicalDim)
	if err != nil {
		return "", nil, err
	}
	ix, err := cache.NewHNSW(cache.HNSWConfig{Dim: cache.DefaultLexicalDim, Seed: 1})
	if err != nil {
		return "", nil, err
	}
	c, err := cache.New(cache.DefaultConfig(), cache.NewMemStore(nil), ix, emb)
	if err != nil {
		return "", nil, err
	}
	s, err := gateway.New(gateway.Options{Config: gateway.DefaultConfig(), Cache: c,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Models: []*gateway.LocalModel{{Name: name, Generator: wlGen, Tokenizer: m.Tokenizer, ContextLength: m.Config.MaxPositions, KV: m.KV(), Drafts: drafts}}})
	if err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	go func() { _ = s.Serve(ln) }()
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil && !errors.Is(err, gateway.ErrShuttingDown) {
			fmt.Fprintln(os.Stderr, "shutdown:", err)
		}
		_ = c.Close()
		_ = eng.Close()
		_ = m.Close()
	}
	return "http://" + ln.Addr().String(), stop, nil
}
