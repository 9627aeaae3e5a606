package kernels

import "fmt"

// Typed launchers for the kernels in llama.cu. All run on the device stream
// (asynchronous); pointers are device addresses; shapes are row-major.
// fp16 tensors are IEEE half words, activations and the KV cache fp32.

// GemvMaxM is the largest token count the GEMV kernels take in one launch.
const GemvMaxM = 8

// GemvKind selects the GEMV epilogue (see llama.cu).
type GemvKind int

const (
	// GemvNorm: Y[m] = W · (rmsnorm(X[xrow[m]]) * nw).
	GemvNorm GemvKind = iota
	// GemvResid: Y[m] += W · X[m].
	GemvResid
	// GemvPlain: Y[m] = W · X[m].
	GemvPlain
	// GemvSwiGLU: W rows interleaved (gate_j, up_j); Y[m][j] = silu(g)*u of rmsnorm'd X.
	GemvSwiGLU
)

var gemvNames = [...]string{"gemv_norm_m", "gemv_resid_m", "gemv_plain_m", "gemv_swiglu_m"}

// GemvSmem is the dynamic shared memory a GEMV of M tokens over K inputs needs.
func GemvSmem(M, K int) int { return M * K * 4 }

// GemvFits reports whether a GEMV of M tokens and K inputs fits this device's shared memory.
func (c *Ctx) GemvFits(M, K int) bool {
	lim := c.d.MaxSmemOptin
	if lim <= 0 {
		lim = 48 << 10
	}
	return M >= 1 && M <= GemvMaxM && GemvSmem(M, K)+1024 <= lim
}

// Gemv runs one fp16-weight GEMV over M (1..GemvWideMaxM) tokens: W [N][K]
// fp16, X fp32 rows of K (row m is X[xrow[m]] when xrow != 0, for GemvNorm
// and GemvPlain), nw fp16 [K] (norm kinds), Y fp32 [M][N] ([M][N/2] for
// GemvSwiGLU). K must be a multiple of 8. More than GemvMaxM tokens run
// as one 2-D launch over chunks of at most GemvMaxM tokens (GemvChunk);
// every token gets the bits it gets alone.
func (c *Ctx) Gemv(kind GemvKind, W, X, xrow, nw DevicePtr, eps float32, Y DevicePtr, M, N, K int) error {
	if M < 1 || M > GemvWideMaxM || K%8 != 0 || N <= 0 || (kind == GemvSwiGLU && N%2 != 0) {
		return fmt.Errorf("gemv kind %d M=%d N=%d K=%d: %w", kind, M, N, K, ErrBadArg)
	}
	if c.useMMA(N, K) {
		return c.gemvMMA(mmaNames[kind], W, X, xrow, nw, eps, Y, M, N, K)
	}
	units := N
	if kind == GemvSwiGLU {
		units = N / 2
	}
	mt := M
	M, nch := c.gemvSplit(mt, K, units)
	name := c.gemvName(gemvNames[kind], M, c.useRing(mt, K))
	f, err := c.Func(name)
	if err != nil {
		return err
	}
	smem := GemvSmem(M, K)
	if c.useRing(mt, K) {
		smem = c.gemvRingSmem(M, K)
	}
	if err := c.gemvSmemAttr(name, f, smem); err != nil {
		return err
	}
	if c.useRing(mt, K) {
		grid, threads, err := c.gemvRingGrid(name, f, units, smem)
		if err != nil {
			return err
		}
		return c.launchPDL(f, Dim3{uint32(grid), 1, 1}, Dim3{uint32(threads), 1, 1}, smem,
			P(W), P(X), P(xrow), P(nw), F(eps), P(Y), I(N), I(K))
	}
	grid, upb, threads := c.gemvGrid(units, smem)
	return c.launchPDL(f, Dim3{uint32(grid), uint32(nch), 1}, Dim3{uint32(threads), 1, 1}, smem,
		P(W), P(X), P(xrow), P(nw), F(eps), P(Y), I(N), I(K), I(upb), I(b2i(c.d.tune.GemvPrefetch)), I(mt))
}

