package main

import (
	"flag"
	"fmt"
	"math"
	"os"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/engine/cuda"
	"github.com/specgate/specgate/speculative"
)

func init() {
	register("bench-quant", "int8 (or, cuda only, int4) weight-only accuracy: logits and greedy tokens of a model quantized vs its unquantized weights (cuda: fp16; cpu: float32)", runBenchQuant)
}

// quantStats accumulates the comparison of one backend's logits rows with a
// reference backend's.
type quantStats struct {
	rows, top1       int
	maxAbs, sumAbs   float64
	sumRef           float64 // sum of |reference logit|, for scale
	elems            int
	tfTokens, tfSame int // teacher-forced greedy steps, steps whose argmax agrees
	frTokens, frSame int // free-running continuations: tokens, tokens equal at their position
	frPrefix         int // tokens before each continuation's first divergence
	frEqual, prompts int // continuations identical in full, prompts
}

func (s *quantStats) add(ref, got []float32) {
	for i := range ref {
		d := math.Abs(float64(got[i]) - float64(ref[i]))
		if math.IsNaN(d) {
			d = math.Inf(1)
		}
		s.maxAbs = math.Max(s.maxAbs, d)
		s.sumAbs += d
		s.sumRef += math.Abs(float64(ref[i]))
	}
	s.elems += len(ref)
	s.rows++
	if argmaxF32(ref) == argmaxF32(got) {
		s.top1++
	}
}

