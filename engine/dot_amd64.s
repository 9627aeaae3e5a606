#include "textflag.h"

// func dotAVX2(a, b *float32, n int) float32
//
// Sums a[k]*b[k] for k in [0, n&^7) with FMA into four 8-lane accumulators
// (accumulator j takes the 8-float chunks 4i+j of each 32-float block; the
// chunks after the last full block go to accumulator 0), then reduces them
// as ((y0+y1)+(y2+y3)), low half + high half, then lanes (0+2, 1+3), then
// lane 0 + lane 1. The caller adds the n&7 tail.
TEXT ·dotAVX2(SB), NOSPLIT, $0-28
	MOVQ a+0(FP), SI
	MOVQ b+8(FP), DI
	MOVQ n+16(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

loop32:
	CMPQ CX, $32
	JL   loop8
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
	JMP  loop32

loop8:
	CMPQ CX, $8
	JL   reduce
	VMOVUPS 0(SI), Y4
	VFMADD231PS 0(DI), Y4, Y0
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JMP  loop8

reduce:
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

// func dot2AVX2(w, x0, x1 *float32, n int) (float32, float32)
//
// dotAVX2(w, x0, n) and dotAVX2(w, x1, n) with exactly its order of
// operations, loading each chunk of w once.
TEXT ·dot2AVX2(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), SI
	MOVQ x0+8(FP), DI
	MOVQ x1+16(FP), DX
	MOVQ n+24(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11

loop32:
	CMPQ CX, $32
	JL   loop8
	VMOVUPS 0(SI), Y4
	VMOVUPS 32(SI), Y5
	VMOVUPS 64(SI), Y6
	VMOVUPS 96(SI), Y7
	VFMADD231PS 0(DI), Y4, Y0
	VFMADD231PS 0(DX), Y4, Y8
	VFMADD231PS 32(DI), Y5, Y1
	VFMADD231PS 32(DX), Y5, Y9
	VFMADD231PS 64(DI), Y6, Y2
	VFMADD231PS 64(DX), Y6, Y10
	VFMADD231PS 96(DI), Y7, Y3
	VFMADD231PS 96(DX), Y7, Y11
	ADDQ $128, SI
	ADDQ $128, DI
	ADDQ $128, DX
	SUBQ $32, CX
	JMP  loop32

loop8:
	CMPQ CX, $8
	JL   reduce
	VMOVUPS 0(SI), Y4
	VFMADD231PS 0(DI), Y4, Y0
	VFMADD231PS 0(DX), Y4, Y8
	ADDQ $32, SI
	ADDQ $32, DI
	ADDQ $32, DX
	SUBQ $8, CX
	JMP  loop8

reduce:
	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VMOVHLPS X0, X0, X1
	VADDPS X1, X0, X0
	VMOVSHDUP X0, X1
	VADDSS X1, X0, X0
	MOVSS X0, ret+32(FP)

	VADDPS Y9, Y8, Y8
	VADDPS Y11, Y10, Y10
	VADDPS Y10, Y8, Y8
	VEXTRACTF128 $1, Y8, X9
	VADDPS X9, X8, X8
	VMOVHLPS X8, X8, X9
	VADDPS X9, X8, X8
	VMOVSHDUP X8, X9
	VADDSS X9, X8, X8
	VZEROUPPER
	MOVSS X8, ret1+36(FP)
	RET

// func dotAVX2H(w *uint16, x *float32, n int) float32
//
// dotAVX2 with a = w widened from IEEE binary16 (VCVTPH2PS, exact): the
// same operations on the same float32 values, half the bytes of w read.
TEXT ·dotAVX2H(SB), NOSPLIT, $0-28
	MOVQ w+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ n+16(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

loop32:
	CMPQ CX, $32
	JL   loop8
	VCVTPH2PS 0(SI), Y4
	VCVTPH2PS 16(SI), Y5
	VCVTPH2PS 32(SI), Y6
	VCVTPH2PS 48(SI), Y7
	VFMADD231PS 0(DI), Y4, Y0
	VFMADD231PS 32(DI), Y5, Y1
	VFMADD231PS 64(DI), Y6, Y2
	VFMADD231PS 96(DI), Y7, Y3
	ADDQ $64, SI
	ADDQ $128, DI
	SUBQ $32, CX
	JMP  loop32

loop8:
	CMPQ CX, $8
	JL   reduce
	VCVTPH2PS 0(SI), Y4
	VFMADD231PS 0(DI), Y4, Y0
	ADDQ $16, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JMP  loop8

reduce:
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

// func dot2AVX2H(w *uint16, x0, x1 *float32, n int) (float32, float32)
//
// dot2AVX2 with w widened from binary16.
TEXT ·dot2AVX2H(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), SI
	MOVQ x0+8(FP), DI
	MOVQ x1+16(FP), DX
	MOVQ n+24(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11

loop32:
	CMPQ CX, $32
	JL   loop8
	VCVTPH2PS 0(SI), Y4
	VCVTPH2PS 16(SI), Y5
	VCVTPH2PS 32(SI), Y6
	VCVTPH2PS 48(SI), Y7
	VFMADD231PS 0(DI), Y4, Y0
	VFMADD231PS 0(DX), Y4, Y8
	VFMADD231PS 32(DI), Y5, Y1
	VFMADD231PS 32(DX), Y5, Y9
	VFMADD231PS 64(DI), Y6, Y2
	VFMADD231PS 64(DX), Y6, Y10
	VFMADD231PS 96(DI), Y7, Y3
	VFMADD231PS 96(DX), Y7, Y11
	ADDQ $64, SI
	ADDQ $128, DI
	ADDQ $128, DX
	SUBQ $32, CX
	JMP  loop32

loop8:
	CMPQ CX, $8
	JL   reduce
	VCVTPH2PS 0(SI), Y4
	VFMADD231PS 0(DI), Y4, Y0
	VFMADD231PS 0(DX), Y4, Y8
	ADDQ $16, SI
	ADDQ $32, DI
	ADDQ $32, DX
	SUBQ $8, CX
	JMP  loop8

reduce:
	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VMOVHLPS X0, X0, X1
	VADDPS X1, X0, X0
	VMOVSHDUP X0, X1
	VADDSS X1, X0, X0
	MOVSS X0, ret+32(FP)

	VADDPS Y9, Y8, Y8
	VADDPS Y11, Y10, Y10
	VADDPS Y10, Y8, Y8
	VEXTRACTF128 $1, Y8, X9
	VADDPS X9, X8, X8
	VMOVHLPS X8, X8, X9
	VADDPS X9, X8, X8
	VMOVSHDUP X8, X9
	VADDSS X9, X8, X8
	VZEROUPPER
	MOVSS X8, ret1+36(FP)
	RET

// func axpyAVX2(y, x *float32, a float32, n int)
//
// y[k] = fma(a, x[k], y[k]) for k in [0, n&^7); the caller does the tail.
TEXT ·axpyAVX2(SB), NOSPLIT, $0-32
	MOVQ y+0(FP), DI
	MOVQ x+8(FP), SI
	VBROADCASTSS a+16(FP), Y0
	MOVQ n+24(FP), CX

loop8:
	CMPQ CX, $8
	JL   done
	VMOVUPS 0(DI), Y1
	VFMADD231PS 0(SI), Y0, Y1
	VMOVUPS Y1, 0(DI)
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JMP  loop8

done:
	VZEROUPPER
	RET

// func cpuidF16C() bool
TEXT ·cpuidF16C(SB), NOSPLIT, $0-1
	MOVL $1, AX
	XORL CX, CX
	CPUID
	SHRL $29, CX
	ANDL $1, CX
	MOVB CX, ret+0(FP)
	RET

// func dot4AVX512H(w *uint16, x *float32, stride, n int, out *float32)
//
// out[t] = dotAVX2H(w, x + t*stride, n) for t in [0, 4), bit for bit: each
// zmm accumulator holds two of dotAVX2's 8-lane accumulators (Z0 = acc0|acc1,
// Z1 = acc2|acc3 of token 0, ...), so every lane sees the same FMAs in the
// same order; the tail chunks and the reduction run on the 8-lane halves
// exactly as in dotAVX2. Each 32-element block of w is widened once for
// the four tokens.
TEXT ·dot4AVX512H(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ stride+16(FP), AX
	SHLQ $2, AX
	LEAQ (DI)(AX*1), DX
	LEAQ (DX)(AX*1), R8
	LEAQ (R8)(AX*1), R9
	MOVQ n+24(FP), CX
	MOVQ out+32(FP), BX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7

loop32:
	CMPQ CX, $32
	JL   split
	VCVTPH2PS 0(SI), Z8
	VCVTPH2PS 32(SI), Z9
	VFMADD231PS 0(DI), Z8, Z0
	VFMADD231PS 64(DI), Z9, Z1
	VFMADD231PS 0(DX), Z8, Z2
	VFMADD231PS 64(DX), Z9, Z3
	VFMADD231PS 0(R8), Z8, Z4
	VFMADD231PS 64(R8), Z9, Z5
	VFMADD231PS 0(R9), Z8, Z6
	VFMADD231PS 64(R9), Z9, Z7
	ADDQ $64, SI
	ADDQ $128, DI
	ADDQ $128, DX
	ADDQ $128, R8
	ADDQ $128, R9
	SUBQ $32, CX
	JMP  loop32

split:
	// acc1 of each token out of the upper halves before 256-bit writes clear them.
	VEXTRACTF64X4 $1, Z0, Y10
	VEXTRACTF64X4 $1, Z2, Y11
	VEXTRACTF64X4 $1, Z4, Y12
	VEXTRACTF64X4 $1, Z6, Y13

loop8:
	CMPQ CX, $8
	JL   reduce
	VCVTPH2PS 0(SI), Y14
	VFMADD231PS 0(DI), Y14, Y0
	VFMADD231PS 0(DX), Y14, Y2
	VFMADD231PS 0(R8), Y14, Y4
	VFMADD231PS 0(R9), Y14, Y6
	ADDQ $16, SI
	ADDQ $32, DI
	ADDQ $32, DX
	ADDQ $32, R8
	ADDQ $32, R9
	SUBQ $8, CX
	JMP  loop8

reduce:
	VEXTRACTF64X4 $1, Z1, Y15
	VADDPS Y10, Y0, Y0
	VADDPS Y15, Y1, Y1
	VADDPS Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X14
	VADDPS X14, X0, X0
	VMOVHLPS X0, X0, X14
	VADDPS X14, X0, X0
	VMOVSHDUP X0, X14
	VADDSS X14, X0, X0
	MOVSS X0, 0(BX)

	VEXTRACTF64X4 $1, Z3, Y15
	VADDPS Y11, Y2, Y2
	VADDPS Y15, Y3, Y3
	VADDPS Y3, Y2, Y2
	VEXTRACTF128 $1, Y2, X14
	VADDPS X14, X2, X2
	VMOVHLPS X2, X2, X14
	VADDPS X14, X2, X2
	VMOVSHDUP X2, X14
	VADDSS X14, X2, X2
	MOVSS X2, 4(BX)

	VEXTRACTF64X4 $1, Z5, Y15
	VADDPS Y12, Y4, Y4
	VADDPS Y15, Y5, Y5
	VADDPS Y5, Y4, Y4
	VEXTRACTF128 $1, Y4, X14
	VADDPS X14, X4, X4
	VMOVHLPS X4, X4, X14
	VADDPS X14, X4, X4
	VMOVSHDUP X4, X14
	VADDSS X14, X4, X4
	MOVSS X4, 8(BX)

	VEXTRACTF64X4 $1, Z7, Y15
	VADDPS Y13, Y6, Y6
	VADDPS Y15, Y7, Y7
	VADDPS Y7, Y6, Y6
	VEXTRACTF128 $1, Y6, X14
	VADDPS X14, X6, X6
	VMOVHLPS X6, X6, X14
	VADDPS X14, X6, X6
	VMOVSHDUP X6, X14
	VADDSS X14, X6, X6
	MOVSS X6, 12(BX)
	VZEROUPPER
	RET

// func dotsAVX2(q, base *float32, slots *int32, n, stride, hd int, out *float32)
//
// out[i] = dotAVX2(q, base + slots[i]*stride, hd) for i in [0, n); hd is a
// multiple of 8 (the attention scores of one query head against n keys).
TEXT ·dotsAVX2(SB), NOSPLIT, $0-56
	MOVQ q+0(FP), R10
	MOVQ base+8(FP), R11
	MOVQ slots+16(FP), R12
	MOVQ n+24(FP), R13
	MOVQ stride+32(FP), R8
	MOVQ hd+40(FP), R9
	MOVQ out+48(FP), BX

key:
	TESTQ R13, R13
	JEQ   end
	MOVLQSX (R12), AX
	IMULQ R8, AX
	LEAQ  (R11)(AX*4), DI
	MOVQ  R10, SI
	MOVQ  R9, CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

loop32:
	CMPQ CX, $32
	JL   loop8
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
	JMP  loop32

loop8:
	CMPQ CX, $8
	JL   reduce
	VMOVUPS 0(SI), Y4
	VFMADD231PS 0(DI), Y4, Y0
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JMP  loop8

reduce:
	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VMOVHLPS X0, X0, X1
	VADDPS X1, X0, X0
	VMOVSHDUP X0, X1
	VADDSS X1, X0, X0
	MOVSS X0, (BX)
	ADDQ  $4, BX
	ADDQ  $4, R12
	DECQ  R13
	JMP   key

end:
	VZEROUPPER
	RET

// func axpysAVX2(acc, base *float32, slots *int32, w *float32, n, stride, hd int)
//
// For i in [0, n), in order: acc[d] = fma(w[i], v_i[d], acc[d]) for d in
// [0, hd), v_i = base + slots[i]*stride; hd is a multiple of 8. Each
// element gets exactly the FMAs of n successive axpyAVX2 calls.
TEXT ·axpysAVX2(SB), NOSPLIT, $0-56
	MOVQ acc+0(FP), DI
	MOVQ base+8(FP), R11
	MOVQ slots+16(FP), R12
	MOVQ w+24(FP), R10
	MOVQ n+32(FP), R13
	MOVQ stride+40(FP), BX
	MOVQ hd+48(FP), R9
	XORQ DX, DX // d offset in floats

chunk32:
	MOVQ R9, CX
	SUBQ DX, CX
	CMPQ CX, $32
	JL   chunk8
	VMOVUPS 0(DI)(DX*4), Y0
	VMOVUPS 32(DI)(DX*4), Y1
	VMOVUPS 64(DI)(DX*4), Y2
	VMOVUPS 96(DI)(DX*4), Y3
	XORQ R8, R8

slot32:
	CMPQ R8, R13
	JGE  store32
	MOVLQSX (R12)(R8*4), AX
	IMULQ BX, AX
	ADDQ  DX, AX
	LEAQ  (R11)(AX*4), SI
	VBROADCASTSS (R10)(R8*4), Y4
	VFMADD231PS 0(SI), Y4, Y0
	VFMADD231PS 32(SI), Y4, Y1
	VFMADD231PS 64(SI), Y4, Y2
	VFMADD231PS 96(SI), Y4, Y3
	INCQ R8
	JMP  slot32

store32:
	VMOVUPS Y0, 0(DI)(DX*4)
	VMOVUPS Y1, 32(DI)(DX*4)
	VMOVUPS Y2, 64(DI)(DX*4)
	VMOVUPS Y3, 96(DI)(DX*4)
	ADDQ $32, DX
	JMP  chunk32

chunk8:
	CMPQ CX, $8
	JL   end
	VMOVUPS 0(DI)(DX*4), Y0
	XORQ R8, R8

slot8:
	CMPQ R8, R13
	JGE  store8
	MOVLQSX (R12)(R8*4), AX
	IMULQ BX, AX
	ADDQ  DX, AX
	LEAQ  (R11)(AX*4), SI
	VBROADCASTSS (R10)(R8*4), Y4
	VFMADD231PS 0(SI), Y4, Y0
	INCQ R8
	JMP  slot8

store8:
	VMOVUPS Y0, 0(DI)(DX*4)
	ADDQ $8, DX
	MOVQ R9, CX
	SUBQ DX, CX
	JMP  chunk8

end:
	VZEROUPPER
	RET
