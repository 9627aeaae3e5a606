package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
)

// Speculator proposes and verifies tokens for one request per Step (draft
// model, Medusa heads, ...). The engine calls Step from its scheduler
// goroutine, one request at a time, between batched steps of plain
// requests; implementations must not keep s past Step (but may keep s.Data).
//
// Contract of one Step, given the state on entry:
//   - s.Seq holds the KV of the prompt and of every generated token except
//     the last one, s.Pending (sampled, emitted, not yet forwarded).
//   - Step proposes tokens after Pending, verifies them with s.ForwardTree
//     (one target forward of Pending plus the tree), resolves the tree with
//     s.KeepTree(path) and returns the newly generated tokens: the accepted
//     draft tokens followed by one token sampled from the target (the
//     "bonus" or correction token). At least 1 and at most s.MaxNew tokens.
//   - On return s.Seq must hold Pending and all returned tokens but the last
//     (which becomes the new Pending); the engine checks this.
//   - Sampling must use s.Probs (identical transforms to plain decoding)
//     and s.Rand, so that a seed gives reproducible output.
//   - Step adds its proposals to s.Stats.Proposed / Accepted; the engine
//     counts s.Stats.Steps.
//   - The chunk's logprobs (and top alternatives) come from the target's
//     verification rows that s.KeepTree (or s.PlainStep) recorded, so they
//     equal plain decoding's; a Step that resolves the tree through s.Seq
//     directly gets no logprobs reported.
//
// A Step that wants plain decoding calls s.PlainStep.
type Speculator interface {
	Step(s *SpecState) ([]int32, error)
}

// BatchSpeculator is an optional capability: a Speculator that can advance
// several requests at once (e.g. one batched draft forward and one batched
// target verification through Model.ForwardBatch and SpecState.TreeBatchItem).
// The engine then calls StepBatch once per scheduler step with all requests
// that use this speculator; out[i] and errs[i] follow Step's contract for
// states[i]. len(out) and len(errs) must equal len(states).
type BatchSpeculator interface {
	Speculator
	StepBatch(states []*SpecState) (out [][]int32, errs []error)
}

// SpecReleaser is implemented by speculators with per-request resources
// (a draft sequence in s.Data): Release is called once when the request
// ends, from the scheduler goroutine.
type SpecReleaser interface {
	Release(s *SpecState)
}

// SpecState is one request's state as a Speculator sees it.
type SpecState struct {
	Ctx    context.Context
	Target *Model
	Seq    *Sequence // target KV: prompt + Generated[:len(Generated)-1]
	Prompt []int32   // read-only
	// Generated holds the tokens generated so far; its last element is Pending. Read-only.
	Generated []int32
	Pending   int32
	Params    SamplingParams
	Rand      *rand.Rand // the request's seeded RNG
	MaxNew    int        // Step may return at most this many tokens (>= 1)
	// Active is the number of requests the engine is serving at this step
	// (load, for adaptive speculation).
	Active int
	Stats  *SpecStats
	// Data is the speculator's own per-request state (nil at the first Step).
	Data any

	// lpRows holds, after a KeepTree or PlainStep of this Step, the target
	// logits rows ([lpN][VocabSize]) that predicted the tokens the Step
	// returns (row 0 of the verification, then the rows of the kept path),
	// so that the engine reports logprobs under speculation. lpN = 0: none.
	lpRows []float32
	lpN    int
}

// ForwardTree runs one target forward over Pending followed by tokens, a
// tree whose parents index tokens (-1 = Pending). It returns logits
// [1+len(tokens)][VocabSize]: row 0 predicts the token after Pending, row
// i+1 the token after tokens[i]. The tree stays pending in s.Seq until
// KeepTree. Owned by the caller. On a speculative request of an Engine the
// target sequence also keeps its own copy of the rows, from which KeepTree
// takes the rows of the kept path for the chunk's logprobs.
func (s *SpecState) ForwardTree(tokens, parents []int32) ([]float32, error) {
	it, err := s.TreeBatchItem(tokens, parents)
	if err != nil {
		return nil, err
	}
	return s.Seq.Forward(it.Tokens, it.Parents, nil)
}

// TreeBatchItem is ForwardTree's forward as a BatchItem for
// Model.ForwardBatch, so that several requests' trees verify in one target
// forward: Tokens = Pending followed by tokens, parents shifted accordingly.
// The item's Logits (after ForwardBatch) are ForwardTree's result. Unlike
// Sequence.Forward it does not append to a pending tree: ErrTreePending.
func (s *SpecState) TreeBatchItem(tokens, parents []int32) (BatchItem, error) {
	if s.Seq.TreeLen() > 0 {
		return BatchItem{}, ErrTreePending
	}
	if len(parents) != len(tokens) {
		return BatchItem{}, fmt.Errorf("engine: TreeBatchItem: %d tokens, %d parents", len(tokens), len(parents))
	}
	all := make([]int32, 0, 1+len(tokens))
	all = append(all, s.Pending)
	all = append(all, tokens...)
	par := make([]int32, 1+len(tokens))
	par[0] = -1
	for i, p := range parents {
		if p < -1 || int(p) >= i {
			return BatchItem{}, fmt.Errorf("engine: TreeBatchItem: parent %d = %d not in [-1, %d)", i, p, i)
		}
		par[i+1] = p + 1
	}
	return BatchItem{Seq: s.Seq, Tokens: all, Parents: par}, nil
}

// KeepTree keeps Pending and the accepted path (indices into the tokens of
// the last ForwardTree, root first; empty when nothing was accepted) in the
// target KV and drops the rest of the tree. It also records the
// verification rows that predicted the accepted tokens and the token after
// them (rows 0, path[0]+1, ...): the engine reports the Step's logprobs
// from them.
func (s *SpecState) KeepTree(path []int) error {
	keep := make([]int, 0, 1+len(path))
	keep = append(keep, 0)
	for _, p := range path {
		keep = append(keep, p+1)
	}
	s.lpN = 0
	V := s.Target.Config.VocabSize
	rec := s.Seq.treeLogits
	ok := len(rec) == s.Seq.TreeLen()*V && len(rec) > 0
	if ok {
		for _, k := range keep {
			if k >= s.Seq.TreeLen() {
				ok = false // Seq.KeepTree reports the bad path
				break
			}
		}
	}
	if ok {
		s.lpRows = s.lpRows[:0]
		for _, k := range keep {
			s.lpRows = append(s.lpRows, rec[k*V:(k+1)*V]...)
		}
	}
	if err := s.Seq.KeepTree(keep); err != nil {
		return err
	}
	if ok {
		s.lpN = len(keep)
	}
	return nil
}

// Probs is the target sampling distribution for one logits row ([VocabSize])
// after the tokens extra have been appended to Generated (penalties count
// them): exactly what plain decoding samples from. Owned by the caller.
func (s *SpecState) Probs(row []float32, extra []int32) []float32 {
	hist := s.Generated
	if len(extra) > 0 {
		hist = append(append(make([]int32, 0, len(hist)+len(extra)), hist...), extra...)
	}
	return Probs(row, s.Params, hist)
}

// PlainStep is one step of plain decoding: forward Pending, sample the next
// token. It returns that one token.
func (s *SpecState) PlainStep() ([]int32, error) {
	logits, err := s.Seq.Forward([]int32{s.Pending}, nil, nil)
	if err != nil {
		return nil, err
	}
	s.lpRows, s.lpN = logits, 1
	return []int32{SampleProbs(s.Probs(logits, nil), s.Rand.Float64())}, nil
}
