package medusa

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/speculative"
)

// BenchmarkLogits: the shipped heads on one hidden row (what a batch-1
// step costs the proposer), all five heads, by vocabulary limit.
func BenchmarkLogits(b *testing.B) {
	target, _ := shipped(b)
	for _, vocab := range []int{0, 2048, 1024} {
		h, err := Load(shippedHeads, target, LoadOptions{VocabLimit: vocab})
		if err != nil {
			b.Fatal(err)
		}
		x := make([]float32, h.Hidden)
		for i := range x {
			x[i] = float32(i%7) - 3
		}
		b.Run(fmt.Sprintf("vocab=%d", h.Rows()), func(b *testing.B) {
			var out []float32
			for b.Loop() {
				out = h.Logits(x, 1, h.NumHeads, out)
			}
		})
	}
}

// BenchmarkLogitsInt8: the shipped int8 heads on one hidden row through
// the CPU backend's int8 weight-only kernels (what Load builds) against
// the same heads dequantized to float32 matrices (what Load built before
// e653040), for one head and for all five; interleave with -count and
// compare medians: go test -run '^$' -bench LogitsInt8 -cpu 1 -count 5 ./medusa/
func BenchmarkLogitsInt8(b *testing.B) {
	target, _ := shipped(b)
	h, err := Load(shippedHeads, target, LoadOptions{})
	if err != nil {
		b.Fatal(err)
	}
	if h.Shared || len(h.projRaw) != h.NumHeads {
		b.Fatalf("shipped heads: shared %v, %d projections: want own int8 projections", h.Shared, len(h.projRaw))
	}
	f := *h // the float32 peer: the dequantized matrices the device heads get
	f.w = make([][]*engine.Mat, h.NumHeads)
	f.proj = make([]*engine.Mat, h.NumHeads)
	fw, fp := h.deviceWeights()
	for i := range h.NumHeads {
		for _, w := range fw[i] {
			f.w[i] = append(f.w[i], engine.NewMat(w, h.Hidden, h.Hidden))
		}
		f.proj[i] = engine.NewMat(fp[i], h.Rows(), h.Hidden)
	}
	x := make([]float32, h.Hidden)
	for i := range x {
		x[i] = float32(i%7) - 3
	}
	for _, k := range []int{1, h.NumHeads} {
		for _, c := range []struct {
			name string
			h    *Heads
		}{{"int8", h}, {"float32", &f}} {
			b.Run(fmt.Sprintf("heads=%d/%s", k, c.name), func(b *testing.B) {
				var out []float32
				for b.Loop() {
					out = c.h.Logits(x, 1, k, out)
				}
			})
		}
	}
}

