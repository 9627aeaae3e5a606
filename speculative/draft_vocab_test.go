package speculative

import (
	"math"
	"testing"

	"github.com/specgate/specgate/engine"
)

// TestDraftHeadMatchesFullLogits: the restricted head's logits are the
// draft's own logits at the kept token ids (the same packed kernels over
// the same rows: equal to 1e-6 relative), its ids are the 2048 most
// frequent tokens of the frequency file, and a greedy chain drafts the
// argmax of the full logits whenever that token is in the set. The
// lossless tests cannot see a wrong head (any draft is verified); this
// one does.
func TestDraftHeadMatchesFullLogits(t *testing.T) {
	target, draft := shippedPair(t)
	d, err := NewDraft(target, draft, Config{Method: MethodChain, K: 1, VocabLimit: 2048, TokenFrequency: shippedFrequency})
	if err != nil {
		t.Fatal(err)
	}
	if d.head == nil || len(d.head.ids) != 2048 {
		t.Fatalf("no restricted head of 2048 rows")
	}
	counts, err := readTokenFrequency(shippedFrequency)
	if err != nil {
		t.Fatal(err)
	}
	// every kept id is at least as frequent as every dropped one
	kept := map[int32]bool{}
	minKept := int64(math.MaxInt64)
	for _, id := range d.head.ids {
		kept[id] = true
		minKept = min(minKept, counts[id])
	}
	for id, c := range counts {
		if !kept[int32(id)] && c > minKept {
			t.Fatalf("token %d (count %d) dropped while a kept token has count %d", id, c, minKept)
		}
	}
	prompts := BenchPrompts()[:6]
	inSet := 0
	for _, p := range prompts {
		toks := target.Tokenizer.Encode(p, true)
		s := draft.NewSequence()
		full, err := s.Forward(toks, nil, []int32{int32(len(toks) - 1)})
		s.Free()
		if err != nil {
			t.Fatal(err)
		}
		s = draft.NewSequence()
		it := []engine.BatchItem{{Seq: s, Tokens: toks, LogitsRows: []int32{int32(len(toks) - 1)}, HiddenOnly: true}}
		if err := draft.ForwardBatch(it); err != nil {
			t.Fatal(err)
		}
		s.Free()
		W, rows := d.logits(it)
		if W != 2048 || len(rows[0]) != 2048 {
			t.Fatalf("restricted logits: width %d, %d values", W, len(rows[0]))
		}
		for r, id := range d.head.ids {
			got, want := rows[0][r], full[id]
			if math.Abs(float64(got-want)) > 1e-6*max(1, math.Abs(float64(want))) {
				t.Fatalf("%q: token %d: restricted logit %g, full %g", p, id, got, want)
			}
		}
		if a := engine.Argmax(full); kept[a] {
			inSet++
			if g := d.head.argmax(rows[0]); g != a {
				t.Fatalf("%q: restricted argmax %d, full argmax %d (in the set)", p, g, a)
			}
		}
	}
	if inSet == 0 {
		t.Fatal("no prompt's next token is in the restricted set: argmax check untested")
	}
}
