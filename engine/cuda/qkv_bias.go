package cuda

import (
	"fmt"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/kernels"
)

// loadBias uploads layer l's q/k/v biases (Config.QKVBias: Qwen2) as one
// fp32 vector in kernels.RopeRows order, the row order of the fused QKV
// weight, so that it adds to the GEMV output before the RoPE kernel.
// Without QKVBias it does nothing (ly.bqkv stays 0). Random backends get
// zero biases.
func (b *Backend) loadBias(c *kernels.Ctx, w *engine.Weights, l int, ly *layer) error {
	cfg := b.cfg
	if !cfg.QKVBias {
		return nil
	}
	n := cfg.QDim() + 2*cfg.KVDim()
	p, err := b.alloc(c, 4*n)
	if err != nil {
		return err
	}
	b.weightBytes += int64(4 * n)
	ly.bqkv = p
	if b.opt.Random {
		return c.Memset32(p, 0, n)
	}
	lw := &w.Layers[l]
	std := append(append(append([]float32(nil), lw.Bq.Float32()...), lw.Bk.Float32()...), lw.Bv.Float32()...)
	if len(std) != n {
		return fmt.Errorf("cuda backend: layer %d: q/k/v biases have %d values, want %d: %w", l, len(std), n, engine.ErrBadWeights)
	}
	perm := make([]float32, 0, n)
	for _, r := range kernels.RopeRows(cfg.NumHeads, cfg.NumKVHeads, cfg.HeadDim) {
		perm = append(perm, std[r])
	}
	return kernels.Upload(c, p, perm)
}
