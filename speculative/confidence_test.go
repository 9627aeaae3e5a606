package speculative

import (
	"fmt"
	"testing"

	"github.com/specgate/specgate/engine"
)

// TestConfidentLongDrafts: through the adaptive engine (its default
// per-step budget), an exact prediction is drafted in long runs: Known
// reports its aligned cursor's record (engine.Confident) and the budget
// looks past the CPU's expensive odd token counts, so each verification
// step accepts several tokens, not one. Output equals plain decoding.
func TestConfidentLongDrafts(t *testing.T) {
	target, _ := shippedPair(t)
	e := engine.New(target, engine.Options{MaxDraft: 16})
	defer e.Close()
	prompt := target.Tokenizer.Encode(testPrompts(t)[0], true)
	want, _, err := generate(e, engine.GenerateRequest{Prompt: prompt, MaxTokens: 96, NoSpeculation: true})
	if err != nil {
		t.Fatal(err)
	}
	k := NewKnown(KnownConfig{})
	req := engine.GenerateRequest{Prompt: prompt, MaxTokens: 96}
	WithProposers(&req, []engine.Proposer{k}, "t", []engine.KnownDraft{{Source: SourcePrediction, Tokens: want}})
	got, res, err := generate(e, req)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("output differs:\n%v\n%v", got, want)
	}
	per := float64(res.Spec.Accepted) / float64(max(res.Spec.Steps, 1))
	t.Logf("%d tokens, %d steps, %d accepted: %.2f accepted per step", len(got), res.Spec.Steps, res.Spec.Accepted, per)
	if per < 3 {
		t.Fatalf("exact prediction accepted %.2f tokens per step through the adaptive engine, want >= 3 (without the Confident hook and the look-ahead: about 2; the engine measures its step costs, so this leaves room for a loaded machine)", per)
	}
}