// GEMV kernel families. All give the same bits for the same inputs (each
// row's chunks are summed per lane in increasing order, then across the
// warp), so they can be mixed freely, e.g. across batch sizes.
const (
	// GemvRing: for batch 1 and K a multiple of 256 (else the deep
	// kernels), persistent blocks (as many as fit on the SMs at once), each
	// warp streaming its units' weight chunks through a cp.async ring in
	// shared memory, refilled across unit boundaries. Faster alone (down
	// projection 9.1 vs 11.2 µs on an H100) but slower inside a decode step
	// (docs/cuda.md, round 4): its blocks fill the SMs, so the next
	// kernel's blocks cannot start beside them.
	GemvRing = "ring"
	// GemvDeep: one unit per warp at a time, 8 chunks per row in flight per
	// lane (24 for the residual GEMVs, so the 5632-wide down projection
	// streams in one round), first unit loaded before the PDL wait.
	GemvDeep = "deep"
	// GemvShallow: the round-2 batch-1 kernels (8 chunks per lane in all,
	// few registers, so more blocks per SM); other batch sizes use the deep
	// kernels. The default: fastest decode step measured (docs/cuda.md).
	GemvShallow = "shallow"
)

// GemvRingDepth is the ring GEMV's chunks in flight per lane: shared
// memory of warps * depth * 512 bytes per block.
const GemvRingDepth = 16

// GemvRingSmem is the ring GEMV's dynamic shared memory with warps warps
// per block (Tuning.GemvRingWarps): the inputs plus the slots.
func GemvRingSmem(M, K, warps int) int { return GemvSmem(M, K) + warps*GemvRingDepth*512 }

// gemvRingSmem is GemvRingSmem with this device's ring warps.
func (c *Ctx) gemvRingSmem(M, K int) int { return GemvRingSmem(M, K, c.d.tune.GemvRingWarps) }

// KernelInfo reports a kernel's registers per thread and how many blocks of
// threads threads (smem bytes of dynamic shared memory) fit on one SM.
func (c *Ctx) KernelInfo(name string, threads, smem int) (regs, perSM int, err error) {
	f, err := c.Func(name)
	if err != nil {
		return 0, 0, err
	}
	if regs, err = c.FuncRegisters(f); err != nil {
		return 0, 0, err
	}
	if err := c.gemvSmemAttr(name, f, smem); err != nil {
		return 0, 0, err
	}
	perSM, err = c.BlocksPerSM(f, threads, smem)
	return regs, perSM, err
}

// useRing: the ring kernels serve batch 1 with K a multiple of 256 (at
// least Tuning.GemvRingMinK) whose inputs plus ring fit in shared memory.
func (c *Ctx) useRing(M, K int) bool {
	lim := c.d.MaxSmemOptin
	if lim <= 0 {
		lim = 48 << 10
	}
	t := &c.d.tune
	return t.Gemv == GemvRing && M == 1 && K%256 == 0 && K >= t.GemvRingMinK && c.gemvRingSmem(M, K)+1024 <= lim
}

// gemvRingGrid is the ring GEMV's grid for units output units: no more
// blocks than units need (8 warps each), and no more than fit on the SMs
// at once (occupancy of f with smem bytes of dynamic shared memory).
func (c *Ctx) gemvRingGrid(name string, f Func, units, smem int) (grid, threads int, err error) {
	t := &c.d.tune
	threads = 32 * t.GemvRingWarps
	per, err := c.blocksPerSMCached(name, f, threads, smem)
	if err != nil {
		return 0, 0, err
	}
	if t.GemvRingBlocksPerSM > 0 {
		per = min(per, t.GemvRingBlocksPerSM)
	}
	grid = min((units+t.GemvRingWarps-1)/t.GemvRingWarps, max(c.d.SMs, 1)*per) // more warps than units: idle
	if c.d.ringMaxBlocks > 0 {
		grid = min(grid, c.d.ringMaxBlocks)
	}
	return max(grid, 1), threads, nil
}

// gemvName is the kernel for prefix ("gemv_norm_m", ...) and M tokens;
// ring: the ring kernel (useRing).
func (c *Ctx) gemvName(prefix string, M int, ring bool) string {
	base := prefix[:len(prefix)-2]
	switch {
	case ring:
		return fmt.Sprintf("%s_r_m%d", base, M)
	case c.d.tune.Gemv == GemvShallow && M == 1:
		return fmt.Sprintf("%s_s_m%d", base, M)
	}
	return fmt.Sprintf("%s%d", prefix, M)
}

