// Int8 weight-only kernels (issue #15 point 5). Concatenated after
// llama.cu (Source sorts the file names), so its helpers are in scope.
// Weights are int8 row-major [N][K] with one fp32 scale per row (per output
// channel): W[n][k] ~ scale[n] * q[n][k], q in [-127, 127]. Activations and
// accumulation stay fp32; the scale multiplies each row's dot product once,
// after the warp sum.

// i8f: signed byte b of w, where w holds four int8 with their sign bits
// flipped (w ^ 0x80808080: byte = q + 128), as a float, exactly: the byte
// goes into the low mantissa bits of 2^23 (one PRMT), then 2^23 + 128 is
// subtracted (one FADD). No integer-to-float conversion unit involved.
__device__ __forceinline__ float i8f(u32 w, int b) {
  return __int_as_float(__byte_perm(w, 0x4B000000u, 0x7540 | b)) - 8388736.f;
}

// gemv_stage_i8: gemv_stage with the inputs stored for the int8 chunks:
// a lane reads 16 consecutive inputs per chunk, and lanes take consecutive
// chunks, so in the natural layout one float4 load by a warp would hit
// every fourth 16-byte bank group (4-way bank conflicts: measured as fast
// as fp16 weights, no faster). Here the float4 j (0..3) of chunk c of row
// m is stored at float4 index m*K/4 + j*(K/16) + c, so the lanes' loads of
// piece j are consecutive. Same values and norm scale as gemv_stage.
// SPLIT (norm kinds, more warps than tokens): the last M warps compute the
// norms while the others stage, so the two input round trips after
// pdl_wait overlap instead of following each other in the norm warps
// (the same code per token: same bits). SGS: staging loads per thread
// issued together (GEMV_STAGE_GS; 8 stages a 5632-wide row in one round).
// CW: columns per weight chunk (16 int8; 32 for the int4 chunks, whose
// 8 float4 pieces are stored at m*K/4 + j*(K/32) + c the same way).
template <int M, int NORM, int SPLIT = 0, int SGS = GEMV_STAGE_GS, int CW = 16>
__device__ __forceinline__ void gemv_stage_i8(const float* __restrict__ X, const int* __restrict__ xrow,
                                              const f16* __restrict__ nw, float eps, int K, float* xs, float* scale) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = blockDim.x >> 5;
  constexpr int G = GEMV_STAGE_G, GS = SGS;
  // CAN_SPLIT false: exactly the unsplit code (the checks below fold away;
  // at run time they cost the deep gate/up kernel 3 registers, which put
  // it over 128: one block per SM instead of two).
  constexpr bool CAN_SPLIT = SPLIT && NORM;
  const bool split = CAN_SPLIT && nwarps > M;
  const int sw = split ? nwarps - M : nwarps;  // warps that stage
  if (NORM) {
    for (int m = split ? warp - sw : warp; (!CAN_SPLIT || m >= 0) && m < M; m += nwarps) {
      const float* src = X + (size_t)(xrow ? xrow[m] : m) * K;
      float ss = 0.f;
      for (int k0 = lane * 4; k0 < K; k0 += 128 * G) {
        float4 v[G];
#pragma unroll
        for (int i = 0; i < G; i++)
          if (k0 + 128 * i < K) v[i] = *(const float4*)(src + k0 + 128 * i);
#pragma unroll
        for (int i = 0; i < G; i++)
          if (k0 + 128 * i < K) ss += v[i].x * v[i].x + v[i].y * v[i].y + v[i].z * v[i].z + v[i].w * v[i].w;
      }
      ss = warp_sum(ss);
      if (lane == 0) scale[m] = rsqrtf(ss / (float)K + eps);
    }
  }
  constexpr int CWS = CW == 32 ? 5 : 4;  // log2(CW)
  const int nvec = K >> CWS;
