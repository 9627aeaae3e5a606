package model

import (
	"errors"
	"math"
	"strings"
	"testing"
)

// Weights QuantizeI4 cannot represent are an error naming the row and
// column, never a silent NaN or zero: a NaN or infinite weight, and a
// group whose largest magnitude over 8 overflows binary16 (|m| >= 524,160:
// m/8 rounds to infinity, every q becomes 0 and s*q is NaN). The largest
// representable group (m/8 = 65504, binary16's maximum) still quantizes.
func TestQuantizeI4NonFinite(t *testing.T) {
	for _, c := range []struct {
		v    float32
		want string
	}{
		{float32(math.NaN()), "row 1, column 37"},
		{float32(math.Inf(1)), "row 1, column 37"},
		{float32(math.Inf(-1)), "row 1, column 37"},
		{6e5, "row 1, column 37"},
		{-524160, "row 1, column 37"},
	} {
		w := make([]float32, 2*64)
		for i := range w {
			w[i] = float32(i%7) * 0.01
		}
		w[64+37] = c.v
		p, s, err := QuantizeI4(NewF32(w, 2, 64))
		if !errors.Is(err, ErrBadWeights) || !strings.Contains(err.Error(), c.want) {
			d := DequantizeI4(p, s, 2, 64)
			t.Errorf("weight %v: err %v (want ErrBadWeights naming %q); dequantized %v", c.v, err, c.want, d[64+37])
		}
	}
	w := make([]float32, 32)
	w[3], w[4] = 524000, -1000
	p, s, err := QuantizeI4(NewF32(w, 1, 32))
	if err != nil {
		t.Fatal(err)
	}
	d := DequantizeI4(p, s, 1, 32)
	if d[3] != 524032 || d[4] != 0 {
		t.Fatalf("largest group: %v %v, want 524032 and 0", d[3], d[4])
	}
}
