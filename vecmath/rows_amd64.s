#include "textflag.h"

// func dotI8RowsVNNI(qu *uint8, base *int8, stride int, n int, rows *int32, nrows int, out *int32)
//
// For each k < nrows: out[k] = Σ_{i<n} (int8(qu[i]^0x80)) · row[i], with
// row = base + rows[k]·stride, the int32 DotI8 returns. n is a positive
// multiple of 64. VPDPBUSD multiplies unsigned by signed bytes, so the
// query comes biased (qu[i] = q[i]+128) and the bias is taken out exactly
// per row: Σ (q+128)·x − 128·Σ x, the second sum from a VPDPBUSD with a
// vector of ones (no overflow: |each lane| ≤ 255·128·4·n/64 < 2^31 for
// n < 16 000). Every line of every row is prefetched before the first row
// is scored, so their cache misses overlap.
TEXT ·dotI8RowsVNNI(SB), NOSPLIT, $0-56
	MOVQ qu+0(FP), SI
	MOVQ base+8(FP), DI
	MOVQ stride+16(FP), R8
	MOVQ n+24(FP), R9
	MOVQ rows+32(FP), R10
	MOVQ nrows+40(FP), R11
	MOVQ out+48(FP), R12

	// Prefetch every row.
	XORQ BX, BX
pfrow:
	CMPQ BX, R11
	JGE  pfdone
	MOVLQSX (R10)(BX*4), AX
	IMULQ R8, AX
	ADDQ DI, AX
	MOVQ R9, CX
pfline:
	PREFETCHT0 (AX)
	ADDQ $64, AX
	SUBQ $64, CX
	JG   pfline
	INCQ BX
	JMP  pfrow
pfdone:

	// Z31 = 64 bytes of 1.
	MOVL $0x01010101, AX
	VPBROADCASTD AX, Z31

	XORQ BX, BX
row:
	CMPQ BX, R11
	JGE  done
	MOVLQSX (R10)(BX*4), AX
	IMULQ R8, AX
	ADDQ DI, AX
	MOVQ SI, DX
	MOVQ R9, CX
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
chunk:
	VMOVDQU64 (AX), Z4
	VMOVDQU64 (DX), Z5
	VPDPBUSD Z4, Z5, Z0
	VPDPBUSD Z4, Z31, Z2
	ADDQ $64, AX
	ADDQ $64, DX
	SUBQ $64, CX
	JLE  reduce
	VMOVDQU64 (AX), Z6
	VMOVDQU64 (DX), Z7
	VPDPBUSD Z6, Z7, Z1
	VPDPBUSD Z6, Z31, Z3
	ADDQ $64, AX
	ADDQ $64, DX
	SUBQ $64, CX
	JG   chunk
reduce:
	VPADDD Z1, Z0, Z0
	VPADDD Z3, Z2, Z2
	VPSLLD $7, Z2, Z2
	VPSUBD Z2, Z0, Z0
	VEXTRACTI64X4 $1, Z0, Y1
	VPADDD Y1, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPADDD X1, X0, X0
	VPSHUFD $0x4e, X0, X1
	VPADDD X1, X0, X0
	VPSHUFD $0xb1, X0, X1
	VPADDD X1, X0, X0
	MOVL X0, (R12)(BX*4)
	INCQ BX
	JMP  row
done:
	VZEROUPPER
	RET
