package cpu

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestMatInt8RoundTrip: Int8 gives back NewMatI8's values and scales
// (row counts on and off the 16-row panels), and nothing for a float32
// matrix.
func TestMatInt8RoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, shape := range [][2]int{{1, 1}, {16, 8}, {17, 5}, {40, 33}} {
		out, in := shape[0], shape[1]
		q := make([]int8, out*in)
		for i := range q {
			q[i] = int8(rng.IntN(256) - 128)
		}
		scale := make([]float32, out)
		for i := range scale {
			scale[i] = rng.Float32()
		}
		got, gs, ok := NewMatI8(slices.Clone(q), slices.Clone(scale), out, in).Int8()
		if !ok || !slices.Equal(got, q) || !slices.Equal(gs, scale) {
			t.Fatalf("%dx%d: Int8 = %v %v %v, want %v %v", out, in, ok, got, gs, q, scale)
		}
	}
	if _, _, ok := NewMat(make([]float32, 16), 4, 4).Int8(); ok {
		t.Fatal("a float32 matrix reports int8 values")
	}
}
