package engine

import "golang.org/x/sys/cpu"

// useAVX2 selects the AVX2+FMA kernels (dot_amd64.s). Tests flip it to
// check both paths; it must not change while a forward runs.
var useAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// useAVX512 selects the 4-token binary16 kernel (dot4AVX512H).
var useAVX512 = useAVX2 && cpu.X86.HasAVX512F

// hasF16C: the CPU converts binary16 to float32 (VCVTPH2PS), which the
// half-weight kernels need on top of AVX2.
var hasF16C = cpuidF16C()

//go:noescape
func dotAVX2(a, b *float32, n int) float32

//go:noescape
func dot2AVX2(w, x0, x1 *float32, n int) (float32, float32)

//go:noescape
func dotAVX2H(w *uint16, x *float32, n int) float32

//go:noescape
func dot2AVX2H(w *uint16, x0, x1 *float32, n int) (float32, float32)

//go:noescape
func dot4AVX512H(w *uint16, x *float32, stride, n int, out *float32)

//go:noescape
func dotsAVX2(q, base *float32, slots *int32, n, stride, hd int, out *float32)

//go:noescape
func axpysAVX2(acc, base *float32, slots *int32, w *float32, n, stride, hd int)

//go:noescape
func axpyAVX2(y, x *float32, a float32, n int)

func cpuidF16C() bool
