package main

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/specgate/specgate/engine"
)

func init() {
	register("bench-engine", "CPU prefill and decode tokens/s at batch 1 and the cost of a k-token forward (medians of interleaved runs) for model dirs", runBenchEngine)
}

func runBenchEngine(args []string) error {
	fs := flag.NewFlagSet("bench-engine", flag.ContinueOnError)
	models := fs.String("models", "models/specgate-target,models/specgate-draft", "comma-separated model directories")
	promptLen := fs.Int("prompt", 128, "prompt tokens for the prefill measurement (and the context of the verification table)")
	decode := fs.Int("decode", 64, "tokens decoded per run")
	runs := fs.Int("runs", 7, "prefill/decode runs per thread count (interleaved across thread counts); the median is reported")
	threadList := fs.String("threads", "0", "comma-separated CPU thread counts to compare, interleaved (0 = the engine's choice: GOMAXPROCS threads, matmuls parallel only when large enough)")
	verify := fs.String("verify", "1,2,4,8,16", "token counts n for the verification-cost table (one Forward of n tokens at the prompt's context vs n=1); empty = skip")
	verifyRuns := fs.Int("verify-runs", 31, "rounds of the verification table (each round times every n once, in order)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ns, err := intList(*verify, 1, 64, "-verify")
	if err != nil {
		return err
	}
	threads, err := intList(*threadList, 0, 1024, "-threads")
	if err != nil {
		return err
	}
	if len(threads) == 0 {
		threads = []int{0}
	}
	if *runs < 1 || *verifyRuns < 1 {
		return fmt.Errorf("bench-engine: -runs and -verify-runs must be >= 1")
	}
	fmt.Printf("bench-engine: CPU, GOMAXPROCS=%d, batch 1, prompt %d, decode %d, median of %d interleaved runs; load average %s\n",
		runtime.GOMAXPROCS(0), *promptLen, *decode, *runs, loadAvg())
	fmt.Printf("%-32s %8s %10s %14s %14s\n", "model", "threads", "params", "prefill tok/s", "decode tok/s")
	for _, dir := range strings.Split(*models, ",") {
		dir = strings.TrimSpace(dir)
		if dir == "" {
			continue
		}
		ms := make([]*engine.Model, len(threads))
		closeAll := func() {
			for _, m := range ms {
				if m != nil {
					m.Close()
				}
			}
		}
		for i, th := range threads {
			m, err := engine.Load(dir, engine.LoadOptions{SkipTokenizer: true, Threads: th, DisablePrefixCache: true,
				KVTokens: *promptLen + *decode + 16 + 64})
			if err != nil {
				closeAll()
				return err
			}
			ms[i] = m
		}
		pre, dec := make([][]float64, len(ms)), make([][]float64, len(ms))
		for r := range *runs + 1 { // round 0 warms up
			for i, m := range ms {
				p, d, err := benchModelOnce(m, *promptLen, *decode)
				if err != nil {
					closeAll()
					return err
				}
				if r > 0 {
					pre[i], dec[i] = append(pre[i], p), append(dec[i], d)
				}
			}
		}
		for i, th := range threads {
			name := "auto"
			if th > 0 {
				name = fmt.Sprint(th)
			}
			fmt.Printf("%-32s %8s %9.2fM %14.1f %14.1f\n", dir, name, float64(paramCount(ms[i].Config))/1e6, median(pre[i]), median(dec[i]))
		}
		if len(ns) > 0 {
			for i, th := range threads {
				if err := benchVerify(ms[i], dir, th, *promptLen, ns, *verifyRuns); err != nil {
					closeAll()
					return err
				}
			}
		}
		closeAll()
	}
	fmt.Printf("load average at the end: %s\n", loadAvg())
	return nil
}

// intList parses a comma-separated list of ints in [lo, hi].
func intList(s string, lo, hi int, flagName string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		var n int
		if _, err := fmt.Sscan(f, &n); err != nil || n < lo || n > hi {
			return nil, fmt.Errorf("bench-engine: %s: %q is not an integer in [%d, %d]", flagName, f, lo, hi)
		}
		out = append(out, n)
	}
	return out, nil
}

