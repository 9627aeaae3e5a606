package speculative

import (
	"runtime"
	"testing"
	"time"

	"github.com/specgate/specgate/engine"
)

// instantBackend is a backend whose forward costs (almost) nothing: the
// "model" continues a fixed token sequence by position (truth[pos+1]),
// samples and takes argmaxes "on the device" like the CUDA backend, and
// counts its calls. A benchmark over it times the engine's host work per
// step alone: batch building, the draft budget, the proposers, the
// verification walk, KV bookkeeping and the scheduler's hand-offs.
type instantBackend struct {
	truth            []int32
	forwards, copies int
	// device, when set, is how long a forward of T tokens keeps the
	// caller waiting (a spin, as cuStreamSynchronize spins): the GPU's
	// step time, so that host work overlapping it shows.
	device func(T int) time.Duration
}

func (f *instantBackend) next(pos int32) int32 {
	p := int(pos) + 1
	if p >= len(f.truth) {
		p = len(f.truth) - 1
	}
	return f.truth[p]
}

func (f *instantBackend) Forward(reqs []*engine.ForwardRequest) error {
	f.forwards++
	if f.device != nil {
		T := 0
		for _, r := range reqs {
			T += len(r.Tokens)
		}
		for t0, d := time.Now(), f.device(T); time.Since(t0) < d; {
		}
	}
	for _, r := range reqs {
		rows := r.LogitsRows
		n := len(r.Tokens)
		if rows != nil {
			n = len(rows)
		}
		for k := range n {
			j := k
			if rows != nil {
				j = int(rows[k])
			}
			tok := f.next(r.Positions[j])
			switch {
			case r.Sample != nil:
				r.Sample.Token, r.Sample.Logprob = tok, 0
			case r.Argmax != nil:
				r.Argmax[k] = tok
			case r.Logits != nil:
				row := r.Logits[k*len(r.Logits)/n : (k+1)*len(r.Logits)/n]
				clear(row)
				row[tok] = 1
			}
		}
	}
	return nil
}

func (f *instantBackend) CopySlots(src, dst []int32) error { f.copies++; return nil }
func (f *instantBackend) Close() error                     { return nil }
func (f *instantBackend) SamplesOnDevice() bool            { return true }
func (f *instantBackend) ArgmaxOnDevice() bool             { return true }

// BenchmarkHostStepPrediction: the engine's host time per step (wall
// µs/step, allocations per step, and the engine's own split) of bench
// workload's code-edit shape on a backend whose forward is free: a
// 160-token answer with the answer itself as the prediction ("exact"), or
// with one token in 12 changed ("edited": the cursor loses and finds the
// draft again), Known plus prompt lookup and the tenant's answers, up to
// 64 nodes a step, steps priced like the H100's exact tree steps. On the
// GPU every µs here is a µs of each verification step (~230 µs of
// device time there), unless it overlaps the device's work. The -gpu
// variants also spin for the H100's device time of each step, so that
// wall-µs/step minus the device's share shows what does not overlap it.
func BenchmarkHostStepPrediction(b *testing.B) {
	target, _ := shippedPair(b)
	prompt := target.Tokenizer.Encode(testPrompts(b)[0], true)
	e0 := engine.New(target, engine.Options{})
	want, _, err := generate(e0, engine.GenerateRequest{Prompt: prompt, MaxTokens: 160, NoSpeculation: true})
	e0.Close()
	if err != nil {
		b.Fatal(err)
	}
	fb := &instantBackend{truth: append(append([]int32(nil), prompt...), want...)}
	m, err := engine.Load("../models/specgate-target", engine.LoadOptions{KVTokens: 8192,
		NewBackend: func(engine.Config, *engine.Weights, int) (engine.Backend, error) { return fb, nil }})
	if err != nil {
		b.Fatal(err)
	}
	edited := append([]int32(nil), want...)
	for i := 11; i < len(edited); i += 12 {
		edited[i] = (edited[i] + 1) % int32(target.Config.VocabSize)
	}
	for _, c := range []struct {
		name   string
		draft  []int32
		device bool
	}{{"exact", want, false}, {"edited", edited, false}, {"exact-gpu", want, true}, {"edited-gpu", edited, true}} {
		b.Run(c.name, func(b *testing.B) {
			fb.device = nil
			if c.device {
				fb.device = h100TreeStep
			}
			e := engine.New(m, engine.Options{MaxDraft: 64, StepCost: h100TreeStep, ProposeCost: func() time.Duration { return time.Microsecond }})
			defer e.Close()
			suf, err := NewSuffix(SuffixConfig{})
			if err != nil {
				b.Fatal(err)
			}
			k := NewKnown(KnownConfig{})
			s0, f0, c0 := e.Stats(), fb.forwards, fb.copies
			var ms0, ms1 runtime.MemStats
			runtime.ReadMemStats(&ms0)
			for b.Loop() {
				req := engine.GenerateRequest{Prompt: prompt, MaxTokens: 160, Sampling: engine.SamplingParams{SkipLogprobs: true}}
				WithProposers(&req, []engine.Proposer{k, suf}, "t", []engine.KnownDraft{{Source: SourcePrediction, Tokens: c.draft}})
				got, _, err := generate(e, req)
				if err != nil {
					b.Fatal(err)
				}
				if len(got) != len(want) {
					b.Fatalf("%d tokens, want %d", len(got), len(want))
				}
			}
			runtime.ReadMemStats(&ms1)
			s1 := e.Stats()
			steps := float64(s1.Steps - s0.Steps)
			b.ReportMetric(float64(b.Elapsed().Microseconds())/steps, "wall-µs/step")
			b.ReportMetric(float64((s1.StepTime-s0.StepTime).Microseconds())/steps, "step-µs/step")
			b.ReportMetric(float64((s1.ProposeTime-s0.ProposeTime).Microseconds())/steps, "propose-µs/step")
			b.ReportMetric(float64((s1.ForwardTime-s0.ForwardTime).Microseconds())/steps, "forward-µs/step")
			b.ReportMetric(steps/float64(b.N), "steps/req")
			b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/steps, "allocs/step")
			b.ReportMetric(float64(fb.copies-c0)/float64(fb.forwards-f0), "copies/forward")
		})
	}
}