func runBenchQuant(args []string) error {
	fs := flag.NewFlagSet("bench-quant", flag.ContinueOnError)
	model := fs.String("model", "models/specgate-target", "HF model directory")
	backend := fs.String("backend", "cuda", "cuda (int8 vs fp16 weights) or cpu (int8 vs float32)")
	prompts := fs.Int("prompts", 200, "prompts from speculative/testdata/prompts.txt")
	tokens := fs.Int("tokens", 32, "greedy tokens per prompt (teacher-forced and free-running)")
	threads := fs.Int("threads", 0, "CPU backend threads (0 = GOMAXPROCS)")
	quant := fs.String("quantize", engine.QuantInt8, "int8, or int4 (group-wise, 32 columns per fp16 scale; --backend cuda only)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	all := speculative.BenchPrompts()
	if *prompts < 1 || *prompts > len(all) || *tokens < 1 || *tokens > 1024 {
		return fmt.Errorf("bench-quant: --prompts in [1, %d], --tokens in [1, 1024]", len(all))
	}
	switch {
	case *quant == engine.QuantInt8:
	case *quant == cuda.QuantInt4 && *backend == "cuda":
	default:
		return fmt.Errorf("bench-quant: --quantize %q with --backend %s: want int8, or int4 on cuda", *quant, *backend)
	}
	load := func(quant string) (*engine.Model, error) {
		lo := engine.LoadOptions{DisablePrefixCache: true, Quantize: quant, Threads: *threads}
		switch *backend {
		case "cuda":
			opt := cuda.Options{}.WithEnv(os.Getenv)
			if quant == cuda.QuantInt4 { // the backend quantizes at upload
				lo.Quantize, opt.Quantize = "", quant
			}
			lo.NewBackend = cuda.Factory(opt)
		case "cpu":
		default:
			return nil, fmt.Errorf("bench-quant: --backend %q: want cuda or cpu", *backend)
		}
		return engine.Load(*model, lo)
	}
	ref, err := load("")
	if err != nil {
		return err
	}
	defer ref.Close()
	q, err := load(*quant)
	if err != nil {
		return err
	}
	defer q.Close()
	cfg := ref.Config
	V := cfg.VocabSize
	rb, qb := ref.Backend(), q.Backend()
	var st quantStats
	slots := func(a, n int) []int32 {
		s := make([]int32, n)
		for i := range s {
			s[i] = int32(a + i)
		}
		return s
	}
	for _, p := range all[:*prompts] {
		ids := ref.Tokenizer.Encode(p, true)
		if len(ids)+*tokens > cfg.MaxPositions {
			ids = ids[:cfg.MaxPositions-*tokens]
		}
		P := len(ids)
		st.prompts++
		// Prefill: every prompt row.
		rr := &engine.ForwardRequest{Tokens: ids, Positions: slots(0, P), Slots: slots(0, P), Logits: make([]float32, P*V)}
		qr := &engine.ForwardRequest{Tokens: ids, Positions: slots(0, P), Slots: slots(0, P), Logits: make([]float32, P*V)}
		if err := rb.Forward([]*engine.ForwardRequest{rr}); err != nil {
			return err
		}
		if err := qb.Forward([]*engine.ForwardRequest{qr}); err != nil {
			return err
		}
		for i := 0; i < P; i++ {
			st.add(rr.Logits[i*V:(i+1)*V], qr.Logits[i*V:(i+1)*V])
		}
		// Teacher-forced: both decode the reference's greedy tokens.
		last := func(l []float32) []float32 { return l[len(l)-V:] }
		next := argmaxF32(last(rr.Logits))
		refToks := []int32{next}
		if argmaxF32(last(qr.Logits)) == next {
			st.tfSame++
		}
		st.tfTokens++
		rl, ql := make([]float32, V), make([]float32, V)
		for i := 0; i+1 < *tokens; i++ {
			n := P + i
			mk := func(l []float32) *engine.ForwardRequest {
				return &engine.ForwardRequest{CachedSlots: slots(0, n), Tokens: []int32{next}, Positions: []int32{int32(n)}, Slots: []int32{int32(n)}, Logits: l}
			}
			if err := rb.Forward([]*engine.ForwardRequest{mk(rl)}); err != nil {
				return err
			}
			if err := qb.Forward([]*engine.ForwardRequest{mk(ql)}); err != nil {
				return err
			}
			st.add(rl, ql)
			next = argmaxF32(rl)
			st.tfTokens++
			if argmaxF32(ql) == next {
				st.tfSame++
			}
			refToks = append(refToks, next)
		}
		// Free-running: the int8 model decodes its own greedy tokens.
		qr = &engine.ForwardRequest{Tokens: ids, Positions: slots(0, P), Slots: slots(0, P), LogitsRows: []int32{int32(P - 1)}, Logits: ql}
		if err := qb.Forward([]*engine.ForwardRequest{qr}); err != nil {
			return err
		}
		own := argmaxF32(ql)
		diverged := false
		for i := 0; i < *tokens; i++ {
			st.frTokens++
			if own == refToks[i] {
				st.frSame++
				if !diverged {
					st.frPrefix++
				}
			} else {
				diverged = true
			}
			if i+1 == *tokens {
				break
			}
			n := P + i
			r := &engine.ForwardRequest{CachedSlots: slots(0, n), Tokens: []int32{own}, Positions: []int32{int32(n)}, Slots: []int32{int32(n)}, Logits: ql}
			if err := qb.Forward([]*engine.ForwardRequest{r}); err != nil {
				return err
			}
			own = argmaxF32(ql)
		}
		if !diverged {
			st.frEqual++
		}
	}
	refName := "fp16"
	if *backend == "cpu" {
		refName = "float32"
	}
	format := "int8 weight-only (per-row scales)"
	if *quant == cuda.QuantInt4 {
		format = "int4 weight-only (groups of 32, fp16 scales)"
	}
	fmt.Printf("bench-quant: %s, %s backend, %s vs %s weights; %d prompts x %d greedy tokens\n",
		*model, *backend, format, refName, st.prompts, *tokens)
	fmt.Printf("logits (%d rows: every prompt position + teacher-forced decode steps): max |Δ| %.4g, mean |Δ| %.4g (mean |logit| %.4g); top-1 agreement %.2f%% (%d/%d rows)\n",
		st.rows, st.maxAbs, st.sumAbs/float64(st.elems), st.sumRef/float64(st.elems), 100*float64(st.top1)/float64(st.rows), st.top1, st.rows)
	fmt.Printf("greedy, teacher-forced (%s argmax vs the %s greedy token, same context): %.2f%% of %d tokens\n",
		*quant, refName, 100*float64(st.tfSame)/float64(st.tfTokens), st.tfTokens)
	fmt.Printf("greedy, free-running (%s decodes its own tokens): %.2f%% of %d tokens equal at their position; %.2f%% before the first divergence; %d of %d continuations identical\n",
		*quant, 100*float64(st.frSame)/float64(st.frTokens), st.frTokens, 100*float64(st.frPrefix)/float64(st.frTokens), st.frEqual, st.prompts)
	return nil
}
