package vecmath

import "golang.org/x/sys/cpu"

// useAVX2 selects the assembly dot products (dot_amd64.s). Tests flip it to
// check both paths against each other.
var useAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA

//go:noescape
func dotF32AVX2(a, b *float32, n int) float32

//go:noescape
func dotI8AVX2(a, b *int8, n int) int32

//go:noescape
func prefetchLines(p *int8, n int)

// useVNNI selects the AVX-512 VNNI kernel of DotI8Rows (rows_amd64.s).
// Tests flip it to check both paths against each other.
var useVNNI = cpu.X86.HasAVX512F && cpu.X86.HasAVX512VNNI && cpu.X86.HasAVX512BW

//go:noescape
func dotI8RowsVNNI(qu *uint8, base *int8, stride, n int, rows *int32, nrows int, out *int32)