#pragma unroll
  for (int m = 0; m < M; m++) {
    if (CAN_SPLIT && warp >= sw) break;
    const float* src = X + (size_t)(xrow ? xrow[m] : m) * K;
    float4* dst = (float4*)(xs + m * K);
    const int step = CAN_SPLIT ? sw * 128 : blockDim.x * 4;
    for (int k0 = tid * 4; k0 < K; k0 += step * GS) {
      float4 v[GS];
      uint2 g[GS];
#pragma unroll
      for (int i = 0; i < GS; i++) {
        const int k = k0 + step * i;
        if (k < K) {
          v[i] = *(const float4*)(src + k);
          if (NORM) g[i] = *(const uint2*)(nw + k);
        }
      }
#pragma unroll
      for (int i = 0; i < GS; i++) {
        const int k = k0 + step * i;
        if (k >= K) break;
        if (NORM) {
          const float2 g0 = h2x2(g[i].x), g1 = h2x2(g[i].y);
          v[i].x *= g0.x; v[i].y *= g0.y; v[i].z *= g1.x; v[i].w *= g1.y;
        }
        dst[((k >> 2) & (CW / 4 - 1)) * nvec + (k >> CWS)] = v[i];
      }
    }
  }
  __syncthreads();
}

// gemv_dot_i8: acc[m] += one 16-byte chunk c of int8 weights (16 values at
// columns 16c ..) times the inputs of row m (gemv_stage_i8's layout),
// summed in increasing column (the bits of a row depend only on its
// chunks' order, as for the fp16 GEMVs).
template <int M>
__device__ __forceinline__ void gemv_dot_i8(const uint4 w, const float* xs, int K, int c, float (&acc)[M]) {
  const u32 a[4] = {w.x ^ 0x80808080u, w.y ^ 0x80808080u, w.z ^ 0x80808080u, w.w ^ 0x80808080u};
  float f[16];
#pragma unroll
  for (int j = 0; j < 4; j++)
#pragma unroll
    for (int b = 0; b < 4; b++) f[4 * j + b] = i8f(a[j], b);
#pragma unroll
  for (int m = 0; m < M; m++) {
    const float4* x = (const float4*)(xs + m * K) + c;
    const int nvec = K >> 4;
    float s = acc[m];
#pragma unroll
    for (int j = 0; j < 4; j++) {
      const float4 v = x[j * nvec];
      s = fmaf(f[4 * j], v.x, s);
      s = fmaf(f[4 * j + 1], v.y, s);
      s = fmaf(f[4 * j + 2], v.z, s);
      s = fmaf(f[4 * j + 3], v.w, s);
    }
    acc[m] = s;
  }
}

// gemv_i8_finish: the epilogue of unit u: warp-sum each row's partial
// dot products, multiply by the row scale wsc and the norm scale with
// explicit roundings (no contraction into the residual add, so every batch
// size gives the same bits) and store (gemv_store).
template <int M, int NORM, int MODE, int R>
__device__ __forceinline__ void gemv_i8_finish(float (&acc)[2][M], const float (&wsc)[R], const float* scale,
                                               const float (&yold)[M], int u, int lane, float* __restrict__ Y, int N,
                                               int units, const RopeArgs& ra, int mpos, int mslot, float minv) {
#pragma unroll
  for (int r = 0; r < R; r++)
#pragma unroll
    for (int m = 0; m < M; m++) {
      acc[r][m] = __fmul_rn(warp_sum(acc[r][m]), wsc[r]);
      if (NORM) acc[r][m] = __fmul_rn(acc[r][m], scale[m]);
    }
  gemv_store<M, MODE>(acc, yold, u, lane, Y, N, units, ra, mpos, mslot, minv);
}

