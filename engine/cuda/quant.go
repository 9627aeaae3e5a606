package cuda

import (
	"fmt"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/engine/model"
	"github.com/specgate/specgate/kernels"
)

// Int8 weight-only quantization on the GPU (issue #15 point 5). With
// Options.Quantize = engine.QuantInt8 (or int8 weights: an int8 checkpoint)
// every projection (fused QKV, o_proj, gate/up, down) and the LM head are
// stored as int8 with one fp32 scale per output row (model.QuantizeI8,
// applied to the rows in the order the kernels read them), and decode steps run the int8 GEMVs
// (kernels.GemvI8*). Larger batches dequantize each matrix to fp16 into a
// scratch buffer and run the same cuBLAS GEMM as fp16 weights. Embeddings
// and norms stay fp16; the fp16 LM head is kept too (the tied embedding
// table, or the untied head for callers that read b.lmHead), but decode
// streams the int8 copy.

// QuantInt4 (Options.Quantize) names int4 weight-only quantization,
// group-wise (model.QuantizeI4: groups of 32 columns, one fp16 scale
// each), a CUDA-only weight format: the projections and the LM head are
// quantized when they are uploaded; the engine and the CPU backend keep
// the float weights (engine.CheckQuantize does not know it).
const QuantInt4 = "int4"

// qmat is one weight matrix on the device: fp16 [rows][cols] when s == 0,
// else int8 [rows][cols] with fp32 row scales s [rows], or (i4) int4
// [rows][cols/2] bytes with fp16 group scales s [rows][cols/32].
type qmat struct {
	w, s kernels.DevicePtr
	i4   bool
}

// quantized reports whether the backend runs int8 or int4 weights.
func (b *Backend) quantized() bool { return b.opt.Quantize == engine.QuantInt8 || b.int4() }

// int4 reports whether the backend runs int4 weights.
func (b *Backend) int4() bool { return b.opt.Quantize == QuantInt4 }

// Quantization names the weight format of the projections: "fp16", "int8"
// or "int4".
func (b *Backend) Quantization() string {
	if b.quantized() {
		return b.opt.Quantize
	}
	return "fp16"
}

// checkQuantize validates Options.Quantize against cfg and returns it
// normalised: int8 weights (an int8 checkpoint, engine.QuantizeWeights)
// imply engine.QuantInt8.
func checkQuantize(cfg engine.Config, w *engine.Weights, q string) (string, error) {
	if q == QuantInt4 {
		if engine.Int8Weights(w) {
			return "", fmt.Errorf("cuda backend: int4 needs float weights, not an int8 checkpoint: %w", engine.ErrBadConfig)
		}
		if cfg.HiddenSize%kernels.I4Group != 0 || cfg.IntermediateSize%kernels.I4Group != 0 || cfg.QDim()%kernels.I4Group != 0 {
			return "", fmt.Errorf("cuda backend: int4 weights need hidden %d, intermediate %d and q dim %d to be multiples of %d: %w",
				cfg.HiddenSize, cfg.IntermediateSize, cfg.QDim(), kernels.I4Group, engine.ErrBadConfig)
		}
		return q, nil
	}
	if err := engine.CheckQuantize(q); err != nil {
		return "", fmt.Errorf("cuda backend: %w", err)
	}
	if engine.Int8Weights(w) {
		q = engine.QuantInt8
	}
	if q != engine.QuantInt8 {
		return "", nil
	}
	if cfg.HiddenSize%16 != 0 || cfg.IntermediateSize%16 != 0 || cfg.QDim()%16 != 0 {
		return "", fmt.Errorf("cuda backend: int8 weights need hidden %d, intermediate %d and q dim %d to be multiples of 16: %w",
			cfg.HiddenSize, cfg.IntermediateSize, cfg.QDim(), engine.ErrBadConfig)
	}
	return q, nil
}

// uploadMat uploads one projection [rows][cols] (the concatenation of
// parts, or random of the given scale when Random): fp16, or int8 with row
// scales when quantized. It also grows the dequantization scratch need.
func (b *Backend) uploadMat(c *kernels.Ctx, rows, cols int, scale float32, parts ...[]float32) (qmat, error) {
	if !b.quantized() {
		p, err := b.upload(c, rows*cols, scale, parts...)
		return qmat{w: p}, err
	}
	if b.int4() {
		return b.uploadMatI4(c, rows, cols, scale, parts...)
	}
	n := rows * cols
	w, err := b.alloc(c, n)
	if err != nil {
		return qmat{}, err
	}
	s, err := b.alloc(c, 4*rows)
	if err != nil {
		return qmat{}, err
	}
	b.weightBytes += int64(n + 4*rows)
	b.deqElems = max(b.deqElems, n)
	if b.opt.Random {
		b.opt.Seed += 0x9E3779B97F4A7C15
		return qmat{w: w, s: s}, c.FillRandomI8(w, s, rows, cols, b.opt.Seed, scale)
	}
	full := concat(n, parts...)
	if len(full) != n {
		return qmat{}, fmt.Errorf("upload: %d elements, want %d: %w", len(full), n, engine.ErrBadWeights)
	}
	// Per-row quantization commutes with the row permutations of the fused
	// matrices. Rows of an int8 checkpoint (already s*q) quantize back to
	// the same q (their scale within an ulp).
	m := model.QuantizeI8(model.NewF32(full, rows, cols))
	if err := kernels.Upload(c, w, m.I8); err != nil {
		return qmat{}, err
	}
	return qmat{w: w, s: s}, kernels.Upload(c, s, m.Scales)
}

