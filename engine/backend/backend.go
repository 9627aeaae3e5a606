// Package backend is the contract between the engine and its backends
// (engine/cpu, engine/cuda): one batched forward over ForwardRequests with
// the KV cache in backend memory addressed by slots, the optional
// capabilities a backend may have (GreedyStepper, DeviceSampler,
// HiddenOnlyForwarder, HeadsBackend, RowArgmaxer) and the checks every
// backend applies (ValidateRequest). It imports only engine/model, so the
// engine and the backends both import it; package engine re-exports every
// name as an alias. Change it only together with the backends.
package backend

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