// gemv_i8: the GEMV of llama.cu (same modes, same launch shape, same
// staging and epilogues) over int8 weights W [N][K] with row scales ws [N]
// (rows in the same order as the fp16 kernels expect: RopeRows for MODE 3,
// interleaved gate/up for MODE 2). K must be a multiple of 16; a lane reads
// 16-byte chunks (16 weights) of a row, D chunks per row in flight. The
// first unit's chunks and scales are loaded before pdl_wait.
// PIPE (for rows of at most 32*D chunks: one round per unit): the next
// unit's chunks and scales are loaded before this unit's are summed, so a
// warp always has a unit in flight (the fp16 kernels wait for each unit's
// loads in turn); the sums and their order are the same.
template <int M, int NORM, int MODE, int D, int PIPE = 0, int SPLIT = 0, int SGS = GEMV_STAGE_GS>
__device__ void gemv_i8(const signed char* __restrict__ W, const float* __restrict__ ws, const float* __restrict__ X,
                        const int* __restrict__ xrow, const f16* __restrict__ nw, float eps, float* __restrict__ Y,
                        int N, int K, int upb, RopeArgs ra) {
  extern __shared__ float4 smem4[];
  float* xs = (float*)smem4;
  __shared__ float scale[M];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = blockDim.x >> 5;
  constexpr int R = MODE >= 2 ? 2 : 1;
  const int units = MODE >= 2 ? N / 2 : N;
  const int u0 = blockIdx.x * upb, u1 = min(units, u0 + upb);
  const int nvec = K >> 4;
  uint4 q[R][D];
  float wsc[R];
  bool loaded = false;
  {
    const int u = u0 + warp;
    if (u < u1) {
#pragma unroll
      for (int r = 0; r < R; r++) {
        const uint4* wr = (const uint4*)(W + (size_t)(u * R + r) * K);
        wsc[r] = ws[u * R + r];
#pragma unroll
        for (int i = 0; i < D; i++)
          if (lane + 32 * i < nvec) q[r][i] = ldg_stream(wr + lane + 32 * i);
      }
      loaded = true;
    }
  }
  pdl_trigger();
  int mpos, mslot;
  gemv_rope_meta<M, MODE>(ra, lane, mpos, mslot);
  pdl_wait();
  gemv_stage_i8<M, NORM, SPLIT, SGS>(X, xrow, nw, eps, K, xs, scale);
  if (PIPE && nvec <= 32 * D) {
    for (int u = u0 + warp; u < u1; u += nwarps) {  // q, wsc hold unit u (loaded)
      const int un = u + nwarps;
      uint4 qn[R][D];
      float wn[R];
      if (un < u1) {
#pragma unroll
        for (int r = 0; r < R; r++) {
          const uint4* wr = (const uint4*)(W + (size_t)(un * R + r) * K);
          wn[r] = ws[un * R + r];
#pragma unroll
          for (int i = 0; i < D; i++)
            if (lane + 32 * i < nvec) qn[r][i] = ldg_stream(wr + lane + 32 * i);
        }
      }
      float yold[M];
      if (MODE == 1 && lane == 0) {
#pragma unroll
        for (int m = 0; m < M; m++) yold[m] = Y[(size_t)m * N + u];
      }
      const float minv = gemv_rope_freq<M, MODE>(ra, lane, u);
      float acc[2][M];
#pragma unroll
      for (int r = 0; r < 2; r++)
#pragma unroll
        for (int m = 0; m < M; m++) acc[r][m] = 0.f;
#pragma unroll
      for (int i = 0; i < D; i++) {
        if (lane + 32 * i >= nvec) break;
#pragma unroll
        for (int r = 0; r < R; r++) gemv_dot_i8<M>(q[r][i], xs, K, lane + 32 * i, acc[r]);
      }
      gemv_i8_finish<M, NORM, MODE, R>(acc, wsc, scale, yold, u, lane, Y, N, units, ra, mpos, mslot, minv);
#pragma unroll
      for (int r = 0; r < R; r++) {
        wsc[r] = wn[r];
#pragma unroll
        for (int i = 0; i < D; i++) q[r][i] = qn[r][i];
      }
    }
    return;
  }
  for (int u = u0 + warp; u < u1; u += nwarps) {
    float yold[M];
    if (MODE == 1 && lane == 0) {
#pragma unroll
      for (int m = 0; m < M; m++) yold[m] = Y[(size_t)m * N + u];
    }
    const float minv = gemv_rope_freq<M, MODE>(ra, lane, u);
    if (!loaded) {
#pragma unroll
      for (int r = 0; r < R; r++) wsc[r] = ws[u * R + r];
    }
    float acc[2][M];
#pragma unroll
    for (int r = 0; r < 2; r++)
#pragma unroll
      for (int m = 0; m < M; m++) acc[r][m] = 0.f;
    for (int v = lane; v < nvec; v += 32 * D) {
      if (!loaded) {
#pragma unroll
        for (int r = 0; r < R; r++) {
          const uint4* wr = (const uint4*)(W + (size_t)(u * R + r) * K);
#pragma unroll
          for (int i = 0; i < D; i++)
            if (v + 32 * i < nvec) q[r][i] = ldg_stream(wr + v + 32 * i);
        }
      }
      loaded = false;
#pragma unroll
      for (int i = 0; i < D; i++) {
        if (v + 32 * i >= nvec) break;
#pragma unroll
        for (int r = 0; r < R; r++) gemv_dot_i8<M>(q[r][i], xs, K, v + 32 * i, acc[r]);
      }
    }
    loaded = false;
    gemv_i8_finish<M, NORM, MODE, R>(acc, wsc, scale, yold, u, lane, Y, N, units, ra, mpos, mslot, minv);
  }
}

