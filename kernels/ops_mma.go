package kernels

import "fmt"

// Tensor-core projections (gemv_mma in llama_mma.cu, rounds 8-9,
// docs/cuda.md): the GEMV kinds and the fused QKV+RoPE step computed with
// mma.sync m16n8k16 (fp16 inputs rounded in registers from the fp32
// activations, fp32 accumulation), the weights as the 16-row A operand and
// the tokens as the B operand, padded to 8 per token tile. A token's
// outputs depend only on its own inputs, the weights and the K split,
// which is fixed per (N, K): the same bits alone and in any batch of up to
// GemvWideMaxM tokens (TestGemvMMA), so plain decoding and exact tree
// steps agree as long as one matrix always runs on one family, which the
// choice below guarantees (it depends on the tuning and the matrix shape,
// never on the token count). The bits differ from the CUDA-core GEMV
// family's (fp16 inputs instead of fp32).
//
// On by default for the shapes measured faster (mmaAutoMinK..mmaAutoMaxK
// columns: the shipped target). Measured on an H100 (round 10: block rows
// of 8 tokens at every step), an exact step of the shipped target costs
// T = 1 75-83 µs (CUDA-core 86-94), 8 87-89 (131), 16 102-107 (175-178;
// round 9's 16-token block rows 128), 64 180-186 (448-452; round 9 198);
// plain decoding (round 9) 9365 vs 8709 tokens/s (medians of 3).

// GemvMMA values (Tuning.GemvMMA; 0 is the default: by shape, useMMA).
const (
	GemvMMAOn  = 1  // every fp16 projection whose shape the kernel takes
	GemvMMAOff = -1 // never: the CUDA-core GEMV family
)

// mmaMaxSplit is the most K parts (warps per block) a launch uses.
const (
	mmaMaxSplit = 8
	mmaRows16   = 2 // Tuning.GemvMMATiles 2: block rows of 16 tokens above 8 tokens (round 9)
	mmaTiles    = 4 // Tuning.GemvMMATiles 4: block rows of 64 tokens above 16 tokens
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

// mmaSmem is the dynamic shared memory of a launch with ks K parts and tt
// token tiles per warp: the part sums of parts 1.. and every part's sums
// of squares.
func mmaSmem(ks, tt int) int { return (ks-1)*tt*512 + ks*tt*32 }

// mmaAutoMinK, mmaAutoMaxK: with Tuning.GemvMMA 0 (the default), matrices
// with mmaAutoMinK..mmaAutoMaxK columns run on the tensor cores, the range
// measured faster there on an H100 (round 9, docs/cuda.md: every
// projection of the shipped 12.6 M target, K 384 and 1024: one-token step
// 75-77 vs 87-92 µs, 64 tokens 197-199 vs 445-448). Other shapes keep the
// CUDA-core GEMVs: wider ones were measured slower on the round-8
// tensor-core kernels (the 1.1B shape, K 2048 and 5632, 2.8x slower decode;
// the round-9 kernels are not measured there) and narrower ones are not
// measured. The rule depends on the shape only, so a matrix runs on one
// family at every batch size.
const (
	mmaAutoMinK = 384
	mmaAutoMaxK = 1024
)

// useMMA reports whether the fp16 projection of an N x K matrix runs on
// the tensor-core kernels on this device (sm_80 or newer).
func (c *Ctx) useMMA(N, K int) bool {
	if c.d.Major < 8 {
		return false
	}
	if _, ok := mmaSplit(N, K); !ok {
		return false
	}
	switch c.d.tune.GemvMMA {
	case GemvMMAOn:
		return true
	case GemvMMAOff:
		return false
	}
	return K >= mmaAutoMinK && K <= mmaAutoMaxK
}

// UsesMMA reports whether a projection of an N x K fp16 matrix runs on the
// tensor-core family on this device with its current tuning (tests use it
// to pick the fp16-input error bound).
func (d *Device) UsesMMA(N, K int) bool { return (&Ctx{d: d}).useMMA(N, K) }

var mmaNames = [...]string{GemvNorm: "gemv_mma_norm", GemvResid: "gemv_mma_resid", GemvPlain: "gemv_mma_plain",
	GemvSwiGLU: "gemv_mma_swiglu"}

// mmaTokenTiles is the token tiles of 8 per warp (and block row) of a
// launch of M tokens: 1 (block rows of 8 tokens, ceil(M / 8) of them: the
// one-token kernel at every M, the default since round 10), or with
// Tuning.GemvMMATiles 2 above 8 tokens 2 (block rows of 16 tokens, round
// 9's default: 168-186 registers against t1's 106-121), or with
// GemvMMATiles 4 above 16 tokens 8 (block rows of 64 tokens), 2 for 9..16.
// The same bits whichever.
func (c *Ctx) mmaTokenTiles(M int) int {
	switch tiles := c.d.tune.GemvMMATiles; {
	case M <= 8 || tiles <= 1:
		return 1
	case M > 16 && tiles == mmaTiles:
		return 2 * mmaTiles
	}
	return 2
}

// mmaPlan is the launch of M tokens of an N x K projection: its K split,
// token tiles per warp (mmaTokenTiles) and dynamic shared memory (part sums
// and sums of squares only: at most 30 KiB, within the 48 KiB every launch
// gets, so every shape the family takes has a launch for every token count).
func (c *Ctx) mmaPlan(M, N, K int) (ks, tt, smem int, ok bool) {
	ks, ok = mmaSplit(N, K)
	if !ok || M < 1 || M > GemvWideMaxM {
		return 0, 0, 0, false
	}
	tt = c.mmaTokenTiles(M)
	return ks, tt, mmaSmem(ks, tt), true
}

// gemvMMA launches gemv_mma (name) over M tokens; extra are the RoPE
// arguments of gemv_mma_qkv_rope.
func (c *Ctx) gemvMMA(name string, W, X, xrow, nw DevicePtr, eps float32, Y DevicePtr, M, N, K int, extra ...uint64) error {
	ks, tt, smem, ok := c.mmaPlan(M, N, K)
	if !ok {
		return fmt.Errorf("%s M=%d N=%d K=%d: %w", name, M, N, K, ErrBadArg)
	}
	name = fmt.Sprintf("%s_t%d", name, tt)
	f, err := c.Func(name)
	if err != nil {
		return err
	}
	if err := c.smemAttr(name, f, smem); err != nil {
		return err
	}
	grid := Dim3{uint32((N + 15) / 16), uint32((M + 8*tt - 1) / (8 * tt)), 1}
	args := append([]uint64{P(W), P(X), P(xrow), P(nw), F(eps), P(Y), I(N), I(K), I(ks), I(M)}, extra...)
	return c.launchPDL(f, grid, Dim3{uint32(32 * ks), 1, 1}, smem, args...)
}
