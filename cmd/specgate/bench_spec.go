package main

import (
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/engine/cuda"
	"github.com/specgate/specgate/speculative"
)

func init() {
	register("bench-spec", "speculative decoding: tau, acceptance, tokens/s and speedup over plain per mode and concurrency", runBenchSpec)
}

func runBenchSpec(args []string) error {
	fs := flag.NewFlagSet("bench-spec", flag.ContinueOnError)
	target := fs.String("target", "models/specgate-target", "target model directory")
	draft := fs.String("draft", "models/specgate-draft", "draft model directory")
	prompts := fs.Int("prompts", 20, "prompts (from speculative/testdata/prompts.txt, code and English interleaved)")
	tokens := fs.Int("tokens", 64, "new tokens per prompt")
	runs := fs.Int("runs", 3, "timed runs per mode; the median run is reported")
	temp := fs.Float64("temperature", 0, "sampling temperature (0 = greedy; outputs are then checked equal to plain)")
	threads := fs.Int("threads", 0, "CPU backend threads (0 = GOMAXPROCS)")
	backend := fs.String("backend", "cpu", "cpu or cuda (both models on the GPU)")
	concFlag := fs.String("concurrency", "1", "comma-separated requests in flight, e.g. 1,8,32")
	modesFlag := fs.String("modes", "", "comma-separated mode names to run (default all); plain always runs first")
	medusaDir := fs.String("medusa", "models/specgate-target-medusa", "Medusa heads directory for the medusa rows (\"\" = none)")
	medusaVocab := fs.Int("medusa-vocab", 2048, "Medusa heads' vocabulary limit (most frequent tokens; 0 = all)")
	hydraDir := fs.String("hydra", "", "a second heads directory (e.g. models/specgate-target-hydra) for rows \"hydra n=N\" and \"hydra adaptive\", run beside the medusa rows (\"\" = none)")
	hydraVocab := fs.Int("hydra-vocab", 2048, "vocabulary limit of the --hydra heads (0 = all)")
	draftVocab := fs.String("draft-vocab", "0", "comma-separated draft LM-head vocabulary limits (FR-Spec: the N most frequent tokens; 0 = all): each draft-model mode runs once per limit, rows named \"MODE v=N\"")
	draftFreq := fs.String("draft-freq", "", "token frequencies ({\"counts\": [...]}) ranking the draft's restricted vocabulary (default: token_frequency.json in the draft's or the target's directory)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole benchmark to this file")
	warmRuns := fs.Int("warm-runs", 2, "untimed runs of plain decoding at each concurrency level before its timed runs (GPU: new batch shapes are captured as CUDA graphs there, not in the first timed runs); 0: none")
	control := fs.Bool("control", true, "end every run with plain decoding again in its own engine (row \"plain (control)\"): the run's noise and order effect")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	var conc []int
	for _, f := range strings.Split(*concFlag, ",") {
		c, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || c < 1 || c > 256 {
			return fmt.Errorf("bench-spec: --concurrency %q: want comma-separated integers in [1, 256]", *concFlag)
		}
		conc = append(conc, c)
	}
	var limits []int
	for _, f := range strings.Split(*draftVocab, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 {
			return fmt.Errorf("bench-spec: --draft-vocab %q: want comma-separated non-negative integers", *draftVocab)
		}
		limits = append(limits, n)
	}
	var modes []speculative.BenchMode
	for _, m := range speculative.DefaultBenchModes() {
		if m.Config == nil {
			modes = append(modes, m)
			continue
		}
		for _, n := range limits {
			v := m
			if n > 0 {
				c := *m.Config
				c.VocabLimit, c.TokenFrequency = n, *draftFreq
				v.Config, v.Name = &c, fmt.Sprintf("%s v=%d", m.Name, n)
			}
			modes = append(modes, v)
		}
	}
	if *medusaDir != "" {
		modes = append(modes, medusaBenchModes("medusa", *medusaDir, *medusaVocab)...)
	}
	if *hydraDir != "" {
		modes = append(modes, medusaBenchModes("hydra", *hydraDir, *hydraVocab)...)
	}
	if *modesFlag != "" {
		want := map[string]bool{}
		for _, f := range strings.Split(*modesFlag, ",") {
			want[strings.TrimSpace(f)] = true
		}
		sel := modes[:1]
		for _, m := range modes[1:] {
			if want[m.Name] {
				sel = append(sel, m)
				delete(want, m.Name)
			}
		}
		delete(want, "plain")
		if len(want) > 0 {
			var names []string
			for _, m := range modes {
				names = append(names, m.Name)
			}
			return fmt.Errorf("bench-spec: --modes: unknown mode(s) %v; modes: %s", want, strings.Join(names, ", "))
		}
		modes = sel
	}
	if *control {
		// plain decoding again, in its own engine, after every other mode:
		// its distance from 1.00x is the noise (machine drift, order) of a
		// run, the yardstick for the speculative rows.
		modes = append(modes, speculative.BenchMode{Name: "plain (control)"})
	}
	all := speculative.BenchPrompts()
	if *prompts < 1 || *prompts > len(all) || *tokens < 1 || *tokens > 512 || *runs < 1 || *runs > 20 {
		return fmt.Errorf("bench-spec: --prompts in [1, %d], --tokens in [1, 512], --runs in [1, 20]", len(all))
	}
	lo := engine.LoadOptions{Threads: *threads}
	switch *backend {
	case "cpu":
	case "cuda":
		lo.NewBackend = cuda.Factory(cuda.Options{}.WithEnv(os.Getenv))
	default:
		return fmt.Errorf("bench-spec: --backend %q: want cpu or cuda", *backend)
	}
	tm, err := engine.Load(*target, lo)
	if err != nil {
		return err
	}
	dm, err := engine.Load(*draft, lo)
	if err != nil {
		return err
	}
	start := time.Now()
	var ps [][]int32
	for _, p := range all[:*prompts] {
		ps = append(ps, tm.Tokenizer.Encode(p, true))
	}
	rows, err := speculative.Bench(tm, dm, speculative.BenchOptions{Prompts: ps, MaxNew: *tokens, Runs: *runs,
		Sampling: engine.SamplingParams{Temperature: float32(*temp)}, Concurrency: conc, Modes: modes, WarmRuns: warmFlag(*warmRuns),
		ReportMismatch: *backend == "cuda", // GPU rounding may differ by step size: count, do not stop
		Progress: func(s string) {
			fmt.Fprintf(os.Stderr, "bench-spec: %s (%v)\n", s, time.Since(start).Round(time.Second))
		}})
	if err != nil {
		return err
	}
	fmt.Printf("target %s, draft %s, medusa %s (vocab limit %d); %d prompts x %d new tokens, temperature %g, median of %d run(s), concurrency %s, %s backend\n\n",
		*target, *draft, *medusaDir, *medusaVocab, *prompts, *tokens, *temp, *runs, *concFlag, *backend)
	fmt.Print(speculative.FormatBench(rows))
	fmt.Fprintf(os.Stderr, "bench-spec: %v\n", time.Since(start).Round(time.Second))
	return nil
}

// warmFlag maps --warm-runs (0: none) to BenchOptions.WarmRuns (0: the default).
func warmFlag(n int) int {
	if n <= 0 {
		return -1
	}
	return n
}
