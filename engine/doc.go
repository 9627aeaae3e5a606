// Package engine runs Llama-family models (LlamaForCausalLM checkpoints in
// Hugging Face layout) and serves completions with continuous batching.
//
// Layers, bottom up:
//
//   - Config (config.json + generation_config.json, both RoPE spellings;
//     package engine/model, architectures registered by name: Llama, Qwen2),
//     Weights (typed tensors of engine/model: F32, F16, BF16 as stored, I8
//     with per-row scales; [out][in] row-major like nn.Linear; every
//     tensor's shape checked against the architecture), Load, NewRandomModel.
//   - Backend: one batched forward over ForwardRequests, with the KV
//     cache in backend memory addressed by slots (the contract: package
//     engine/backend). CPUBackend (package engine/cpu) is the pure-Go
//     float32 reference: HF's RMSNorm, RoPE (rotate_half; default, linear and
//     llama3 inv_freq), GQA, SwiGLU; matmuls are cache-blocked (a T-token
//     forward reads the weights once), parallel over output rows on a
//     persistent worker pool, with AVX2/FMA (and AVX-512) kernels on amd64
//     and binary16 weight streaming for fp16 checkpoints (bit-identical to
//     float32), and batch-invariant (a token's logits do not depend on what
//     it is batched with), which speculative verification relies on.
//     Speed and verification-cost tables: docs/engine.md.
//   - BlockManager: paged KV (fixed-size blocks, refcounts, copy-on-write
//     forks, tree compaction with KeepTree) and the prefix cache (full blocks
//     keyed by hash(salt, parent, tokens), LRU eviction of blocks nobody holds).
//   - Sequence: one token sequence's block table and committed tokens;
//     Forward appends a chain (committed at once) or a token tree (pending
//     until KeepTree; further tree Forwards append levels to it, their
//     parents indexing the whole pending tree). Model.ForwardBatch forwards
//     several sequences at once.
//   - Sampler: Probs (penalties → temperature → top-k → top-p → min-p), the
//     one distribution both plain decoding and speculative sampling use;
//     Sample, SampleProbs, LogSoftmax, TopLogprobs; NewRand (seeded PCG).
//   - Engine (Generator): a scheduler goroutine owns the model; every step is
//     one batched forward over ready requests (prompt chunks and decodes);
//     callers' goroutines detokenize, apply stop sequences and emit. Requests
//     join and leave between steps; cancellation and emit errors stop a
//     request before its next token and free its KV before Generate returns.
//     Admission is by KV demand; under pressure the newest running request
//     is preempted (recomputed later), so the oldest always progress.
//   - Proposer (proposer.go): draft sources (package speculative's draft
//     model, suffix and known-text proposers; package medusa) propose token
//     trees once per step for all their requests; the engine puts every
//     tree into the step's one batched forward, verifies it (verify.go:
//     greedy argmax walk, lossless recursive rejection sampling) and splits
//     a per-step draft budget by expected acceptance and measured step cost
//     (specsched.go).
//
// Tensors are float32; logits are row-major [rows][VocabSize]. Ranges are
// half-open. Slices returned by Forward, Probs, LogSoftmax are owned by the
// caller; Sequence.Tokens aliases sequence memory (read-only).
package engine