// concat is the concatenation of parts (parts[0] itself when alone).
func concat(n int, parts ...[]float32) []float32 {
	if len(parts) == 1 {
		return parts[0]
	}
	full := make([]float32, 0, n)
	for _, p := range parts {
		full = append(full, p...)
	}
	return full
}

// uploadMatI4 is uploadMat for int4 weights: packed values [rows][cols/2]
// and fp16 group scales [rows][cols/32] (model.QuantizeI4 of the rows in
// the order the kernels read them: group-wise quantization commutes with
// the row permutations of the fused matrices).
func (b *Backend) uploadMatI4(c *kernels.Ctx, rows, cols int, scale float32, parts ...[]float32) (qmat, error) {
	n := rows * cols
	groups := n / kernels.I4Group
	w, err := b.alloc(c, n/2)
	if err != nil {
		return qmat{}, err
	}
	s, err := b.alloc(c, 2*groups)
	if err != nil {
		return qmat{}, err
	}
	b.weightBytes += int64(n/2 + 2*groups)
	b.deqElems = max(b.deqElems, n)
	if b.opt.Random {
		b.opt.Seed += 0x9E3779B97F4A7C15
		return qmat{w, s, true}, c.FillRandomI4(w, s, rows, cols, b.opt.Seed, scale)
	}
	full := concat(n, parts...)
	if len(full) != n {
		return qmat{}, fmt.Errorf("upload: %d elements, want %d: %w", len(full), n, engine.ErrBadWeights)
	}
	p, sc, err := model.QuantizeI4(model.NewF32(full, rows, cols))
	if err != nil {
		return qmat{}, err
	}
	if err := kernels.Upload(c, w, p); err != nil {
		return qmat{}, err
	}
	return qmat{w, s, true}, kernels.Upload(c, s, sc)
}

// qkvRopeQ is the fused QKV + RoPE + KV-append GEMV over a quantized QKV
// weight (int8 or int4).
func (b *Backend) qkvRopeQ(c *kernels.Ctx, W qmat, X, nw, qkv, pos, slots, invFreq, kc, vc kernels.DevicePtr,
	M, H, nh, nkv, hd int) error {
	if W.i4 {
		return c.GemvI4QKVRope(W.w, W.s, X, 0, nw, b.eps, qkv, pos, slots, invFreq, kc, vc, M, H, nh, nkv, hd)
	}
	return c.GemvI8QKVRope(W.w, W.s, X, 0, nw, b.eps, qkv, pos, slots, invFreq, kc, vc, M, H, nh, nkv, hd)
}

// allocDequant allocates the fp16 scratch the cuBLAS path dequantizes into.
func (b *Backend) allocDequant(c *kernels.Ctx) error {
	if b.deqElems == 0 || !kernels.HasCUBLAS() || b.opt.NoCUBLAS {
		return nil
	}
	var err error
	b.deq, err = b.alloc(c, 2*b.deqElems)
	return err
}

// mmQ is mm over a qmat: int8 GEMVs for batches that fit them; larger
// batches dequantize into b.deq and take mm's cuBLAS path, or (no cuBLAS)
// run the int8 GEMV in chunks.
func (b *Backend) mmQ(c *kernels.Ctx, kind kernels.GemvKind, W qmat, X, xrow, nw, Y kernels.DevicePtr, M, N, K int) error {
	if W.s == 0 {
		return b.mm(c, kind, W.w, X, xrow, nw, Y, M, N, K)
	}
	gemv, dequant := c.GemvI8, c.DequantI8F16
	if W.i4 {
		gemv, dequant = c.GemvI4, c.DequantI4F16
	}
	if M <= kernels.GemvMaxM && c.GemvFits(M, K) {
		return gemv(kind, W.w, W.s, X, xrow, nw, b.eps, Y, M, N, K)
	}
	if b.deq != 0 {
		if err := dequant(W.w, W.s, b.deq, N, K); err != nil {
			return err
		}
		return b.mm(c, kind, b.deq, X, xrow, nw, Y, M, N, K)
	}
	outW := N
	if kind == kernels.GemvSwiGLU {
		outW = N / 2
	}
	step := kernels.GemvMaxM
	for step > 0 && !c.GemvFits(step, K) {
		step--
	}
	if step == 0 {
		return fmt.Errorf("mm: K=%d does not fit shared memory and cuBLAS is absent: %w", K, kernels.ErrBadArg)
	}
	for m0 := 0; m0 < M; m0 += step {
		m := min(step, M-m0)
		x, xr := X, xrow
		if xrow != 0 {
			xr += kernels.DevicePtr(m0 * 4)
		} else {
			x += kernels.DevicePtr(m0 * K * 4)
		}
		if err := gemv(kind, W.w, W.s, x, xr, nw, b.eps, Y+kernels.DevicePtr(m0*outW*4), m, N, K); err != nil {
			return err
		}
	}
	return nil
}

// StreamBytes is the weight bytes one decode step reads: every projection,
// the LM head as decode reads it (int8 and scales when quantized), the
// norms; not the embedding table (one row per token).
func (b *Backend) StreamBytes() int64 {
	cfg := b.cfg
	H, I, V, L := int64(cfg.HiddenSize), int64(cfg.IntermediateSize), int64(cfg.VocabSize), int64(cfg.NumLayers)
	rows := L*(int64(b.qkvDim)+H+2*I) + V
	elems := L*(int64(b.qkvDim)*H+H*int64(cfg.QDim())+3*I*H) + V*H
	norms := (2*L + 1) * H * 2
	if b.int4() {
		return elems/2 + 2*elems/kernels.I4Group + norms
	}
	if b.quantized() {
		return elems + 4*rows + norms
	}
	return 2*elems + norms
}
