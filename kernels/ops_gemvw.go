package kernels

import "fmt"

// Register-tiled GEMVs for multi-token steps (llama_wide.cu, round 7):
// each warp keeps RW weight rows in registers (loaded once, before the PDL
// wait) and runs over all of its block's tokens 8 at a time, so a weight
// is read once per token chunk of up to 64 tokens instead of once per 8
// tokens, and each input read from shared memory feeds RW rows. Every
// (row, token) gets the bits the batch-1 kernels give it (same per-lane
// chunk order, same butterfly), so plain decoding and exact tree steps
// still agree bit for bit. Serves K <= GemvWideMaxK (weights held in
// registers: at most 4 chunks of 8 per lane and row).

// GemvWideMaxK is the largest input width the register-tiled GEMVs take.
const GemvWideMaxK = 32 * 8 * 4

// DefaultGemvWideMin is Tuning.GemvWideMin's default: the fewest tokens a
// launch needs to run the register-tiled kernels.
const DefaultGemvWideMin = 65

// useGemvW reports whether a GEMV of M tokens over K inputs runs the
// register-tiled kernels on this device.
func (c *Ctx) useGemvW(M, K int) bool {
	mn := c.d.tune.GemvWideMin
	if mn < 0 || M < max(mn, 2) || K > GemvWideMaxK || K%8 != 0 {
		return false
	}
	_, _, _, _, ok := c.gemvWShape(M, K, 1)
	return ok
}

// gemvWShape picks the register-tiled launch of M tokens over K inputs and
// rows weight rows: rw rows per warp and cpl chunks per lane and row (K <=
// 512: 4 rows of 2 chunks, or 2 rows when 4 would leave most SMs idle;
// else 2 rows of 4 chunks), warps per block, and tc tokens per block (a
// multiple of 8, the token chunks as few as fill the SMs: each chunk
// re-reads the weights, each row block re-stages the inputs).
func (c *Ctx) gemvWShape(M, K, rows int) (rw, cpl, warps, tc int, ok bool) {
	lim := c.d.MaxSmemOptin
	if lim <= 0 {
		lim = 48 << 10
	}
	maxTc := min(64, (lim-2048-K*2)/(K*4)) &^ 7
	if maxTc < 8 || K > GemvWideMaxK {
		return 0, 0, 0, 0, false
	}
	sms := max(c.d.SMs, 1)
	rw, cpl, warps = 4, 2, 8
	if K > 512 {
		rw, cpl = 2, 4
	}
	if w := c.d.tune.GemvWideWarps; w > 0 {
		warps = w
	}
	blocksX := func() int { return (rows + warps*rw - 1) / (warps * rw) }
	if c.d.tune.GemvWideWarps == 0 && blocksX()*((M+7)/8) < sms {
		warps = 4
	}
	if v := c.d.tune.GemvWideRows; v > 0 {
		rw = min(v, 8/cpl)
	} else if blocksX()*((M+7)/8) < sms/2 {
		rw = 2
	}
	gx := blocksX()
	nch := max((M+maxTc-1)/maxTc, min((M+7)/8, (sms+gx-1)/gx))
	tc = ((M+nch-1)/nch + 7) &^ 7
	return rw, cpl, warps, min(tc, maxTc), true
}

// gemvW launches the register-tiled GEMV named prefix ("gemv_norm", ...,
// "gemv_qkv_rope") over M tokens with rows weight rows; extra are the
// MODE 3 arguments.
func (c *Ctx) gemvW(prefix string, W, X, xrow, nw DevicePtr, eps float32, Y DevicePtr, M, N, K, rows int, extra ...uint64) error {
	rw, cpl, warps, tc, ok := c.gemvWShape(M, K, rows)
	if !ok {
		return fmt.Errorf("%s wide M=%d K=%d: %w", prefix, M, K, ErrBadArg)
	}
	name := fmt.Sprintf("%s_w%dc%d", prefix, rw, cpl)
	if c.d.tune.GemvWideTile == 4 {
		name += "t4"
	}
	f, err := c.Func(name)
	if err != nil {
		return err
	}
	smem := tc*K*4 + K*2
	if err := c.smemAttr(name, f, smem); err != nil {
		return err
	}
	grid := Dim3{uint32((rows + warps*rw - 1) / (warps * rw)), uint32((M + tc - 1) / tc), 1}
	args := append([]uint64{P(W), P(X), P(xrow), P(nw), F(eps), P(Y), I(N), I(K), I(M), I(tc)}, extra...)
	return c.launchPDL(f, grid, Dim3{uint32(32 * warps), 1, 1}, smem, args...)
}

// Grouped attention (attention_g in llama_wide.cu): all G = nh/nkv query
// heads of a KV head in one block (grid T x nkv instead of T x nh), each
// key and value row loaded once for G heads, every head's arithmetic that
// of the per-head kernel (same bits: TestRopeAttention, and
// TestExactTreeMatchesPlainOnGPU at contexts of 100 and 600 keys). The
// per-head kernel holds 238 registers (one 256-thread block per SM), so a
// launch of more than one block per SM runs in waves: by default
// (Tuning.AttnGroupMin 0) the grouped kernel runs when T x nh exceeds the
// SMs. Measured on an H100 (docs/cuda.md round 7, shipped target, context
// 100, 6 layers, eager): per-head / grouped 53.8 / 68.9 µs at 17 tokens
// (one wave: grouping only serialises heads), 77.1 / 70.0 at 24, 84.5 /
// 71.2 at 33, 130.0 / 86.1 at 64. Built for head dims 64 and 128 with G
// in attnGroups.

var attnGroups = map[int][]int{64: {2, 3, 4}, 128: {2, 4}}

// attnGroup is the heads per block of an attention launch of T tokens: G
// when the grouped kernel serves it, else 1.
func (c *Ctx) attnGroup(T, nh, nkv, hd int) int {
	mn := c.d.tune.AttnGroupMin
	switch {
	case mn < 0 || nkv < 1 || nh%nkv != 0 || nh == nkv:
		return 1
	case mn == 0 && T*nh <= max(c.d.SMs, 1):
		return 1
	case mn > 0 && T < mn:
		return 1
	}
	g := nh / nkv
	for _, v := range attnGroups[hd] {
		if v == g {
			return g
		}
	}
	return 1
}