// Chunks in flight per lane and row. Deep (every M): 8, or 12 for the
// residual GEMVs (the 5632-wide down projection, 11 chunks per lane, in one
// round); the default at batch 1 too (faster in decode, docs/quantization.md).
// Shallow (batch 1): as many as a row of the 1.1B shape needs (4 for 2048
// inputs; 12 for the down projection), with the next unit loaded while one
// is summed (PIPE). Batch-1 experiments (Tuning.GemvI8, ops_i8.go): deep4
// (4 chunks per row except the residual kinds' 12, and at most 85
// registers so that 3 blocks of 8 warps fit on an SM: deep's 8 chunk
// slots cost registers a 2048-wide row never uses), deep4split and
// deepsplit (the same with SPLIT staging). The hybrid families take
// deep4split's kernels for the norm kinds and deep's residual kernel
// (hybrid) or gemv_i8_resid_rg8_m1 (hybrid8: deep's, staging a 5632-wide
// row in one round of loads instead of two).
#ifndef GEMV_I8_DEEP_D
#define GEMV_I8_DEEP_D 8
#endif
#ifndef GEMV_I8_DEEP_DR
#define GEMV_I8_DEEP_DR 12
#endif
#define GEMV_I8_ARGS                                                                                       \
  const signed char *W, const float *ws, const float *X, const int *xrow, const f16 *nw, float eps, float *Y, \
      int N, int K, int upb