// gemvGrid picks units per warp (enough for ~4 waves of 8-warp blocks),
// warps per block (Tuning.GemvWarps, or with GemvWarpsAuto: halved from 8 down to 2 while the grid would have fewer
// than 3 blocks per SM and each block's staged inputs, smem bytes, are at
// most 16 KB: small matrices then spread evenly over the SMs, at the price
// of more blocks re-reading the inputs), and returns the grid, units per
// block and threads per block.
func (c *Ctx) gemvGrid(units, smem int) (grid, upb, threads int) {
	sms := max(c.d.SMs, 1)
	upw := max(1, (units+sms*32-1)/(sms*32))
	wpb := 8
	switch w := c.d.tune.GemvWarps; w {
	case 8, 4, 2:
		wpb = w
	default:
		for wpb > 2 && smem <= 16<<10 && (units+wpb*upw-1)/(wpb*upw) < 3*sms {
			wpb /= 2
		}
	}
	upb = wpb * upw
	return (units + upb - 1) / upb, upb, 32 * wpb
}

// gemvSmemAttr raises f's dynamic shared-memory limit to smem when needed:
// when smem plus the kernel's static shared memory exceeds the 48 KB a
// launch gets without opting in. (Comparing smem alone with 48 KB was the
// concurrency bug of issue #12: a GEMV of 6 tokens over 2048 inputs has
// exactly 48 KB of dynamic shared memory, and the kernel's static
// scale[M] pushed the launch over the default, so cuLaunchKernelEx failed
// with CUDA error 1 whenever a step happened to batch 6 tokens.)
func (c *Ctx) gemvSmemAttr(name string, f Func, smem int) error {
	return c.smemAttr(name, f, smem)
}

// smemAttr raises f's dynamic shared-memory limit to smem when smem plus
// its static shared memory is over 48 KB (cached per kernel name).
func (c *Ctx) smemAttr(name string, f Func, smem int) error {
	if smem <= 0 {
		return nil
	}
	static, err := c.staticSmem(name, f)
	if err != nil {
		return err
	}
	if smem+static <= 48<<10 {
		return nil
	}
	key := name + "#smem"
	if prev, ok := c.d.funcs[key]; !ok || int(prev) < smem {
		if err := c.SetMaxDynamicSmem(f, smem); err != nil {
			return fmt.Errorf("%s: %d bytes of shared memory: %w", name, smem, err)
		}
		c.d.funcs[key] = Func(smem)
	}
	return nil
}

// RopeRows is the fused-QKV weight row order GemvQKVRope and RopeAppendPerm
// expect: entry i is the row of the standard [q heads | k heads | v] matrix
// (nh+2nkv)*hd rows) stored at row i. Within each q and k head, rows j and
// j+hd/2 are adjacent (row 2u, 2u+1 of the head = j, j+hd/2 for u = j); v
// rows keep their order.
func RopeRows(nh, nkv, hd int) []int {
	half := hd / 2
	rows := make([]int, 0, (nh+2*nkv)*hd)
	for h := 0; h < nh+nkv; h++ {
		for j := 0; j < half; j++ {
			rows = append(rows, h*hd+j, h*hd+j+half)
		}
	}
	for e := (nh + nkv) * hd; e < (nh+2*nkv)*hd; e++ {
		rows = append(rows, e)
	}
	return rows
}

