package main

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/engine/cuda"
	"github.com/specgate/specgate/kernels"
)

func init() {
	register("bench-decode", "batch-1 decode tokens/s of a model shape on cuda or cpu, with the bandwidth roofline", runBenchDecode)
}

// benchShapes are the named architectures bench-decode knows.
var benchShapes = map[string]engine.Config{
	"tinyllama-1.1b": {HiddenSize: 2048, IntermediateSize: 5632, NumLayers: 22, NumHeads: 32, NumKVHeads: 4, HeadDim: 64,
		RMSNormEps: 1e-5, RopeTheta: 10000, RopeScaling: engine.RopeScaling{Type: engine.RopeDefault}, MaxPositions: 2048,
		VocabSize: 32000, BOS: 1, EOS: []int32{2}},
	"tiny": {HiddenSize: 256, IntermediateSize: 688, NumLayers: 4, NumHeads: 4, NumKVHeads: 2, HeadDim: 64,
		RMSNormEps: 1e-5, RopeTheta: 10000, RopeScaling: engine.RopeScaling{Type: engine.RopeDefault}, MaxPositions: 2048,
		VocabSize: 4096, BOS: 1, EOS: []int32{2}},
}

func runBenchDecode(args []string) error {
	fs := flag.NewFlagSet("bench-decode", flag.ContinueOnError)
	backend := fs.String("backend", "cuda", "cuda, cpu or auto (cuda, else cpu)")
	shape := fs.String("shape", "tinyllama-1.1b", "model shape: "+strings.Join(shapeNames(), ", "))
	random := fs.Bool("random-weights", false, "use random weights of the shape (required; real checkpoints: use --model)")
	model := fs.String("model", "", "HF model directory instead of a shape")
	prompt := fs.Int("prompt", 32, "prompt tokens (prefilled, not timed)")
	tokens := fs.Int("tokens", 256, "decode steps timed")
	stepEvents := fs.Bool("step-events", false, "also time each step's device work with CUDA events (adds ~2 event records per step)")
	warmup := fs.Int("warmup", 8, "decode steps before timing")
	graphs := fs.Bool("graphs", true, "cuda: replay decode steps as CUDA graphs")
	devArgmax := fs.Bool("device-argmax", true, "cuda: greedy token by argmax on the device (4 bytes back per step instead of the logits)")
	pdl := fs.Bool("pdl", true, "cuda: programmatic dependent launch (kernels start during their predecessor's tail)")
	prefillReps := fs.Int("prefill-reps", 3, "prefill timings after the first (warm-up) prefill; the median is printed")
	quantize := fs.String("quantize", "", "weight format of the projections and LM head: \"\" (as stored: fp16 on cuda), int8 (weight-only, per-row scales) or, cuda only, int4 (weight-only, groups of 32 columns with fp16 scales)")
	multi := fs.Int("steps-per-call", 1, "cuda: greedy steps per host round trip (multi-step decoding, DecodeGreedy; 1 = one Forward per token)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *prompt < 1 || *tokens < 1 || *warmup < 0 || *prompt+*tokens+*warmup > 1<<16 {
		return fmt.Errorf("bench-decode: --prompt, --tokens must be >= 1 and the total <= 65536")
	}
	if *multi < 1 || *multi > cuda.MaxDecodeSteps || *tokens%*multi != 0 {
		return fmt.Errorf("bench-decode: --steps-per-call must be in 1..%d and divide --tokens", cuda.MaxDecodeSteps)
	}
	*warmup = (*warmup + *multi - 1) / *multi * *multi // whole calls
	var cfg engine.Config
	var w *engine.Weights
	switch {
	case *model != "":
		var err error
		if cfg, err = engine.LoadConfig(*model); err != nil {
			return err
		}
		if w, err = engine.LoadWeights(*model, cfg); err != nil {
			return err
		}
	case *random:
		c, ok := benchShapes[*shape]
		if !ok {
			return fmt.Errorf("bench-decode: unknown --shape %q (have %s)", *shape, strings.Join(shapeNames(), ", "))
		}
		cfg = c
	default:
		return fmt.Errorf("bench-decode: give --random-weights (with --shape) or --model DIR")
	}
	slots := *prompt + *tokens + *warmup + 8
	var be engine.Backend
	var gpu *cuda.Backend
	var err error
	if *backend == "cuda" || *backend == "auto" {
		gpu, err = cuda.New(cfg, w, cuda.Options{NumSlots: slots, Random: w == nil, Seed: 1, NoGraphs: !*graphs, NoPDL: !*pdl, TimeSteps: *stepEvents, Quantize: *quantize}.WithEnv(os.Getenv))
		if err != nil && *backend == "cuda" {
			return err
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench-decode: no CUDA (%v); using cpu\n", err)
		} else {
			be = gpu
		}
	}
	if be == nil {
		if *quantize == cuda.QuantInt4 {
			return fmt.Errorf("bench-decode: --quantize int4 needs the cuda backend (the CPU backend has no int4 weights; int8 works on both)")
		}
		if w == nil {
			w = engine.RandomWeights(cfg, 1)
		}
		if w, err = engine.QuantizeWeights(cfg, w, *quantize); err != nil {
			return err
		}
		if be, err = engine.NewCPUBackend(cfg, w, slots, 0); err != nil {
			return err
		}
	}
	defer be.Close()

	r := rand.New(rand.NewPCG(1, 2))
	V := cfg.VocabSize
	toks := make([]int32, *prompt)
	for i := range toks {
		toks[i] = int32(r.IntN(V))
	}
	all := make([]int32, slots)
	for i := range all {
		all[i] = int32(i)
	}
	pre := &engine.ForwardRequest{Tokens: toks, Positions: all[:*prompt], Slots: all[:*prompt],
		LogitsRows: []int32{int32(*prompt - 1)}, Logits: make([]float32, V)}
	t0 := time.Now()
	if err := be.Forward([]*engine.ForwardRequest{pre}); err != nil {
		return err
	}
	prefill := time.Since(t0)
	var pres []float64
	for i := 0; i < *prefillReps; i++ { // same tokens into the same slots: same KV afterwards
		t0 := time.Now()
		if err := be.Forward([]*engine.ForwardRequest{pre}); err != nil {
			return err
		}
		pres = append(pres, time.Since(t0).Seconds())
	}
	next := argmaxF32(pre.Logits)
	n := *prompt
	var am cuda.Argmaxer
	if a, ok := be.(cuda.Argmaxer); ok && *devArgmax {
		am = a
	}
	out := make([]int32, max(1, *multi))
	var st cuda.Stepper
	if s, ok := be.(cuda.Stepper); ok && *multi > 1 {
		st = s
	} else if *multi > 1 {
		return fmt.Errorf("bench-decode: --steps-per-call needs the cuda backend")
	}
	step := func() error {
		if st != nil { // *multi tokens per call
			if err := st.DecodeGreedy(next, int32(n), all[:n], all[n:n+*multi], out); err != nil {
				return err
			}
			next = out[*multi-1]
			n += *multi
			return nil
		}
		q := &engine.ForwardRequest{CachedSlots: all[:n], Tokens: []int32{next}, Positions: all[n : n+1], Slots: all[n : n+1], Logits: pre.Logits}
		if am != nil {
			if err := am.ForwardArgmax([]*engine.ForwardRequest{q}, out); err != nil {
				return err
			}
			next = out[0]
		} else {
			if err := be.Forward([]*engine.ForwardRequest{q}); err != nil {
				return err
			}
			next = argmaxF32(q.Logits)
		}
		n++
		return nil
	}
	for i := 0; i < *warmup / *multi; i++ { // step() decodes *multi tokens
		if err := step(); err != nil {
			return err
		}
	}
	if gpu != nil {
		gpu.StepTimes() // drop the warm-up steps
	}
	per := make([]float64, 0, *tokens)
	start := time.Now()
	for i := 0; i < *tokens / *multi; i++ {
		s := time.Now()
		if err := step(); err != nil {
			return err
		}
		per = append(per, time.Since(s).Seconds()/float64(*multi))
	}
	total := time.Since(start).Seconds()
	sort.Float64s(per)
	tps := float64(*tokens) / total
	name := *shape
	if *model != "" {
		name = *model
	}
	fmt.Printf("bench-decode: shape %s, %d layers, hidden %d, intermediate %d, heads %d/%d, vocab %d\n",
		name, cfg.NumLayers, cfg.HiddenSize, cfg.IntermediateSize, cfg.NumHeads, cfg.NumKVHeads, V)
	fmt.Printf("prefill %d tokens: first %.2f ms", *prompt, prefill.Seconds()*1e3)
	if len(pres) > 0 {
		sort.Float64s(pres)
		med := pres[len(pres)/2]
		fmt.Printf(", then median of %d: %.2f ms = %.0f tokens/s (min %.2f ms)", len(pres), med*1e3, float64(*prompt)/med, pres[0]*1e3)
	}
	fmt.Println()
	mode := "one Forward per token"
	if st != nil {
		mode = fmt.Sprintf("%d greedy steps per DecodeGreedy call", *multi)
	}
	fmt.Printf("decode: %d tokens in %.3f s: %.1f tokens/s (median step %.3f ms, p90 %.3f ms), context %d..%d, %s\n",
		*tokens, total, tps, per[len(per)/2]*1e3, per[len(per)*9/10]*1e3, *prompt+*warmup, n, mode)
	if gpu != nil {
		dev := gpu.StepTimes()
		for i := range dev {
			dev[i] /= float64(*multi)
		}
		if len(dev) > 0 {
			sort.Float64s(dev)
			fmt.Printf("device time per step (metadata upload + kernels, events): median %.3f ms, p90 %.3f ms; host and copy-back: %.3f ms of the median wall step\n",
				dev[len(dev)/2]*1e3, dev[len(dev)*9/10]*1e3, (per[len(per)/2]-dev[len(dev)/2])*1e3)
		}
		d, tu := gpu.Device(), gpu.Tuning()
		rt := make([]float64, 200)
		for i := range rt {
			s := time.Now()
			if err := d.Do(func(*kernels.Ctx) error { return nil }); err != nil {
				return err
			}
			rt[i] = time.Since(s).Seconds()
		}
		sort.Float64s(rt)
		fmt.Printf("GPU worker round trip (empty Do): median %.1f µs, p90 %.1f µs (hand-off spin %v)\n",
			rt[len(rt)/2]*1e6, rt[len(rt)*9/10]*1e6, tu.HandoffSpin)
		g, replays := gpu.Stats()
		fmt.Printf("device: %s (sm_%d%d, %d SMs), kernels %s, graphs %d, replays %d, device argmax %v, pdl %v\n",
			d.Name, d.Major, d.Minor, d.SMs, d.Arch, g, replays, am != nil, *pdl && !tu.NoPDL)
		fmt.Printf("kernels: attention splits <= %d (>= %d keys each), attention preload %v, GEMV %s, int8 GEMV %s (ring: depth %d, %d warps/block, blocks/SM cap %d (0 = all that fit); others: warps %d, -1 = per matrix)\n",
			tu.AttnSplits, tu.AttnSplitMinKeys, !tu.NoAttnPreload, tu.Gemv, tu.GemvI8,
			kernels.GemvRingDepth, tu.GemvRingWarps, tu.GemvRingBlocksPerSM, tu.GemvWarps)
		if err := d.Do(func(c *kernels.Ctx) error {
			var b strings.Builder
			for _, k := range []struct {
				name          string
				threads, smem int
			}{{"gemv_swiglu_r_m1", 32 * tu.GemvRingWarps, kernels.GemvRingSmem(1, cfg.HiddenSize, tu.GemvRingWarps)},
				{"gemv_resid_r_m1", 32 * tu.GemvRingWarps, kernels.GemvRingSmem(1, cfg.IntermediateSize, tu.GemvRingWarps)},
				{"gemv_swiglu_m1", 256, kernels.GemvSmem(1, cfg.HiddenSize)}, {"gemv_resid_m1", 256, kernels.GemvSmem(1, cfg.IntermediateSize)},
				{"gemv_swiglu_s_m1", 256, kernels.GemvSmem(1, cfg.HiddenSize)}, {"gemv_resid_s_m1", 256, kernels.GemvSmem(1, cfg.IntermediateSize)},
				{fmt.Sprintf("attention_hd%d", cfg.HeadDim), 256, 0}} {
				regs, per, err := c.KernelInfo(k.name, k.threads, k.smem)
				if err != nil {
					return err
				}
				fmt.Fprintf(&b, " %s %d regs x %d threads, %d blocks/SM;", k.name, regs, k.threads, per)
			}
			fmt.Printf("occupancy:%s\n", b.String())
			return nil
		}); err != nil {
			return err
		}
		var bw float64
		if err := d.Do(func(c *kernels.Ctx) error {
			var err error
			bw, err = c.CopyBandwidth(1<<30, 30)
			return err
		}); err != nil {
			return err
		}
		wb := float64(gpu.WeightBytes())
		read := wb - float64(V*cfg.HiddenSize*2) // the embedding table: one row per token
		if cfg.TieWordEmbeddings {
			read = wb
		}
		roof := bw / wb
		fmt.Printf("device-to-device copy bandwidth: %.0f GB/s (bytes read + written, 1 GiB copies, median of 30)\n", bw/1e9)
		fmt.Printf("weight bytes: %.3f GB (read per token %.3f GB); roofline = weight bytes / bandwidth = %.3f ms = %.1f tokens/s\n",
			wb/1e9, read/1e9, wb/bw*1e3, roof)
		fmt.Printf("achieved: %.1f%% of roofline; effective weight-read bandwidth %.0f GB/s\n", 100*tps/roof, read*tps/1e9)
		sb := float64(gpu.StreamBytes())
		fmt.Printf("weights %s: a decode step streams %.3f GB (projections, LM head, norms); at the copy bandwidth %.3f ms = %.1f tokens/s; achieved %.1f%%\n",
			gpu.Quantization(), sb/1e9, sb/bw*1e3, bw/sb, 100*tps*sb/bw)
	}
	return nil
}

func argmaxF32(v []float32) int32 {
	b := 0
	for i, x := range v {
		if x > v[b] {
			b = i
		}
	}
	return int32(b)
}

func shapeNames() []string {
	var s []string
	for k := range benchShapes {
		s = append(s, k)
	}
	sort.Strings(s)
	return s
}
