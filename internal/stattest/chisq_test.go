package stattest_test

import (
	"math"
	"testing"

	"github.com/specgate/specgate/internal/stattest"
)

// TestChi2CDF checks the CDF against printed chi-square tables and the
// closed form for 2 degrees of freedom.
func TestChi2CDF(t *testing.T) {
	cases := []struct {
		x    float64
		df   int
		want float64
	}{
		{3.841459, 1, 0.95},
		{6.634897, 1, 0.99},
		{0.454936, 1, 0.50},
		{5.991465, 2, 0.95},
		{11.070498, 5, 0.95},
		{15.086272, 5, 0.99},
		{23.209251, 10, 0.99},
		{3.940299, 10, 0.05},
		{43.772972, 30, 0.95},
		{124.342113, 100, 0.95},
		{70.064895, 100, 0.01},
	}
	for _, c := range cases {
		if got := stattest.Chi2CDF(c.x, c.df); math.Abs(got-c.want) > 1e-5 {
			t.Errorf("stattest.Chi2CDF(%v, %d) = %.7f, want %.5f", c.x, c.df, got, c.want)
		}
	}
	for _, x := range []float64{0.1, 1, 2.5, 7, 20} {
		if got, want := stattest.Chi2CDF(x, 2), 1-math.Exp(-x/2); math.Abs(got-want) > 1e-12 {
			t.Errorf("stattest.Chi2CDF(%v, 2) = %v, want %v", x, got, want)
		}
	}
	// chiSquare: a perfect fit has p = 1, a skewed one p ~ 0; zero-probability hits fail.
	if _, _, p := stattest.ChiSquare([]int{250, 250, 500}, []float64{0.25, 0.25, 0.5}); p < 0.999 {
		t.Errorf("perfect fit: p = %v", p)
	}
	if _, _, p := stattest.ChiSquare([]int{300, 200, 500}, []float64{0.25, 0.25, 0.5}); p > 1e-3 {
		t.Errorf("skewed fit: p = %v", p)
	}
	if _, _, p := stattest.ChiSquare([]int{1, 499, 500}, []float64{0, 0.5, 0.5}); p != 0 {
		t.Errorf("hit on a zero-probability bin: p = %v", p)
	}
}