// GemvQKVRope is the fused attention input step for M (1..GemvMaxM)
// tokens: qkv [M][(nh+2nkv)*hd] = Wp · (rmsnorm(X[xrow[m] or m]) * nw) with
// Wp the fused QKV weight in RopeRows order, written in the standard order
// with q and k rotated at pos[m] (invFreq fp32 [hd/2]), and k, v of token m
// stored at slot slots[m] of one layer's caches kc, vc [slots][nkv*hd].
// Same bits as Gemv(GemvNorm) on the standard weight followed by RopeAppend.
func (c *Ctx) GemvQKVRope(W, X, xrow, nw DevicePtr, eps float32, qkv, pos, slots, invFreq, kc, vc DevicePtr,
	M, H, nh, nkv, hd int) error {
	N := (nh + 2*nkv) * hd
	if M < 1 || M > GemvWideMaxM || H%8 != 0 || hd%2 != 0 || N <= 0 {
		return fmt.Errorf("gemv_qkv_rope M=%d H=%d heads %d/%d hd %d: %w", M, H, nh, nkv, hd, ErrBadArg)
	}
	if c.useMMA(N, H) {
		return c.gemvMMA("gemv_mma_qkv_rope", W, X, xrow, nw, eps, qkv, M, N, H,
			P(pos), P(slots), P(invFreq), P(kc), P(vc), I(nh), I(nkv), I(hd))
	}
	mt := M
	M, nch := c.gemvSplit(mt, H, N/2)
	ring := c.useRing(mt, H)
	name := c.gemvName("gemv_qkv_rope_m", M, ring)
	f, err := c.Func(name)
	if err != nil {
		return err
	}
	smem := GemvSmem(M, H)
	if ring {
		smem = c.gemvRingSmem(M, H)
	}
	if err := c.gemvSmemAttr(name, f, smem); err != nil {
		return err
	}
	rope := []uint64{P(pos), P(slots), P(invFreq), P(kc), P(vc), I(nh), I(nkv), I(hd)}
	if ring {
		grid, threads, err := c.gemvRingGrid(name, f, N/2, smem)
		if err != nil {
			return err
		}
		return c.launchPDL(f, Dim3{uint32(grid), 1, 1}, Dim3{uint32(threads), 1, 1}, smem,
			append([]uint64{P(W), P(X), P(xrow), P(nw), F(eps), P(qkv), I(N), I(H)}, rope...)...)
	}
	grid, upb, threads := c.gemvGrid(N/2, smem)
	return c.launchPDL(f, Dim3{uint32(grid), uint32(nch), 1}, Dim3{uint32(threads), 1, 1}, smem,
		append([]uint64{P(W), P(X), P(xrow), P(nw), F(eps), P(qkv), I(N), I(H), I(upb), I(b2i(c.d.tune.GemvPrefetch)), I(mt)}, rope...)...)
}

// RopeAppendPerm is RopeAppend reading src [T][(nh+2nkv)*hd] in RopeRows
// order (a GEMM over the permuted weight) and writing qkv in the standard order.
func (c *Ctx) RopeAppendPerm(src, qkv, pos, slots, invFreq, kc, vc DevicePtr, T, nh, nkv, hd int) error {
	return c.launchByNamePDL("rope_append_perm", Dim3{uint32(T), 1, 1}, Dim3{128, 1, 1}, 0,
		P(src), P(qkv), P(pos), P(slots), P(invFreq), P(kc), P(vc), I(nh), I(nkv), I(hd))
}

// Embed gathers x[t] = table[tokens[t]] (fp16 table [V][H] → fp32 x [T][H]).
func (c *Ctx) Embed(table, tokens, x DevicePtr, T, H int) error {
	return c.LaunchByName("embed_f16", Dim3{uint32(T), 1, 1}, Dim3{256, 1, 1}, 0, P(table), P(tokens), P(x), I(H))
}

// RMSNormF16 writes out[t] = f16(rmsnorm(x[xrow[t] or t]) * nw), out [T][K].
func (c *Ctx) RMSNormF16(x, xrow, nw DevicePtr, eps float32, out DevicePtr, T, K int) error {
	return c.LaunchByName("rmsnorm_f16", Dim3{uint32(T), 1, 1}, Dim3{256, 1, 1}, 0, P(x), P(xrow), P(nw), F(eps), P(out), I(K))
}

func grid1(n int) Dim3 { return Dim3{uint32(min(max((n+255)/256, 1), 4096)), 1, 1} }

// CastF16 converts n fp32 values to fp16.
func (c *Ctx) CastF16(in, out DevicePtr, n int) error {
	return c.LaunchByName("cast_f16", grid1(n), Dim3{256, 1, 1}, 0, P(in), P(out), I(n))
}

// SwiGLU: gu [T][2I] interleaved gate/up fp32 → out [T][I] fp32.
func (c *Ctx) SwiGLU(gu, out DevicePtr, I_, T int) error {
	return c.LaunchByName("swiglu_f32", grid1(T*I_), Dim3{256, 1, 1}, 0, P(gu), P(out), I(I_), I(T))
}

// FillRandomF16 fills n fp16 values with scale*uniform(-1,1) from seed.
func (c *Ctx) FillRandomF16(w DevicePtr, n int64, seed uint64, scale float32) error {
	g := Dim3{uint32(min((n+255)/256, 65535)), 1, 1}
	return c.LaunchByName("fill_random_f16", g, Dim3{256, 1, 1}, 0, P(w), uint64(n), seed, F(scale))
}

