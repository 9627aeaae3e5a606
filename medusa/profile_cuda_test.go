//go:build cuda

package medusa

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/engine/cuda"
	"github.com/specgate/specgate/speculative"
)

// TestStepProfileOnGPU (SPECGATE_PROFILE=DIR; skipped otherwise) splits a
// decode step's time on the GPU into device time (cuda.Options.TimeSteps:
// uploads and kernels of each forward) and the rest (host), for plain
// decoding and fixed Medusa trees, 10 prompts x 128 tokens each, and
// writes a CPU profile per mode to DIR.
func TestStepProfileOnGPU(t *testing.T) {
	dir := os.Getenv("SPECGATE_PROFILE")
	if dir == "" {
		t.Skip("SPECGATE_PROFILE not set")
	}
	target, err := engine.Load(shippedTarget, engine.LoadOptions{KVTokens: 8192, DisablePrefixCache: true,
		NewBackend: cuda.Factory(cuda.Options{TimeSteps: true})})
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	be := target.Backend().(*cuda.Backend)
	type mode struct {
		name string
		tree string
	}
	var prompts [][]int32
	for _, s := range speculative.BenchPrompts()[:10] {
		prompts = append(prompts, target.Tokenizer.Encode(s, true))
	}
	for _, m := range []mode{{"plain", ""}, {"medusa n=4", "4"}, {"medusa n=8", "8"}, {"medusa n=16", "16"}, {"medusa n=32", "32"}} {
		opts := engine.Options{}
		if m.tree != "" {
			p, err := New(target, Spec{Heads: shippedHeads, Tree: m.tree, VocabLimit: 2048})
			if err != nil {
				t.Fatal(err)
			}
			opts = engine.Options{Proposers: []engine.Proposer{p}, FixedDraft: true, MaxDraft: 64}
		}
		e := engine.New(target, opts)
		sp := engine.SamplingParams{SkipLogprobs: true}
		for _, pr := range prompts { // warm-up: graphs captured
			if _, _, err := generate(e, engine.GenerateRequest{Prompt: pr, MaxTokens: 128, Sampling: sp}); err != nil {
				t.Fatal(err)
			}
		}
		be.StepTimes()
		f, _ := os.Create(filepath.Join(dir, strings.NewReplacer(" ", "", "=", "").Replace(m.name)+"exact"+os.Getenv("SPECGATE_EXACT_VERIFY")+".cpu.pprof"))
		pprof.StartCPUProfile(f)
		t0 := time.Now()
		toks, steps := 0, 0
		for _, pr := range prompts {
			got, res, err := generate(e, engine.GenerateRequest{Prompt: pr, MaxTokens: 128, Sampling: sp})
			if err != nil {
				t.Fatal(err)
			}
			toks += len(got)
			if res.Spec != nil {
				steps += res.Spec.Steps + max(len(got)-1-res.Spec.Accepted-res.Spec.Steps, 0)
			} else {
				steps += len(got) - 1
			}
		}
		wall := time.Since(t0)
		pprof.StopCPUProfile()
		f.Close()
		dt := be.StepTimes()
		sort.Float64s(dt)
		sum := 0.0
		for _, x := range dt {
			sum += x
		}
		med := 0.0
		if len(dt) > 0 {
			med = dt[len(dt)/2]
		}
		e.Close()
		t.Logf("%-12s %5d tokens %5d decode steps %5d forwards: wall %.1f us/forward, device %.1f us/forward (median %.1f), tokens/s %.0f",
			m.name, toks, steps, len(dt), wall.Seconds()/float64(max(len(dt), 1))*1e6, sum/float64(max(len(dt), 1))*1e6, med*1e6, float64(toks)/wall.Seconds())
	}
}

// TestVerifyCostOnGPU (SPECGATE_PROFILE set; skipped otherwise): device and
// wall time of one target forward of a chain-shaped tree of T tokens at
// context ~100 (shipped target, median of 30), with logits copied back,
// with the rows' argmax only, and with argmax plus the Medusa heads (5
// heads, top-10, vocabulary limit 2048).
func TestVerifyCostOnGPU(t *testing.T) {
	if os.Getenv("SPECGATE_PROFILE") == "" {
		t.Skip("SPECGATE_PROFILE not set")
	}
	target, err := engine.Load(shippedTarget, engine.LoadOptions{KVTokens: 8192, DisablePrefixCache: true,
		NewBackend: cuda.Factory(cuda.Options{TimeSteps: true})})
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	be := target.Backend().(*cuda.Backend)
	p, err := New(target, Spec{Heads: shippedHeads, Tree: "64", VocabLimit: 2048})
	if err != nil {
		t.Fatal(err)
	}
	id := p.DeviceHeads(be)
	ctx := make([]int32, 100)
	for i := range ctx {
		ctx[i] = int32(5 + 7*i%8000)
	}
	s := target.NewSequence()
	defer s.Free()
	if _, err := s.Forward(ctx, nil, []int32{}); err != nil {
		t.Fatal(err)
	}
	med := func(x []float64) float64 { sort.Float64s(x); return x[len(x)/2] }
	for _, T := range []int{1, 2, 5, 8, 9, 17, 33, 64, 65} {
		toks, par := make([]int32, T), make([]int32, T)
		for i := range toks {
			toks[i], par[i] = int32(11+5*i), int32(i)-1
		}
		line := ""
		for _, v := range []struct {
			name       string
			arg, heads bool
		}{{"logits", false, false}, {"argmax", true, false}, {"argmax+heads", true, true}} {
			var dev, wall []float64
			for rep := range 33 {
				it := []engine.BatchItem{{Seq: s, Tokens: toks, Parents: par, ArgmaxOnly: v.arg}}
				if v.heads {
					it[0].Heads = id
				}
				be.StepTimes()
				t0 := time.Now()
				if err := target.ForwardBatch(it); err != nil {
					t.Fatal(err)
				}
				w := time.Since(t0).Seconds()
				d := be.StepTimes()
				if err := s.KeepTree(nil); err != nil {
					t.Fatal(err)
				}
				if rep >= 3 && len(d) == 1 {
					dev, wall = append(dev, d[0]*1e6), append(wall, w*1e6)
				}
			}
			line += fmt.Sprintf("  %s: device %.1f us, wall %.1f us", v.name, med(dev), med(wall))
		}
		t.Logf("T=%2d%s", T, line)
	}
}
