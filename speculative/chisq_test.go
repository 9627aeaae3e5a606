package speculative

import (
	"math"
	"testing"
)

// gammaP is the regularized lower incomplete gamma function P(a, x)
// (Numerical Recipes: series for x < a+1, Lentz continued fraction else).
func gammaP(a, x float64) float64 {
	if x <= 0 {
		return 0
	}
	lg, _ := math.Lgamma(a)
	if x < a+1 {
		sum, term := 1/a, 1/a
		for n := 1; n < 1000; n++ {
			term *= x / (a + float64(n))
			sum += term
			if math.Abs(term) < math.Abs(sum)*1e-15 {
				break
			}
		}
		return sum * math.Exp(-x+a*math.Log(x)-lg)
	}
	const tiny = 1e-300
	b := x + 1 - a
	c := 1 / tiny
	d := 1 / b
	h := d
	for i := 1; i < 1000; i++ {
		an := -float64(i) * (float64(i) - a)
		b += 2
		d = an*d + b
		if math.Abs(d) < tiny {
			d = tiny
		}
		c = b + an/c
		if math.Abs(c) < tiny {
			c = tiny
		}
		d = 1 / d
		del := d * c
		h *= del
		if math.Abs(del-1) < 1e-15 {
			break
		}
	}
	return 1 - math.Exp(-x+a*math.Log(x)-lg)*h
}

// chi2CDF is the chi-square CDF with df degrees of freedom.
func chi2CDF(x float64, df int) float64 { return gammaP(float64(df)/2, x/2) }

// chiSquare tests observed counts against probabilities: bins with an
// expected count below 5 are pooled into one bin. It returns the statistic,
// the degrees of freedom and the p-value (0 when a count falls where the
// probability is 0).
func chiSquare(counts []int, probs []float64) (stat float64, df int, p float64) {
	n := 0
	for _, c := range counts {
		n += c
	}
	var poolE float64
	poolO := 0
	bins := 0
	for i, c := range counts {
		e := probs[i] * float64(n)
		if probs[i] == 0 {
			if c > 0 {
				return math.Inf(1), 0, 0
			}
			continue
		}
		if e < 5 {
			poolE += e
			poolO += c
			continue
		}
		stat += (float64(c) - e) * (float64(c) - e) / e
		bins++
	}
	if poolE > 0 {
		stat += (float64(poolO) - poolE) * (float64(poolO) - poolE) / poolE
		bins++
	}
	df = bins - 1
	if df < 1 {
		return stat, df, 1
	}
	return stat, df, 1 - chi2CDF(stat, df)
}

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
		if got := chi2CDF(c.x, c.df); math.Abs(got-c.want) > 1e-5 {
			t.Errorf("chi2CDF(%v, %d) = %.7f, want %.5f", c.x, c.df, got, c.want)
		}
	}
	for _, x := range []float64{0.1, 1, 2.5, 7, 20} {
		if got, want := chi2CDF(x, 2), 1-math.Exp(-x/2); math.Abs(got-want) > 1e-12 {
			t.Errorf("chi2CDF(%v, 2) = %v, want %v", x, got, want)
		}
	}
	// chiSquare: a perfect fit has p = 1, a skewed one p ~ 0; zero-probability hits fail.
	if _, _, p := chiSquare([]int{250, 250, 500}, []float64{0.25, 0.25, 0.5}); p < 0.999 {
		t.Errorf("perfect fit: p = %v", p)
	}
	if _, _, p := chiSquare([]int{300, 200, 500}, []float64{0.25, 0.25, 0.5}); p > 1e-3 {
		t.Errorf("skewed fit: p = %v", p)
	}
	if _, _, p := chiSquare([]int{1, 499, 500}, []float64{0, 0.5, 0.5}); p != 0 {
		t.Errorf("hit on a zero-probability bin: p = %v", p)
	}
}