// RopeAppend rotates q and k of qkv [T][(nh+2nkv)*hd] in place at pos[t]
// (invFreq fp32 [hd/2]) and stores k, v of token t at slot slots[t] of one
// layer's caches kc, vc [slots][nkv*hd].
func (c *Ctx) RopeAppend(qkv, pos, slots, invFreq, kc, vc DevicePtr, T, nh, nkv, hd int) error {
	return c.launchByNamePDL("rope_append", Dim3{uint32(T), 1, 1}, Dim3{128, 1, 1}, 0,
		P(qkv), P(pos), P(slots), P(invFreq), P(kc), P(vc), I(nh), I(nkv), I(hd))
}

// AttnMeta locates, per query token t (device int32 arrays of length T):
// its keys' slots at SlotList[KVOff[t] : KVOff[t]+KVLen[t]], how many of
// them are cached (Cached[t]; the rest are new tokens of its request), and
// MaskOff[t]: -1 for a causal chain, else the word offset into Mask of its
// ancestor bitmask over the request's new tokens.
type AttnMeta struct {
	SlotList, KVOff, KVLen, Cached, MaskOff, Mask DevicePtr
	// TokIdx, when not 0, lists the tokens (int32 indices into the
	// per-token arrays) that Attention computes: its T counts entries of
	// TokIdx. The others are left to AttnTile.
	TokIdx DevicePtr
	// MaxLen, when > 0, bounds every token's key count: the launch then has
	// only Device.AttnSplitsFor(MaxLen) split blocks per head instead of
	// Tuning.AttnSplits (most of which would exit at once at short contexts). The
	// bits do not change: a token's split count depends on its own key
	// count only, and is never above AttnSplitsFor(MaxLen).
	MaxLen int
}

// AttentionHeadDims are the head sizes the attention kernel is built for.
var AttentionHeadDims = []int{8, 16, 32, 64, 128, 256}

const (
	attnPartFloats = 2 << 20 // device scratch for split partials (8 MB)
	attnCntInts    = 32 << 10
)

// Attention computes out [T][nh*hd] from q in qkv and one layer's caches.
// Tokens are launched in chunks small enough for the split scratch; chunks
// run in stream order, so they share it.
//
// Split attention (flash-decoding): a query token with kvlen keys is
// processed by S = clamp(ceil(kvlen/AttnSplitMinKeys), 1, AttnSplits)
// blocks per head (Tuning) over contiguous key ranges; the last block of a
// (token, head) to finish combines the partials in split order. S depends
// on kvlen only, so a token's output bits do not depend on its batch.
// Measured on an H100 (docs/cuda.md): splitting pays from ~1k keys (ctx
// 4096: 61 -> 25 µs) but costs ~3.5 µs of combine latency at 256 keys and
// multiplies waves at T=8. Unless Tuning.NoAttnPreload, attention reads
// its launch metadata, the first round of cached keys (into registers) and
// the block's other cached key and value rows (towards L2) before waiting
// for the QKV kernel (PDL): only the new tokens' rows depend on it. Same
// bits either way.
func (c *Ctx) Attention(qkv, out, kc, vc DevicePtr, m AttnMeta, T, nh, nkv, hd int, scale float32) error {
	switch hd {
	case 8, 16, 32, 64, 128, 256:
	default:
		return fmt.Errorf("attention head_dim %d (want 8, 16, 32, 64, 128 or 256): %w", hd, ErrBadArg)
	}
	smax := c.d.AttnSplitsFor(m.MaxLen)
	tc := min(T, attnPartFloats/(nh*smax*(hd+2)), attnCntInts/nh)
	if T < 1 || nh < 1 || tc < 1 {
		return fmt.Errorf("attention T=%d nh=%d hd=%d (split scratch too small): %w", T, nh, hd, ErrBadArg)
	}
	name, heads := fmt.Sprintf("attention_hd%d", hd), nh
	if g := c.attnGroup(T, nh, nkv, hd); g > 1 { // all query heads of a KV head per block (ops_attn_g.go): same bits
		name, heads = c.attnGroupName(g, hd), nkv
	}
	for t0 := 0; t0 < T; t0 += tc {
		n := min(tc, T-t0)
		if err := c.launchByNamePDL(name, Dim3{uint32(n), uint32(heads), uint32(smax)}, Dim3{256, 1, 1}, 0,
			P(qkv), P(out), P(kc), P(vc), P(m.SlotList), P(m.KVOff), P(m.KVLen), P(m.Cached), P(m.MaskOff), P(m.Mask),
			I(nh), I(nkv), F(scale), I(t0), I(smax), I(c.d.tune.AttnSplitMinKeys), P(c.d.attnPart), P(c.d.attnCnt),
			I(b2i(!c.d.tune.NoAttnPreload)), P(m.TokIdx)); err != nil {
			return err
		}
	}
	return nil
}

