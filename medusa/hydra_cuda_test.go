//go:build cuda

package medusa

import (
	"errors"
	"testing"
)

// TestHydraLosslessGreedyOnGPU: Hydra heads on the CUDA backend register
// no device heads (head 0 needs the pending token) and take the host path
// from the hidden rows the CUDA forward returns; greedy output equals plain
// CUDA greedy output on 20 prompts x 64 tokens (7-node trees: verification
// of <= 8 tokens on the batch-invariant path).
func TestHydraLosslessGreedyOnGPU(t *testing.T) {
	target := loadCUDATarget(t)
	dir := hydraDirForShipped(t)
	p, err := New(target, Spec{Heads: dir, Tree: "7"})
	if err != nil {
		t.Fatal(err)
	}
	if id := p.DeviceHeads(target.Backend()); id != 0 || !errors.Is(p.DeviceError(), ErrHydraOnHost) {
		t.Fatalf("Hydra heads on the CUDA backend: device id %d, DeviceError %v", id, p.DeviceError())
	}
	gen, steps, acc := gpuLossless(t, target, p, "hydra")
	t.Logf("%s: 20 prompts equal on the GPU; %d tokens, %d speculative steps, %d head tokens accepted (tau %.2f)", dir, gen, steps, acc, float64(gen)/float64(max(steps, 1)))
	if acc == 0 {
		t.Fatal("no Hydra token accepted on the GPU: hidden rows missing?")
	}
}
