package kernels

import "fmt"

// Launchers for the draft-head kernels in medusa.cu (Medusa heads inside the
// target's forward; engine/cuda heads.go).

// HeadsTopKMax is the largest k HeadsTopK takes.
const HeadsTopKMax = 16

// headsRows is the rows per heads_resblock block (HEADS_HR in medusa.cu).
const headsRows = 8

// HeadsResBlock runs one residual block of nh heads over R rows:
// out[h][r] = x_h[r] + silu(W[h] x_h[r] + bias[h]), x_h = x + h*xHeadStride
// floats ([R][H]; stride 0: all heads read the same rows). W fp16 [nh][H][H],
// bias fp32 [nh][H], out fp32 [nh][R][H] (must not overlap x). H must be a
// multiple of 8.
func (c *Ctx) HeadsResBlock(x DevicePtr, xHeadStride int, W, bias, out DevicePtr, nh, R, H int) error {
	if nh < 1 || R < 1 || H < 8 || H%8 != 0 || xHeadStride < 0 {
		return fmt.Errorf("heads_resblock nh=%d R=%d H=%d: %w", nh, R, H, ErrBadArg)
	}
	const name = "heads_resblock"
	f, err := c.Func(name)
	if err != nil {
		return err
	}
	smem := headsRows * H * 4
	if err := c.smemAttr(name, f, smem); err != nil {
		return err
	}
	grid := Dim3{uint32((H + 7) / 8), uint32(nh), uint32((R + headsRows - 1) / headsRows)}
	if err := c.Launch(f, grid, Dim3{256, 1, 1}, smem, P(x), uint64(int64(xHeadStride)), P(W), P(bias), P(out), I(R), I(H)); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// HeadsTopK writes, for each of the nh*R rows of logits [nh*R][V] (row
// h*R + r: head h, hidden row r), the k largest entries' tokens, largest
// first (ties to the lower index, NaN as -inf): out[(r*nh + h)*k + j] =
// ids[idx] (ids != 0, int32 [V]) or idx. k in [1, HeadsTopKMax], k <= V.
func (c *Ctx) HeadsTopK(logits, ids, out DevicePtr, nh, R, V, k int) error {
	if nh < 1 || R < 1 || k < 1 || k > HeadsTopKMax || k > V {
		return fmt.Errorf("heads_topk nh=%d R=%d V=%d k=%d: %w", nh, R, V, k, ErrBadArg)
	}
	rows := nh * R
	return c.LaunchByName("heads_topk", Dim3{uint32((rows + 7) / 8), 1, 1}, Dim3{256, 1, 1}, 0,
		P(logits), P(ids), P(out), I(rows), I(R), I(nh), I(V), I(k))
}

// Fused path: HeadsNormResBlock and HeadsProjTopK (PDL-launched when the
// context's PDL is on, as inside a forward).

// headsTile is the vocabulary rows per heads_proj_tile block (HEADS_TILE).
const headsTile = 64

// HeadsTiles is the number of vocabulary tiles HeadsProjTopK splits V
// projection rows into; its candidate scratch holds nh*R*HeadsTiles(V)*k
// values and as many indices.
func HeadsTiles(V int) int { return (V + headsTile - 1) / headsTile }

// HeadsNormResBlock is HeadsResBlock over the final-normed rows
// rmsnorm(x[xrow[r]]) * nw (the same rows for every head).
func (c *Ctx) HeadsNormResBlock(x, xrow, nw DevicePtr, eps float32, W, bias, out DevicePtr, nh, R, H int) error {
	if nh < 1 || R < 1 || H < 8 || H%8 != 0 || xrow == 0 {
		return fmt.Errorf("heads_norm_resblock nh=%d R=%d H=%d: %w", nh, R, H, ErrBadArg)
	}
	const name = "heads_norm_resblock"
	f, err := c.Func(name)
	if err != nil {
		return err
	}
	smem := headsRows * H * 4
	if err := c.smemAttr(name, f, smem); err != nil {
		return err
	}
	grid := Dim3{uint32((H + 7) / 8), uint32(nh), uint32((R + headsRows - 1) / headsRows)}
	if err := c.launchPDL(f, grid, Dim3{256, 1, 1}, smem, P(x), P(xrow), P(nw), F(eps), P(W), P(bias), P(out), I(R), I(H)); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// HeadsProjTopK projects the nh*R head rows y [nh*R][H] (row h*R + r) onto
// V rows of fp16 proj (head h's at proj + h*projHeadStride elements;
// stride 0: one shared projection) and writes each row's k best tokens as
// HeadsTopK does, in two launches: per 64-row tile of 8 head rows the
// logits and the tile's top-k into cv/ci (nh*R*HeadsTiles(V)*k floats /
// ints), then their merge into out.
func (c *Ctx) HeadsProjTopK(y, proj DevicePtr, projHeadStride int, cv, ci, ids, out DevicePtr, nh, R, V, H, k int) error {
	if nh < 1 || R < 1 || H < 8 || H%8 != 0 || k < 1 || k > HeadsTopKMax || k > V || projHeadStride < 0 {
		return fmt.Errorf("heads_proj_tile nh=%d R=%d V=%d H=%d k=%d: %w", nh, R, V, H, k, ErrBadArg)
	}
	rows, tiles := nh*R, HeadsTiles(V)
	const name = "heads_proj_tile"
	f, err := c.Func(name)
	if err != nil {
		return err
	}
	smem := 8 * H * 4 // HEADS_PB rows of y
	if err := c.smemAttr(name, f, smem); err != nil {
		return err
	}
	if err := c.launchPDL(f, Dim3{uint32(tiles), uint32((rows + 7) / 8), 1}, Dim3{256, 1, 1}, smem,
		P(y), P(proj), uint64(int64(projHeadStride)), P(cv), P(ci), I(rows), I(R), I(V), I(H), I(k)); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return c.launchByNamePDL("heads_topk_merge", Dim3{uint32((rows + 7) / 8), 1, 1}, Dim3{256, 1, 1}, 0,
		P(cv), P(ci), P(ids), P(out), I(rows), I(R), I(nh), I(tiles*k), I(k))
}
