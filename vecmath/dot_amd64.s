#include "textflag.h"

// FMA into independent 8-lane accumulators, one horizontal reduction at the
// end. dotF32AVX2 is also engine/cpu's dot kernel (vecmath.DotBlocksAVX2).

// func dotF32AVX2(a, b *float32, n int) float32
//
// Sums a[k]*b[k] for k in [0, n&^7); the caller adds the n&7 tail.
TEXT ·dotF32AVX2(SB), NOSPLIT, $0-28
	MOVQ a+0(FP), SI
	MOVQ b+8(FP), DI
	MOVQ n+16(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

f32loop32:
	CMPQ CX, $32
	JL   f32loop8
	VMOVUPS 0(SI), Y4
	VMOVUPS 32(SI), Y5
	VMOVUPS 64(SI), Y6
	VMOVUPS 96(SI), Y7
	VFMADD231PS 0(DI), Y4, Y0
	VFMADD231PS 32(DI), Y5, Y1
	VFMADD231PS 64(DI), Y6, Y2
	VFMADD231PS 96(DI), Y7, Y3
	ADDQ $128, SI
	ADDQ $128, DI
	SUBQ $32, CX
	JMP  f32loop32

f32loop8:
	CMPQ CX, $8
	JL   f32reduce
	VMOVUPS 0(SI), Y4
	VFMADD231PS 0(DI), Y4, Y0
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JMP  f32loop8

f32reduce:
	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VMOVHLPS X0, X0, X1
	VADDPS X1, X0, X0
	VMOVSHDUP X0, X1
	VADDSS X1, X0, X0
	VZEROUPPER
	MOVSS X0, ret+24(FP)
	RET

// func dotI8AVX2(a, b *int8, n int) int32
//
// Sums a[k]*b[k] (int8 × int8 in int32) for k in [0, n&^31); the caller
// adds the tail. Each 16-byte half is sign-extended to 16 int16 lanes
// (VPMOVSXBW) and multiplied pairwise into 8 int32 lanes (VPMADDWD); no
// overflow: |a·b| ≤ 127·127·n < 2^31 for n < 133 000.
TEXT ·dotI8AVX2(SB), NOSPLIT, $0-28
	MOVQ a+0(FP), SI
	MOVQ b+8(FP), DI
	MOVQ n+16(FP), CX
	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1

i8loop32:
	CMPQ CX, $32
	JL   i8reduce
	VPMOVSXBW 0(SI), Y2
	VPMOVSXBW 0(DI), Y3
	VPMOVSXBW 16(SI), Y4
	VPMOVSXBW 16(DI), Y5
	VPMADDWD Y3, Y2, Y2
	VPMADDWD Y5, Y4, Y4
	VPADDD Y2, Y0, Y0
	VPADDD Y4, Y1, Y1
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $32, CX
	JMP  i8loop32

i8reduce:
	VPADDD Y1, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPADDD X1, X0, X0
	VPSHUFD $0x4e, X0, X1
	VPADDD X1, X0, X0
	VPSHUFD $0xb1, X0, X1
	VPADDD X1, X0, X0
	VZEROUPPER
	MOVL X0, ret+24(FP)
	RET

// func prefetchLines(p *int8, n int)
//
// Issues PREFETCHT0 for every 64-byte line of p[0:n] (n > 0): the HNSW
// search asks for all unvisited neighbours' vectors before scoring the
// first, so their cache misses overlap.
TEXT ·prefetchLines(SB), NOSPLIT, $0-16
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX

pfloop:
	PREFETCHT0 (SI)
	ADDQ $64, SI
	SUBQ $64, CX
	JG   pfloop
	RET
