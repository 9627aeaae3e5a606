package speculative

import (
	"context"
	_ "embed"
	"fmt"
	"sort"
	"strings"
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

// BenchMode is one row of the speculative benchmark: a name and a config
// (nil = plain decoding, the baseline).
type BenchMode struct {
	Name   string
	Config *Config
}

// DefaultBenchModes are the rows of `specgate bench-spec`: plain, chains of
// 1, 2, 4 and 6, a small and a large static tree, a dynamic tree, and the
// adaptive chain and dynamic tree (costs measured on the machine at hand).
func DefaultBenchModes() []BenchMode {
	return []BenchMode{
		{"plain", nil},
		{"chain k=1", &Config{Method: MethodChain, K: 1}},
		{"chain k=2", &Config{Method: MethodChain, K: 2}},
		{"chain k=4", &Config{Method: MethodChain, K: 4}},
		{"chain k=6", &Config{Method: MethodChain, K: 6}},
		{"tree [2,2,1] n<=8", &Config{Method: MethodTree, K: 4, Branching: []int{2, 2, 1}, Budget: 8}},
		{"tree [4,2,2,1] n<=16", &Config{Method: MethodTree, K: 5, Branching: []int{4, 2, 2, 1}, Budget: 16}},
		{"dynamic w=4 n<=12", &Config{Method: MethodDynamic, K: 5, Width: 4, Budget: 12}},
		{"chain adaptive", &Config{Method: MethodChain, K: 4, Adaptive: true}},
		{"dynamic adaptive", &Config{Method: MethodDynamic, K: 5, Width: 4, Budget: 12, Adaptive: true}},
	}
}

// BenchOptions configure Bench.
type BenchOptions struct {
	Prompts  [][]int32 // token ids, each non-empty
	MaxNew   int       // new tokens per prompt
	Runs     int       // timed runs per mode (median reported); >= 1
	Sampling engine.SamplingParams
	Modes    []BenchMode // nil = DefaultBenchModes
}

// BenchRow is one mode's result. Tau is generated tokens per target step
// (decode steps only: the first token of each request comes from prefill);
// Acceptance is accepted/proposed draft tokens; TokensPerSec is the median
// run's generated tokens over its wall-clock time; Speedup is plain's
// median time over this mode's.
type BenchRow struct {
	Name         string
	Tau          float64
	Acceptance   float64
	TokensPerSec float64
	Speedup      float64
	Steps        int
	Proposed     int
	Accepted     int
	Tokens       int
	Median       time.Duration
}

// Bench decodes every prompt with every mode on target (batch 1, one request
// at a time) Runs times, modes interleaved within a run so that machine load
// drifts affect all modes alike. The first mode is the speedup baseline.
// Outputs are checked against the first mode's under greedy decoding.
func Bench(target, draft *engine.Model, o BenchOptions) ([]BenchRow, error) {
	modes := o.Modes
	if modes == nil {
		modes = DefaultBenchModes()
	}
	if o.Runs < 1 || o.MaxNew < 1 || len(o.Prompts) == 0 {
		return nil, fmt.Errorf("%w: bench: runs %d, max new %d, %d prompts: all must be >= 1", ErrConfig, o.Runs, o.MaxNew, len(o.Prompts))
	}
	specs := make([]engine.Speculator, len(modes))
	for i, m := range modes {
		if m.Config == nil {
			continue
		}
		d, err := NewDraft(target, draft, *m.Config)
		if err != nil {
			return nil, fmt.Errorf("bench mode %q: %w", m.Name, err)
		}
		specs[i] = d
	}
	e := engine.New(target, engine.Options{})
	defer e.Close()
	// warm-up (untimed): one short request per mode.
	for i := range modes {
		req := engine.GenerateRequest{Prompt: o.Prompts[0], MaxTokens: min(o.MaxNew, 8), Sampling: o.Sampling,
			Speculator: specs[i], NoSpeculation: specs[i] == nil}
		if _, err := e.Generate(context.Background(), req, func(engine.Chunk) error { return nil }); err != nil {
			return nil, fmt.Errorf("bench mode %q warm-up: %w", modes[i].Name, err)
		}
	}
	rows := make([]BenchRow, len(modes))
	times := make([][]time.Duration, len(modes))
	ref := make([][]int32, len(o.Prompts))
	for run := range o.Runs {
		for i, m := range modes {
			var st engine.SpecStats
			toks := 0
			start := time.Now()
			for p, prompt := range o.Prompts {
				req := engine.GenerateRequest{Prompt: prompt, MaxTokens: o.MaxNew, Sampling: o.Sampling,
					Speculator: specs[i], NoSpeculation: specs[i] == nil}
				var out []int32
				res, err := e.Generate(context.Background(), req, func(c engine.Chunk) error {
					out = append(out, c.Tokens...)
					return nil
				})
				if err != nil {
					return nil, fmt.Errorf("bench mode %q prompt %d: %w", m.Name, p, err)
				}
				if o.Sampling.Temperature <= 0 {
					if i == 0 && run == 0 {
						ref[p] = out
					} else if fmt.Sprint(out) != fmt.Sprint(ref[p]) {
						return nil, fmt.Errorf("bench mode %q prompt %d: greedy output differs from %q", m.Name, p, modes[0].Name)
					}
				}
				toks += res.CompletionTokens
				if res.Spec != nil {
					st.Steps += res.Spec.Steps
					st.Proposed += res.Spec.Proposed
					st.Accepted += res.Spec.Accepted
				} else {
					st.Steps += max(res.CompletionTokens-1, 0)
				}
			}
			times[i] = append(times[i], time.Since(start))
			if run == 0 {
				r := &rows[i]
				r.Name, r.Steps, r.Proposed, r.Accepted, r.Tokens = m.Name, st.Steps, st.Proposed, st.Accepted, toks
				r.Tau = float64(toks-len(o.Prompts)) / float64(max(st.Steps, 1))
				if st.Proposed > 0 {
					r.Acceptance = float64(st.Accepted) / float64(st.Proposed)
				}
			}
		}
	}
	for i := range rows {
		rows[i].Median = median(times[i])
		rows[i].TokensPerSec = float64(rows[i].Tokens) / rows[i].Median.Seconds()
		rows[i].Speedup = rows[0].Median.Seconds() / rows[i].Median.Seconds()
	}
	return rows, nil
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(a, b int) bool { return s[a] < s[b] })
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// FormatBench renders rows as a markdown table.
func FormatBench(rows []BenchRow) string {
	var b strings.Builder
	b.WriteString("| mode | τ (tokens/step) | acceptance | proposed | accepted | target steps | tokens/s | speedup |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		acc := "-"
		if r.Proposed > 0 {
			acc = fmt.Sprintf("%.2f", r.Acceptance)
		}
		fmt.Fprintf(&b, "| %s | %.2f | %s | %d | %d | %d | %.1f | %.2f× |\n",
			r.Name, r.Tau, acc, r.Proposed, r.Accepted, r.Steps, r.TokensPerSec, r.Speedup)
	}
	return b.String()
}

// ForwardCosts measures the cost model's inputs on this machine: the time
// of a target forward of n tokens (a tree of n below one pending token)
// relative to a one-token forward, per extra token (VerifyCost), and a
// one-token draft forward relative to a one-token target forward
// (DraftCost). It runs reps forwards of each after a 100-token context.
func ForwardCosts(target, draft *engine.Model, n, reps int) (verify, draftCost float64, err error) {
	timeit := func(m *engine.Model, k int) (time.Duration, error) {
		s := m.NewSequence()
		defer s.Free()
		ctx := make([]int32, 100)
		for i := range ctx {
			ctx[i] = int32(5 + i%50)
		}
		if _, err := s.Forward(ctx, nil, []int32{}); err != nil {
			return 0, err
		}
		toks, par := make([]int32, k), make([]int32, k)
		for i := range toks {
			toks[i], par[i] = int32(7+i), int32(i)-1
		}
		var ds []time.Duration
		for range reps {
			t0 := time.Now()
			if _, err := s.Forward(toks, par, nil); err != nil {
				return 0, err
			}
			ds = append(ds, time.Since(t0))
			if err := s.KeepTree(nil); err != nil {
				return 0, err
			}
		}
		return median(ds), nil
	}
	t1, err := timeit(target, 1)
	if err != nil {
		return 0, 0, err
	}
	tn, err := timeit(target, n)
	if err != nil {
		return 0, 0, err
	}
	d1, err := timeit(draft, 1)
	if err != nil {
		return 0, 0, err
	}
	return (tn.Seconds()/t1.Seconds() - 1) / float64(n-1), d1.Seconds() / t1.Seconds(), nil
}
