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

// SpecStats reports what speculation did for one request, counting what
// the caller took (engine/specstats.go): a verified step counts when the
// caller took a token of its output, its accepted draft tokens only up to
// the last token taken.
type SpecStats struct {
	Steps    int // verified draft steps (target forwards with a tree)
	Proposed int // draft tokens proposed (verified)
	Accepted int // draft tokens accepted
	// BySource splits Proposed and Accepted by draft source (Proposal.Source).
	BySource map[string]SourceStats
	// AcceptedAt[d-1] counts accepted draft tokens at depth d.
	AcceptedAt []int
	// Exact is false when an approximate acceptance rule (Typical) decided
	// some sampled tokens.
	Exact bool
	// Forwards counts the target's decode forwards the request took part
	// in: plain one-token steps, verifying steps and each step of a
	// multi-step greedy call, a step run ahead of a caller that stopped
	// included (the work done, not what the caller took); the prefill is
	// not counted. Decode tokens over Forwards is the request's tokens per
	// target step.
	Forwards int
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
