package kernels

import "testing"

// The projection family per matrix shape (ops_mma.go useMMA): by default
// the tensor cores take the matrices of 384..1024 columns (every projection
// of the shipped target, hidden 384, intermediate 1024) and the CUDA-core
// GEMVs the others (the 1.1B shape; the draft's and the test configs'
// narrower ones, except the draft's down projection, K 512); GemvMMA on / off force
// one family for every shape the kernels take; never below sm_80 or for
// shapes the tensor-core kernels do not take. The batch size never enters.
func TestUseMMARule(t *testing.T) {
	dev := func(major int, tn Tuning) *Device {
		return &Device{Major: major, tune: mustDefaults(t, tn)}
	}
	def, on, off := dev(9, Tuning{}), dev(9, Tuning{GemvMMA: GemvMMAOn}), dev(9, Tuning{GemvMMA: GemvMMAOff})
	old := dev(7, Tuning{GemvMMA: GemvMMAOn})
	for _, c := range []struct {
		N, K         int
		def, on, off bool
	}{
		{640, 384, true, true, false},    // shipped target: qkv
		{384, 384, true, true, false},    // o_proj
		{2048, 384, true, true, false},   // gate/up
		{384, 1024, true, true, false},   // down
		{8192, 384, true, true, false},   // lm_head
		{2560, 2048, false, true, false}, // 1.1B: qkv
		{2048, 5632, false, true, false}, // 1.1B: down
		{136, 2048, false, true, false},
		{640, 192, false, true, false},  // draft: qkv
		{192, 512, true, true, false},   // draft: down
		{256, 128, false, true, false},  // engine test config (hidden 128)
		{100, 384, false, false, false}, // N % 8
		{640, 392, false, false, false}, // K % 64
	} {
		if got := def.UsesMMA(c.N, c.K); got != c.def {
			t.Errorf("default, %dx%d: tensor cores %v, want %v", c.N, c.K, got, c.def)
		}
		if got := on.UsesMMA(c.N, c.K); got != c.on {
			t.Errorf("GemvMMA on, %dx%d: tensor cores %v, want %v", c.N, c.K, got, c.on)
		}
		if got := off.UsesMMA(c.N, c.K); got != c.off {
			t.Errorf("GemvMMA off, %dx%d: tensor cores %v, want %v", c.N, c.K, got, c.off)
		}
		if old.UsesMMA(c.N, c.K) {
			t.Errorf("sm_70, %dx%d: tensor cores chosen", c.N, c.K)
		}
	}
}
