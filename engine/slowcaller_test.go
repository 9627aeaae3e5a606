package engine

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// heldCaller runs request A, whose caller holds its first chunk, beside
// request B, which is read promptly. Once B has finished (bWait names what a
// timeout there means) check runs with the engine's stats and B's token
// count; then A's caller reads on. Both outputs are checked against a manual
// greedy decode.
func heldCaller(t *testing.T, bWait string, check func(st Stats, nB int)) {
	t.Helper()
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
				<-gate // the caller stops reading
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
		t.Fatal(bWait)
	}
	if b.err != nil {
		t.Fatal(b.err)
	}
	if fmt.Sprint(b.toks) != fmt.Sprint(wantB) {
		t.Fatalf("B %v\nwant %v", b.toks, wantB)
	}
	check(e.Stats(), len(wantB))
	close(gate)
	if err := <-doneA; err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(gotA) != fmt.Sprint(wantA) {
		t.Fatalf("A %v\nwant %v", gotA, wantA)
	}
}

// TestSlowCallerDoesNotHoldOthers: request A's caller reads nothing after
// its first chunk until request B has finished. A is then maxAhead outputs
// behind; B's steps must go on without A (A keeps its KV and sits out)
// instead of waiting for A's caller (the scheduler used to wait up to
// AckWait, 2 ms, before every such step; with an hour's AckWait this test
// timed out). A must have sat out B's steps (Stats.SatOut), and the outputs
// of both are checked against a manual greedy decode.
func TestSlowCallerDoesNotHoldOthers(t *testing.T) {
	heldCaller(t, "request B did not finish while request A's caller read nothing: the scheduler waits for A's caller", func(st Stats, _ int) {
		if st.SatOut == 0 {
			t.Fatalf("A never sat out a step while its caller read nothing (%d steps)", st.Steps)
		}
	})
}
