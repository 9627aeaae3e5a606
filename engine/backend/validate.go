package backend

import (
	"fmt"

	"github.com/specgate/specgate/engine/model"
)

// ValidateRequest checks a ForwardRequest (index i in the batch) against a
// model config and a KV capacity: lengths agree, tokens are in the
// vocabulary, slots are in range, parents form a tree, logits has room.
// Backends call it before touching memory.
func ValidateRequest(cfg model.Config, numSlots, i int, r *ForwardRequest) error {
	n := len(r.Tokens)
	bad := func(f string, a ...any) error {
		return fmt.Errorf("engine: forward request %d: %s", i, fmt.Sprintf(f, a...))
	}
	if len(r.Positions) != n || len(r.Slots) != n {
		return bad("%d tokens, %d positions, %d slots", n, len(r.Positions), len(r.Slots))
	}
	if r.Parents != nil && len(r.Parents) != n {
		return bad("%d tokens, %d parents", n, len(r.Parents))
	}
	for j, t := range r.Tokens {
		if t < 0 || int(t) >= cfg.VocabSize {
			return bad("token %d = %d out of range [0, %d)", j, t, cfg.VocabSize)
		}
		if r.Slots[j] < 0 || int(r.Slots[j]) >= numSlots {
			return bad("slot %d = %d out of range [0, %d)", j, r.Slots[j], numSlots)
		}
		if r.Positions[j] < 0 || int(r.Positions[j]) >= model.MaxPositionsLimit {
			return bad("position %d = %d out of range", j, r.Positions[j])
		}
		if r.Parents != nil && (r.Parents[j] < -1 || int(r.Parents[j]) >= j) {
			return bad("parent %d = %d not in [-1, %d)", j, r.Parents[j], j)
		}
	}
	for j, s := range r.CachedSlots {
		if s < 0 || int(s) >= numSlots {
			return bad("cached slot %d = %d out of range [0, %d)", j, s, numSlots)
		}
	}
	rows := n
	if r.LogitsRows != nil {
		rows = len(r.LogitsRows)
		for j, row := range r.LogitsRows {
			if row < 0 || int(row) >= n {
				return bad("logits row %d = %d out of range [0, %d)", j, row, n)
			}
		}
	}
	if r.HiddenOnly {
		if len(r.Hidden) < rows*cfg.HiddenSize {
			return bad("hidden-only request: hidden buffer %d < %d rows * hidden %d", len(r.Hidden), rows, cfg.HiddenSize)
		}
		return nil
	}
	if len(r.Logits) < rows*cfg.VocabSize {
		return bad("logits buffer %d < %d rows * vocab %d", len(r.Logits), rows, cfg.VocabSize)
	}
	if r.Hidden != nil && len(r.Hidden) < rows*cfg.HiddenSize {
		return bad("hidden buffer %d < %d rows * hidden %d", len(r.Hidden), rows, cfg.HiddenSize)
	}
	return nil
}

// Argmax returns the index of the largest value (lowest index on ties).
func Argmax(l []float32) int32 {
	best := 0
	for i, v := range l {
		if v > l[best] {
			best = i
		}
	}
	return int32(best)
}

// Int8Weights reports whether w's projections are int8 (an int8 checkpoint
// or QuantizeWeights' result).
func Int8Weights(w *model.Weights) bool {
	return w != nil && len(w.Layers) > 0 && w.Layers[0].Wq.DType == model.I8
}
