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

// mmaProjections reports whether any fp16 projection of the model (QKV,
// o_proj, gate/up, down, LM head) runs on the tensor-core kernels
// (kernels.Tuning.GemvMMA): their inputs are rounded to fp16, as cuBLAS
// prefill's are, so tests hold such a backend to the fp16 error bound.
func (b *Backend) mmaProjections() bool {
	cfg := b.cfg
	H, I := cfg.HiddenSize, cfg.IntermediateSize
	for _, s := range [][2]int{{b.qkvDim, H}, {H, cfg.QDim()}, {2 * I, H}, {H, I}, {cfg.VocabSize, H}} {
		if b.dev.UsesMMA(s[0], s[1]) {
			return true
		}
	}
	return false
}
