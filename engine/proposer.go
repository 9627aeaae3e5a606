package engine

import (
	"context"
	"math/rand/v2"
)

// RequestID identifies one Generate call to proposers; unique within an Engine.
type RequestID uint64

// Proposer drafts token trees for speculative decoding (a draft model,
// Medusa heads, suffix trees over earlier text, a client's prediction, ...).
//
// The engine owns the decode loop. At every scheduler step it calls Propose
// once per proposer with all of that proposer's requests that decode in the
// step (from the scheduler goroutine; never concurrently for one engine),
// puts every returned tree into the step's one batched target forward,
// beside prefill chunks and plain decode tokens, and verifies it: greedy
// requests by the target's argmax walk (output identical to plain decoding),
// sampled requests by recursive rejection sampling on the tree (lossless).
// The accepted path's KV is kept, the rest freed.
//
// Release is called once when a request ends (also on error or
// cancellation), from the scheduler goroutine: the proposer frees what it
// keeps for the request.
type Proposer interface {
	Propose(ctx context.Context, reqs []ProposeRequest) ([]Proposal, error)
	Release(id RequestID)
}

// HiddenNeeder is implemented by proposers that draft from the target's
// hidden states (Medusa, EAGLE). When NeedsHidden reports true the engine
// asks the backend for the final hidden-state row (after the final norm:
// the input of lm_head, [HiddenSize]) that predicted each request's pending
// token and passes it in ProposeRequest.Hidden. Only the rows asked for are
// copied out of the backend.
type HiddenNeeder interface {
	NeedsHidden() bool
}

// FinishObserver is implemented by proposers that learn from finished
// requests (suffix trees over a tenant's earlier answers). Finished is
// called once per request that used the proposer, before Release, with the
// request's prompt and the generated tokens its caller took (read-only;
// valid only during the call). It runs on the scheduler once the request's
// KV is freed, after its Generate may have returned, and before the
// scheduler handles any later request.
type FinishObserver interface {
	Finished(id RequestID, tenant string, prompt, output []int32)
}

// Starter is implemented by proposers that set a request up before its
// first Propose call. The engine calls Start once when the request is
// submitted (before any Confidence or Propose for it), with its tenant and
// known drafts (read-only, valid only during the call); Release follows as
// for every request. Known uses it so that its Confidence answers for the
// request's first decode step from the request's own drafts.
type Starter interface {
	Start(id RequestID, tenant string, known []KnownDraft)
}

// KnownDraft is text the caller already holds that may continue the
// request (an OpenAI `prediction`, a semantic-cache near miss's answer),
// tokenized. Proposers that draft from known text read it from
// ProposeRequest.Known; the engine only passes it through.
type KnownDraft struct {
	Source string  // stats label, e.g. "prediction", "near_miss"
	Tokens []int32 // the draft text's tokens
}

// ProposeRequest is one request's part of a Propose call. Slices are owned
// by the engine: read-only, valid only during the call.
type ProposeRequest struct {
	ID     RequestID
	Tenant string // GenerateRequest.Tenant: proposers never mix tenants' text
	Prompt []int32
	// Generated holds the tokens generated so far; its last element is the
	// pending token: sampled and emitted, not yet in the target's KV. The
	// tree hangs below it. The target's KV holds Prompt and Generated but
	// the pending token.
	Generated []int32
	Params    SamplingParams
	// Budget is the most tree nodes (the pending token not counted) the
	// engine verifies for this request and proposer in this step (>= 1).
	// MaxDepth is the deepest node allowed (depth 1 = a child of the
	// pending token): the tokens the request may still generate, minus the
	// bonus, and the model's positions.
	Budget, MaxDepth int
	// Hidden is the target's final hidden-state row that predicted the
	// pending token ([HiddenSize]); only for a HiddenNeeder, else nil. It is
	// nil too when the backend could not provide it (the proposer then
	// proposes without it or nothing).
	Hidden []float32
	// HeadTop, for a HeadsProposer whose heads run on the backend: the
	// heads' candidates for the row that predicted the pending token,
	// [NumHeads][TopK] token ids, best first (devheads.go); nil otherwise.
	HeadTop []int32
	// Known are the request's known drafts (GenerateRequest.KnownDrafts).
	Known []KnownDraft
	// Rand is the request's seeded RNG: a sampled draft must draw from it so
	// that a seed reproduces the output.
	Rand *rand.Rand
	// Active is the number of requests decoding in this step (load).
	Active int
	// Proposed and Accepted count this proposer's nodes for this request so
	// far (accepted: nodes on accepted paths).
	Proposed, Accepted int
}

// Proposal is one request's draft tree below its pending token.
//
// Node i has token Tokens[i] and parent Parents[i] (-1 = the pending token;
// else an index < i). Depth of a child of the pending token is 1.
//
// Q describes how nodes were drawn, for lossless verification of sampled
// requests. Q == nil or Q[i] == nil: node i is deterministic (chosen without
// randomness, or from a distribution the verifier is not told): it is
// accepted only when the target's own sample at its parent is its token.
// Q[i] != nil: node i was drawn from the draft distribution Q[i]
// ([VocabSize], sums to 1) at its parent; the siblings that share one Q
// slice were drawn from it without replacement, in index order. Greedy
// requests ignore Q.
//
// Source labels the proposal for per-source stats (e.g. "draft",
// "medusa", "suffix"); Sources, when non-nil, labels each node instead.
type Proposal struct {
	Tokens  []int32
	Parents []int32
	Q       [][]float32
	Source  string
	Sources []string
}

// Len is the number of nodes.
func (p *Proposal) Len() int { return len(p.Tokens) }

// SourceStats counts one draft source's nodes for a request.
type SourceStats struct {
	Proposed int // nodes proposed (verified)
	Accepted int // nodes on accepted paths
}
