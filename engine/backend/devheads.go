package backend

import (
	"fmt"

	"github.com/specgate/specgate/engine/model"
)

// DraftHeads are residual draft heads on the target's final hidden state
// (Medusa-1 layout): head h applies Layers blocks x ← x + SiLU(W x + b) and
// then a vocabulary projection; its candidates are the TopK largest
// projections. Slices are read during LoadHeads only.
type DraftHeads struct {
	// Key identifies the heads (e.g. directory and vocabulary limit): a
	// second LoadHeads with the same key and TopK returns the same id.
	Key                      string
	NumHeads, Layers, Hidden int
	TopK                     int           // candidates per head and row (1..16)
	W                        [][][]float32 // [head][layer] [Hidden][Hidden], nn.Linear layout
	B                        [][][]float32 // [head][layer] [Hidden]
	// Proj holds the vocabulary projection of every head ([Rows][Hidden]),
	// or one shared by all heads (len 1); nil: the target's lm_head (then
	// IDs must be nil).
	Proj [][]float32
	// IDs maps projection row r to token IDs[r] (FR-Spec vocabulary
	// limit); nil: row r is token r.
	IDs []int32
}

// Rows is the number of projection rows (candidate tokens per head).
func (d *DraftHeads) Rows(vocab int) int {
	if d.IDs != nil {
		return len(d.IDs)
	}
	return vocab
}

// Validate checks shapes against a model with hidden size H and vocabulary V.
func (d *DraftHeads) Validate(H, V int) error {
	bad := func(f string, a ...any) error {
		return fmt.Errorf("draft heads %q: %s: %w", d.Key, fmt.Sprintf(f, a...), model.ErrBadWeights)
	}
	if d.NumHeads < 1 || d.Layers < 0 || d.Hidden != H {
		return bad("%d heads, %d layers, hidden %d (model hidden %d)", d.NumHeads, d.Layers, d.Hidden, H)
	}
	rows := d.Rows(V)
	if d.TopK < 1 || d.TopK > 16 || d.TopK > rows {
		return bad("top-k %d not in [1, min(16, %d)]", d.TopK, rows)
	}
	if len(d.W) != d.NumHeads || len(d.B) != d.NumHeads {
		return bad("%d / %d heads of weights and biases, want %d", len(d.W), len(d.B), d.NumHeads)
	}
	for h := range d.NumHeads {
		if len(d.W[h]) != d.Layers || len(d.B[h]) != d.Layers {
			return bad("head %d: %d / %d layers, want %d", h, len(d.W[h]), len(d.B[h]), d.Layers)
		}
		for l := range d.Layers {
			if len(d.W[h][l]) != H*H || len(d.B[h][l]) != H {
				return bad("head %d layer %d: weight %d / bias %d values, want %d / %d", h, l, len(d.W[h][l]), len(d.B[h][l]), H*H, H)
			}
		}
	}
	switch {
	case d.Proj == nil && d.IDs != nil:
		return bad("a vocabulary limit needs its projection rows (Proj)")
	case d.Proj != nil && len(d.Proj) != 1 && len(d.Proj) != d.NumHeads:
		return bad("%d projections for %d heads (want 1 or %d)", len(d.Proj), d.NumHeads, d.NumHeads)
	}
	for i, p := range d.Proj {
		if len(p) != rows*H {
			return bad("projection %d: %d values, want %d x %d", i, len(p), rows, H)
		}
	}
	for i, id := range d.IDs {
		if id < 0 || int(id) >= V {
			return bad("IDs[%d] = %d not in [0, %d)", i, id, V)
		}
	}
	return nil
}

// HeadsBackend is an optional Backend capability: draft heads loaded once
// (LoadHeads returns their id, >= 1) run inside Forward for requests with
// ForwardRequest.Heads set to that id, on every logits row's final hidden
// state; ForwardRequest.HeadTop receives [rows][NumHeads][TopK] tokens.
// HeadsWidth is NumHeads*TopK of a loaded id (0 when unknown).
type HeadsBackend interface {
	LoadHeads(h *DraftHeads) (int, error)
	HeadsWidth(id int) int
}

// RowArgmaxer is an optional Backend capability: Forward honours
// ForwardRequest.Argmax (the argmax of every logits row, ties to the lowest
// id, instead of the rows).
type RowArgmaxer interface {
	ArgmaxOnDevice() bool
}
