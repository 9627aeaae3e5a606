package speculative

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"

	"github.com/specgate/specgate/engine"
)

// TokenFrequencyFile is the name NewDraft looks for (in the draft's, then
// the target's directory) when Config.VocabLimit is set without
// Config.TokenFrequency. Format: {"counts": [VocabSize]int64}, as the
// Medusa heads ship (models/specgate-target-medusa).
const TokenFrequencyFile = "token_frequency.json"

// DefaultVocabLimit is the restricted draft vocabulary of the generate
// CLI's default (FromFlags with vocab < 0) where token frequencies are
// found: on the shipped target's own continuations the 2048 most frequent
// tokens cover 92.4% of the tokens (4096: 98.0%), and the shipped draft's
// forward costs about half of its full-vocabulary one.
const DefaultVocabLimit = 2048

// draftHead is a draft model's LM head restricted to its most frequent
// tokens (FR-Spec, Zhao et al. 2025): the draft forward stops at the final
// hidden state (engine.BatchItem.HiddenOnly) and the proposer projects it
// onto rows of the tied/own LM head only. Tokens outside the set get draft
// probability 0: greedy drafts never propose them, sampled drafts never
// draw them, and the Q handed to the engine is exactly the distribution the
// tokens were drawn from (zero outside the set), so verification stays
// lossless; only acceptance can drop.
type draftHead struct {
	ids []int32     // row -> token id, ascending
	mat *engine.Mat // [len(ids)][Hidden]
	// full is the whole LM head, for the ruleUnrestrictedQ negative
	// control only (nil otherwise).
	full *engine.Mat
}

// fullLogits is the draft's logits over the whole vocabulary of one
// hidden row (the negative control's wrong label).
func (h *draftHead) fullLogits(hidden []float32) []float32 {
	out := make([]float32, h.full.Rows())
	h.full.MulT(1, out, hidden[:h.full.Cols()], 1)
	return out
}

// newDraftHead builds the restricted head of draft from counts (one per
// token id): the limit most frequent ids (ties by lower id).
func newDraftHead(draft *engine.Model, counts []int64, limit int) (*draftHead, error) {
	V, H := draft.Config.VocabSize, draft.Config.HiddenSize
	if len(counts) != V {
		return nil, fmt.Errorf("%w: token frequencies: %d counts, draft vocab_size %d", ErrConfig, len(counts), V)
	}
	if limit <= 0 || limit > V {
		return nil, fmt.Errorf("%w: vocab limit %d not in [1, %d]", ErrConfig, limit, V)
	}
	order := make([]int32, V)
	for i := range order {
		order[i] = int32(i)
	}
	sort.SliceStable(order, func(a, b int) bool { return counts[order[a]] > counts[order[b]] })
	ids := append([]int32(nil), order[:limit]...)
	sort.Slice(ids, func(a, b int) bool { return ids[a] < ids[b] })
	w := make([]float32, limit*H)
	for r, id := range ids {
		draft.Weights.LMHead.RowInto(w[r*H:(r+1)*H], int(id))
	}
	return &draftHead{ids: ids, mat: engine.NewMat(w, limit, H)}, nil
}

// readTokenFrequency reads a {"counts": [...]} file.
func readTokenFrequency(path string) ([]int64, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: token frequencies: %w", ErrConfig, err)
	}
	var f struct {
		Counts []int64 `json:"counts"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrConfig, path, err)
	}
	if len(f.Counts) == 0 {
		return nil, fmt.Errorf("%w: %s: counts: missing or empty", ErrConfig, path)
	}
	return f.Counts, nil
}

// frequencyPath is cfg.TokenFrequency, else TokenFrequencyFile in the
// draft's or the target's directory, whichever exists first.
func frequencyPath(cfg Config, target, draft *engine.Model) (string, error) {
	if cfg.TokenFrequency != "" {
		return cfg.TokenFrequency, nil
	}
	for _, m := range []*engine.Model{draft, target} {
		if m.Dir == "" {
			continue
		}
		p := filepath.Join(m.Dir, TokenFrequencyFile)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: vocab limit %d needs token frequencies: set token_frequency (no %s in the draft's or the target's directory)", ErrConfig, cfg.VocabLimit, TokenFrequencyFile)
}

// project returns the restricted logits ([rows][len(ids)]) of rows hidden
// rows ([rows][H]).
func (h *draftHead) project(hidden []float32, rows int) []float32 {
	out := make([]float32, rows*len(h.ids))
	h.mat.MulT(1, out, hidden, rows)
	return out
}

// expand writes a full-vocabulary logits row (-Inf outside the set) of one
// restricted row into dst (len VocabSize) and returns it.
func (h *draftHead) expand(row, dst []float32) []float32 {
	ninf := float32(math.Inf(-1))
	for i := range dst {
		dst[i] = ninf
	}
	for r, id := range h.ids {
		dst[id] = row[r]
	}
	return dst
}

// argmax is the token id of the largest restricted logit (ties: lower
// id, as engine.Argmax on the expanded row).
func (h *draftHead) argmax(row []float32) int32 {
	best := 0
	for r, v := range row {
		if v > row[best] {
			best = r
		}
	}
	return h.ids[best]
}