// AttnTileRows is the query rows (tokens x query heads of one KV head) of
// one AttnTile block: a tile holds AttnTileRows / (nh/nkv) tokens.
const AttnTileRows = 128

// AttnTileTokens is the most query tokens of one AttnTile tile for nh query
// and nkv KV heads, 0 when AttnTile cannot serve the shape (head dim not
// 64 or 128, or more than AttnTileRows query heads per KV head).
func AttnTileTokens(nh, nkv, hd int) int {
	if (hd != 64 && hd != 128) || nkv < 1 || nh%nkv != 0 || nh/nkv > AttnTileRows {
		return 0
	}
	return AttnTileRows / (nh / nkv)
}

// AttnTileSmem is AttnTile's dynamic shared memory for head dim hd (see
// ATILE_SMEM in llama.cu).
func AttnTileSmem(hd int) int {
	const rows, kt = AttnTileRows, 64
	return (rows*(hd+4) + kt*(hd+4) + kt*hd + rows*(kt+4)) * 4
}

// AttnTile computes causal attention for prefill chunks: tiles [n][2]
// int32 on the device, tile i = (first token, tokens) of consecutive new
// tokens of one chain request (at most AttnTileTokens), whose attention
// outputs it writes to out (same layout and metadata as Attention; mask
// and cached counts are not read: token t sees keys [0, KVLen[t]) of its
// slot list). Each block stages its keys and values once for all query
// heads of a KV head and all tokens of the tile.
func (c *Ctx) AttnTile(qkv, out, kc, vc DevicePtr, m AttnMeta, tiles DevicePtr, n, nh, nkv, hd int, scale float32) error {
	if AttnTileTokens(nh, nkv, hd) == 0 || n < 1 {
		return fmt.Errorf("attn_tile: %d tiles, heads %d/%d, head_dim %d: %w", n, nh, nkv, hd, ErrBadArg)
	}
	name := fmt.Sprintf("attn_tile_hd%d", hd)
	f, err := c.Func(name)
	if err != nil {
		return err
	}
	smem := AttnTileSmem(hd)
	if err := c.smemAttr(name, f, smem); err != nil {
		return err
	}
	if err := c.launchPDL(f, Dim3{uint32(n), uint32(nkv), 1}, Dim3{256, 1, 1}, smem,
		P(qkv), P(out), P(kc), P(vc), P(m.SlotList), P(m.KVOff), P(m.KVLen), P(tiles), I(nh), I(nkv), F(scale)); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// DecodeAdvance launches decode_advance (see llama.cu): the first kernel of
// each step of multi-step greedy decoding of one sequence. tokens, pos,
// slots, kvlen, cached point at the step's one-token metadata, slotList
// at the sequence's slot list, argIdx at the previous step's argmax; out
// collects the tokens; step is the device step counter (zero before step 0).
func (c *Ctx) DecodeAdvance(tokens, pos, slots, kvlen, cached, slotList, argIdx, out, step DevicePtr) error {
	return c.LaunchByName("decode_advance", Dim3{1, 1, 1}, Dim3{1, 1, 1}, 0,
		P(tokens), P(pos), P(slots), P(kvlen), P(cached), P(slotList), P(argIdx), P(out), P(step))
}

// KVGather copies cache[l][src[i]] to tmp[l][i] for i in [0,n), l in [0,L);
// layerStride is the elements between layers of cache.
func (c *Ctx) KVGather(cache, tmp, src DevicePtr, n, L, kvdim int, layerStride int64) error {
	return c.LaunchByName("kv_gather", Dim3{uint32(n), uint32(L), 1}, Dim3{256, 1, 1}, 0,
		P(cache), P(tmp), P(src), I(n), I(kvdim), uint64(layerStride))
}

// KVScatter copies tmp[l][i] to cache[l][dst[i]].
func (c *Ctx) KVScatter(cache, tmp, dst DevicePtr, n, L, kvdim int, layerStride int64) error {
	return c.LaunchByName("kv_scatter", Dim3{uint32(n), uint32(L), 1}, Dim3{256, 1, 1}, 0,
		P(cache), P(tmp), P(dst), I(n), I(kvdim), uint64(layerStride))
}

// ArgmaxRows writes out[r] = argmax of logits [R][V] row r (ties → lowest id).
func (c *Ctx) ArgmaxRows(logits, out DevicePtr, R, V int) error {
	return c.launchByNamePDL("argmax_rows", Dim3{uint32(R), 1, 1}, Dim3{1024, 1, 1}, 0, P(logits), P(out), I(V))
}

// SampleRows samples one token per row of logits [R][V] with temperature,
// top-k (0 = off) and top-p (>= 1 = off); u [R] holds uniforms in [0,1).
func (c *Ctx) SampleRows(logits, u, out DevicePtr, R, V int, temp float32, topk int, topp float32) error {
	return c.LaunchByName("sample_rows", Dim3{uint32(R), 1, 1}, Dim3{1024, 1, 1}, 0,
		P(logits), P(u), P(out), I(V), F(temp), I(topk), F(topp))
}

// CopyBandwidth times iters device-to-device copies of bytes (after one
// warm-up) with events and returns the median rate in bytes/s, counting
// bytes read plus bytes written (2*bytes per copy).
func (c *Ctx) CopyBandwidth(bytes, iters int) (float64, error) {
	src, err := c.Alloc(bytes)
	if err != nil {
		return 0, err
	}
	defer c.Free(src)
	dst, err := c.Alloc(bytes)
	if err != nil {
		return 0, err
	}
	defer c.Free(dst)
	if err := c.Memset32(src, 0x3c003c00, bytes/4); err != nil {
		return 0, err
	}
	a, err := c.NewEvent()
	if err != nil {
		return 0, err
	}
	defer c.DestroyEvent(a)
	b, err := c.NewEvent()
	if err != nil {
		return 0, err
	}
	defer c.DestroyEvent(b)
	if err := c.DtoD(dst, src, bytes); err != nil {
		return 0, err
	}
	ms := make([]float64, 0, iters)
	for i := 0; i < iters; i++ {
		if err := c.Record(a); err != nil {
			return 0, err
		}
		if err := c.DtoD(dst, src, bytes); err != nil {
			return 0, err
		}
		if err := c.Record(b); err != nil {
			return 0, err
		}
		t, err := c.ElapsedMs(a, b)
		if err != nil {
			return 0, err
		}
		ms = append(ms, float64(t))
	}
	return 2 * float64(bytes) / (Median(ms) / 1e3), nil
}

// Median of xs (xs is sorted in place); 0 for none.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	for i := 1; i < len(xs); i++ {
		for j := i; j > 0 && xs[j] < xs[j-1]; j-- {
			xs[j], xs[j-1] = xs[j-1], xs[j]
		}
	}
	return xs[len(xs)/2]
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// SampleParamWords is the int32 words of one row's parameters for
// SampleRowsP (see sample_rows_p in llama.cu).
const SampleParamWords = 8

// SampleRowsP samples one token per row of logits [R][V] (used as scratch:
// penalties are applied in place) with per-row parameters prm [R][8] int32
// words (temperature, top-k, top-p, min-p, uniform, penalty offset and
// count, active) and penalty entries ptok / pdel; tok [R] gets the tokens,
// lp [R] their log-softmax under the raw logits. Rows whose active word is
// 0 are skipped.
func (c *Ctx) SampleRowsP(logits, prm, ptok, pdel, tok, lp DevicePtr, R, V int) error {
	return c.LaunchByName("sample_rows_p", Dim3{uint32(R), 1, 1}, Dim3{1024, 1, 1}, 0,
		P(logits), P(prm), P(ptok), P(pdel), P(tok), P(lp), I(V))
}

// RMSNormF32 writes out[t] = rmsnorm(x[xrow[t] or t]) * nw in fp32, out [T][K].
func (c *Ctx) RMSNormF32(x, xrow, nw DevicePtr, eps float32, out DevicePtr, T, K int) error {
	return c.LaunchByName("rmsnorm_f32", Dim3{uint32(T), 1, 1}, Dim3{256, 1, 1}, 0, P(x), P(xrow), P(nw), F(eps), P(out), I(K))
}
