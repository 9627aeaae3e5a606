package cuda

import (
	"github.com/specgate/specgate/kernels"
)

// Exact batches (issue #17, lossless on the GPU). The GEMV kernels give the
// same bits for a token whatever the batch size (1..kernels.GemvMaxM), so
// plain decoding and a speculative tree of up to 7 nodes agree bit for bit;
// larger steps used to run their projections through cuBLAS GEMMs on fp16
// activations, whose rounding differs, and a greedy tree verification then
// sometimes picked another token than plain decoding at a near-tie (seen:
// the 16-node Medusa tree, 1 prompt of 20 x 128 tokens). With exact batches,
// every step of up to MaxExactTokens tokens without prefill tiles runs its
// projections as GEMVs of at most GemvMaxM tokens each (the fused QKV+RoPE
// kernel per chunk), so each token's result is the one plain decoding
// computes. Larger steps and prefill chunks keep cuBLAS. Only steps that
// verify a tree are covered (plain batches keep their GEMMs).
//
// On by default (since 2026-11-23, after the measurements in docs/medusa.md,
// which ran with cuBLAS tree steps): the product's promise is that
// speculation returns plain decoding's output. The price, measured on the
// H100: a 17-token step costs about 1.7x as much as chunked GEMVs as
// through cuBLAS (Medusa n=16 at c=1 0.42x instead of 0.72x); the adaptive
// budget sees that price in its step timings. Near-tie differences without
// it were rare (0 of 20 prompts x 128 tokens at concurrency 1 in one run, 1
// in another). Options.FastVerify (or SPECGATE_EXACT_VERIFY=0) turns exact
// batches off. Not covered either way: steps over MaxExactTokens (many
// concurrent trees), Qwen2 (QKV bias) and int8 weights; plain decoding of
// a large batch is itself not bit-identical to batch 1 for the same reason.

// Since session 4 an exact step runs each projection as one launch
// (kernels.Gemv over up to kernels.GemvWideMaxM tokens: a 2-D grid whose
// block rows are chunks of at most GemvMaxM tokens, each computed as the
// GEMV of that chunk alone), not one launch per chunk of 8 tokens: same
// bits, 5 launches per layer instead of 5 per chunk.

// Both fp16 projection families keep the contract (kernels.Tuning.GemvMMA,
// rounds 8-9): the CUDA-core GEMVs and the tensor-core kernels (the default
// for matrices of 384..1024 columns, e.g. the shipped target's), whose
// per-token arithmetic does not depend on the other tokens of the token
// tile either; a backend runs every step of a matrix on one of them.

// MaxExactTokens is the largest step exact batches cover.
const MaxExactTokens = kernels.GemvWideMaxM

// exactStep reports whether a step of T tokens runs its projections as
// GEMVs: tree steps (a batch with an ancestor mask) of more than GemvMaxM
// tokens, unless Options.FastVerify.
func (b *Backend) exactStep(c *kernels.Ctx, T int) bool {
	cfg := b.cfg
	tree := len(b.hostFlat.mask) > 0
	return !b.opt.FastVerify && !cfg.QKVBias && len(b.layers) > 0 && b.layers[0].wqkv.s == 0 && T > kernels.GemvMaxM && T <= MaxExactTokens && b.nTiles == 0 && tree &&
		c.GemvWideFits(T, cfg.HiddenSize) && c.GemvWideFits(T, cfg.QDim()) && c.GemvWideFits(T, cfg.IntermediateSize)
}
