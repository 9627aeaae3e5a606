package serving

import (
	"testing"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/speculative"
)

// TestSpeculativeConfigVocabLimit: the config's `speculative: {method: draft,
// vocab_limit: N}` reaches the draft proposer, which finds the shipped
// target's token frequencies next to it; 0 keeps the whole vocabulary.
func TestSpeculativeConfigVocabLimit(t *testing.T) {
	target, err := engine.Load("../models/specgate-target", engine.LoadOptions{KVTokens: 256})
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	draft, err := engine.Load("../models/specgate-draft", engine.LoadOptions{KVTokens: 256})
	if err != nil {
		t.Fatal(err)
	}
	defer draft.Close()
	for _, limit := range []int{0, 1024} {
		sc, err := SpecConfig(SpeculativeConfig{K: 2, VocabLimit: limit})
		if err != nil {
			t.Fatal(err)
		}
		d, err := speculative.NewDraft(target, draft, sc)
		if err != nil {
			t.Fatal(err)
		}
		want := limit
		if limit == 0 {
			want = target.Config.VocabSize
		}
		if d.VocabLimit() != want {
			t.Fatalf("vocab_limit %d: the draft proposes from %d tokens, want %d", limit, d.VocabLimit(), want)
		}
	}
}
