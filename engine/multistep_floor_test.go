package engine

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// oracleChain proposes the known greedy continuation (right at every
// node) and claims a fixed confidence in it.
type oracleChain struct {
	want []int32
	conf float64
}

func (o *oracleChain) Propose(_ context.Context, reqs []ProposeRequest) ([]Proposal, error) {
	out := make([]Proposal, len(reqs))
	for i, r := range reqs {
		at := len(r.Generated) // want[at] follows the pending token
		for d := 0; d < r.Budget && at+d < len(o.want); d++ {
			out[i].Tokens = append(out[i].Tokens, o.want[at+d])
			out[i].Parents = append(out[i].Parents, int32(d-1))
		}
	}
	return out, nil
}
func (o *oracleChain) Release(RequestID)                 {}
func (o *oracleChain) Confidence(RequestID, int) float64 { return o.conf }
func (o *oracleChain) String() string                    { return fmt.Sprintf("oracle %.2f", o.conf) }

// TestDraftsBeatMultiStep: a lone greedy request on an engine with
// multi-step decoding gets drafts only where a step with them beats the
// measured multi-step rate, not merely a one-token step. Step costs are a
// fixed curve (5 ms a step, +1% a token: drafts of 0.6 confidence beat a
// one-token step by far), while a multi-step chunk of this tiny model runs
// at its real speed, well under 5 ms a token. Without DecodeSteps the same
// drafts are verified every step; with it, once a chunk was timed, none
// (a probe now and then aside), and the output is plain decoding's.
func TestDraftsBeatMultiStep(t *testing.T) {
	m := NewRandomModel(genConfig(), 21, LoadOptions{KVTokens: 4096, BlockSize: 4, Threads: 1})
	prompt := []int32{1, 5, 7, 9, 11, 13, 17, 19, 23, 29, 31}
	want := manualGreedy(t, m, prompt, 60)
	cost := func(T int) time.Duration { return time.Duration(5e6 * (1 + 0.01*float64(T-1))) }
	greedy := SamplingParams{SkipLogprobs: true}
	run := func(steps int) Result {
		t.Helper()
		e := New(m, Options{DecodeSteps: steps, StepCost: cost, MaxDraft: 8})
		defer e.Close()
		// a plain request first: the engine times its multi-step chunks
		if _, _, err := collect(e, context.Background(), GenerateRequest{Prompt: prompt, MaxTokens: 60, Sampling: greedy, NoSpeculation: true}); err != nil {
			t.Fatal(err)
		}
		got, res, err := collect(e, context.Background(), GenerateRequest{Prompt: prompt, MaxTokens: 60, Sampling: greedy,
			Proposers: []Proposer{&oracleChain{want: want, conf: 0.6}}})
		if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("DecodeSteps %d: %v (%v), want %v", steps, got, err, want)
		}
		if res.Spec == nil {
			res.Spec = &SpecStats{}
		}
		return res
	}
	one, multi := run(0), run(8)
	t.Logf("one-token plain steps: %d draft steps, %d proposed; multi-step: %d draft steps, %d proposed", one.Spec.Steps, one.Spec.Proposed, multi.Spec.Steps, multi.Spec.Proposed)
	if one.Spec.Steps < 10 {
		t.Fatalf("premise: without multi-step decoding the drafts pay (%d draft steps), want >= 10", one.Spec.Steps)
	}
	if multi.Spec.Steps > 3 {
		t.Fatalf("with multi-step decoding drafts that lose to it were verified in %d steps, want <= 3 (probes)", multi.Spec.Steps)
	}
}
