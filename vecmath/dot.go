package vecmath

import "math"

// dotI8 is the int8 dot product in int32 (AVX2 where the CPU has it).
// len(b) must be ≥ len(a).
func dotI8(a, b []int8) int32 {
	var s int32
	i := 0
	if len(b) < len(a) { // the assembly below would read past b's length
		panic("vecmath: DotI8 with len(b) < len(a)")
	}
	if useAVX2 && len(a) >= 32 {
		s = dotI8AVX2(&a[0], &b[0], len(a))
		i = len(a) &^ 31
	}
	b = b[:len(a)]
	for ; i < len(a); i++ {
		s += int32(a[i]) * int32(b[i])
	}
	return s
}

// quantize writes v as int8 into dst (symmetric, one scale per vector:
// v[i] ≈ scale·dst[i], |dst[i]| ≤ 127) and returns the scale. dst beyond
// len(v) is zeroed.
func quantize(v []float32, dst []int8) float32 {
	var m float32
	for _, x := range v {
		if x < 0 {
			x = -x
		}
		if x > m {
			m = x
		}
	}
	clear(dst)
	if m == 0 {
		return 0
	}
	inv := 127 / m
	for i, x := range v {
		// math.Round (half away from zero) of y = x·inv, |y| ≤ 127: adding
		// ±0.5 in float64 and truncating is exact for a float32 y (its bits
		// stop at 2^-17 near a half, far above float64's rounding there), and
		// int8() truncates toward zero.
		y := float64(x * inv)
		dst[i] = int8(y + math.Copysign(0.5, y))
	}
	return m / 127
}
