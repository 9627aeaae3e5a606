package kernels

import "fmt"

// Tensor-core projections (gemv_mma in llama_mma.cu, round 8, docs/cuda.md):
// the GEMV kinds and the fused QKV+RoPE step computed with mma.sync m16n8k16
// (fp16 inputs staged from the fp32 activations, fp32 accumulation), tokens
// padded to 16 per M-tile. A token's outputs depend only on its own inputs,
// the weights and the K split, which is fixed per (N, K): the same bits
// alone and in any batch of up to GemvWideMaxM tokens (TestGemvMMA), so
// plain decoding and exact tree steps agree as long as one matrix always
// runs on one family, which the choice below guarantees (it depends on the
// tuning and the matrix shape, never on the token count). The bits differ
// from the CUDA-core GEMV family's (fp16 inputs instead of fp32).
//
// Off by default (Tuning.GemvMMA): measured on an H100 (round 8), an exact
// tree step of the shipped target costs 22-48 % less from 16 to 64 tokens
// (T = 16 138 vs 176 µs, 64 234 vs 451), but a one-token step 106 vs 87 µs
// (plain decoding 10-22 % slower, median 13 %), and the 1.1B shape decodes 2.8x slower
// (bandwidth bound: too few bytes in flight per warp at 124-164 registers).

// GemvMMA values (Tuning.GemvMMA; 0 is the default: off).
const (
	GemvMMAOn  = 1  // every fp16 projection whose shape the kernel takes
	GemvMMAOff = -1 // never (as the default): the CUDA-core GEMV family
)

// mmaMaxSplit is the most K parts (warps per n-tile) a launch uses, and
// mmaMaxWarps the most warps per block.
const (
	mmaMaxSplit = 8
	mmaMaxWarps = 8 // __launch_bounds__(256): no register cap below 255 (16 warps capped them at 128 and spilled)
	mmaTiles    = 4 // M-tiles of 16 tokens one block takes at most (the larger MMA_TILES instantiation)
)

// mmaSplit is the K split of an N x K matrix: ks contiguous parts of K (the
// largest power of two <= mmaMaxSplit leaving each part a multiple of 32
// columns and at least 64). It depends on the shape only, so a token's bits
// do not depend on the batch. ok is false for shapes the kernel does not
// take (N % 8, K % 64).
func mmaSplit(N, K int) (ks int, ok bool) {
	if N <= 0 || N%8 != 0 || K <= 0 || K%64 != 0 {
		return 0, false
	}
	ks = mmaMaxSplit
	for ks > 1 && (K%(32*ks) != 0 || K/ks < 64) {
		ks /= 2
	}
	return ks, true
}

// mmaLaunch is the launch shape for M tokens (free to depend on M: it only
// moves whole n-tiles and M-tiles between blocks): mpb tokens per block row
// (64, or less where their inputs do not fit in shared memory), nt n-tiles
// per block (enough warps that each stages at most 4 of the block's tokens,
// at most mmaMaxWarps), and the dynamic shared memory. ok is false when not
// even 16 tokens fit.
func (c *Ctx) mmaLaunch(M, K, ks, tiles int) (mpb, nt, smem int, ok bool) {
	lim := c.d.MaxSmemOptin
	if lim <= 0 {
		lim = 48 << 10
	}
	lim -= 1024 // static shared memory (scale)
	for mpb = 16 * tiles; mpb >= 16; mpb -= 16 {
		rows := min(M, mpb)
		nt = 1
		for nt*ks*4 < rows && 2*nt*ks <= mmaMaxWarps {
			nt *= 2
		}
		smem = rows*(K+32)*2 + (ks-1)*nt*tiles*512
		if smem <= lim {
			return mpb, nt, smem, true
		}
	}
	return 0, 0, 0, false
}

// useMMA reports whether the fp16 projection of an N x K matrix runs on
// the tensor-core kernels on this device (sm_80 or newer).
func (c *Ctx) useMMA(N, K int) bool {
	if c.d.Major < 8 {
		return false
	}
	ks, ok := mmaSplit(N, K)
	if !ok {
		return false
	}
	if _, _, _, ok := c.mmaLaunch(16, K, ks, 1); !ok { // one M-tile must fit, whatever M
		return false
	}
	return c.d.tune.GemvMMA == GemvMMAOn
}

// UsesMMA reports whether a projection of an N x K fp16 matrix runs on the
// tensor-core family on this device with its current tuning (tests use it
// to pick the fp16-input error bound).
func (d *Device) UsesMMA(N, K int) bool { return (&Ctx{d: d}).useMMA(N, K) }

var mmaNames = [...]string{GemvNorm: "gemv_mma_norm", GemvResid: "gemv_mma_resid", GemvPlain: "gemv_mma_plain",
	GemvSwiGLU: "gemv_mma_swiglu"}

// mmaTilesFor is the M-tiles per block of a launch of M tokens: 1 up to 16
// tokens, else Tuning.GemvMMATiles (1 by default: one block row per 16
// tokens measured faster than 4 M-tiles per block, 234 vs 285 µs for a
// 64-token step of the shipped target).
func (c *Ctx) mmaTilesFor(M int) int {
	if M <= 16 || c.d.tune.GemvMMATiles != mmaTiles {
		return 1
	}
	return mmaTiles
}

// mmaPlan is the launch of M tokens of an N x K projection: its K split,
// M-tiles per block and mmaLaunch's shape. Where Tuning.GemvMMATiles' four
// M-tiles per block do not fit in shared memory (their partials take four
// times the room; useMMA checks one), the launch takes one: the same bits
// per M-tile, so the matrix stays on the tensor-core family.
func (c *Ctx) mmaPlan(M, N, K int) (ks, tiles, mpb, nt, smem int, ok bool) {
	ks, ok = mmaSplit(N, K)
	if !ok || M < 1 || M > GemvWideMaxM {
		return 0, 0, 0, 0, 0, false
	}
	tiles = c.mmaTilesFor(M)
	mpb, nt, smem, ok = c.mmaLaunch(M, K, ks, tiles)
	if !ok && tiles > 1 {
		tiles = 1
		mpb, nt, smem, ok = c.mmaLaunch(M, K, ks, tiles)
	}
	return ks, tiles, mpb, nt, smem, ok
}

// gemvMMA launches gemv_mma (name) over M tokens; extra are the RoPE
// arguments of gemv_mma_qkv_rope.
func (c *Ctx) gemvMMA(name string, W, X, xrow, nw DevicePtr, eps float32, Y DevicePtr, M, N, K int, extra ...uint64) error {
	ks, tiles, mpb, nt, smem, ok := c.mmaPlan(M, N, K)
	if !ok {
		return fmt.Errorf("%s M=%d N=%d K=%d: %w", name, M, N, K, ErrBadArg)
	}
	name = fmt.Sprintf("%s_t%d", name, tiles)
	f, err := c.Func(name)
	if err != nil {
		return err
	}
	if err := c.smemAttr(name, f, smem); err != nil {
		return err
	}
	ntiles := N / 8
	grid := Dim3{uint32((ntiles + nt - 1) / nt), uint32((M + mpb - 1) / mpb), 1}
	args := append([]uint64{P(W), P(X), P(xrow), P(nw), F(eps), P(Y), I(N), I(K), I(ks), I(M), I(mpb)}, extra...)
	return c.launchPDL(f, grid, Dim3{uint32(32 * nt * ks), 1, 1}, smem, args...)
}
