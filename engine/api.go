package engine

// This file is the contract between the engine and its users (gateway,
// speculative, the CUDA backend). Change it only together with them.

import (
	"context"
	"errors"
	"time"

	"github.com/specgate/specgate/engine/model"
)

// Sentinel errors. Wrap them with %w and the file/field/tensor in question.
var (
	ErrBadConfig      = model.ErrBadConfig
	ErrBadWeights     = model.ErrBadWeights
	ErrContextLength  = errors.New("engine: prompt exceeds the model's context length")
	ErrKVExhausted    = errors.New("engine: KV cache has no free blocks")
	ErrBackendMissing = errors.New("engine: backend unavailable")
)

// Backend runs the Llama forward pass of one model's weights on one device
// (the CPU in pure Go, or a GPU through kernels/). The KV cache tensors live
// in the backend; the block bookkeeping (which blocks a sequence owns) lives
// in the engine's BlockManager and reaches the backend as a block table.
//
// KV layout: slot s = block*BlockSize + offset holds, for every layer, the
// key and value vectors of one token ([NumKVHeads][HeadDim] each).
type Backend interface {
	// Forward runs one batched forward over all requests: it writes the KV of
	// every new token into the slots given by req.Slots and fills req.Logits.
	Forward(reqs []*ForwardRequest) error
	// CopySlots copies the KV of slot src[i] to slot dst[i] for every layer
	// (used for compaction after tree verification and copy-on-write).
	CopySlots(src, dst []int32) error
	// Close releases device memory.
	Close() error
}

// GreedyStepper is an optional Backend capability: multi-step greedy
// decoding of one sequence in one call, without a host round trip per
// token (the CUDA backend feeds each argmax back on the device).
// DecodeGreedy runs len(slots) steps: step i feeds its token at position
// pos+i into slot slots[i], attending to cached and then slots[:i+1]; its
// argmax (ties to the lowest id) is out[i] and the next step's token; step
// 0's token is token. Afterwards the KV holds the len(slots) fed tokens,
// exactly as after as many single Forward steps. Implementations accept at
// least MaxDecodeSteps steps per call.
type GreedyStepper interface {
	DecodeGreedy(token, pos int32, cached, slots []int32, out []int32) error
}

// ForwardRequest is one sequence's share of a batched forward.
//
// The sequence already holds Cached tokens of KV, at slots CachedSlots[0:Cached]
// (half-open), with positions 0..Cached-1. The request adds len(Tokens) new
// tokens. No slot in Slots may be a cached slot of any request of the same
// batch: the CUDA kernels read cached rows while the new ones are being
// written (they treat the cached prefix as constant during the forward).
type ForwardRequest struct {
	CachedSlots []int32 // slots of the cached prefix, in position order; len = cached length
	Tokens      []int32 // new tokens
	Positions   []int32 // RoPE position of each new token
	Slots       []int32 // KV slot each new token's K/V is written to
	// Parents describes a token tree over the new tokens: Parents[i] is the
	// index (into Tokens) of token i's parent, or -1 when its parent is the
	// last cached token. Token i attends to all cached tokens, its ancestors
	// and itself. nil means a causal chain (token i attends to 0..i).
	// Parents[i] < i always.
	Parents []int32
	// LogitsRows selects which new tokens get logits: nil = all, an empty
	// non-nil slice = none (a prefill chunk that needs no logits).
	// Logits is filled row-major, len(LogitsRows or Tokens) * VocabSize.
	LogitsRows []int32
	Logits     []float32
	// Hidden, when non-nil, receives the final hidden state (after the
	// final norm: the input of the LM head) of every logits row, row-major
	// len(LogitsRows or Tokens) * HiddenSize, in the order of Logits.
	// Proposers that draft from hidden states (HiddenNeeder) need it.
	Hidden []float32
	// HiddenOnly: fill Hidden for the logits rows and skip the LM head
	// (Logits may be nil). Only backends that are HiddenOnlyForwarders
	// accept it (hiddenonly.go): a draft model whose proposer projects onto
	// a restricted vocabulary itself.
	HiddenOnly bool
	// Sample, for a backend that is a DeviceSampler (devsample.go): sample
	// this request's one logits row on the device and write the token and
	// its logprob into Sample instead of filling Logits.
	Sample *RowSample
	// Heads, HeadTop, Argmax: device draft heads and greedy verification
	// (devheads.go). Heads > 0 (a HeadsBackend's heads id): HeadTop receives
	// [rows][NumHeads][TopK] head candidates per logits row (filled with -1
	// when the backend could not run them). Argmax non-nil (a RowArgmaxer): it
	// receives each logits row's argmax and Logits is not written.
	Heads   int
	HeadTop []int32
	Argmax  []int32
}