// LB: GEMV_I8_LB (as llama.cu's GEMVs) or GEMV_I8_LB3 (at most 85
// registers). An explicit minimum of 1 block per SM is not the same as
// none: it let ptxas take 130-132 registers for the deep gate/up and qkv
// kernels instead of 126-128, one block of 8 warps per SM instead of two.
#define GEMV_I8_LB __launch_bounds__(256)
#define GEMV_I8_LB3 __launch_bounds__(256, 3)
#define GEMV_I8_INST(SFX, M, DN, DR, DG, PIPE, SPLIT, LB)                                                  \
  extern "C" __global__ void LB gemv_i8_norm##SFX##_m##M(GEMV_I8_ARGS) {           \
    gemv_i8<M, 1, 0, DN, PIPE, SPLIT>(W, ws, X, xrow, nw, eps, Y, N, K, upb, NO_ROPE);                       \
  }                                                                                                         \
  extern "C" __global__ void LB gemv_i8_resid##SFX##_m##M(GEMV_I8_ARGS) {          \
    gemv_i8<M, 0, 1, DR, PIPE, SPLIT>(W, ws, X, xrow, nw, eps, Y, N, K, upb, NO_ROPE);                       \
  }                                                                                                         \
  extern "C" __global__ void LB gemv_i8_plain##SFX##_m##M(GEMV_I8_ARGS) {          \
    gemv_i8<M, 0, 0, DN, PIPE, SPLIT>(W, ws, X, xrow, nw, eps, Y, N, K, upb, NO_ROPE);                       \
  }                                                                                                         \
  extern "C" __global__ void LB gemv_i8_swiglu##SFX##_m##M(GEMV_I8_ARGS) {         \
    gemv_i8<M, 1, 2, DG, PIPE, SPLIT>(W, ws, X, xrow, nw, eps, Y, N, K, upb, NO_ROPE);                       \
  }                                                                                                         \
  extern "C" __global__ void LB gemv_i8_qkv_rope##SFX##_m##M(                      \
      GEMV_I8_ARGS, const int* pos, const int* slots, const float* inv_freq, float* kc, float* vc, int nh,    \
      int nkv, int hd) {                                                                                    \
    gemv_i8<M, 1, 3, DG, PIPE, SPLIT>(W, ws, X, xrow, nw, eps, Y, N, K, upb,                                 \
                                      RopeArgs{pos, slots, inv_freq, kc, vc, nh, nkv, hd});                 \
  }
GEMV_I8_INST(_s, 1, 4, 12, 4, 1, 0, GEMV_I8_LB)
GEMV_I8_INST(_d4, 1, 4, 12, 4, 0, 0, GEMV_I8_LB3)
GEMV_I8_INST(_d4s, 1, 4, 12, 4, 0, 1, GEMV_I8_LB3)
GEMV_I8_INST(_ds, 1, GEMV_I8_DEEP_D, GEMV_I8_DEEP_DR, GEMV_I8_DEEP_D, 0, 1, GEMV_I8_LB)
extern "C" __global__ void __launch_bounds__(256) gemv_i8_resid_rg8_m1(GEMV_I8_ARGS) {
  gemv_i8<1, 0, 1, GEMV_I8_DEEP_DR, 0, 0, 8>(W, ws, X, xrow, nw, eps, Y, N, K, upb, NO_ROPE);
}
#define GEMV_I8_INST_D(M) GEMV_I8_INST(, M, GEMV_I8_DEEP_D, GEMV_I8_DEEP_DR, GEMV_I8_DEEP_D, 0, 0, GEMV_I8_LB)
GEMV_I8_INST_D(1)
GEMV_I8_INST_D(2)
GEMV_I8_INST_D(3)
GEMV_I8_INST_D(4)
GEMV_I8_INST_D(5)
GEMV_I8_INST_D(6)
GEMV_I8_INST_D(7)
GEMV_I8_INST_D(8)

// dequant_i8_f16: out[n][k] = f16(ws[n] * q[n][k]) for the cuBLAS path
// (batches above GemvMaxM tokens). Each thread converts 16 weights of one
// row; K a multiple of 16. Grid-stride over N*K/16 chunks.
extern "C" __global__ void dequant_i8_f16(const signed char* __restrict__ W, const float* __restrict__ ws,
                                          f16* __restrict__ out, int N, int K) {
  pdl_trigger();
  pdl_wait();
  const long long chunks = (long long)N * (K >> 4);
  const int cpr = K >> 4;
  for (long long c = blockIdx.x * (long long)blockDim.x + threadIdx.x; c < chunks;
       c += (long long)gridDim.x * blockDim.x) {
    const int n = (int)(c / cpr);
    const float s = ws[n];
    const uint4 w = ((const uint4*)W)[c];
    const u32 a[4] = {w.x ^ 0x80808080u, w.y ^ 0x80808080u, w.z ^ 0x80808080u, w.w ^ 0x80808080u};
    u32 h[8];
#pragma unroll
    for (int j = 0; j < 8; j++) {
      const f16 lo = f2h(s * i8f(a[j >> 1], 2 * (j & 1))), hi = f2h(s * i8f(a[j >> 1], 2 * (j & 1) + 1));
      h[j] = (u32)lo | ((u32)hi << 16);
    }
    uint4* o = (uint4*)(out + c * 16);
    o[0] = make_uint4(h[0], h[1], h[2], h[3]);
    o[1] = make_uint4(h[4], h[5], h[6], h[7]);
  }
}

