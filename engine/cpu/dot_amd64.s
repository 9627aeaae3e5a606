#include "textflag.h"

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

// Constants of expAVX512 (Cephes expf): log2(e), ln2 split in two, the
// polynomial p0..p5 of exp(r) on [-ln2/2, ln2/2], 1, and the clamp range.
DATA expConsts<>+0(SB)/4, $0x3fb8aa3b  // log2(e)
DATA expConsts<>+4(SB)/4, $0x3f318000  // ln2 high part 0.693359375
DATA expConsts<>+8(SB)/4, $0xb95e8083  // ln2 low part -2.12194440e-4
DATA expConsts<>+12(SB)/4, $0x39506967 // 1.9875691500e-4
DATA expConsts<>+16(SB)/4, $0x3ab743ce // 1.3981999507e-3
DATA expConsts<>+20(SB)/4, $0x3c088908 // 8.3334519073e-3
DATA expConsts<>+24(SB)/4, $0x3d2aa9c1 // 4.1665795894e-2
DATA expConsts<>+28(SB)/4, $0x3e2aaaaa // 1.6666665459e-1
DATA expConsts<>+32(SB)/4, $0x3f000000 // 5.0000001201e-1
DATA expConsts<>+36(SB)/4, $0x3f800000 // 1
DATA expConsts<>+40(SB)/4, $0x42b0c0a5 // 88.3762626647949: exp overflows past it
DATA expConsts<>+44(SB)/4, $0xc2cff1b4 // -103.972076416: exp is 0 below it
DATA expConsts<>+48(SB)/4, $0xff800000 // -inf
GLOBL expConsts<>(SB), RODATA|NOPTR, $52

// EXPCONSTS loads expConsts into Z16..Z28.
#define EXPCONSTS \
	LEAQ expConsts<>(SB), AX \
	VBROADCASTSS 0(AX), Z16 \
	VBROADCASTSS 4(AX), Z17 \
	VBROADCASTSS 8(AX), Z18 \
	VBROADCASTSS 12(AX), Z19 \
	VBROADCASTSS 16(AX), Z20 \
	VBROADCASTSS 20(AX), Z21 \
	VBROADCASTSS 24(AX), Z22 \
	VBROADCASTSS 28(AX), Z23 \
	VBROADCASTSS 32(AX), Z24 \
	VBROADCASTSS 36(AX), Z25 \
	VBROADCASTSS 40(AX), Z26 \
	VBROADCASTSS 44(AX), Z27 \
	VBROADCASTSS 48(AX), Z28

// EXP16(X, N, T) sets X = exp(X) in 16 lanes (relative error about 1e-7;
// clamped to [-103.97, 88.38], so it never overflows to +Inf): X = n ln2 +
// r, exp(r) by the degree-7 polynomial r(r p(r) + 1) + 1, times 2^n
// (VSCALEFPS). N and T are scratch; needs EXPCONSTS.
#define EXP16(X, N, T) \
	VMINPS Z26, X, X \
	VMAXPS Z27, X, X \
	VMULPS Z16, X, N \
	VRNDSCALEPS $0, N, N \
	VFNMADD231PS Z17, N, X \
	VFNMADD231PS Z18, N, X \
	VMOVAPS Z19, T \
	VFMADD213PS Z20, X, T \
	VFMADD213PS Z21, X, T \
	VFMADD213PS Z22, X, T \
	VFMADD213PS Z23, X, T \
	VFMADD213PS Z24, X, T \
	VFMADD213PS Z25, X, T \
	VFMADD213PS Z25, X, T \
	VSCALEFPS N, T, X

// TAILMASK(n) sets K1 to the lanes of the last n%16 elements (0 if none)
// and BX to n/16; clobbers AX, CX, DX.
#define TAILMASK(n) \
	MOVQ n, BX \
	MOVQ BX, CX \
	ANDQ $15, CX \
	MOVQ $1, DX \
	SHLQ CX, DX \
	DECQ DX \
	KMOVW DX, K1 \
	SHRQ $4, BX

// func expAVX512(x *float32, n int)
//
// x[i] = exp(x[i]) for i in [0, n) with EXP16 (tests check it against
// math.Exp).
TEXT ·expAVX512(SB), NOSPLIT, $0-16
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), R8
	EXPCONSTS
	TAILMASK(R8)
	TESTQ BX, BX
	JEQ   tail

loop:
	VMOVUPS (SI), Z4
	EXP16(Z4, Z8, Z9)
	VMOVUPS Z4, (SI)
	ADDQ $64, SI
	DECQ BX
	JNZ  loop

tail:
	KORTESTW K1, K1
	JEQ      done
	VMOVUPS.Z (SI), K1, Z4
	EXP16(Z4, Z8, Z9)
	VMOVUPS Z4, K1, (SI)

done:
	VZEROUPPER
	RET

