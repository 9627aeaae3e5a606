// Package stattest holds the statistics the lossless-speculation tests
// share: the chi-square goodness-of-fit test.
package stattest

import "math"

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
func Chi2CDF(x float64, df int) float64 { return gammaP(float64(df)/2, x/2) }

// ChiSquare tests observed counts against probabilities: bins with an
// expected count below 5 are pooled into one bin. It returns the statistic,
// the degrees of freedom and the p-value (0 when a count falls where the
// probability is 0).
func ChiSquare(counts []int, probs []float64) (stat float64, df int, p float64) {
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
	return stat, df, 1 - Chi2CDF(stat, df)
}
