package model

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/specgate/specgate/safetensors"
)

// One group by hand: max |w| = 0.7, scale f16(0.1) = 0.0999755859375
// (binary16 0x2E66); 0.7/s = 7.0017 -> 7, -0.35/s = -3.5009 -> -4,
// 0.15/s = 1.5004 -> 2, 0.05/s = 0.50012 -> 1 (ties away from zero are
// not reached: these are just above .5), -0.0499/s = -0.4991 -> 0; the
// rest 0. Bytes: (q0+8) | (q1+8)<<4.
func TestQuantizeI4ByHand(t *testing.T) {
	w := make([]float32, 64)
	copy(w, []float32{0.7, -0.35, 0.15, 0.05, -0.0499})
	// second group: all zeros, scale 0
	p, s, err := QuantizeI4(NewF32(w, 1, 64))
	if err != nil {
		t.Fatal(err)
	}
	if len(p) != 32 || len(s) != 2 {
		t.Fatalf("%d bytes, %d scales", len(p), len(s))
	}
	if s[0] != 0x2E66 || s[1] != 0 {
		t.Fatalf("scales %#04x %#04x, want 0x2e66 0", s[0], s[1])
	}
	if got := safetensors.F16ToFloat32(s[0]); got != 0.0999755859375 {
		t.Fatalf("scale %v", got)
	}
	want := []byte{byte(7+8) | byte(-4+8)<<4, byte(2+8) | byte(1+8)<<4, byte(0+8) | byte(0+8)<<4}
	for i, b := range want {
		if p[i] != b {
			t.Fatalf("byte %d = %#02x, want %#02x", i, p[i], b)
		}
	}
	for i := 3; i < 32; i++ {
		if p[i] != 0x88 {
			t.Fatalf("byte %d = %#02x, want 0x88 (two zeros)", i, p[i])
		}
	}
	d := DequantizeI4(p, s, 1, 64)
	for i, v := range []float32{7 * 0.0999755859375, -4 * 0.0999755859375, 2 * 0.0999755859375, 0.0999755859375, 0} {
		if d[i] != v {
			t.Fatalf("dequantized[%d] = %v, want %v", i, d[i], v)
		}
	}
	if _, _, err := QuantizeI4(NewF32(make([]float32, 48), 1, 48)); !errors.Is(err, ErrBadWeights) {
		t.Fatalf("48 columns: %v", err)
	}
}

// Every value is within half a step of its group's scale (or clamped at
// ±7 steps when the binary16 scale rounded down), the group maximum maps
// to ±7 or ±6.5+ steps, and dequantized values stay in range.
func TestQuantizeI4Error(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const rows, cols = 7, 96
	w := make([]float32, rows*cols)
	for i := range w {
		w[i] = float32(r.NormFloat64()) * float32(math.Pow(10, float64(r.IntN(5)-3)))
	}
	p, s, err := QuantizeI4(NewF32(w, rows, cols))
	if err != nil {
		t.Fatal(err)
	}
	d := DequantizeI4(p, s, rows, cols)
	for i, v := range w {
		sc := float64(safetensors.F16ToFloat32(s[i/I4Group]))
		e := math.Abs(float64(d[i]) - float64(v))
		if e > sc/2*(1+1e-6) && !(math.Abs(float64(d[i])) == 7*sc && math.Abs(float64(v)) > 7*sc) {
			t.Fatalf("w[%d] = %v -> %v: error %v > scale/2 %v", i, v, d[i], e, sc/2)
		}
	}
}