// SamplingParams are the per-request knobs of the sampler. Temperature 0
// means greedy (argmax; ties go to the lowest id).
type SamplingParams struct {
	Temperature      float32
	TopK             int     // 0 = off
	TopP             float32 // 1 or 0 = off
	MinP             float32 // 0 = off
	PresencePenalty  float32
	FrequencyPenalty float32
	Seed             *uint64 // nil = random seed
	Logprobs         int     // number of top logprobs to report per token; 0 = none (the chosen token's logprob is reported unless SkipLogprobs)
	// SkipLogprobs: the caller ignores logprobs (with Logprobs 0): chunks
	// carry none, the engine skips the softmax over the vocabulary per
	// token, and it may decode a lone greedy request several tokens per
	// step on a GreedyStepper backend (Options.DecodeSteps).
	SkipLogprobs bool
}

// GenerateRequest is one completion.
type GenerateRequest struct {
	Prompt       []int32 // already tokenized (chat template applied by the caller or by RenderChat)
	MaxTokens    int     // 0 = up to the context length
	Stop         []string
	StopTokenIDs []int32 // in addition to the model's EOS ids
	Sampling     SamplingParams
	// PrefixSalt separates prefix-cache entries (per tenant), against the
	// timing side channel. Empty = shared.
	PrefixSalt string
	// NoSpeculation forces plain decoding.
	NoSpeculation bool
	// Proposers draft for this request (nil = the engine's
	// Options.Proposers); the engine merges their trees and splits the
	// step's verification budget between them by their acceptance.
	Proposers []Proposer
	// Tenant names the request's tenant for proposers that learn from text
	// (never shared across tenants). Empty = the default tenant.
	Tenant string
	// KnownDrafts are texts the caller holds that may continue this
	// request (an OpenAI prediction, a cache near miss), passed to the
	// proposers (ProposeRequest.Known).
	KnownDrafts []KnownDraft
	// Typical, when non-nil, accepts sampled drafts by Medusa's typical
	// acceptance instead of lossless rejection sampling: faster but not the
	// target's distribution (Result.Spec.Exact is false). Greedy requests
	// stay exact.
	Typical *TypicalAcceptance
}

// TypicalAcceptance is Medusa's typical acceptance rule: a draft token x at
// a node with target distribution p is accepted when p(x) > min(Epsilon,
// Delta*exp(-H(p))). Medusa's defaults: Epsilon 0.09, Delta 0.3.
type TypicalAcceptance struct {
	Epsilon, Delta float32
}

// TokenLogprob is one candidate with its log-probability.
type TokenLogprob struct {
	Token   int32
	Text    string
	Logprob float32
}

// Chunk is one streamed piece of output. Text never splits a UTF-8 sequence.
type Chunk struct {
	Tokens   []int32 // tokens this chunk adds (several when speculation accepted many)
	Text     string  // decoded text delta; may be empty while a multi-byte char is incomplete
	Logprobs []TokenLogprob
	Top      [][]TokenLogprob // per token, the Logprobs-many best alternatives
}

// FinishReason says why generation stopped: "stop" (EOS or stop sequence),
// "length" (max tokens or context), or "cancelled".
type FinishReason string

const (
	FinishStop      FinishReason = "stop"
	FinishLength    FinishReason = "length"
	FinishCancelled FinishReason = "cancelled"
)

// SpecStats reports what speculation did for one request.
type SpecStats struct {
	Steps    int // target forward passes in decode
	Proposed int // draft tokens proposed
	Accepted int // draft tokens accepted
	// BySource splits Proposed and Accepted by draft source (Proposal.Source).
	BySource map[string]SourceStats
	// AcceptedAt[d-1] counts accepted draft tokens at depth d.
	AcceptedAt []int
	// Exact is false when an approximate acceptance rule (Typical) decided
	// some sampled tokens.
	Exact bool
}

// Result summarises a finished generation.
type Result struct {
	PromptTokens     int
	CompletionTokens int
	CachedTokens     int           // prompt tokens served from the prefix cache
	QueueTime        time.Duration // from submission to the first admission (KV granted); metrics
	Finish           FinishReason
	Spec             *SpecStats // nil without speculation
}

// Generator is what the gateway needs from a local model. Generate streams
// chunks through emit; if emit returns an error or ctx is cancelled,
// generation stops before the next token and all KV memory of the request
// is freed before Generate returns.
type Generator interface {
	Generate(ctx context.Context, req GenerateRequest, emit func(Chunk) error) (Result, error)
}
