package kernels

import "fmt"

// Int8 weight-only launchers (llama_i8.cu). A quantized matrix is int8
// row-major W [N][K] plus one fp32 scale per row S [N] (per output channel:
// row n ~ S[n] * W[n]); K must be a multiple of 16 (one 16-byte load holds
// 16 weights). Activations and accumulation are fp32, as in the fp16 GEMVs,
// and the kinds, shapes and row orders are theirs.

// Int8 GEMV families at batch 1 (Tuning.GemvI8; other batch sizes always
// run the deep kernels). All give the same bits (TestGemvI8). GemvDeep: 8
// chunks of 16 weights per row in flight, 12 for the residual GEMVs.
// GemvShallow: as many as a 2048- or 5632-wide row needs, the next unit
// loaded while one is summed. Decode of the 1.1B shape on an H100
// (docs/device-notes.md, quant call 2, tokens/s, fp16 967.9): hybrid8
// 1434.1 (the default), hybrid 1432.6, deep4split 1399.2, deep 1207.8.
const (
	// GemvI8Deep4: 4 chunks per row (12 for the residual kinds) and at
	// most 85 registers, so 3 blocks of 8 warps fit on an SM (deep's
	// unused chunk slots cost the gate/up kernel 131 registers: 2 blocks
	// per SM, its grid in 1.33 waves).
	GemvI8Deep4 = "deep4"
	// GemvI8Deep4Split: GemvI8Deep4 with split staging (the norm kinds'
	// sum of squares in one warp while the others stage the inputs).
	GemvI8Deep4Split = "deep4split"
	// GemvI8DeepSplit: GemvDeep with split staging.
	GemvI8DeepSplit = "deepsplit"
	// GemvI8Hybrid: GemvI8Deep4Split's kernels for the norm kinds (qkv,
	// gate/up, LM head) and GemvDeep's residual kernel (o, down: the
	// 4-chunk residual kernel spills at 85 registers). Per-kernel
	// measurements: docs/device-notes.md (quant call 1).
	GemvI8Hybrid = "hybrid"
	// GemvI8Hybrid8: GemvI8Hybrid with a residual kernel that stages its
	// inputs in one round of up to 8 loads per thread (a 5632-wide row:
	// one round instead of two).
	GemvI8Hybrid8 = "hybrid8"
)

// GemvI8Families are the batch-1 int8 GEMV families.
var GemvI8Families = []string{GemvDeep, GemvShallow, GemvI8Deep4, GemvI8Deep4Split, GemvI8DeepSplit, GemvI8Hybrid, GemvI8Hybrid8}

// gemvI8Suffix: a batch-1 family's kernel name suffix; gemvI8ResidSuffix
// overrides it for the residual kind.
var (
	gemvI8Suffix = map[string]string{GemvDeep: "", GemvShallow: "_s", GemvI8Deep4: "_d4", GemvI8Deep4Split: "_d4s",
		GemvI8DeepSplit: "_ds", GemvI8Hybrid: "_d4s", GemvI8Hybrid8: "_d4s"}
	gemvI8ResidSuffix = map[string]string{GemvI8Hybrid: "", GemvI8Hybrid8: "_rg8"}
)

var gemvI8Names = [...]string{"gemv_i8_norm", "gemv_i8_resid", "gemv_i8_plain", "gemv_i8_swiglu"}

func (c *Ctx) gemvI8Name(prefix string, M int) string {
	if M == 1 {
		v := c.d.tune.GemvI8
		if sfx, ok := gemvI8ResidSuffix[v]; ok && prefix == gemvI8Names[GemvResid] {
			return prefix + sfx + "_m1"
		}
		return prefix + gemvI8Suffix[v] + "_m1"
	}
	return fmt.Sprintf("%s_m%d", prefix, M)
}

// gemvI8Grid is gemvGrid, except at batch 1 (unless Tuning.NoGemvI8Wave):
// when gemvGrid's grid would need more than one wave of resident blocks of
// f, the units per warp grow until it fits in one.
func (c *Ctx) gemvI8Grid(name string, f Func, M, units, smem int) (grid, upb, threads int, err error) {
	grid, upb, threads = c.gemvGrid(units, smem)
	if M != 1 || c.d.tune.NoGemvI8Wave {
		return grid, upb, threads, nil
	}
	bps, err := c.blocksPerSMCached(name, f, threads, smem)
	if err != nil {
		return 0, 0, 0, err
	}
	slots := max(c.d.SMs, 1) * bps
	if grid <= slots {
		return grid, upb, threads, nil
	}
	wpb := threads / 32
	upw := (units + slots*wpb - 1) / (slots * wpb)
	upb = wpb * upw
	return (units + upb - 1) / upb, upb, threads, nil
}

// blocksPerSMCached is BlocksPerSM of f (named name) cached per device.
func (c *Ctx) blocksPerSMCached(name string, f Func, threads, smem int) (int, error) {
	key := fmt.Sprintf("%s#bps%d/%d", name, smem, threads)
	if bps, ok := c.d.funcs[key]; ok {
		return int(bps), nil
	}
	n, err := c.BlocksPerSM(f, threads, smem)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	c.d.funcs[key] = Func(max(n, 1))
	return max(n, 1), nil
}