// fill_random_i8: random int8 weights for benchmarks: q[i] uniform in
// [-127, 127] from a hash of (seed, i), row scales ws[n] = scale / 127, so
// W ~ scale * uniform(-1, 1) like fill_random_f16.
extern "C" __global__ void fill_random_i8(signed char* w, float* ws, long long n, int rows, unsigned long long seed,
                                          float scale) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    unsigned long long z = seed + (unsigned long long)i * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    w[i] = (signed char)((int)((z >> 40) % 255u) - 127);
    if (i < rows) ws[i] = scale / 127.f;
  }
}

// ---- int4 weight-only, group-wise (issue #15 point 5) ----
// A row of K weights is K/32 groups of 32; group g of row n holds
// q[n][32g + i] in [-8, 7] and one fp16 scale S[n][g] (either sign): W[n][k] ~
// S[n][k/32] * q[n][k]. Stored as bytes: byte j of a row holds column 2j
// in its low nibble and 2j+1 in its high one, each as q + 8 (0..15); one
// 16-byte chunk is one group. A lane reads a chunk and its scale, turns
// the nibbles into floats exactly (mask, one PRMT into the mantissa of
// 2^23, one FADD), sums the group's 32 products in a fixed order and adds
// the group sum times its scale (one FMA) to the row's accumulator: the
// same order for every batch size (batch invariance as in the int8 and
// fp16 GEMVs). Inputs are staged as gemv_stage_i8 with CW = 32.

__device__ __forceinline__ float i4f(u32 w, int b) {
  return __int_as_float(__byte_perm(w, 0x4B000000u, 0x7540 | b)) - 8388616.f;
}

// gemv_dot_i4: the group sum of chunk c times the inputs of row m,
// returned per row in g[m] (then scaled by the caller).
template <int M>
__device__ __forceinline__ void gemv_dot_i4(const uint4 w, const float* xs, int K, int c, float sc, float (&acc)[M]) {
  const u32 a[4] = {w.x, w.y, w.z, w.w};
  float f[32];
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const u32 lo = a[i] & 0x0F0F0F0Fu, hi = (a[i] >> 4) & 0x0F0F0F0Fu;
#pragma unroll
    for (int b = 0; b < 4; b++) {
      f[8 * i + 2 * b] = i4f(lo, b);
      f[8 * i + 2 * b + 1] = i4f(hi, b);
    }
  }
  const int nvec = K >> 5;
#pragma unroll
  for (int m = 0; m < M; m++) {
    const float4* x = (const float4*)(xs + m * K) + c;
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < 8; j++) {
      const float4 v = x[j * nvec];
      s = fmaf(f[4 * j], v.x, s);
      s = fmaf(f[4 * j + 1], v.y, s);
      s = fmaf(f[4 * j + 2], v.z, s);
      s = fmaf(f[4 * j + 3], v.w, s);
    }
    acc[m] = fmaf(s, sc, acc[m]);
  }
}

