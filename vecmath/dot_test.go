package vecmath

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestDotKernels checks the assembly dot products against plain loops on
// every length up to 300 (all tail cases), and quantize's bounds.
func TestDotKernels(t *testing.T) {
	if !useAVX2 {
		t.Skip("no AVX2+FMA on this CPU: the portable loops are the only path")
	}
	r := rand.New(rand.NewPCG(3, 4))
	for n := 0; n <= 300; n++ {
		a, b := make([]float32, n), make([]float32, n)
		qa, qb := make([]int8, n), make([]int8, n)
		var want float64
		var wantI int32
		for i := range a {
			a[i], b[i] = float32(r.NormFloat64()), float32(r.NormFloat64())
			want += float64(a[i]) * float64(b[i])
			qa[i], qb[i] = int8(r.IntN(255)-127), int8(r.IntN(255)-127)
			wantI += int32(qa[i]) * int32(qb[i])
		}
		useAVX2 = true
		got := Dot(a, b)
		gotI := dotI8(qa, qb)
		useAVX2 = false
		plain := Dot(a, b)
		plainI := dotI8(qa, qb)
		useAVX2 = true
		if math.Abs(float64(got)-want) > 1e-4*math.Sqrt(float64(n)+1) || math.Abs(float64(plain)-want) > 1e-4*math.Sqrt(float64(n)+1) {
			t.Errorf("n=%d: Dot AVX2 %v, plain %v, float64 %v", n, got, plain, want)
		}
		if gotI != wantI || plainI != wantI {
			t.Errorf("n=%d: dotI8 AVX2 %d, plain %d, want %d", n, gotI, plainI, wantI)
		}
	}
	// Extreme int8 values: no overflow at the largest dimension used.
	a := make([]int8, 4096)
	for i := range a {
		a[i] = -127
	}
	if got := dotI8(a, a); got != 127*127*4096 {
		t.Errorf("dotI8 of -127s = %d", got)
	}
}

func TestQuantize(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	v := make([]float32, 512)
	for i := range v {
		if r.IntN(5) == 0 {
			v[i] = float32(r.NormFloat64())
		}
	}
	q := make([]int8, 544)
	for i := range q {
		q[i] = 9 // must be cleared beyond len(v)
	}
	s := quantize(v, q)
	for i, x := range v {
		if d := math.Abs(float64(x - s*float32(q[i]))); d > float64(s)/2+1e-6 {
			t.Fatalf("component %d: %v vs %v·%d", i, x, s, q[i])
		}
	}
	for _, x := range q[512:] {
		if x != 0 {
			t.Fatal("padding not zero")
		}
	}
	if s := quantize(make([]float32, 8), q[:8]); s != 0 {
		t.Errorf("zero vector scale %v", s)
	}
}

// A b shorter than a panics instead of the AVX2 kernel reading past b's
// length (into its capacity, where a reslice would not catch it).
func TestDotI8ShortPanics(t *testing.T) {
	a, b := make([]int8, 64), make([]int8, 40, 64) // b's capacity would let a reslice pass
	defer func() {
		if recover() == nil {
			t.Fatal("DotI8 with len(b) < len(a) did not panic")
		}
	}()
	DotI8(a, b)
}
