//go:build !amd64

package engine

// useAVX2 is false off amd64: the portable dot kernels run.
var useAVX2 = false

func dotAVX2(a, b *float32, n int) float32 { panic("engine: dotAVX2 off amd64") }

func dot2AVX2(w, x0, x1 *float32, n int) (float32, float32) { panic("engine: dot2AVX2 off amd64") }
