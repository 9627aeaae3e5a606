package kernels

import "testing"

// TestMMAPlanEveryShape: for every projection shape the tensor-core family
// takes on an H100 (227 KiB of opt-in shared memory) or an A100 (163 KiB),
// with one or four M-tiles per block, every step of 1 to GemvWideMaxM
// tokens has a launch whose shared memory fits (a matrix is on one family
// for every token count: a launch that does not fit would fail the step,
// not fall back to the CUDA-core GEMVs). No GPU needed.
func TestMMAPlanEveryShape(t *testing.T) {
	for _, smem := range []int{232448, 166912} {
		for _, tiles := range []int{1, mmaTiles} {
			tune, err := Tuning{GemvMMA: GemvMMAOn, GemvMMATiles: tiles}.withDefaults()
			if err != nil {
				t.Fatal(err)
			}
			c := &Ctx{d: &Device{Major: 9, MaxSmemOptin: smem, tune: tune}}
			for K := 64; K <= 16384; K += 64 {
				const N = 256
				if !c.useMMA(N, K) {
					continue
				}
				for M := 1; M <= GemvWideMaxM; M++ {
					_, tl, mpb, nt, sm, ok := c.mmaPlan(M, N, K)
					if !ok {
						t.Fatalf("smem %d tiles %d: K %d takes the tensor-core family, but no launch of %d tokens fits", smem, tiles, K, M)
					}
					if sm > smem-1024 || mpb < 16 || mpb > 16*tl || nt < 1 {
						t.Fatalf("smem %d tiles %d K %d M %d: launch mpb %d nt %d smem %d (tiles %d)", smem, tiles, K, M, mpb, nt, sm, tl)
					}
				}
			}
		}
	}
}
