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

// TestQuantizeRounding: every component is math.Round(x·127/max|v|) (half
// away from zero), on random vectors and on values that land on and next to
// the halves, for both signs.
func TestQuantizeRounding(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	check := func(v []float32) {
		t.Helper()
		q := make([]int8, len(v))
		s := quantize(v, q)
		var m float32
		for _, x := range v {
			m = max(m, float32(math.Abs(float64(x))))
		}
		if s != m/127 {
			t.Fatalf("scale %v, want %v", s, m/127)
		}
		inv := 127 / m
		for i, x := range v {
			if want := int8(math.Round(float64(x * inv))); q[i] != want {
				t.Fatalf("component %d (%v, scaled %v): %d, want %d", i, x, x*inv, q[i], want)
			}
		}
	}
	for range 2000 {
		v := make([]float32, 1+r.IntN(600))
		for i := range v {
			v[i] = float32(r.NormFloat64() * math.Pow(10, float64(r.IntN(9)-4)))
		}
		check(v)
	}
	// With max 127 the scale is 1: components are their own scaled values.
	var v []float32
	for k := -127; k <= 127; k++ {
		h := float32(k) + 0.5
		v = append(v, h, math.Nextafter32(h, 0), math.Nextafter32(h, 200), float32(k), math.Nextafter32(float32(k), 0))
	}
	v = append(v, 127, -127, 1e-30, -1e-30, 0.49999997, -0.49999997)
	for i := range v {
		v[i] = max(min(v[i], 127), -127)
	}
	check(v)
}
