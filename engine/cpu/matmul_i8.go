package cpu

import (
	"unsafe"

	"github.com/specgate/specgate/engine/model"
)

// Int8 weight-only matmul on the CPU (issue #15 point 5): a matrix keeps
// its int8 values (one float32 scale per output row) packed in the same
// 16-row panels as the binary16/float32 weights (packW), a quarter of the
// float32 bytes. The packed kernels (dot_gen.go, type "B") widen each
// panel row exactly (int8 -> int32 -> float32) in registers and run the
// same sequential FMA chain over k as the other weight types:
// acc[t][o] = sum_k float32(q[o][k]) * x[t][k]; the row scale multiplies
// acc once afterwards (scaleRows). Every output is therefore one fixed
// sequence of float32 operations whatever the batch and tiling, so the
// batch invariance of matmulJobs holds for int8 too. The portable path
// (no AVX2) sums in the same order (rowDot).

// wmatI8 is the int8 form of a wmat.
type wmatI8 struct {
	panels  []int8    // ceil(out/16) panels of in*16 values (packW's layout; rows past out are 0)
	scale   []float32 // [out]
	out, in int
}

// newWmatI8 packs q ([out][in] row-major int8) with its row scales.
func newWmatI8(q []int8, scale []float32, out, in int) wmat {
	if len(q) < out*in || len(scale) < out {
		panic("engine: int8 weight smaller than [out][in]")
	}
	np := (out + 15) / 16
	p := make([]int8, np*in*16)
	for o := range out {
		base := (o/16)*in*16 + o%16
		for k, v := range q[o*in : (o+1)*in] {
			p[base+k*16] = v
		}
	}
	return wmat{out: out, in: in, i8: &wmatI8{panels: p, scale: scale[:out], out: out, in: in}}
}

// rowDot is scale[o] * sum_k float32(q[o][k]) * x[k], summed in increasing
// k (the portable path; like dot for float32 weights it need not give the
// packed kernels' bits, only the same bits whatever the batch).
func (m *wmatI8) rowDot(o int, x []float32) float32 {
	base := (o/16)*m.in*16 + o%16
	p := m.panels[base : base+(m.in-1)*16+1]
	x = x[:m.in]
	var acc float32
	for k := range x {
		acc += float32(p[k*16]) * x[k]
	}
	return acc * m.scale[o]
}

// scaleRows multiplies out[t][o] by scale[o] for o in [lo, hi), t < T (the
// packed kernels' epilogue).
func (m *wmatI8) scaleRows(out []float32, T, outDim, lo, hi int) {
	sc := m.scale[lo:hi]
	for t := range T {
		row := out[t*outDim+lo : t*outDim+hi]
		for i, s := range sc {
			row[i] *= s
		}
	}
}

// i8panelPtr is the address of packed int8 panel q.
func (w *wmat) i8panelPtr(q int) unsafe.Pointer { return unsafe.Pointer(&w.i8.panels[q*w.in*16]) }

// newWmatT is newWmat for a typed tensor: I8 tensors keep their int8
// values (newWmatI8), others are widened to float32.
func newWmatT(t model.Tensor, out, in int, half bool) wmat {
	if t.DType == model.I8 {
		return newWmatI8(t.I8, t.Scales, out, in)
	}
	if t.DType == model.F16 && half && useAVX2 && hasF16C {
		return newWmatF16(t.Half, out, in) // matmul_f16.go: no float32 copy
	}
	return newWmat(t.Float32(), out, in, half)
}
