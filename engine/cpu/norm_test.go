package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestRMSNormRowsBitIdentical: rmsNormRows (four rows' sums of squares
// interleaved) gives every row the bits of rmsNorm on that row alone, for
// 1..9 rows of random values of mixed magnitudes.
func TestRMSNormRowsBitIdentical(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const H = 384
	w := make([]float32, H)
	for i := range w {
		w[i] = float32(rng.NormFloat64())
	}
	for T := 1; T <= 9; T++ {
		x := make([]float32, T*H)
		for i := range x {
			x[i] = float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(7)-3)))
		}
		got, want := make([]float32, T*H), make([]float32, T*H)
		rmsNormRows(got, x, w, T, 1e-5)
		for r := range T {
			rmsNorm(want[r*H:(r+1)*H], x[r*H:(r+1)*H], w, 1e-5)
		}
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("T=%d: element %d = %v, rmsNorm %v", T, i, got[i], want[i])
			}
		}
	}
}