// BenchmarkDecodeBatch1: greedy batch-1 decoding of the shipped target,
// plain against Medusa with the shipped heads' tree cut to n nodes (fixed
// draft, as bench spec's "medusa n=N" rows), 4 bench prompts x 64 new
// tokens per op. Reports µs per generated token and per target step (the
// step-cost accounting of issue #17: a Medusa step's µs over plain's is
// what τ must pay for) and τ. "n=N/host" runs the heads on the host after
// the step (Propose, from the accepted row's hidden state); "n=N" as
// medusa.New attaches them, inside the CPU forward beside the LM head when
// the backend has two threads and the tree is shallow (attachCPU; name
// suffix "/in-forward"). Interleave with -count, compare medians; profile
// one mode at a time. With Hydra heads ($SPECGATE_HYDRA_HEADS or
// models/specgate-target-hydra) also "hydra/n=N" (always the host path):
//
//	go test -run '^$' -bench 'DecodeBatch1/(plain|n=1)' -cpu 2 -count 5 ./medusa/
//	go test -run '^$' -bench 'DecodeBatch1/n=1/host' -cpu 1 -count 5 -cpuprofile /tmp/n1.prof ./medusa/
func BenchmarkDecodeBatch1(b *testing.B) {
	target, _ := shipped(b)
	prompts := speculative.BenchPrompts()[:4]
	toks := make([][]int32, len(prompts))
	for i, p := range prompts {
		toks[i] = target.Tokenizer.Encode(p, true)
	}
	type mode struct {
		name string
		opts engine.Options
	}
	modes := []mode{{"plain", engine.Options{}}}
	for _, tree := range []string{"1", "[[0],[1]]", "2", "4"} {
		p, err := New(target, Spec{Heads: shippedHeads, Tree: tree, VocabLimit: 2048})
		if err != nil {
			b.Fatal(err)
		}
		name := "n=" + tree
		if p.DeviceHeads(target.Backend()) > 0 {
			name += "/in-forward"
		}
		modes = append(modes, mode{name, engine.Options{Proposers: []engine.Proposer{p}, FixedDraft: true}})
		hl, err := Load(shippedHeads, target, LoadOptions{VocabLimit: 2048})
		if err != nil {
			b.Fatal(err)
		}
		host, err := NewProposer(hl, p.Tree()) // not attached: heads on the host
		if err != nil {
			b.Fatal(err)
		}
		modes = append(modes, mode{"n=" + tree + "/host", engine.Options{Proposers: []engine.Proposer{host}, FixedDraft: true}})
	}
	// Hydra heads ($SPECGATE_HYDRA_HEADS or the shipped ones; not random
	// ones): always on the host path
	hdir := os.Getenv("SPECGATE_HYDRA_HEADS")
	if hdir == "" {
		if _, err := os.Stat(filepath.Join(shippedHydra, ConfigFile)); err == nil {
			hdir = shippedHydra
		}
	}
	if hdir != "" {
		for _, tree := range []string{"1", "2", "4"} {
			p, err := New(target, Spec{Heads: hdir, Tree: tree, VocabLimit: 2048})
			if err != nil {
				b.Fatal(err)
			}
			modes = append(modes, mode{"hydra/n=" + tree, engine.Options{Proposers: []engine.Proposer{p}, FixedDraft: true}})
		}
	}
	for _, m := range modes {
		opts := m.opts
		b.Run(m.name, func(b *testing.B) {
			e := engine.New(target, opts)
			defer e.Close()
			// warm-up, untimed (the engine calibrates its step costs once)
			if _, _, err := generate(e, engine.GenerateRequest{Prompt: toks[0], MaxTokens: 8, Sampling: engine.SamplingParams{SkipLogprobs: true}}); err != nil {
				b.Fatal(err)
			}
			gen, steps := 0, 0
			for b.Loop() {
				for _, pt := range toks {
					out, res, err := generate(e, engine.GenerateRequest{Prompt: pt, MaxTokens: 64, Sampling: engine.SamplingParams{SkipLogprobs: true}})
					if err != nil {
						b.Fatal(err)
					}
					gen += len(out)
					steps += len(out) - 1 // the first token comes from prefill
					if res.Spec != nil {
						steps -= res.Spec.Accepted
					}
				}
			}
			el := float64(b.Elapsed().Microseconds())
			b.ReportMetric(el/float64(gen), "µs/token")
			b.ReportMetric(el/float64(steps), "µs/step")
			b.ReportMetric(float64(gen-b.N*len(toks))/float64(steps), "τ")
		})
	}
}

// BenchmarkHydraLogits: one Hydra head on n nodes of one request (the
// hydra heads of hydraDirForShipped: $SPECGATE_HYDRA_HEADS, the shipped
// ones, else random), i.e. one depth of one request's tree; block 0's
// hidden-row product runs once for the n nodes.
//
//	go test -run '^$' -bench HydraLogits -cpu 1 -count 5 ./medusa/
func BenchmarkHydraLogits(b *testing.B) {
	target, _ := shipped(b)
	h, err := Load(hydraDirForShipped(b), target, LoadOptions{})
	if err != nil {
		b.Fatal(err)
	}
	x := make([]float32, h.Hidden)
	for i := range x {
		x[i] = float32(i%7) - 3
	}
	for _, head := range []int{0, h.NumHeads - 1} {
		for _, n := range []int{1, 4, 16} {
			row := make([]int32, n)
			toks := make([]int32, n*(head+1))
			for k := range toks {
				toks[k] = int32(100 + 37*k)
			}
			b.Run(fmt.Sprintf("head=%d/nodes=%d", head, n), func(b *testing.B) {
				var out []float32
				for b.Loop() {
					out = h.HydraLogits(head, x, 1, row, toks, out)
				}
			})
		}
	}
}
