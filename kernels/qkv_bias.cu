// add_bias_rows: x [T][N] fp32 += bias [N] fp32 on every row (the q/k/v
// projection biases of Qwen2, in the fused-QKV row order). grid-stride.
extern "C" __global__ void add_bias_rows(float* __restrict__ x, const float* __restrict__ bias, int N, int T) {
  pdl_trigger();
  pdl_wait();
  const long long n = (long long)T * N;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    x[i] += bias[i % N];
}
