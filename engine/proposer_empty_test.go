package engine

import (
	"context"
	"fmt"
	"testing"
)

// emptyProposer claims confidence but never has a draft (a suffix index
// without a match, a known draft whose cursor is lost).
type emptyProposer struct{ calls int }

func (p *emptyProposer) Propose(_ context.Context, reqs []ProposeRequest) ([]Proposal, error) {
	p.calls++
	return make([]Proposal, len(reqs)), nil
}
func (p *emptyProposer) Release(RequestID)                 {}
func (p *emptyProposer) Confidence(RequestID, int) float64 { return 0.9 }

// TestEmptyProposalsKeepMultiStep: with Options.DecodeSteps, a lone greedy
// request whose proposers are granted nodes but propose nothing decodes in
// multi-step chunks between their calls, not one token per step (measured
// before: 31 steps for 40 tokens against plain's 6).
func TestEmptyProposalsKeepMultiStep(t *testing.T) {
	m := NewRandomModel(genConfig(), 21, LoadOptions{KVTokens: 2048, BlockSize: 4, Threads: 1})
	prompt := []int32{1, 5, 7, 9, 11, 13, 17, 19, 23, 29, 31}
	want := manualGreedy(t, m, prompt, 48)
	e := New(m, Options{DecodeSteps: 8})
	defer e.Close()
	p := &emptyProposer{}
	s0 := e.Stats()
	got, _, err := collect(e, context.Background(), GenerateRequest{Prompt: prompt, MaxTokens: 48,
		Sampling: SamplingParams{SkipLogprobs: true}, Proposers: []Proposer{p}})
	if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%v (%v), want %v", got, err, want)
	}
	steps := e.Stats().Steps - s0.Steps
	t.Logf("48 tokens in %d steps, %d Propose calls", steps, p.calls)
	// prefill, then per 9 tokens one step that asks the proposer and one chunk of 8
	if steps > 14 {
		t.Fatalf("48 tokens took %d steps (%d Propose calls), want <= 14: one-token steps while the proposer had nothing", steps, p.calls)
	}
}