// GemvI8 is Gemv over an int8 matrix W [N][K] with row scales S [N]:
// Y[m] = (W · x_m) * S (per row), with x_m as for Gemv of the same kind.
func (c *Ctx) GemvI8(kind GemvKind, W, S, X, xrow, nw DevicePtr, eps float32, Y DevicePtr, M, N, K int) error {
	if kind < 0 || int(kind) >= len(gemvI8Names) || M < 1 || M > GemvMaxM || K%16 != 0 || N <= 0 ||
		(kind == GemvSwiGLU && N%2 != 0) {
		return fmt.Errorf("gemv_i8 kind %d M=%d N=%d K=%d (K must be a multiple of 16): %w", kind, M, N, K, ErrBadArg)
	}
	return c.launchQuantGemv(c.gemvI8Name(gemvI8Names[kind], M), kind, W, S, X, xrow, nw, eps, Y, M, N, K)
}

// launchQuantGemv launches the weight-only GEMV kernel name (int8 or int4:
// both take W, their scales S, X, xrow, nw, eps, Y, N, K and units per
// block) for M tokens on the one-wave grid of gemvI8Grid.
func (c *Ctx) launchQuantGemv(name string, kind GemvKind, W, S, X, xrow, nw DevicePtr, eps float32, Y DevicePtr, M, N, K int) error {
	f, err := c.Func(name)
	if err != nil {
		return err
	}
	smem := GemvSmem(M, K)
	if err := c.smemAttr(name, f, smem); err != nil {
		return err
	}
	units := N
	if kind == GemvSwiGLU {
		units = N / 2
	}
	grid, upb, threads, err := c.gemvI8Grid(name, f, M, units, smem)
	if err != nil {
		return err
	}
	if err := c.launchPDL(f, Dim3{uint32(grid), 1, 1}, Dim3{uint32(threads), 1, 1}, smem,
		P(W), P(S), P(X), P(xrow), P(nw), F(eps), P(Y), I(N), I(K), I(upb)); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// GemvI8QKVRope is GemvQKVRope over an int8 fused QKV weight W (RopeRows
// order) with row scales S in the same order.
func (c *Ctx) GemvI8QKVRope(W, S, X, xrow, nw DevicePtr, eps float32, qkv, pos, slots, invFreq, kc, vc DevicePtr,
	M, H, nh, nkv, hd int) error {
	N := (nh + 2*nkv) * hd
	if M < 1 || M > GemvMaxM || H%16 != 0 || hd%2 != 0 || N <= 0 {
		return fmt.Errorf("gemv_i8_qkv_rope M=%d H=%d heads %d/%d hd %d (H must be a multiple of 16): %w", M, H, nh, nkv, hd, ErrBadArg)
	}
	return c.launchQuantQKVRope(c.gemvI8Name("gemv_i8_qkv_rope", M), W, S, X, xrow, nw, eps, qkv, pos, slots, invFreq, kc, vc, M, H, nh, nkv, hd)
}

// launchQuantQKVRope launches the weight-only fused QKV + RoPE + KV append
// kernel name (int8 or int4; same parameters) for M tokens.
func (c *Ctx) launchQuantQKVRope(name string, W, S, X, xrow, nw DevicePtr, eps float32, qkv, pos, slots, invFreq, kc, vc DevicePtr,
	M, H, nh, nkv, hd int) error {
	N := (nh + 2*nkv) * hd
	f, err := c.Func(name)
	if err != nil {
		return err
	}
	smem := GemvSmem(M, H)
	if err := c.smemAttr(name, f, smem); err != nil {
		return err
	}
	grid, upb, threads, err := c.gemvI8Grid(name, f, M, N/2, smem)
	if err != nil {
		return err
	}
	if err := c.launchPDL(f, Dim3{uint32(grid), 1, 1}, Dim3{uint32(threads), 1, 1}, smem,
		P(W), P(S), P(X), P(xrow), P(nw), F(eps), P(qkv), I(N), I(H), I(upb),
		P(pos), P(slots), P(invFreq), P(kc), P(vc), I(nh), I(nkv), I(hd)); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// DequantI8F16 writes out [N][K] fp16 = f16(S[n] * W[n][k]) (the cuBLAS
// path of batches larger than GemvMaxM). K must be a multiple of 16.
func (c *Ctx) DequantI8F16(W, S, out DevicePtr, N, K int) error {
	if N <= 0 || K <= 0 || K%16 != 0 {
		return fmt.Errorf("dequant_i8_f16 N=%d K=%d: %w", N, K, ErrBadArg)
	}
	chunks := N * K / 16
	g := Dim3{uint32(min(max((chunks+255)/256, 1), 8*max(c.d.SMs, 1))), 1, 1}
	return c.launchByNamePDL("dequant_i8_f16", g, Dim3{256, 1, 1}, 0, P(W), P(S), P(out), I(N), I(K))
}

// FillRandomI8 fills W [N][K] with int8 uniform in [-127, 127] and S [N]
// with scale/127 (benchmarks: the same weight distribution as FillRandomF16).
func (c *Ctx) FillRandomI8(W, S DevicePtr, N, K int, seed uint64, scale float32) error {
	n := int64(N) * int64(K)
	g := Dim3{uint32(min((n+255)/256, 65535)), 1, 1}
	return c.LaunchByName("fill_random_i8", g, Dim3{256, 1, 1}, 0, P(W), P(S), uint64(n), I(N), seed, F(scale))
}
