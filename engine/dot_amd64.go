package engine

import "golang.org/x/sys/cpu"

// useAVX2 selects the AVX2+FMA dot kernels (dot_amd64.s). Tests flip it to
// check both paths; it must not change while a forward runs.
var useAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA

//go:noescape
func dotAVX2(a, b *float32, n int) float32

//go:noescape
func dot2AVX2(w, x0, x1 *float32, n int) (float32, float32)
