package cpu

import "github.com/specgate/specgate/safetensors"

// F16 tensors (typed weights, engine/model) on the packed path: the
// binary16 panels are packed straight from the tensor's bits, and no
// float32 copy is kept (the portable path, used only when a test turns the
// AVX2 kernels off after construction, widens from the panels). An fp16
// checkpoint then costs its F16 tensors plus the panels: 4 bytes per
// weight, where widening to float32 first kept 4 more.

// newWmatF16 packs bits ([out][in] binary16, row-major) into panels.
func newWmatF16(bits []uint16, out, in int) wmat {
	if len(bits) < out*in {
		panic("engine: weight smaller than [out][in]")
	}
	np := (out + 15) / 16
	p := make([]uint16, np*in*16)
	for o := range out {
		base := (o/16)*in*16 + o%16
		for k, v := range bits[o*in : (o+1)*in] {
			p[base+k*16] = v
		}
	}
	return wmat{out: out, in: in, h: p}
}

// halfRowDot is sum_k w[o][k]*x[k] over the binary16 panels, in increasing
// k (portable path of a panels-only matrix).
func (w *wmat) halfRowDot(o int, x []float32) float32 {
	base := (o/16)*w.in*16 + o%16
	p := w.h[base : base+(w.in-1)*16+1]
	x = x[:w.in]
	var acc float32
	for k := range x {
		acc += safetensors.F16ToFloat32(p[k*16]) * x[k]
	}
	return acc
}
