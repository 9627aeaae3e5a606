// Command verifycost measures the tree-verification cost curve of a model
// shape on the CUDA backend: the time of one target forward of T tree tokens
// (a Medusa-style tree under the pending token, every row's argmax on the
// device, as the engine verifies a proposal) divided by the time of a
// one-token decode forward, at the same context. With a measured τ (tokens
// per verification step) the curve gives the speedup to expect from
// speculation at that size: τ / cost(T).
//
//	go run ./tools/verifycost -shape tinyllama-1.1b -context 256 -tokens 1,2,4,8,16,32,64
//
// Random weights (the cost does not depend on their values). Rounds are
// interleaved (each round times every T once, in order); medians are printed.
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/engine/cuda"
)

var shapes = map[string]engine.Config{
	// TinyLlama 1.1B (the shape of docs' decode measurements)
	"tinyllama-1.1b": {HiddenSize: 2048, IntermediateSize: 5632, NumLayers: 22, NumHeads: 32, NumKVHeads: 4, HeadDim: 64,
		RMSNormEps: 1e-5, RopeTheta: 10000, RopeScaling: engine.RopeScaling{Type: engine.RopeDefault}, MaxPositions: 2048,
		VocabSize: 32000, BOS: 1, EOS: []int32{2}},
}

func main() {
	shape := flag.String("shape", "tinyllama-1.1b", "model shape (random weights)")
	model := flag.String("model", "", "HF model directory instead of a random shape")
	ctxLen := flag.Int("context", 256, "cached tokens before the verified tree")
	list := flag.String("tokens", "1,2,4,8,16,32,64", "tree sizes T (tokens per verification forward)")
	rounds := flag.Int("rounds", 30, "timed rounds (each times every T once)")
	fanout := flag.Int("fanout", 4, "children per tree node (node i's parent is (i-1)/fanout); 0 = a chain")
	flag.Parse()
	var cfg engine.Config
	var w *engine.Weights
	if *model != "" {
		var err error
		if cfg, err = engine.LoadConfig(*model); err != nil {
			log.Fatal(err)
		}
		if w, err = engine.LoadWeights(*model, cfg); err != nil {
			log.Fatal(err)
		}
	} else {
		c, ok := shapes[*shape]
		if !ok {
			log.Fatalf("unknown -shape %q", *shape)
		}
		cfg = c
	}
	var ts []int
	for _, f := range strings.Split(*list, ",") {
		t, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || t < 1 || t > 512 {
			log.Fatalf("-tokens %q: want integers in [1, 512]", *list)
		}
		ts = append(ts, t)
	}
	maxT := 0
	for _, t := range ts {
		maxT = max(maxT, t)
	}
	slots := *ctxLen + maxT + 8
	be, err := cuda.New(cfg, w, cuda.Options{NumSlots: slots, Random: w == nil, Seed: 1}.WithEnv(os.Getenv))
	if err != nil {
		log.Fatal(err)
	}
	defer be.Close()
	all := make([]int32, slots)
	for i := range all {
		all[i] = int32(i)
	}
	V := int32(cfg.VocabSize)
	pre := &engine.ForwardRequest{Tokens: make([]int32, *ctxLen), Positions: all[:*ctxLen], Slots: all[:*ctxLen], LogitsRows: []int32{}}
	for i := range pre.Tokens {
		pre.Tokens[i] = int32(i*7919) % V
	}
	if err := be.Forward([]*engine.ForwardRequest{pre}); err != nil {
		log.Fatal(err)
	}
	reqs := map[int]*engine.ForwardRequest{}
	for _, t := range ts {
		r := &engine.ForwardRequest{CachedSlots: all[:*ctxLen], Tokens: make([]int32, t), Positions: make([]int32, t),
			Slots: all[*ctxLen : *ctxLen+t]}
		if *fanout > 0 {
			r.Parents = make([]int32, t)
		}
		depth := make([]int32, t)
		for i := range t {
			r.Tokens[i] = int32(i*104729+13) % V
			p := int32(i - 1)
			if *fanout > 0 {
				p = int32((i - 1) / *fanout)
				if i == 0 {
					p = -1
				}
				r.Parents[i] = p
			}
			if i > 0 {
				depth[i] = depth[p] + 1
			}
			r.Positions[i] = int32(*ctxLen) + depth[i]
		}
		reqs[t] = r
	}
	out := make([]int32, maxT)
	run := func(t int) time.Duration {
		s := time.Now()
		if err := be.ForwardArgmax([]*engine.ForwardRequest{reqs[t]}, out); err != nil {
			log.Fatal(err)
		}
		return time.Since(s)
	}
	for range 3 { // warm-up: graph capture, cuBLAS handles
		for _, t := range ts {
			run(t)
		}
	}
	times := map[int][]float64{}
	for range *rounds {
		for _, t := range ts {
			times[t] = append(times[t], run(t).Seconds())
		}
	}
	med := func(t int) float64 {
		x := append([]float64(nil), times[t]...)
		sort.Float64s(x)
		return x[len(x)/2]
	}
	name := *shape
	if *model != "" {
		name = *model
	}
	base := med(ts[0])
	fmt.Printf("verifycost: %s (%d layers, hidden %d, vocab %d), context %d, tree fanout %d, device argmax per row, median of %d interleaved rounds\n",
		name, cfg.NumLayers, cfg.HiddenSize, cfg.VocabSize, *ctxLen, *fanout, *rounds)
	fmt.Println("| T tokens | forward ms | cost vs T=" + strconv.Itoa(ts[0]) + " |\n|---:|---:|---:|")
	for _, t := range ts {
		fmt.Printf("| %d | %.3f | %.2f |\n", t, med(t)*1e3, med(t)/base)
	}
}