// loadAvg is the first three fields of /proc/loadavg ("?" elsewhere).
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// benchVerify prints, per n, the median time of one Forward of n tokens (a
// chain-shaped tree, as speculative verification sends, dropped again with
// KeepTree(nil)) after a promptLen-token context, and its cost in one-token
// forwards: the median over rounds of t(n)/t(1) of the same round (each
// round times every n once, in order, so a ratio compares neighbours in
// time on a shared machine).
func benchVerify(m *engine.Model, dir string, threads, promptLen int, ns []int, rounds int) error {
	s := m.NewSequence()
	defer s.Free()
	ctx := make([]int32, promptLen)
	for i := range ctx {
		ctx[i] = int32((i*53 + 5) % m.Config.VocabSize)
	}
	if _, err := s.Forward(ctx, nil, []int32{}); err != nil {
		return err
	}
	type input struct{ toks, par []int32 }
	in := make([]input, len(ns))
	for j, n := range ns {
		in[j] = input{make([]int32, n), make([]int32, n)}
		for i := range n {
			in[j].toks[i], in[j].par[i] = int32((100+i)%m.Config.VocabSize), int32(i-1)
		}
	}
	ms := make([][]float64, len(ns))
	ratio := make([][]float64, len(ns))
	for r := range rounds + 1 { // round 0 warms up
		t1 := 0.0
		for j := range ns {
			t0 := time.Now()
			if _, err := s.Forward(in[j].toks, in[j].par, nil); err != nil {
				return err
			}
			d := float64(time.Since(t0).Nanoseconds()) / 1e6
			if err := s.KeepTree(nil); err != nil {
				return err
			}
			if j == 0 {
				t1 = d
			}
			if r > 0 {
				ms[j] = append(ms[j], d)
				ratio[j] = append(ratio[j], d/t1)
			}
		}
	}
	th := "auto"
	if threads > 0 {
		th = fmt.Sprint(threads)
	}
	fmt.Printf("  %s, threads %s: one forward of n tokens at context %d (median of %d interleaved rounds)\n", dir, th, promptLen, rounds)
	fmt.Printf("  %8s %12s %16s %14s\n", "tokens", "ms/forward", fmt.Sprintf("x (n=%d)", ns[0]), "ms per token")
	for j, n := range ns {
		med := median(ms[j])
		fmt.Printf("  %8d %12.3f %16.2f %14.3f\n", n, med, median(ratio[j]), med/float64(n))
	}
	return nil
}

func paramCount(c engine.Config) int {
	H, I, V := c.HiddenSize, c.IntermediateSize, c.VocabSize
	per := H*c.QDim() + 2*H*c.KVDim() + c.QDim()*H + 3*H*I + 2*H
	n := V*H + c.NumLayers*per + H
	if !c.TieWordEmbeddings {
		n += V * H
	}
	return n
}

// benchModelOnce returns prefill and decode tokens/s of one batch-1 run.
func benchModelOnce(m *engine.Model, promptLen, decode int) (float64, float64, error) {
	if promptLen+decode >= m.Config.MaxPositions {
		return 0, 0, fmt.Errorf("bench-engine: prompt %d + decode %d exceeds context %d", promptLen, decode, m.Config.MaxPositions)
	}
	r := rand.New(rand.NewPCG(1, 2))
	prompt := make([]int32, promptLen)
	for i := range prompt {
		prompt[i] = int32(r.IntN(m.Config.VocabSize))
	}
	s := m.NewSequence()
	defer s.Free()
	t0 := time.Now()
	lg, err := s.Forward(prompt, nil, []int32{int32(promptLen - 1)})
	if err != nil {
		return 0, 0, err
	}
	t1 := time.Now()
	for range decode {
		if lg, err = s.Forward([]int32{engine.Argmax(lg)}, nil, nil); err != nil {
			return 0, 0, err
		}
	}
	t2 := time.Now()
	return float64(promptLen) / t1.Sub(t0).Seconds(), float64(decode) / t2.Sub(t1).Seconds(), nil
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
