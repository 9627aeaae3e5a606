package kernels

import "testing"

// TestMMAPlanEveryShape: for every projection shape the tensor-core family
// takes, with block rows of 8, 16 or 64 tokens (Tuning.GemvMMATiles 1, 2, 4),
// every step of 1 to GemvWideMaxM tokens has a launch: at most 8 K parts
// (256 threads, the kernels' launch bound), token tiles covering the step
// (1 tile up to 8 tokens and at every M with GemvMMATiles 1, else 2 or,
// above 16 tokens with GemvMMATiles 4, 8),
// and shared memory within the 48 KiB any launch gets (a matrix is on one
// family for every token count: a launch that does not fit would fail the
// step, not fall back to the CUDA-core GEMVs). No GPU needed.
func TestMMAPlanEveryShape(t *testing.T) {
	for _, tiles := range []int{1, mmaRows16, mmaTiles} {
		tune, err := Tuning{GemvMMA: GemvMMAOn, GemvMMATiles: tiles}.withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		c := &Ctx{d: &Device{Major: 9, tune: tune}}
		for K := 64; K <= 16384; K += 64 {
			const N = 256
			if !c.useMMA(N, K) {
				continue
			}
			for M := 1; M <= GemvWideMaxM; M++ {
				ks, tt, sm, ok := c.mmaPlan(M, N, K)
				if !ok {
					t.Fatalf("tiles %d: K %d takes the tensor-core family, but no launch of %d tokens", tiles, K, M)
				}
				want := 2
				switch {
				case M <= 8 || tiles == 1:
					want = 1
				case M > 16 && tiles == mmaTiles:
					want = 8
				}
				if ks < 1 || ks > mmaMaxSplit || K%(32*ks) != 0 || tt != want || sm+1024 > 48<<10 {
					t.Fatalf("tiles %d K %d M %d: launch ks %d tt %d (want %d) smem %d", tiles, K, M, ks, tt, want, sm)
				}
			}
		}
	}
}
