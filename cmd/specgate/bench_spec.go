package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/engine/cuda"
	"github.com/specgate/specgate/speculative"
)

func init() {
	register("bench-spec", "speculative decoding on CPU: tau, acceptance, tokens/s and speedup per chain/tree mode", runBenchSpec)
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
	costs := fs.Bool("costs", true, "also measure the cost model's verify and draft costs on this machine")
	backend := fs.String("backend", "cpu", "cpu or cuda (both models on the GPU)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	all := speculative.BenchPrompts()
	if *prompts < 1 || *prompts > len(all) || *tokens < 1 || *tokens > 512 || *runs < 1 || *runs > 20 {
		return fmt.Errorf("bench-spec: --prompts in [1, %d], --tokens in [1, 512], --runs in [1, 20]", len(all))
	}
	lo := engine.LoadOptions{Threads: *threads}
	switch *backend {
	case "cpu":
	case "cuda":
		lo.NewBackend = cuda.Factory(cuda.Options{})
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
	var ps [][]int32
	for _, p := range all[:*prompts] {
		ps = append(ps, tm.Tokenizer.Encode(p, true))
	}
	start := time.Now()
	rows, err := speculative.Bench(tm, dm, speculative.BenchOptions{Prompts: ps, MaxNew: *tokens, Runs: *runs,
		Sampling: engine.SamplingParams{Temperature: float32(*temp)}})
	if err != nil {
		return err
	}
	fmt.Printf("target %s, draft %s; %d prompts x %d new tokens, temperature %g, median of %d run(s), batch 1, %s backend\n\n",
		*target, *draft, *prompts, *tokens, *temp, *runs, *backend)
	fmt.Print(speculative.FormatBench(rows))
	if *costs {
		v, d, err := speculative.ForwardCosts(tm, dm, 8, 3)
		if err != nil {
			return err
		}
		fmt.Printf("\ncost model on this machine: each extra verified token costs %.2f of a one-token target forward; a draft forward %.2f\n", v, d)
	}
	fmt.Fprintf(os.Stderr, "bench-spec: %v\n", time.Since(start).Round(time.Second))
	return nil
}