// gemv_i4: gemv_i8 (same modes, launch shape, staging and epilogue; no
// row scale) over int4 weights W [N][K/2] bytes with fp16 group scales GS
// [N][K/32]. K must be a multiple of 32; D chunks per lane and row in
// flight; the first unit's chunks and scales are loaded before pdl_wait.
template <int M, int NORM, int MODE, int D>
__device__ void gemv_i4(const unsigned char* __restrict__ W, const unsigned short* __restrict__ GS,
                        const float* __restrict__ X, const int* __restrict__ xrow, const f16* __restrict__ nw, float eps,
                        float* __restrict__ Y, int N, int K, int upb, RopeArgs ra) {
  extern __shared__ float4 smem4[];
  float* xs = (float*)smem4;
  __shared__ float scale[M];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = blockDim.x >> 5;
  constexpr int R = MODE >= 2 ? 2 : 1;
  const int units = MODE >= 2 ? N / 2 : N;
  const int u0 = blockIdx.x * upb, u1 = min(units, u0 + upb);
  const int nvec = K >> 5;
  uint4 q[R][D];
  unsigned short qs[R][D];
  bool loaded = false;
  {
    const int u = u0 + warp;
    if (u < u1) {
#pragma unroll
      for (int r = 0; r < R; r++) {
        const uint4* wr = (const uint4*)(W + (size_t)(u * R + r) * (K >> 1));
        const unsigned short* sr = GS + (size_t)(u * R + r) * nvec;
#pragma unroll
        for (int i = 0; i < D; i++)
          if (lane + 32 * i < nvec) {
            q[r][i] = ldg_stream(wr + lane + 32 * i);
            qs[r][i] = sr[lane + 32 * i];
          }
      }
      loaded = true;
    }
  }
  pdl_trigger();
  int mpos, mslot;
  gemv_rope_meta<M, MODE>(ra, lane, mpos, mslot);
  pdl_wait();
  gemv_stage_i8<M, NORM, NORM, GEMV_STAGE_GS, 32>(X, xrow, nw, eps, K, xs, scale);
  float wsc[R];  // no row scale: the group scales are applied per chunk
#pragma unroll
  for (int r = 0; r < R; r++) wsc[r] = 1.f;
  for (int u = u0 + warp; u < u1; u += nwarps) {
    float yold[M];
    if (MODE == 1 && lane == 0) {
#pragma unroll
      for (int m = 0; m < M; m++) yold[m] = Y[(size_t)m * N + u];
    }
    const float minv = gemv_rope_freq<M, MODE>(ra, lane, u);
    float acc[2][M];
#pragma unroll
    for (int r = 0; r < 2; r++)
#pragma unroll
      for (int m = 0; m < M; m++) acc[r][m] = 0.f;
    for (int v = lane; v < nvec; v += 32 * D) {
      if (!loaded) {
#pragma unroll
        for (int r = 0; r < R; r++) {
          const uint4* wr = (const uint4*)(W + (size_t)(u * R + r) * (K >> 1));
          const unsigned short* sr = GS + (size_t)(u * R + r) * nvec;
#pragma unroll
          for (int i = 0; i < D; i++)
            if (v + 32 * i < nvec) {
              q[r][i] = ldg_stream(wr + v + 32 * i);
              qs[r][i] = sr[v + 32 * i];
            }
        }
      }
      loaded = false;
#pragma unroll
      for (int i = 0; i < D; i++) {
        if (v + 32 * i >= nvec) break;
#pragma unroll
        for (int r = 0; r < R; r++)
          gemv_dot_i4<M>(q[r][i], xs, K, v + 32 * i, h2f(qs[r][i]), acc[r]);
      }
    }
    loaded = false;
    gemv_i8_finish<M, NORM, MODE, R>(acc, wsc, scale, yold, u, lane, Y, N, units, ra, mpos, mslot, minv);
  }
}

#define GEMV_I4_ARGS                                                                                             \
  const unsigned char *W, const unsigned short *GS, const float *X, const int *xrow, const f16 *nw, float eps, \
      float *Y, int N, int K, int upb
