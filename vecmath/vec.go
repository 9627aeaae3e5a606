// Package vecmath is the one float32/int8 vector-math helper of the module:
// dot products (AVX2+FMA on amd64, portable loops elsewhere), L2
// normalisation and symmetric int8 quantisation of embedding vectors. It
// imports nothing of ours, so the cache (which must not import engine), its
// stores and the BERT encoder share it. The engine's CPU backend keeps its
// own matmul kernel family (packed panels, fused attention), which is not a
// vector helper.
package vecmath

import "math"

// DotBlocksAVX2 returns Σ a[k]·b[k] over k < len(a)&^7 with the AVX2+FMA
// kernel: four 8-lane accumulators (accumulator j takes the 8-float chunks
// 4i+j of each 32-float block; the chunks after the last full block go to
// accumulator 0), reduced as ((y0+y1)+(y2+y3)), low half + high half, then
// lanes (0+2, 1+3), then lane 0 + lane 1. The caller adds the len(a)&7
// tail, and must call it only on a CPU with AVX2 and FMA (engine/cpu's dot
// does, so that both packages run one kernel). a must not be empty and b
// must hold len(a) values. Small enough to inline: attention scores call it
// per head and position.
func DotBlocksAVX2(a, b []float32) float32 {
	return dotF32AVX2(&a[0], &b[:len(a)][0], len(a)&^7)
}

// Dot returns the dot product of two equal-length vectors (cosine
// similarity for L2-normalized ones). It panics if b is shorter than a;
// only the first len(a) values of b are read.
func Dot(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	if useAVX2 && len(a) >= 64 {
		s0 = dotF32AVX2(&a[0], &b[0], len(a))
		i = len(a) &^ 7
	}
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return s0 + s1 + s2 + s3
}

// Normalize scales v to unit L2 norm in place (sum of squares in float64);
// a zero vector stays zero.
func Normalize(v []float32) {
	var ss float64
	for _, x := range v {
		ss += float64(x) * float64(x)
	}
	if ss == 0 {
		return
	}
	inv := float32(1 / math.Sqrt(ss))
	for i := range v {
		v[i] *= inv
	}
}

// DotI8 is the int8 dot product in int32 (AVX2 where the CPU has it).
// len(b) must be ≥ len(a).
func DotI8(a, b []int8) int32 { return dotI8(a, b) }

// QuantizeI8 writes v as int8 into dst (symmetric, one scale per vector:
// v[i] ≈ scale·dst[i], |dst[i]| ≤ 127) and returns the scale. dst beyond
// len(v) is zeroed.
func QuantizeI8(v []float32, dst []int8) float32 { return quantize(v, dst) }

// PrefetchLines asks the CPU to fetch the n bytes at p into cache (a no-op
// off amd64).
func PrefetchLines(p *int8, n int) { prefetchLines(p, n) }
