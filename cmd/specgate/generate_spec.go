package main

import (
	"flag"
	"fmt"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/speculative"
)

// `specgate generate --draft DIR --spec chain|tree|dynamic --spec-k N`:
// speculative decoding with a draft model, acceptance figures at the end.
func init() {
	var draft, method, freq string
	var k, vocab int
	registerGenerateExtension(generateExtension{
		addFlags: func(fs *flag.FlagSet) {
			fs.StringVar(&draft, "draft", "", "draft model directory (enables speculative decoding)")
			fs.StringVar(&method, "spec", "chain", "speculation shape: chain | tree | dynamic")
			fs.IntVar(&k, "spec-k", 0, "chain length / tree depth, every step (0 = adaptive: the engine drafts only what pays)")
			fs.IntVar(&vocab, "draft-vocab", -1, "restrict the draft's LM head to the N most frequent tokens (FR-Spec: cheaper draft forwards; 0 = all; -1 = 2048 where token frequencies are found, else all)")
			fs.StringVar(&freq, "draft-freq", "", "token frequencies ({\"counts\": [...]}) for --draft-vocab (default: token_frequency.json in the draft's or the target's directory)")
		},
		build: func(target *engine.Model, o engine.Options) (engine.Options, error) {
			d, err := speculative.FromFlags(target, draft, method, k, vocab, freq)
			if err != nil || d == nil {
				return o, err
			}
			return d.EngineOptions(o), nil
		},
		report: func(res engine.Result) string {
			st := res.Spec
			if st == nil || st.Steps == 0 {
				return ""
			}
			// every decode step emits one token plus its accepted drafts (steps
			// without a draft, multi-step greedy ones included, emit one); the
			// first token comes from the prefill
			steps := max(res.CompletionTokens-1-st.Accepted, 1)
			s := fmt.Sprintf("[speculative %s: %d target steps (%d with a draft), %d proposed, %d accepted",
				method, steps, st.Steps, st.Proposed, st.Accepted)
			if st.Proposed > 0 {
				s += fmt.Sprintf(", acceptance %.3f", float64(st.Accepted)/float64(st.Proposed))
			}
			s += fmt.Sprintf(", τ %.2f tokens/step]", float64(res.CompletionTokens-1)/float64(steps))
			return s
		},
	})
}
