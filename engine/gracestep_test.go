package engine

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestGraceStep: a request whose caller falls maxAhead outputs behind is
// served by one more step (its grace step) before it sits out, so a caller
// that is only late for a moment keeps its place in the batch. A's caller
// holds its first chunk until request B has finished: the engine must have
// handed A exactly maxOut outputs by then (B's tokens are known, one token
// per plain output, so Stats.TokensGenerated - len(B) is A's count; with
// the bare maxAhead rule it was maxAhead), and A sat out B's later steps.
// Both outputs are checked against a manual greedy decode.
func TestGraceStep(t *testing.T) {
	m := NewRandomModel(genConfig(), 21, LoadOptions{KVTokens: 2048, BlockSize: 4, Threads: 2})
	e := New(m, Options{})
	defer e.Close()
	promptA := []int32{1, 5, 7, 9, 11}
	promptB := []int32{2, 4, 8, 16, 32, 60}
	const nA, nB = 12, 16
	wantA, wantB := manualGreedy(t, m, promptA, nA), manualGreedy(t, m, promptB, nB)

	first := make(chan struct{})
	gate := make(chan struct{})
	defer func() {
		select {
		case <-gate:
		default:
			close(gate)
		}
	}()
	var gotA []int32
	doneA := make(chan error, 1)
	go func() {
		_, err := e.Generate(context.Background(), GenerateRequest{Prompt: promptA, MaxTokens: nA}, func(c Chunk) error {
			gotA = append(gotA, c.Tokens...)
			if len(gotA) == len(c.Tokens) {
				close(first)
				<-gate
			}
			return nil
		})
		doneA <- err
	}()
	<-first
	type out struct {
		toks []int32
		err  error
	}
	doneB := make(chan out, 1)
	go func() {
		toks, _, err := collect(e, context.Background(), GenerateRequest{Prompt: promptB, MaxTokens: nB})
		doneB <- out{toks, err}
	}()
	var b out
	select {
	case b = <-doneB:
	case <-time.After(60 * time.Second):
		t.Fatal("request B did not finish while request A's caller held its first chunk")
	}
	if b.err != nil {
		t.Fatal(b.err)
	}
	if fmt.Sprint(b.toks) != fmt.Sprint(wantB) {
		t.Fatalf("B %v\nwant %v", b.toks, wantB)
	}
	st := e.Stats()
	if handed := st.TokensGenerated - int64(len(wantB)); handed != maxOut {
		t.Fatalf("A was handed %d outputs while its caller held the first; want %d (maxAhead %d, then one grace step)", handed, maxOut, maxAhead)
	}
	if st.SatOut == 0 {
		t.Fatalf("A never sat out while its caller held its first chunk (%d steps)", st.Steps)
	}
	close(gate)
	if err := <-doneA; err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(gotA) != fmt.Sprint(wantA) {
		t.Fatalf("A %v\nwant %v", gotA, wantA)
	}
}
