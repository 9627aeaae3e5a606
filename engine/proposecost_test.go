package engine

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// slowProposer takes 20ms per Propose call: on any machine far more than
// the 1ms target step it drafts for.
type slowProposer struct{ Proposer }

func (p slowProposer) Propose(ctx context.Context, reqs []ProposeRequest) ([]Proposal, error) {
	time.Sleep(20 * time.Millisecond)
	return p.Proposer.Propose(ctx, reqs)
}

// TestProposeCostFixed: a proposer that takes 20ms a call is priced by its
// measured time and the budget stops drafting with it (a draft of at most 6
// nodes cannot pay for 20 one-millisecond steps); with Options.ProposeCost
// the engine prices it at the fixed 10µs per level instead, so it drafts a
// draft equal to the target whatever the machine's load. Output equals plain
// decoding either way.
func TestProposeCostFixed(t *testing.T) {
	cfg := genConfig()
	opts := LoadOptions{KVTokens: 2048, BlockSize: 4, Threads: 2, DisablePrefixCache: true}
	target := NewRandomModel(cfg, 31, opts)
	same := NewRandomModel(cfg, 31, opts)
	prompt := []int32{2, 3, 5, 7, 11, 13}
	want := manualGreedy(t, target, prompt, 40)
	price := func(T int, tree, heads bool) time.Duration {
		return time.Duration(float64(time.Millisecond) * (1 + 0.05*float64(T-1)))
	}
	accepted := map[bool]int{}
	for _, fixed := range []bool{false, true} {
		o := Options{Proposers: []Proposer{slowProposer{newModelChain(same, false)}}, MaxDraft: 6, StepClassCost: price}
		if fixed {
			o.ProposeCost = func() time.Duration { return 10 * time.Microsecond }
		}
		e := New(target, o)
		got, res, err := collect(e, context.Background(), GenerateRequest{Prompt: prompt, MaxTokens: 40})
		e.Close()
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("fixed=%v: output %v, plain %v", fixed, got, want)
		}
		accepted[fixed] = res.Spec.Accepted
		t.Logf("ProposeCost fixed=%v: %d nodes proposed, %d accepted, %d speculative steps", fixed, res.Spec.Proposed, res.Spec.Accepted, res.Spec.Steps)
	}
	if accepted[true] < 20 {
		t.Fatalf("with ProposeCost only %d nodes accepted from a draft equal to the target", accepted[true])
	}
	if accepted[false] >= accepted[true] {
		t.Fatalf("a 20ms proposer priced by its wall time drafted as much (%d accepted) as one priced at 10µs (%d)", accepted[false], accepted[true])
	}
}
