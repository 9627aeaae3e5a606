package engine

import "testing"

// TestGraceStep: a request whose caller falls maxAhead outputs behind is
// served by one more step (its grace step) before it sits out, so a caller
// that is only late for a moment keeps its place in the batch. A's caller
// holds its first chunk until request B has finished: the engine must have
// handed A exactly maxOut outputs by then (B's tokens are known, one token
// per plain output, so Stats.TokensGenerated - len(B) is A's count; with
// the bare maxAhead rule it was maxAhead), and A sat out B's later steps.
// Both outputs are checked against a manual greedy decode (heldCaller).
func TestGraceStep(t *testing.T) {
	heldCaller(t, "request B did not finish while request A's caller held its first chunk", func(st Stats, nB int) {
		if handed := st.TokensGenerated - int64(nB); handed != maxOut {
			t.Fatalf("A was handed %d outputs while its caller held the first; want %d (maxAhead %d, then one grace step)", handed, maxOut, maxAhead)
		}
		if st.SatOut == 0 {
			t.Fatalf("A never sat out while its caller held its first chunk (%d steps)", st.Steps)
		}
	})
}
