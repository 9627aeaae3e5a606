package cpu

import "golang.org/x/sys/cpu"

// useAVX2 selects the AVX2+FMA kernels (dot_amd64.s). Tests flip it to
// check both paths; it must not change while a forward runs.
var useAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// useAVX512 selects the AVX-512 packed matmul kernels (up to 8 tokens per
// pass) over the AVX2 ones (up to 6); both give the same bits.
var useAVX512 = useAVX2 && cpu.X86.HasAVX512F

// hasF16C: the CPU converts binary16 to float32 (VCVTPH2PS), which the
// binary16 packed kernels need on top of AVX2.
var hasF16C = cpuidF16C()

//go:noescape
func dot2AVX2(w, x0, x1 *float32, n int) (float32, float32)

//go:noescape
func dotsAVX2(q, base *float32, slots *int32, n, stride, hd int, out *float32)

//go:noescape
func axpysAVX2(acc, base *float32, slots *int32, w *float32, n, stride, hd int)

//go:noescape
func axpyAVX2(y, x *float32, a float32, n int)

func cpuidF16C() bool

//go:generate go run dot_gen.go

//go:noescape
func expAVX512(x *float32, n int)

//go:noescape
func softmaxAVX512(x *float32, n int, scale float32)

//go:noescape
func siluMulAVX512(gate, up *float32, n int)
