package serving

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/medusa"
)

// Check finds what Load would fail on, without loading weights, and
// returns every problem (not just the first), each naming its key under
// where ("models[0]"): the model directory, and the draft model's or
// Medusa heads' directory, each with a readable config.json,
// tokenizer.json and weights; Medusa heads checked against the target's
// hidden and vocabulary sizes.
func (m ModelConfig) Check(where string) []error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	modelDir := func(key, dir string) {
		st, err := os.Stat(dir)
		if err != nil {
			add("%s: %s: %v", key, dir, errors.Unwrap(err))
			return
		}
		if !st.IsDir() {
			add("%s: %s: not a directory", key, dir)
			return
		}
		if _, err := engine.LoadConfig(dir); err != nil {
			add("%s: %s: %v", key, dir, err)
		}
		if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
			add("%s: %s: no tokenizer.json", key, dir)
		}
		w1, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
		if len(w1) == 0 {
			add("%s: %s: no *.safetensors weights", key, dir)
		}
	}
	modelDir(where+".path", m.Path)
	switch m.Speculative.Method {
	case "draft":
		modelDir(where+".draft", m.Draft)
	case "medusa":
		key := where + ".speculative.heads"
		if m.Speculative.Heads == "" {
			key = where + ".draft"
		}
		if st, err := os.Stat(m.MedusaHeads()); err != nil || !st.IsDir() {
			add("%s: %s: Medusa heads directory not found", key, m.MedusaHeads())
		} else if err := m.checkMedusa(); err != nil {
			add("%s: %v", key, err)
		}
	}
	return errs
}

// checkMedusa validates a model's Medusa setting against its target's
// config.json (hidden and vocabulary sizes) without loading weights.
func (m ModelConfig) checkMedusa() error {
	hidden, vocab := 0, 0
	if c, err := engine.LoadConfig(m.Path); err == nil {
		hidden, vocab = c.HiddenSize, c.VocabSize
	}
	return medusa.Check(medusa.Spec{Heads: m.MedusaHeads(), Tree: m.Speculative.Tree, VocabLimit: m.Speculative.VocabLimit}, hidden, vocab)
}
