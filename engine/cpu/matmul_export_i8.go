package cpu

// NewMatI8 prepares an int8 weight-only matrix for proposers' extra
// projections (Medusa heads stored as int8): q is [out][in] row-major, one
// float32 scale per output row (w[o][k] = q[o][k] * scale[o]); MulT then
// runs the backend's int8 kernels (matmul_i8.go: a quarter of float32's
// bytes, each output (sum_k float32(q[o][k]) * x[k]) * scale[o]). q and
// scale are packed or aliased: do not modify them afterwards.
func NewMatI8(q []int8, scale []float32, out, in int) *Mat {
	return &Mat{w: newWmatI8(q, scale, out, in)}
}
