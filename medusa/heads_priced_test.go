package medusa

import (
	"testing"
	"time"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/speculative"
)

// TestAdaptiveHeadsPriced: the adaptive budget prices the device heads'
// cost (engine.Options.StepClassCost: steps that run heads and trees with
// heads cost heavy x a plain step of their size). With heads as cheap as
// plain steps Medusa drafts; at 5x it drafts nothing and the heads run only
// where no budget has decided yet (each prompt's last row and the first
// decode step, whose batch is built before its budget): a request fetches
// heads only when its drafts may pay in the next step.
// Output equals plain decoding either way. The backend runs the heads on
// the host (hostHeadsBackend) and counts the rows it ran them on.
func TestAdaptiveHeadsPriced(t *testing.T) {
	target, hb := loadHostHeadsTarget(t, 4096)
	defer target.Close()
	var err error
	plain := engine.New(target, engine.Options{})
	defer plain.Close()
	prompts := speculative.BenchPrompts()[:3]
	n := 48
	if testing.Short() {
		prompts, n = prompts[:2], 32
	}
	sp := engine.SamplingParams{SkipLogprobs: true}
	want := make([][]int32, len(prompts))
	for i, text := range prompts {
		if want[i], _, err = generate(plain, engine.GenerateRequest{Prompt: target.Tokenizer.Encode(text, true), MaxTokens: n, Sampling: sp}); err != nil {
			t.Fatal(err)
		}
	}
	for _, heavy := range []float64{1, 5} {
		price := func(T int, tree, heads bool) time.Duration {
			c := float64(time.Millisecond) * (1 + 0.05*float64(T-1))
			if heads {
				c *= heavy
			}
			return time.Duration(c)
		}
		p, err := New(target, Spec{Heads: shippedHeads, Tree: "8", VocabLimit: 1024})
		if err != nil {
			t.Fatal(err)
		}
		e := engine.New(target, engine.Options{Proposers: []engine.Proposer{p}, StepClassCost: price})
		hb.headRows = 0
		proposed, accepted := 0, 0
		for i, text := range prompts {
			got, res, err := generate(e, engine.GenerateRequest{Prompt: target.Tokenizer.Encode(text, true), MaxTokens: n, Sampling: sp})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want[i]) {
				t.Fatalf("heads %gx prompt %d: %d tokens, plain %d", heavy, i, len(got), len(want[i]))
			}
			for j := range got {
				if got[j] != want[i][j] {
					t.Fatalf("heads %gx prompt %d token %d: %d, plain %d", heavy, i, j, got[j], want[i][j])
				}
			}
			proposed += res.Spec.Proposed
			accepted += res.Spec.Accepted
		}
		e.Close()
		t.Logf("heads %gx a plain step: %d nodes proposed, %d accepted, heads ran on %d rows", heavy, proposed, accepted, hb.headRows)
		switch heavy {
		case 1:
			if proposed == 0 {
				t.Fatalf("heads as cheap as plain steps: nothing proposed")
			}
		default:
			if proposed != 0 || hb.headRows > 2*len(prompts) {
				t.Fatalf("heads at %gx: %d nodes proposed, heads on %d rows (want 0, and at most 2 rows for each of the %d prompts)",
					heavy, proposed, hb.headRows, len(prompts))
			}
		}
	}
}
