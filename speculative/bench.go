package speculative

import (
	"context"
	_ "embed"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/specgate/specgate/engine"
)

//go:embed testdata/prompts.txt
var promptsTxt string

// BenchPrompts returns the prompts of testdata/prompts.txt (Go source lines
// from GOROOT/src and English sentences from the repo's docs), code and text
// interleaved.
func BenchPrompts() []string {
	var code, text []string
	for _, line := range strings.Split(promptsTxt, "\n") {
		kind, body, ok := strings.Cut(line, "\t")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		body = strings.NewReplacer(`\\`, `\`, `\t`, "\t").Replace(body)
		switch kind {
		case "code":
			code = append(code, body)
		case "text":
			text = append(text, body)
		}
	}
	var out []string
	for i := 0; i < len(code) || i < len(text); i++ {
		if i < len(code) {
			out = append(out, code[i])
		}
		if i < len(text) {
			out = append(out, text[i])
		}
	}
	return out
}

// BenchMode is one row of the speculative benchmark. Config (a
// draft-model proposer) or New (any other proposers, e.g. Medusa heads)
// selects the drafts; neither = plain decoding, the baseline. Adaptive
// lets the engine size each step's drafts (its default); otherwise every
// request gets its full draft every step (engine.Options.FixedDraft).
type BenchMode struct {
	Name     string
	Config   *Config
	New      func(target *engine.Model) ([]engine.Proposer, error)
	Adaptive bool
	// MaxDraft > 0 sets engine.Options.MaxDraft for a New mode (nodes per
	// request and step; default 16).
	MaxDraft int
}

// DefaultBenchModes are the rows of `specgate bench spec`: plain, fixed
// chains of 2, 4 and 6, a static and a dynamic tree, and the engine's
// adaptive budget over a chain and a dynamic tree.
func DefaultBenchModes() []BenchMode {
	return []BenchMode{
		{Name: "plain"},
		{Name: "chain k=1", Config: &Config{Method: MethodChain, K: 1}},
		{Name: "chain k=2", Config: &Config{Method: MethodChain, K: 2}},
		{Name: "chain k=3", Config: &Config{Method: MethodChain, K: 3}},
		{Name: "chain k=4", Config: &Config{Method: MethodChain, K: 4}},
		{Name: "chain k=6", Config: &Config{Method: MethodChain, K: 6}},
		{Name: "tree [2,2,1] n<=8", Config: &Config{Method: MethodTree, K: 4, Branching: []int{2, 2, 1}, Budget: 8}},
		{Name: "dynamic w=4 n<=12", Config: &Config{Method: MethodDynamic, K: 5, Width: 4, Budget: 12}},
		{Name: "chain adaptive", Config: &Config{Method: MethodChain, K: 6, Adaptive: true}, Adaptive: true},
		{Name: "dynamic adaptive", Config: &Config{Method: MethodDynamic, K: 5, Width: 4, Budget: 12, Adaptive: true}, Adaptive: true},
	}
}

// BenchOptions configure Bench.
type BenchOptions struct {
	Prompts     [][]int32 // token ids, each non-empty
	MaxNew      int       // new tokens per prompt
	Runs        int       // timed runs per mode (median reported); >= 1
	Concurrency []int     // requests in flight; nil = [1]
	Sampling    engine.SamplingParams
	Modes       []BenchMode  // nil = DefaultBenchModes; the first is the baseline
	Progress    func(string) // optional progress lines
	// ReportMismatch counts greedy outputs that differ from the baseline's
	// (BenchRow.Mismatch) instead of failing: on a GPU, steps of different
	// sizes may round differently (cuBLAS on fp16 activations) and pick
	// another token at a near-tie.
	ReportMismatch bool
	// WarmRuns is how many untimed runs of the first mode (plain decoding)
	// each concurrency level starts with; 0 = 2, negative = none. On the GPU
	// every new batch shape (requests in flight, attention splits as the
	// contexts grow) runs eagerly at its first sighting and is captured as
	// a CUDA graph at its second: without them the first mode paid a
	// level's new shapes in its first two runs (at concurrency 32 the plain
	// row ran 39% slower than its control row, a median of 3 runs).
	WarmRuns int
}

// BenchRow is one mode's result at one concurrency. Tau is generated
// tokens per target step of a request (decode steps only: the first token
// comes from prefill); Acceptance is accepted/proposed draft tokens;
// TokensPerSec is the median run's generated tokens over its wall-clock
// time; Speedup is the baseline's median time at the same concurrency over
// this mode's.
type BenchRow struct {
	Name         string
	Concurrency  int
	Tau          float64
	Acceptance   float64
	TokensPerSec float64
	Speedup      float64
	Steps        int
	Proposed     int
	Accepted     int
	Tokens       int
	Median       time.Duration
	// CPUSpeedup is the baseline's median process CPU time (user+system)
	// at the same concurrency over this mode's: on a shared, loaded
	// machine the work a mode costs, where wall time also measures the
	// CPU share the run got.
	CPUSpeedup float64
	CPUMedian  time.Duration
	Mismatch   int // greedy outputs that differ from the baseline's (ReportMismatch), over all runs
	// EngineSteps is the median over runs of the scheduler steps the run
	// took (prefill and decode; a step serves every request it batches);
	// SatOut the median over runs of the request-steps the engine's
	// scheduler left out because the request's caller was behind reading
	// its outputs (engine.Stats.SatOut): each one shrinks a batch.
	EngineSteps int64
	SatOut      int64
}

// Bench decodes every prompt with every mode on target, at each
// concurrency (that many requests in flight, prompts taken in order), Runs
// times, modes interleaved within a run so that machine load drifts affect
// all modes alike. Each mode has its own engine over the shared target.
// Outputs are checked against the baseline's under greedy decoding.
func Bench(target, draft *engine.Model, o BenchOptions) ([]BenchRow, error) {
	modes := o.Modes
	if modes == nil {
		modes = DefaultBenchModes()
	}
	conc := o.Concurrency
	if conc == nil {
		conc = []int{1}
	}
	if o.Runs < 1 || o.MaxNew < 1 || len(o.Prompts) == 0 {
		return nil, fmt.Errorf("%w: bench: runs %d, max new %d, %d prompts: all must be >= 1", ErrConfig, o.Runs, o.MaxNew, len(o.Prompts))
	}
	for _, c := range conc {
		if c < 1 || c > 256 {
			return nil, fmt.Errorf("%w: bench: concurrency %d not in [1, 256]", ErrConfig, c)
		}
	}
	engines := make([]*engine.Engine, len(modes))
	for i, m := range modes {
		var props []engine.Proposer
		switch {
		case m.Config != nil:
			d, err := NewDraft(target, draft, *m.Config)
			if err != nil {
				return nil, fmt.Errorf("bench mode %q: %w", m.Name, err)
			}
			props = []engine.Proposer{d}
		case m.New != nil:
			ps, err := m.New(target)
			if err != nil {
				return nil, fmt.Errorf("bench mode %q: %w", m.Name, err)
			}
			props = ps
		}
		opts := engine.Options{Proposers: props, FixedDraft: !m.Adaptive, MaxBatch: 256}
		if m.Config != nil {
			c, _ := m.Config.withDefaults()
			opts.MaxDraft = c.Budget
		}
		if m.MaxDraft > 0 {
			opts.MaxDraft = m.MaxDraft
		}
		engines[i] = engine.New(target, opts)
		defer engines[i].Close()
	}
	// warm-up (untimed): one short request per mode (the engines time their forwards).
	for i := range modes {
		req := engine.GenerateRequest{Prompt: o.Prompts[0], MaxTokens: min(o.MaxNew, 8), Sampling: o.Sampling}
		if _, err := engines[i].Generate(context.Background(), req, func(engine.Chunk) error { return nil }); err != nil {
			return nil, fmt.Errorf("bench mode %q warm-up: %w", modes[i].Name, err)
		}
	}
	var rows []BenchRow
	warm := o.WarmRuns
	if warm == 0 {
		warm = 2
	}
	for _, c := range conc {
		for w := range warm {
			if o.Progress != nil {
				o.Progress(fmt.Sprintf("concurrency %d, warm-up %d/%d, mode %s", c, w+1, warm, modes[0].Name))
			}
			if _, _, _, err := runConcurrent(engines[0], o, c); err != nil {
				return nil, fmt.Errorf("bench mode %q concurrency %d warm-up: %w", modes[0].Name, c, err)
			}
		}
		crow := make([]BenchRow, len(modes))
		times := make([][]time.Duration, len(modes))
		cpus := make([][]time.Duration, len(modes))
		steps := make([][]int64, len(modes))
		satOut := make([][]int64, len(modes))
		ref := make([][]int32, len(o.Prompts))
		for run := range o.Runs {
			for i, m := range modes {
				if o.Progress != nil {
					o.Progress(fmt.Sprintf("concurrency %d, run %d/%d, mode %s", c, run+1, o.Runs, m.Name))
				}
				// each timed run starts from a collected heap: the previous
				// mode's garbage (a fixed draft mode allocates far more) is
				// not collected on this mode's time
				runtime.GC()
				c0, s0 := processCPU(), engines[i].Stats()
				outs, results, dt, err := runConcurrent(engines[i], o, c)
				cpus[i] = append(cpus[i], processCPU()-c0)
				s1 := engines[i].Stats()
				steps[i] = append(steps[i], s1.Steps-s0.Steps)
				satOut[i] = append(satOut[i], s1.SatOut-s0.SatOut)
				if err != nil {
					return nil, fmt.Errorf("bench mode %q concurrency %d: %w", m.Name, c, err)
				}
				var st engine.SpecStats
				toks := 0
				for p, res := range results {
					if o.Sampling.Temperature <= 0 {
						if i == 0 && run == 0 {
							ref[p] = outs[p]
						} else if fmt.Sprint(outs[p]) != fmt.Sprint(ref[p]) {
							if !o.ReportMismatch {
								return nil, fmt.Errorf("bench mode %q prompt %d: greedy output differs from %q", m.Name, p, modes[0].Name)
							}
							crow[i].Mismatch++
						}
					}
					toks += res.CompletionTokens
					if res.Spec != nil {
						st.Steps += res.Spec.Steps + max(res.CompletionTokens-1-res.Spec.Accepted-res.Spec.Steps, 0)
						st.Proposed += res.Spec.Proposed
						st.Accepted += res.Spec.Accepted
					} else {
						st.Steps += max(res.CompletionTokens-1, 0)
					}
				}
				times[i] = append(times[i], dt)
				if run == 0 {
					r := &crow[i]
					r.Name, r.Concurrency, r.Steps, r.Proposed, r.Accepted, r.Tokens = m.Name, c, st.Steps, st.Proposed, st.Accepted, toks
					r.Tau = float64(toks-len(o.Prompts)) / float64(max(st.Steps, 1))
					if st.Proposed > 0 {
						r.Acceptance = float64(st.Accepted) / float64(st.Proposed)
					}
				}
			}
		}
		for i := range crow {
			crow[i].Median = median(times[i])
			crow[i].TokensPerSec = float64(crow[i].Tokens) / crow[i].Median.Seconds()
			crow[i].Speedup = crow[0].Median.Seconds() / crow[i].Median.Seconds()
			crow[i].CPUMedian = median(cpus[i])
			crow[i].CPUSpeedup = crow[0].CPUMedian.Seconds() / max(crow[i].CPUMedian.Seconds(), 1e-9)
			crow[i].EngineSteps = medianInt(steps[i])
			crow[i].SatOut = medianInt(satOut[i])
		}
		rows = append(rows, crow...)
	}
	return rows, nil
}

// runConcurrent runs every prompt through e with c requests in flight and
// returns the outputs, results and wall time.
func runConcurrent(e *engine.Engine, o BenchOptions, c int) ([][]int32, []engine.Result, time.Duration, error) {
	n := len(o.Prompts)
	outs := make([][]int32, n)
	results := make([]engine.Result, n)
	errs := make([]error, n)
	next := make(chan int, n)
	for i := range n {
		next <- i
	}
	close(next)
	var wg sync.WaitGroup
	start := time.Now()
	for range min(c, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range next {
				sp := o.Sampling
				sp.SkipLogprobs = sp.Logprobs == 0 // as the gateway does for clients that ask for none
				req := engine.GenerateRequest{Prompt: o.Prompts[p], MaxTokens: o.MaxNew, Sampling: sp}
				results[p], errs[p] = e.Generate(context.Background(), req, func(ch engine.Chunk) error {
					outs[p] = append(outs[p], ch.Tokens...)
					return nil
				})
			}
		}()
	}
	wg.Wait()
	dt := time.Since(start)
	for p, err := range errs {
		if err != nil {
			return nil, nil, 0, fmt.Errorf("prompt %d: %w", p, err)
		}
	}
	return outs, results, dt, nil
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(a, b int) bool { return s[a] < s[b] })
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func medianInt(v []int64) int64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// FormatBench renders rows as a markdown table.
func FormatBench(rows []BenchRow) string {
	var b strings.Builder
	b.WriteString("| mode | concurrency | τ (tokens/step) | acceptance | proposed | accepted | target steps | tokens/s | speedup vs plain | CPU time vs plain | engine steps | sat out |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		acc := "-"
		if r.Proposed > 0 {
			acc = fmt.Sprintf("%.2f", r.Acceptance)
		}
		fmt.Fprintf(&b, "| %s | %d | %.2f | %s | %d | %d | %d | %.1f | %.2f× | %.2f× | %d | %d |\n",
			r.Name, r.Concurrency, r.Tau, acc, r.Proposed, r.Accepted, r.Steps, r.TokensPerSec, r.Speedup, r.CPUSpeedup, r.EngineSteps, r.SatOut)
	}
	for _, r := range rows {
		if r.Mismatch > 0 {
			fmt.Fprintf(&b, "\n%s, concurrency %d: %d greedy output(s) differ from the baseline's (all runs)", r.Name, r.Concurrency, r.Mismatch)
		}
	}
	return b.String()
}

// processCPU is the process's user+system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