// func softmaxAVX512(x *float32, n int, scale float32)
//
// In place over x[0:n], n >= 1: x[i] *= scale; m = max x; x[i] = exp(x[i] -
// m) (EXP16); s = the sum of x (16 lanes, element i in lane i%16, then the
// lanes pairwise (i, i+8), (i, i+4), (i, i+2), (i, i+1)); x[i] *= 1/s. The
// same operations for every element whatever the row's neighbours are.
TEXT ·softmaxAVX512(SB), NOSPLIT, $0-20
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), R8
	VBROADCASTSS scale+16(FP), Z0
	EXPCONSTS
	TAILMASK(R8)
	MOVQ BX, R9

	// pass 1: scale, running max
	VMOVAPS Z28, Z1
	MOVQ SI, DI
	TESTQ BX, BX
	JEQ   tail1

loop1:
	VMULPS (DI), Z0, Z2
	VMOVUPS Z2, (DI)
	VMAXPS Z2, Z1, Z1
	ADDQ $64, DI
	DECQ BX
	JNZ  loop1

tail1:
	KORTESTW K1, K1
	JEQ      max
	VMOVAPS Z28, Z2
	VMOVUPS (DI), K1, Z2
	VMULPS  Z0, Z2, Z2
	VMOVUPS Z2, K1, (DI)
	VMAXPS  Z2, Z1, Z1

max:
	VEXTRACTF64X4 $1, Z1, Y2
	VMAXPS Y2, Y1, Y1
	VEXTRACTF128 $1, Y1, X2
	VMAXPS X2, X1, X1
	VPERMILPS $0x4e, X1, X2
	VMAXPS X2, X1, X1
	VPERMILPS $0xb1, X1, X2
	VMAXPS X2, X1, X1
	VBROADCASTSS X1, Z1

	// pass 2: exp(x - m), sum
	VPXORD Z3, Z3, Z3
	MOVQ SI, DI
	MOVQ R9, BX
	TESTQ BX, BX
	JEQ   tail2

loop2:
	VMOVUPS (DI), Z4
	VSUBPS Z1, Z4, Z4
	EXP16(Z4, Z8, Z9)
	VMOVUPS Z4, (DI)
	VADDPS Z4, Z3, Z3
	ADDQ $64, DI
	DECQ BX
	JNZ  loop2

tail2:
	KORTESTW K1, K1
	JEQ      sum
	VMOVUPS.Z (DI), K1, Z4
	VSUBPS Z1, Z4, Z4
	EXP16(Z4, Z8, Z9)
	VMOVUPS Z4, K1, (DI)
	VADDPS Z4, Z3, K1, Z3

sum:
	VEXTRACTF64X4 $1, Z3, Y2
	VADDPS Y2, Y3, Y3
	VEXTRACTF128 $1, Y3, X2
	VADDPS X2, X3, X3
	VMOVHLPS X3, X3, X2
	VADDPS X2, X3, X3
	VMOVSHDUP X3, X2
	VADDSS X2, X3, X3
	MOVL $0x3f800000, AX
	VMOVD AX, X5
	VDIVSS X3, X5, X5
	VBROADCASTSS X5, Z5

	// pass 3: normalize
	MOVQ SI, DI
	MOVQ R9, BX
	TESTQ BX, BX
	JEQ   tail3

loop3:
	VMULPS (DI), Z5, Z4
	VMOVUPS Z4, (DI)
	ADDQ $64, DI
	DECQ BX
	JNZ  loop3

tail3:
	KORTESTW K1, K1
	JEQ      done
	VMOVUPS.Z (DI), K1, Z4
	VMULPS  Z5, Z4, Z4
	VMOVUPS Z4, K1, (DI)

done:
	VZEROUPPER
	RET

// func siluMulAVX512(gate, up *float32, n int)
//
// g[i] = g[i] / (1 + exp(-g[i])) * u[i] for i in [0, n) (SiLU(gate) * up,
// exp by EXP16).
TEXT ·siluMulAVX512(SB), NOSPLIT, $0-24
	MOVQ gate+0(FP), SI
	MOVQ up+8(FP), DI
	MOVQ n+16(FP), R8
	EXPCONSTS
	TAILMASK(R8)
	VPXORD Z0, Z0, Z0
	TESTQ BX, BX
	JEQ   tail

loop:
	VMOVUPS (SI), Z4
	VSUBPS Z4, Z0, Z6
	EXP16(Z6, Z8, Z9)
	VADDPS Z25, Z6, Z6
	VDIVPS Z6, Z4, Z4
	VMULPS (DI), Z4, Z4
	VMOVUPS Z4, (SI)
	ADDQ $64, SI
	ADDQ $64, DI
	DECQ BX
	JNZ  loop

tail:
	KORTESTW K1, K1
	JEQ      done
	VMOVUPS.Z (SI), K1, Z4
	VMOVUPS.Z (DI), K1, Z7
	VSUBPS Z4, Z0, Z6
	EXP16(Z6, Z8, Z9)
	VADDPS Z25, Z6, Z6
	VDIVPS Z6, Z4, Z4
	VMULPS Z7, Z4, Z4
	VMOVUPS Z4, K1, (SI)

done:
	VZEROUPPER
	RET
