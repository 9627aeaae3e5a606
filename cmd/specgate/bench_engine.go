package main

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/specgate/specgate/engine"
)

func init() {
	register("bench-engine", "CPU prefill and decode tokens/s at batch 1 (median of N runs) for model dirs", runBenchEngine)
}

func runBenchEngine(args []string) error {
	fs := flag.NewFlagSet("bench-engine", flag.ContinueOnError)
	models := fs.String("models", "models/specgate-target,models/specgate-draft", "comma-separated model directories")
	promptLen := fs.Int("prompt", 128, "prompt tokens for the prefill measurement")
	decode := fs.Int("decode", 64, "tokens decoded per run")
	runs := fs.Int("runs", 5, "runs; the median is reported")
	threads := fs.Int("threads", 0, "CPU threads (0 = GOMAXPROCS)")
	verify := fs.String("verify", "1,2,4,8", "token counts n for the verification-cost table (one Forward of n tokens at the prompt's context vs n=1); empty = skip")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var ns []int
	for _, f := range strings.Split(*verify, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		var n int
		if _, err := fmt.Sscan(f, &n); err != nil || n < 1 || n > 64 {
			return fmt.Errorf("bench-engine: -verify: %q is not a token count in [1, 64]", f)
		}
		ns = append(ns, n)
	}
	fmt.Printf("bench-engine: CPU, GOMAXPROCS=%d, threads=%d, batch 1, prompt %d, decode %d, median of %d runs\n",
		runtime.GOMAXPROCS(0), *threads, *promptLen, *decode, *runs)
	fmt.Printf("%-32s %10s %14s %14s\n", "model", "params", "prefill tok/s", "decode tok/s")
	for _, dir := range strings.Split(*models, ",") {
		dir = strings.TrimSpace(dir)
		if dir == "" {
			continue
		}
		m, err := engine.Load(dir, engine.LoadOptions{SkipTokenizer: true, Threads: *threads, DisablePrefixCache: true,
			KVTokens: *promptLen + *decode + 16})
		if err != nil {
			return err
		}
		pre, dec, err := benchModel(m, *promptLen, *decode, *runs)
		if err != nil {
			m.Close()
			return err
		}
		fmt.Printf("%-32s %9.2fM %14.1f %14.1f\n", dir, float64(paramCount(m.Config))/1e6, pre, dec)
		if len(ns) > 0 {
			if err := benchVerify(m, dir, *promptLen, ns, *runs); err != nil {
				m.Close()
				return err
			}
		}
		m.Close()
	}
	return nil
}

// benchVerify prints, per n, the median time of one Forward of n tokens (a
// chain-shaped tree, as speculative verification sends, dropped again with
// KeepTree(nil)) after a promptLen-token context, and its ratio to n = 1.
func benchVerify(m *engine.Model, dir string, promptLen int, ns []int, runs int) error {
	s := m.NewSequence()
	defer s.Free()
	ctx := make([]int32, promptLen)
	for i := range ctx {
		ctx[i] = int32((i*53 + 5) % m.Config.VocabSize)
	}
	if _, err := s.Forward(ctx, nil, []int32{}); err != nil {
		return err
	}
	fmt.Printf("  %s: verification cost at context %d (median of %d)\n", dir, promptLen, runs)
	fmt.Printf("  %8s %12s %12s %14s\n", "tokens", "ms/forward", "x (n=1)", "ms per token")
	var base float64
	for _, n := range ns {
		toks, par := make([]int32, n), make([]int32, n)
		for i := range toks {
			toks[i], par[i] = int32((100+i)%m.Config.VocabSize), int32(i-1)
		}
		var ms []float64
		for range runs + 1 {
			t0 := time.Now()
			if _, err := s.Forward(toks, par, nil); err != nil {
				return err
			}
			ms = append(ms, float64(time.Since(t0).Microseconds())/1e3)
			if err := s.KeepTree(nil); err != nil {
				return err
			}
		}
		med := median(ms[1:])
		if base == 0 {
			base = med
		}
		fmt.Printf("  %8d %12.2f %12.2f %14.2f\n", n, med, med/base, med/float64(n))
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

// benchModel returns median prefill and decode tokens/s at batch 1.
func benchModel(m *engine.Model, promptLen, decode, runs int) (float64, float64, error) {
	if promptLen+decode >= m.Config.MaxPositions {
		return 0, 0, fmt.Errorf("bench-engine: prompt %d + decode %d exceeds context %d", promptLen, decode, m.Config.MaxPositions)
	}
	r := rand.New(rand.NewPCG(1, 2))
	prompt := make([]int32, promptLen)
	for i := range prompt {
		prompt[i] = int32(r.IntN(m.Config.VocabSize))
	}
	var pre, dec []float64
	for range runs + 1 { // the first run warms up
		s := m.NewSequence()
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
		s.Free()
		pre = append(pre, float64(promptLen)/t1.Sub(t0).Seconds())
		dec = append(dec, float64(decode)/t2.Sub(t1).Seconds())
	}
	return median(pre[1:]), median(dec[1:]), nil
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
