package kernels

import "fmt"

// Int4 weight-only launchers (llama_i8.cu, "int4"). A quantized matrix is
// W [N][K/2] bytes (byte j of a row: column 2j in the low nibble, 2j+1 in
// the high one, each as q+8 with q in [-8, 7]) plus fp16 group scales GS
// [N][K/32] (row n, group g: W[n][k] ~ GS[n][k/32] * q[n][k]); K must be a
// multiple of 32. Activations and accumulation are fp32 and the kinds,
// shapes and row orders are those of the fp16 and int8 GEMVs.

// I4Group is the int4 group size: columns per fp16 scale.
const I4Group = 32

var gemvI4Names = [...]string{"gemv_i4_norm", "gemv_i4_resid", "gemv_i4_plain", "gemv_i4_swiglu"}

// GemvI4 is Gemv over an int4 matrix W with group scales GS:
// Y[m] = (W · x_m) with x_m as for Gemv of the same kind. The kernels are
// batch-1 only: a batch of M tokens is M launches, one per token (each
// re-reads W), so a token's result is its batch-1 result bit for bit.
func (c *Ctx) GemvI4(kind GemvKind, W, GS, X, xrow, nw DevicePtr, eps float32, Y DevicePtr, M, N, K int) error {
	if kind < 0 || int(kind) >= len(gemvI4Names) || M < 1 || M > GemvMaxM || K%I4Group != 0 || K <= 0 || N <= 0 ||
		(kind == GemvSwiGLU && N%2 != 0) {
		return fmt.Errorf("gemv_i4 kind %d M=%d N=%d K=%d (K must be a multiple of %d): %w", kind, M, N, K, I4Group, ErrBadArg)
	}
	outW := N
	if kind == GemvSwiGLU {
		outW = N / 2
	}
	for m := 0; m < M; m++ {
		x, xr := X+DevicePtr(m*K*4), xrow
		if xrow != 0 {
			x, xr = X, xrow+DevicePtr(m*4)
		}
		if err := c.gemvI4One(kind, W, GS, x, xr, nw, eps, Y+DevicePtr(m*outW*4), N, K); err != nil {
			return err
		}
	}
	return nil
}

// gemvI4One is GemvI4 of one token.
func (c *Ctx) gemvI4One(kind GemvKind, W, GS, X, xrow, nw DevicePtr, eps float32, Y DevicePtr, N, K int) error {
	return c.launchQuantGemv(gemvI4Names[kind]+"_m1", kind, W, GS, X, xrow, nw, eps, Y, 1, N, K)
}

// GemvI4QKVRope is GemvQKVRope over an int4 fused QKV weight W (RopeRows
// order) with group scales GS in the same row order.
func (c *Ctx) GemvI4QKVRope(W, GS, X, xrow, nw DevicePtr, eps float32, qkv, pos, slots, invFreq, kc, vc DevicePtr,
	M, H, nh, nkv, hd int) error {
	N := (nh + 2*nkv) * hd
	if M < 1 || M > GemvMaxM || H%I4Group != 0 || H <= 0 || hd%2 != 0 || N <= 0 {
		return fmt.Errorf("gemv_i4_qkv_rope M=%d H=%d heads %d/%d hd %d (H must be a multiple of %d): %w", M, H, nh, nkv, hd, I4Group, ErrBadArg)
	}
	for m := 0; m < M; m++ { // batch-1 kernels, one launch per token (GemvI4)
		x, xr := X+DevicePtr(m*H*4), xrow
		if xrow != 0 {
			x, xr = X, xrow+DevicePtr(m*4)
		}
		off := DevicePtr(m * 4)
		if err := c.gemvI4QKVRopeOne(W, GS, x, xr, nw, eps, qkv+DevicePtr(m*N*4), pos+off, slots+off, invFreq, kc, vc,
			H, nh, nkv, hd); err != nil {
			return err
		}
	}
	return nil
}

// gemvI4QKVRopeOne is GemvI4QKVRope of one token.
func (c *Ctx) gemvI4QKVRopeOne(W, GS, X, xrow, nw DevicePtr, eps float32, qkv, pos, slots, invFreq, kc, vc DevicePtr,
	H, nh, nkv, hd int) error {
	return c.launchQuantQKVRope("gemv_i4_qkv_rope_m1", W, GS, X, xrow, nw, eps, qkv, pos, slots, invFreq, kc, vc, 1, H, nh, nkv, hd)
}

// DequantI4F16 writes out [N][K] fp16 = f16(GS[n][k/32] * q[n][k]) (the
// cuBLAS path of batches larger than GemvMaxM). K must be a multiple of 32.
func (c *Ctx) DequantI4F16(W, GS, out DevicePtr, N, K int) error {
	if N <= 0 || K <= 0 || K%I4Group != 0 {
		return fmt.Errorf("dequant_i4_f16 N=%d K=%d: %w", N, K, ErrBadArg)
	}
	groups := N * K / I4Group
	g := Dim3{uint32(min(max((groups+255)/256, 1), 8*max(c.d.SMs, 1))), 1, 1}
	return c.launchByNamePDL("dequant_i4_f16", g, Dim3{256, 1, 1}, 0, P(W), P(GS), P(out), I(N), I(K))
}

// FillRandomI4 fills W [N][K/2] with int4 values uniform in [-7, 7] and
// the group scales GS [N][K/32] with f16(scale/7) (benchmarks: the weight
// distribution of FillRandomF16).
func (c *Ctx) FillRandomI4(W, GS DevicePtr, N, K int, seed uint64, scale float32) error {
	if N <= 0 || K <= 0 || K%I4Group != 0 {
		return fmt.Errorf("fill_random_i4 N=%d K=%d: %w", N, K, ErrBadArg)
	}
	n := int64(N) * int64(K) / 2
	g := Dim3{uint32(min((n+255)/256, 65535)), 1, 1}
	return c.LaunchByName("fill_random_i4", g, Dim3{256, 1, 1}, 0, P(W), P(GS), uint64(n), uint64(int64(N)*int64(K/I4Group)), seed, F(scale))
}
