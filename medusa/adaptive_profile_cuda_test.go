//go:build cuda

package medusa

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/engine/cuda"
	"github.com/specgate/specgate/speculative"
)

// TestAdaptiveBreakdownOnGPU (SPECGATE_PROFILE=DIR; skipped otherwise)
// runs bench spec's workload (20 prompts x 128 tokens, greedy,
// SkipLogprobs) for plain decoding and the adaptive modes at concurrency
// 1, 8 and 32, interleaved (SPECGATE_ROUNDS rounds, default 3), and splits
// each mode's median run into the engine's host time (steps, propose,
// forward), the device time of the target's and the draft's forwards
// (cuda.Options.TimeSteps), graphs captured and draft nodes verified: where
// an adaptive mode that drafts little loses time against plain. CPU
// profiles of the c=8 runs go to DIR.
func TestAdaptiveBreakdownOnGPU(t *testing.T) {
	dir := os.Getenv("SPECGATE_PROFILE")
	if dir == "" {
		t.Skip("SPECGATE_PROFILE not set")
	}
	rounds := 3
	if v, err := strconv.Atoi(os.Getenv("SPECGATE_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	fac := cuda.Factory(cuda.Options{TimeSteps: true})
	target, err := engine.Load(shippedTarget, engine.LoadOptions{NewBackend: fac})
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	draft, err := engine.Load("../models/specgate-draft", engine.LoadOptions{NewBackend: fac})
	if err != nil {
		t.Fatal(err)
	}
	defer draft.Close()
	tb, db := target.Backend().(*cuda.Backend), draft.Backend().(*cuda.Backend)
	var prompts [][]int32
	for _, s := range speculative.BenchPrompts()[:20] {
		prompts = append(prompts, target.Tokenizer.Encode(s, true))
	}
	type mode struct {
		name string
		mk   func() ([]engine.Proposer, error)
	}
	modes := []mode{{"plain", nil},
		{"chain adaptive", func() ([]engine.Proposer, error) {
			d, err := speculative.NewDraft(target, draft, speculative.Config{Method: speculative.MethodChain, K: 6, Adaptive: true})
			return []engine.Proposer{d}, err
		}},
		{"dynamic adaptive", func() ([]engine.Proposer, error) {
			d, err := speculative.NewDraft(target, draft, speculative.Config{Method: speculative.MethodDynamic, K: 5, Width: 4, Budget: 12, Adaptive: true})
			return []engine.Proposer{d}, err
		}},
		{"medusa adaptive", func() ([]engine.Proposer, error) {
			p, err := New(target, Spec{Heads: shippedHeads, Tree: "16", VocabLimit: 2048})
			return []engine.Proposer{p}, err
		}},
	}
	engines := make([]*engine.Engine, len(modes))
	for i, m := range modes {
		opts := engine.Options{MaxBatch: 256}
		if m.mk != nil {
			ps, err := m.mk()
			if err != nil {
				t.Fatal(err)
			}
			opts.Proposers = ps
		}
		engines[i] = engine.New(target, opts)
		defer engines[i].Close()
	}
	run := func(e *engine.Engine, c int) ([][]int32, time.Duration) {
		outs := make([][]int32, len(prompts))
		next := make(chan int, len(prompts))
		for i := range prompts {
			next <- i
		}
		close(next)
		var wg sync.WaitGroup
		t0 := time.Now()
		for range c {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for p := range next {
					req := engine.GenerateRequest{Prompt: prompts[p], MaxTokens: 128, Sampling: engine.SamplingParams{SkipLogprobs: true}}
					if _, err := e.Generate(context.Background(), req, func(ch engine.Chunk) error {
						outs[p] = append(outs[p], ch.Tokens...)
						return nil
					}); err != nil {
						t.Error(err)
					}
				}
			}()
		}
		wg.Wait()
		return outs, time.Since(t0)
	}
	sum := func(x []float64) float64 {
		s := 0.0
		for _, v := range x {
			s += v
		}
		return s
	}
	type sample struct {
		wall               time.Duration
		st                 engine.Stats
		devT, devD         float64
		fwdT, fwdD, graphs int
		mismatch           int
	}
	for _, c := range []int{1, 8, 32} {
		var ref [][]int32
		samples := make([][]sample, len(modes))
		for i := range modes { // warm-up at this concurrency
			run(engines[i], c)
		}
		for r := range rounds {
			for i, m := range modes {
				tb.StepTimes()
				db.StepTimes()
				g0, _ := tb.Stats()
				st0 := engines[i].Stats()
				var f *os.File
				if c == 8 && r == 0 {
					f, _ = os.Create(filepath.Join(dir, strings.ReplaceAll(m.name, " ", "_")+"_c8.pprof"))
					pprof.StartCPUProfile(f)
				}
				runtime.GC() // as bench spec does before each timed run
				outs, wall := run(engines[i], c)
				if f != nil {
					pprof.StopCPUProfile()
					f.Close()
				}
				st1 := engines[i].Stats()
				g1, _ := tb.Stats()
				dt, dd := tb.StepTimes(), db.StepTimes()
				s := sample{wall: wall, devT: sum(dt), devD: sum(dd), fwdT: len(dt), fwdD: len(dd), graphs: g1 - g0}
				s.st = engine.Stats{Steps: st1.Steps - st0.Steps, Forwards: st1.Forwards - st0.Forwards, SpecSteps: st1.SpecSteps - st0.SpecSteps,
					SpecProposed: st1.SpecProposed - st0.SpecProposed, SpecAccepted: st1.SpecAccepted - st0.SpecAccepted,
					StepTime: st1.StepTime - st0.StepTime, ProposeTime: st1.ProposeTime - st0.ProposeTime, ForwardTime: st1.ForwardTime - st0.ForwardTime}
				if i == 0 && r == 0 {
					ref = outs
				}
				for p := range outs {
					if fmt.Sprint(outs[p]) != fmt.Sprint(ref[p]) {
						s.mismatch++
					}
				}
				samples[i] = append(samples[i], s)
			}
		}
		var plainWall time.Duration
		for i, m := range modes {
			ss := samples[i]
			slices.SortFunc(ss, func(a, b sample) int { return int(a.wall - b.wall) })
			s := ss[len(ss)/2]
			if i == 0 {
				plainWall = s.wall
			}
			walls := ""
			for _, x := range ss {
				walls += fmt.Sprintf(" %.1f", x.wall.Seconds()*1e3)
			}
			us := func(d time.Duration) float64 { return d.Seconds() * 1e6 / float64(max(s.st.Steps, 1)) }
			t.Logf("c=%-2d %-16s %.2fx wall %.1f ms (runs%s) steps %d fwd %d spec %d prop %d acc %d | per step: host step %.1f propose %.1f forward %.1f us; target device %.1f us/step (%d fwd), draft device %.1f ms (%d fwd); graphs captured %d; mismatches %d",
				c, m.name, plainWall.Seconds()/s.wall.Seconds(), s.wall.Seconds()*1e3, walls, s.st.Steps, s.st.Forwards, s.st.SpecSteps, s.st.SpecProposed, s.st.SpecAccepted,
				us(s.st.StepTime), us(s.st.ProposeTime), us(s.st.ForwardTime), s.devT*1e6/float64(max(s.st.Steps, 1)), s.fwdT, s.devD*1e3, s.fwdD, s.graphs, s.mismatch)
		}
	}
}
