package engine

import (
	"context"
	"fmt"
	"sync"
	"testing"
)

// startRecorder records Start, Confidence and Propose calls in order.
type startRecorder struct {
	mu     sync.Mutex
	events []string
}

func (p *startRecorder) log(f string, a ...any) {
	p.mu.Lock()
	p.events = append(p.events, fmt.Sprintf(f, a...))
	p.mu.Unlock()
}
func (p *startRecorder) Start(id RequestID, tenant string, known []KnownDraft) {
	p.log("start %s %d", tenant, len(known))
}
func (p *startRecorder) Confidence(RequestID, int) float64 { p.log("confidence"); return 0.9 }
func (p *startRecorder) Propose(_ context.Context, reqs []ProposeRequest) ([]Proposal, error) {
	p.log("propose")
	return make([]Proposal, len(reqs)), nil
}
func (p *startRecorder) Release(RequestID) { p.log("release") }

// TestStarterBeforeConfidence: a Starter proposer is started once per
// request, with its tenant and known drafts, before the engine asks its
// Confidence or calls Propose for it, and released after.
func TestStarterBeforeConfidence(t *testing.T) {
	m := NewRandomModel(genConfig(), 21, LoadOptions{KVTokens: 2048, BlockSize: 4, Threads: 1})
	e := New(m, Options{})
	defer e.Close()
	p := &startRecorder{}
	known := []KnownDraft{{Source: "prediction", Tokens: []int32{3, 4, 5}}}
	if _, _, err := collect(e, context.Background(), GenerateRequest{Prompt: []int32{1, 5, 7, 9}, MaxTokens: 6,
		Proposers: []Proposer{p}, Tenant: "acme", KnownDrafts: known}); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	ev := p.events
	if len(ev) < 3 || ev[0] != "start acme 1" || ev[len(ev)-1] != "release" {
		t.Fatalf("events %v: want start first (tenant acme, 1 draft), release last", ev)
	}
	asked := false
	for _, x := range ev[1:] {
		if x == "start acme 1" {
			t.Fatalf("started twice: %v", ev)
		}
		asked = asked || x == "confidence" || x == "propose"
	}
	if !asked {
		t.Fatalf("events %v: the engine never asked the proposer", ev)
	}
}
