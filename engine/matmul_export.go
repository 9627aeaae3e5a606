package engine

// MatMulT computes out[t][o] = sum_k x[t][k] * w[o][k] for t in [0, T), o in
// [0, outDim): x is [T][in], w is [outDim][in] (nn.Linear layout), out is
// [T][outDim], all row-major float32; threads as in the CPU backend (0 =
// GOMAXPROCS). It is the CPU backend's own matmul (SIMD dot products, the
// weight rows read once per token tile), exported for the small extra
// projections of proposers that run beside the target (Medusa heads).
func MatMulT(threads int, out, x, w []float32, T, in, outDim int) {
	matmulT(threads, out, x, w, T, in, outDim)
}