#define GEMV_I4_INST(M)                                                                                      \
  extern "C" __global__ void __launch_bounds__(256) gemv_i4_norm_m##M(GEMV_I4_ARGS) {                        \
    gemv_i4<M, 1, 0, 4>(W, GS, X, xrow, nw, eps, Y, N, K, upb, NO_ROPE);                                     \
  }                                                                                                          \
  extern "C" __global__ void __launch_bounds__(256) gemv_i4_resid_m##M(GEMV_I4_ARGS) {                       \
    gemv_i4<M, 0, 1, 6>(W, GS, X, xrow, nw, eps, Y, N, K, upb, NO_ROPE);                                     \
  }                                                                                                          \
  extern "C" __global__ void __launch_bounds__(256) gemv_i4_plain_m##M(GEMV_I4_ARGS) {                       \
    gemv_i4<M, 0, 0, 4>(W, GS, X, xrow, nw, eps, Y, N, K, upb, NO_ROPE);                                     \
  }                                                                                                          \
  extern "C" __global__ void __launch_bounds__(256) gemv_i4_swiglu_m##M(GEMV_I4_ARGS) {                      \
    gemv_i4<M, 1, 2, 4>(W, GS, X, xrow, nw, eps, Y, N, K, upb, NO_ROPE);                                     \
  }                                                                                                          \
  extern "C" __global__ void __launch_bounds__(256) gemv_i4_qkv_rope_m##M(                                   \
      GEMV_I4_ARGS, const int* pos, const int* slots, const float* inv_freq, float* kc, float* vc, int nh,    \
      int nkv, int hd) {                                                                                     \
    gemv_i4<M, 1, 3, 4>(W, GS, X, xrow, nw, eps, Y, N, K, upb, RopeArgs{pos, slots, inv_freq, kc, vc, nh, nkv, hd}); \
  }
// Batch 1 only: GemvI4 runs a batch of M tokens as M launches (each
// token's bits are its batch-1 bits; 40 instantiations for batches 1-8
// tripled the NVRTC time of the sources).
GEMV_I4_INST(1)

// dequant_i4_f16: out[n][k] = f16(S[n][k/32] * q[n][k]) for the cuBLAS
// path (batches above GemvMaxM tokens). Each thread converts one 32-weight
// group. Grid-stride over N*K/32 groups.
extern "C" __global__ void dequant_i4_f16(const unsigned char* __restrict__ W, const unsigned short* __restrict__ GS,
                                          f16* __restrict__ out, int N, int K) {
  pdl_trigger();
  pdl_wait();
  const long long groups = (long long)N * (K >> 5);
  for (long long g = blockIdx.x * (long long)blockDim.x + threadIdx.x; g < groups;
       g += (long long)gridDim.x * blockDim.x) {
    const float s = h2f(GS[g]);
    const uint4 w = ((const uint4*)W)[g];
    const u32 a[4] = {w.x, w.y, w.z, w.w};
    u32 h[16];
#pragma unroll
    for (int i = 0; i < 4; i++) {
      const u32 lo = a[i] & 0x0F0F0F0Fu, hi = (a[i] >> 4) & 0x0F0F0F0Fu;
#pragma unroll
      for (int b = 0; b < 4; b++)
        h[4 * i + b] = (u32)f2h(s * i4f(lo, b)) | ((u32)f2h(s * i4f(hi, b)) << 16);
    }
    uint4* o = (uint4*)(out + g * 32);
#pragma unroll
    for (int j = 0; j < 4; j++) o[j] = make_uint4(h[4 * j], h[4 * j + 1], h[4 * j + 2], h[4 * j + 3]);
  }
}

// fill_random_i4: random int4 weights for benchmarks: nibbles uniform in
// [1, 15] (q in [-7, 7]) from a hash of (seed, byte), group scales
// f16(scale / 7), so W ~ scale * uniform(-1, 1) like fill_random_f16.
extern "C" __global__ void fill_random_i4(unsigned char* w, unsigned short* gs, long long nbytes, long long groups,
                                          unsigned long long seed, float scale) {
  const unsigned short s = f2h(scale / 7.f);
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < nbytes; i += (long long)gridDim.x * blockDim.x) {
    unsigned long long z = seed + (unsigned long long)i * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const unsigned lo = 1 + (unsigned)((z >> 40) % 15u), hi = 1 + (unsigned)((z >> 20) % 15u);
    w[i] = (unsigned char)(lo | (hi << 4));
    if (i < groups) gs[i] = s;
  }
}
