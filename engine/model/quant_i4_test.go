package model

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/specgate/specgate/safetensors"
)

// One group by hand: the value of largest magnitude is 0.7, scale
// f16(0.7 / -8 = -0.0875) = -0.0875244140625 (binary16 0xAD9A; 0.0875 =
// 1.4 * 2^-4, mantissa 0.4 * 1024 = 409.6 -> 410). w / s in float32:
// 0.7 -> -7.9978 -> -8; -0.35 -> 3.9989 -> 4; 0.15 -> -1.7138 -> -2;
// 0.05 -> -0.5713 -> -1; -0.0499 -> 0.5701 -> 1; -0.69 -> 7.8835 -> 8,
// clamped to 7; 0.21881103515625 (2.5 * |s|, exact) -> -2.5 -> -3 and its
// negation -> 3 (ties away from zero); the rest 0. Bytes:
// (q0+8) | (q1+8)<<4. A second group of zeros: scale +0, q = 0.
func TestQuantizeI4ByHand(t *testing.T) {
	w := make([]float32, 64)
	copy(w, []float32{0.7, -0.35, 0.15, 0.05, -0.0499, -0.69, 0.21881103515625, -0.21881103515625})
	p, s, err := QuantizeI4(NewF32(w, 1, 64))
	if err != nil {
		t.Fatal(err)
	}
	if len(p) != 32 || len(s) != 2 {
		t.Fatalf("%d bytes, %d scales", len(p), len(s))
	}
	if s[0] != 0xAD9A || s[1] != 0 {
		t.Fatalf("scales %#04x %#04x, want 0xad9a 0", s[0], s[1])
	}
	const sc = -0.0875244140625
	if got := safetensors.F16ToFloat32(s[0]); got != sc {
		t.Fatalf("scale %v", got)
	}
	want := []byte{0xC0, 0x76, 0xF9, 0xB5}
	for i, b := range want {
		if p[i] != b {
			t.Fatalf("byte %d = %#02x, want %#02x", i, p[i], b)
		}
	}
	for i := len(want); i < 32; i++ {
		if p[i] != 0x88 {
			t.Fatalf("byte %d = %#02x, want 0x88 (two zeros)", i, p[i])
		}
	}
	d := DequantizeI4(p, s, 1, 64)
	for i, q := range []float32{-8, 4, -2, -1, 1, 7, -3, 3, 0} {
		if d[i] != q*sc {
			t.Fatalf("dequantized[%d] = %v, want %v", i, d[i], q*sc)
		}
	}
	if _, _, err := QuantizeI4(NewF32(make([]float32, 48), 1, 48)); !errors.Is(err, ErrBadWeights) {
		t.Fatalf("48 columns: %v", err)
	}
}

// Every value is within half a step |s| of its dequantized value, except
// values beyond 7.5 steps on the side opposite the group's extreme, which
// are clamped to 7 steps (at most one step off); the group's extreme maps
// to -8 steps; dequantized values never exceed the group's max |w| by more
// than the binary16 rounding of the scale.
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
	for g := 0; g < len(w)/I4Group; g++ {
		sc := float64(safetensors.F16ToFloat32(s[g]))
		var am float64
		extreme := -1
		for i := g * I4Group; i < (g+1)*I4Group; i++ {
			if a := math.Abs(float64(w[i])); a > am {
				am, extreme = a, i
			}
		}
		if q := float64(d[extreme]) / sc; q != -8 {
			t.Fatalf("group %d: extreme %v -> %v steps, want -8", g, w[extreme], q)
		}
		for i := g * I4Group; i < (g+1)*I4Group; i++ {
			v := float64(w[i])
			e := math.Abs(float64(d[i]) - v)
			clamped := float64(d[i]) == 7*sc && v/sc > 7.5
			if e > math.Abs(sc)/2*(1+1e-6) && !(clamped && e <= math.Abs(sc)) {
				t.Fatalf("w[%d] = %v -> %v: error %v > |scale|/2 %v", i, v, d[i], e, math.Abs(sc)/2)
			}
		}
	}
}
