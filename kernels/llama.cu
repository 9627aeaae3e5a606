// Llama forward kernels. Compiled at run time by NVRTC (no CUDA headers):
// fp16 is handled as raw 16-bit words converted with PTX cvt instructions.
// Conventions: activations fp32 row-major [T][dim]; weights fp16 row-major
// [out][in]; the KV cache is fp32, per layer [slot][kvDim].

typedef unsigned short f16;
typedef unsigned int u32;

#define NEG_INF __int_as_float(0xff800000)

__device__ __forceinline__ float h2f(f16 h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
__device__ __forceinline__ f16 f2h(float f) {
  f16 h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
__device__ __forceinline__ float2 h2x2(u32 v) {
  float2 r;
  asm("{.reg .f16 lo, hi;\n\tmov.b32 {lo, hi}, %2;\n\tcvt.f32.f16 %0, lo;\n\tcvt.f32.f16 %1, hi;}"
      : "=f"(r.x), "=f"(r.y) : "r"(v));
  return r;
}
__device__ __forceinline__ uint4 ldg_stream(const uint4* p) {
  uint4 r;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
  return r;
}
// cp.async (sm_80+): 16 bytes global -> shared, L2 only, completing
// asynchronously; groups are committed and waited for per thread.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned sa = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(sa), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// rope_rot: (o1, o2) = (x1*c - x2*s, x2*c + x1*s) with every product and
// sum rounded separately (no FMA contraction), so each kernel that rotates
// gives the same bits.
__device__ __forceinline__ void rope_rot(float x1, float x2, float c, float s, float& o1, float& o2) {
  o1 = __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s));
  o2 = __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s));
}

// block_sum / block_max: every thread gets the result. red must hold 32 floats.
__device__ float block_sum(float v, float* red) {
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) red[w] = v;
  __syncthreads();
  float r = lane < nw ? red[lane] : 0.f;
  return warp_sum(r);
}
__device__ float block_max(float v, float* red) {
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) red[w] = v;
  __syncthreads();
  float r = lane < nw ? red[lane] : NEG_INF;
  return warp_max(r);
}

// embed: x[t][:] = table[tokens[t]][:] (fp16 -> fp32). grid T, block 256.
extern "C" __global__ void embed_f16(const f16* __restrict__ table, const int* __restrict__ tokens,
                                     float* __restrict__ x, int H) {
  const f16* row = table + (size_t)tokens[blockIdx.x] * H;
  float* out = x + (size_t)blockIdx.x * H;
  for (int i = threadIdx.x; i < H; i += blockDim.x) out[i] = h2f(row[i]);
}

// Programmatic dependent launch (sm_90): a kernel launched with the PDL
// attribute may start while its predecessor runs; pdl_wait blocks until the
// predecessor has completed and its writes are visible, pdl_trigger lets the
// successor launch. Everything a kernel does before pdl_wait must read only
// data no earlier kernel writes (weights). No-ops without the attribute.
__device__ __forceinline__ void pdl_wait() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_trigger() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// ---------------------------------------------------------------------------
// GEMV for M <= 8 tokens: y[m][n] = sum_k W[n][k] * xin[m][k], fp16 W, fp32
// x and accumulation. One warp per output unit; lanes read 16-byte chunks of
// the row (coalesced), D chunks per row in flight (8 per lane in all). The
// first unit's first chunks are loaded before pdl_wait, so the weight stream
// overlaps the previous kernel's tail and this kernel's prologue. The inputs
// live in shared memory (M*K floats, dynamic). Each lane sums its chunks in
// increasing order whatever D, and the per-row sum order does not depend on
// M, so a token's result is the same whichever batch it is in.
//   NORM: y = (W . (x[xrow[m]] * nw)) * rsqrt(mean(x^2) + eps)  (xrow may be
//         null: row m), i.e. W applied to rmsnorm(x) * nw
//   MODE 0: y[m][n] = dot; 1: y[m][n] += dot (residual);
//   MODE 2: W rows interleaved (gate_j, up_j) = rows (2j, 2j+1):
//           y[m][j] = silu(gate) * up, N counts W rows.
//   MODE 3: fused QKV + RoPE + KV append (see gemv_qkv_rope below); W rows
//           of each q/k head are interleaved (j, j + hd/2) pairs, v rows in
//           order; unit u = rows (2u, 2u+1).
// grid = ceil(units / upb), block 256, units = N (MODE 0/1) or N/2 (MODE 2, 3).
struct RopeArgs {
  const int* pos;
  const int* slots;
  const float* inv_freq;
  float* kc;
  float* vc;
  int nh, nkv, hd;
};

// gemv_stage (after pdl_wait): the block's inputs into shared memory xs
// [M][K]. NORM: xs = x * nw and scale[m] = rsqrt(mean(x^2) + eps), applied
// to the dot products (nw and x are loaded in the same round trip). One warp
// sums row m's squares in a fixed order (lane-strided, then warp_sum), so
// the scale does not depend on the block size or on M.
template <int M, int NORM>
__device__ __forceinline__ void gemv_stage(const float* __restrict__ X, const int* __restrict__ xrow,
                                           const f16* __restrict__ nw, float eps, int K, float* xs, float* scale,
                                           int mc = M) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = blockDim.x >> 5, nt = blockDim.x;
  // Loads are issued in groups of G (norm) and GS (staging) before their
  // values are used: this runs after pdl_wait, on the critical path, one
  // round trip per group (round 4: +5 % decode speed over one at a time).
  // The staging loads run over the flattened (token, column) space, so a
  // batch of M tokens needs as few round trips as one token (session 4:
  // the old per-token loop cost one round trip per token).
#ifndef GEMV_STAGE_G
#define GEMV_STAGE_G 8
#endif
#ifndef GEMV_STAGE_GS
#define GEMV_STAGE_GS 4
#endif
  constexpr int G = GEMV_STAGE_G, GS = GEMV_STAGE_GS;
  if (NORM) {
    for (int m = warp; m < mc; m += nwarps) {
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
  // xs layout (gemv_dot): row m holds, for 8-column chunk c, columns
  // 8c..8c+3 at m*K + 4c and 8c+4..8c+7 at m*K + K/2 + 4c, so the lanes'
  // 16-byte reads of consecutive chunks are contiguous (no bank conflicts).
  const int k4n = K >> 2, half = K >> 1;
  if (M == 1) {  // the round-4 loop (batch 1 is the decode step: keep it short)
    const float* src = X + (size_t)(xrow ? xrow[0] : 0) * K;
    const int step = nt * 4;
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
        *(float4*)(xs + ((k & 4) ? half : 0) + (k >> 3) * 4) = v[i];
      }
    }
    __syncthreads();
    return;
  }
  // Thread tid stages float4 idx = tid, tid + nt, ... of the mc x K/4
  // inputs: (token m, column 4*k4), advanced without divisions.
  int m = 0, k4 = tid;
  while (k4 >= k4n) k4 -= k4n, m++;
  while (m < mc) {
    float4 v[GS];
    uint2 g[GS];
    int mi[GS], ki[GS];
#pragma unroll
    for (int i = 0; i < GS; i++) {
      mi[i] = m;
      ki[i] = k4;
      if (m < mc) {
        v[i] = *(const float4*)(X + (size_t)(xrow ? xrow[m] : m) * K + 4 * k4);
        if (NORM) g[i] = *(const uint2*)(nw + 4 * k4);
      }
      for (k4 += nt; k4 >= k4n; k4 -= k4n) m++;
    }
#pragma unroll
    for (int i = 0; i < GS; i++) {
      if (mi[i] >= mc) break;
      if (NORM) {
        const float2 g0 = h2x2(g[i].x), g1 = h2x2(g[i].y);
        v[i].x *= g0.x; v[i].y *= g0.y; v[i].z *= g1.x; v[i].w *= g1.y;
      }
      *(float4*)(xs + mi[i] * K + ((ki[i] & 1) ? half : 0) + (ki[i] >> 1) * 4) = v[i];
    }
  }
  __syncthreads();
}

// gemv_dot: acc[m] += one 16-byte weight chunk (8 fp16 at column k) times
// xs[m][k .. k+8), in the order every GEMV kernel uses (the bits of a row
// depend only on its chunks' order, which is increasing in k per lane).
template <int M>
__device__ __forceinline__ void gemv_dot(const uint4 w, const float* xs, int K, int k, float (&acc)[M]) {
  const float2 w0 = h2x2(w.x), w1 = h2x2(w.y), w2 = h2x2(w.z), w3 = h2x2(w.w);
  const int o = (k >> 3) * 4;  // gemv_stage's layout: chunk k/8's halves at o and K/2 + o
#pragma unroll
  for (int m = 0; m < M; m++) {
    const float4 a = *(const float4*)(xs + m * K + o), b = *(const float4*)(xs + m * K + (K >> 1) + o);
    float s = acc[m];
    s = fmaf(w0.x, a.x, s); s = fmaf(w0.y, a.y, s); s = fmaf(w1.x, a.z, s); s = fmaf(w1.y, a.w, s);
    s = fmaf(w2.x, b.x, s); s = fmaf(w2.y, b.y, s); s = fmaf(w3.x, b.z, s); s = fmaf(w3.y, b.w, s);
    acc[m] = s;
  }
}

// gemv_dot2: gemv_dot for the two rows of a unit (w0 row 0, w1 row 1),
// reading the inputs once for both: same arithmetic per row.
template <int M>
__device__ __forceinline__ void gemv_dot2(const uint4 w, const uint4 u, const float* xs, int K, int k, float (&acc)[M],
                                          float (&acd)[M]) {
  const float2 w0 = h2x2(w.x), w1 = h2x2(w.y), w2 = h2x2(w.z), w3 = h2x2(w.w);
  const float2 u0 = h2x2(u.x), u1 = h2x2(u.y), u2 = h2x2(u.z), u3 = h2x2(u.w);
  const int o = (k >> 3) * 4;
#pragma unroll
  for (int m = 0; m < M; m++) {
    const float4 a = *(const float4*)(xs + m * K + o), b = *(const float4*)(xs + m * K + (K >> 1) + o);
    float s = acc[m];
    s = fmaf(w0.x, a.x, s); s = fmaf(w0.y, a.y, s); s = fmaf(w1.x, a.z, s); s = fmaf(w1.y, a.w, s);
    s = fmaf(w2.x, b.x, s); s = fmaf(w2.y, b.y, s); s = fmaf(w3.x, b.z, s); s = fmaf(w3.y, b.w, s);
    acc[m] = s;
    float t = acd[m];
    t = fmaf(u0.x, a.x, t); t = fmaf(u0.y, a.y, t); t = fmaf(u1.x, a.z, t); t = fmaf(u1.y, a.w, t);
    t = fmaf(u2.x, b.x, t); t = fmaf(u2.y, b.y, t); t = fmaf(u3.x, b.z, t); t = fmaf(u3.y, b.w, t);
    acd[m] = t;
  }
}

// gemv_store: the epilogue of unit u; acc holds the warp-summed, scaled dot
// products (acc[1] only for two-row units), yold the residual (MODE 1, lane
// 0). MODE 3: lane m < M holds token m's position mpos, slot mslot and the
// unit's inverse frequency minv (rope units only).
template <int M, int MODE>
__device__ __forceinline__ void gemv_store(const float (&acc)[2][M], const float (&yold)[M], int u, int lane,
                                           float* __restrict__ Y, int N, int units, const RopeArgs ra, int mpos,
                                           int mslot, float minv) {
  if (MODE == 3) {
    // Lane m < M handles token m: rotate the (j, j+half) pair of a q/k
    // head (HF rotate_half, same arithmetic as rope_append), store q and k
    // at their standard positions in Y [M][N] and k, v at slot slots[m].
    const int half = ra.hd >> 1, kvdim = ra.nkv * ra.hd, qdim = ra.nh * ra.hd;
    const int ropeUnits = (ra.nh + ra.nkv) * half;
#pragma unroll
    for (int m = 0; m < M; m++) {
      if (lane != m) continue;
      float* row = Y + (size_t)m * N;
      const size_t slot = (size_t)mslot;
      if (u < ropeUnits) {
        const int h = u / half, j = u - h * half;
        float s, c;
        sincosf((float)mpos * minv, &s, &c);
        const float x1 = acc[0][m], x2 = acc[1][m];
        float o1, o2;
        rope_rot(x1, x2, c, s, o1, o2);
        row[h * ra.hd + j] = o1;
        row[h * ra.hd + j + half] = o2;
        if (h >= ra.nh) {
          float* kd = ra.kc + slot * kvdim + (h - ra.nh) * ra.hd;
          kd[j] = o1;
          kd[j + half] = o2;
        }
      } else {
        const int e = 2 * u - 2 * ropeUnits;  // index into v
        row[qdim + kvdim + e] = acc[0][m];
        row[qdim + kvdim + e + 1] = acc[1][m];
        ra.vc[slot * kvdim + e] = acc[0][m];
        ra.vc[slot * kvdim + e + 1] = acc[1][m];
      }
    }
  } else if (lane == 0) {
#pragma unroll
    for (int m = 0; m < M; m++) {
      if (MODE == 0) Y[(size_t)m * N + u] = acc[0][m];
      if (MODE == 1) Y[(size_t)m * N + u] = yold[m] + acc[0][m];
      if (MODE == 2) {
        const float g = acc[0][m];
        Y[(size_t)m * units + u] = g / (1.f + expf(-g)) * acc[1][m];
      }
    }
  }
}

// gemv_store_lanes: gemv_store for the fp16 GEMVs with every mode spread
// over the lanes (after warp_sum every lane holds every token's sum): lane
// m < mc stores token m (MODE 1: lane m loaded yold[m]); tokens m >= mc of
// a partial chunk (a 2-D launch's last chunk) are not stored.
template <int M, int MODE>
__device__ __forceinline__ void gemv_store_lanes(const float (&acc)[2][M], const float (&yold)[M], int u, int lane,
                                                 float* __restrict__ Y, int N, int units, const RopeArgs ra,
                                                 int mpos, int mslot, float minv, int mc) {
  if (MODE == 3) {
    if (lane < mc) gemv_store<M, 3>(acc, yold, u, lane, Y, N, units, ra, mpos, mslot, minv);
    return;
  }
#pragma unroll
  for (int m = 0; m < M; m++) {
    if (lane != m || m >= mc) continue;
    if (MODE == 0) Y[(size_t)m * N + u] = acc[0][m];
    if (MODE == 1) Y[(size_t)m * N + u] = yold[m] + acc[0][m];
    if (MODE == 2) {
      const float g = acc[0][m];
      Y[(size_t)m * units + u] = g / (1.f + expf(-g)) * acc[1][m];
    }
  }
}

// gemv_finish: warp-sum the lanes' partial dot products of unit u, apply
// the norm scale and store (gemv_store).
template <int M, int NORM, int MODE>
__device__ __forceinline__ void gemv_finish(float (&acc)[2][M], const float (&yold)[M], const float* scale, int u,
                                            int lane, float* __restrict__ Y, int N, int units, const RopeArgs ra,
                                            int mpos, int mslot, float minv, int mc = -1) {
  constexpr int R = MODE >= 2 ? 2 : 1;
#pragma unroll
  for (int r = 0; r < R; r++)
#pragma unroll
    for (int m = 0; m < M; m++) {
      acc[r][m] = warp_sum(acc[r][m]);
      if (NORM) acc[r][m] *= scale[m];
    }
  if (mc < 0)
    gemv_store<M, MODE>(acc, yold, u, lane, Y, N, units, ra, mpos, mslot, minv);
  else
    gemv_store_lanes<M, MODE>(acc, yold, u, lane, Y, N, units, ra, mpos, mslot, minv, mc);
}

// gemv_rope_meta: MODE 3 only: lane m < M gets token m's position and slot
// (launch metadata, written by no kernel: read before pdl_wait).
template <int M, int MODE>
__device__ __forceinline__ void gemv_rope_meta(const RopeArgs ra, int lane, int& mpos, int& mslot, int mc = M) {
  mpos = 0;
  mslot = 0;
  if (MODE == 3 && lane < M && lane < mc) {
    mpos = ra.pos[lane];
    mslot = ra.slots[lane];
  }
}

// gemv_rope_freq: MODE 3: lane m < M gets inv_freq of unit u's pair index.
template <int M, int MODE>
__device__ __forceinline__ float gemv_rope_freq(const RopeArgs ra, int lane, int u) {
  if (MODE != 3 || lane >= M) return 0.f;
  const int half = ra.hd >> 1;
  return u < (ra.nh + ra.nkv) * half ? ra.inv_freq[u % half] : 0.f;
}

template <int M, int NORM, int MODE, int DEEP = 1>
__device__ void gemv(const f16* __restrict__ W, const float* __restrict__ X, const int* __restrict__ xrow,
                     const f16* __restrict__ nw, float eps, float* __restrict__ Y, int N, int K, int upb,
                     int prefetch, RopeArgs ra, int mt) {
  extern __shared__ float4 smem4[];
  float* xs = (float*)smem4;
  __shared__ float scale[M];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = blockDim.x >> 5;
  constexpr int R = MODE >= 2 ? 2 : 1;
  // Chunks per row in flight per lane. DEEP: 8 per row (one round for
  // K = 2048), 24 for the residual GEMVs (the 5632-wide down projection in
  // one round); else 8 per lane in all (round 2). The sum order is the same.
  // M >= 2 (session 4): 8 chunks per lane in all (as the shallow batch-1
  // kernels): the deeper pipelines held 150-180 registers, one block per
  // SM, and multi-token launches (exact tree steps) ran in waves.
  constexpr int D = DEEP && M == 1 ? (MODE == 1 ? 24 : 8) : 8 / R;
  const int units = MODE >= 2 ? N / 2 : N;
  // 2-D launches (kernels.Gemv with more than GemvMaxM tokens): block row
  // blockIdx.y computes tokens [m0, m0 + mc) of the mt tokens, exactly as a
  // launch over those tokens alone would (same per-lane chunk order), so a
  // token's bits do not depend on the batch.
  const int m0 = blockIdx.y * M, mc = min(M, mt - m0);
  const int* xr = xrow ? xrow + m0 : xrow;
  const float* Xc = xrow ? X : X + (size_t)m0 * K;
  float* Yc = Y + (size_t)m0 * (MODE == 2 ? units : N);
  const RopeArgs rc{MODE == 3 ? ra.pos + m0 : ra.pos, MODE == 3 ? ra.slots + m0 : ra.slots, ra.inv_freq, ra.kc, ra.vc,
                    ra.nh, ra.nkv, ra.hd};
  const int u0 = blockIdx.x * upb, u1 = min(units, u0 + upb);
  const int nvec = K >> 3;
  if (prefetch && u1 > u0) {
    // Start this block's weight rows towards L2 while the inputs load.
    const char* wb = (const char*)(W + (size_t)u0 * R * K);
    const size_t bytes = (size_t)(u1 - u0) * R * K * 2;
    for (size_t o = (size_t)tid * 128; o < bytes; o += (size_t)blockDim.x * 128)
      asm volatile("prefetch.global.L2 [%0];" ::"l"(wb + o));
  }
  // Weights do not depend on earlier kernels: load the first chunks now.
  uint4 q[R][D];
  bool loaded = false;
  {
    const int u = u0 + warp;
    if (u < u1) {
#pragma unroll
      for (int r = 0; r < R; r++) {
        const uint4* wr = (const uint4*)(W + (size_t)(u * R + r) * K);
#pragma unroll
        for (int i = 0; i < D; i++)
          if (lane + 32 * i < nvec) q[r][i] = ldg_stream(wr + lane + 32 * i);
      }
      loaded = true;
    }
  }
  pdl_trigger();
  int mpos, mslot;
  gemv_rope_meta<M, MODE>(rc, lane, mpos, mslot, mc);
  pdl_wait();
  gemv_stage<M, NORM>(Xc, xr, nw, eps, K, xs, scale, mc);
  for (int u = u0 + warp; u < u1; u += nwarps) {
    float yold[M];  // MODE 1: the residual (lane m: token m), loaded while the weights stream
    if (MODE == 1) {
#pragma unroll
      for (int m = 0; m < M; m++)
        if (lane == m && m < mc) yold[m] = Yc[(size_t)m * N + u];
    }
    const float minv = gemv_rope_freq<M, MODE>(rc, lane, u);
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
        const int k = (v + 32 * i) * 8;
        if (R == 2)
          gemv_dot2<M>(q[0][i], q[R - 1][i], xs, K, k, acc[0], acc[1]);
        else
          gemv_dot<M>(q[0][i], xs, K, k, acc[0]);
      }
    }
    gemv_finish<M, NORM, MODE>(acc, yold, scale, u, lane, Yc, N, units, rc, mpos, mslot, minv, mc);
  }
}

// gemv_ring: the same GEMV (same bits) as a weight stream, for K a multiple
// of 256 (every lane has C = K/256 chunks per row, and a unit's R rows are
// contiguous). Warp gw of TW takes units gw, gw + TW, ...; each lane walks
// its chunks of those units (row by row, chunk c = column block lane + 32c)
// through a ring of P 16-byte slots in shared memory filled by cp.async:
// the first P copies are issued before pdl_wait, and each chunk consumed is
// replaced by the copy P chunks ahead, across unit boundaries, so the
// weight stream does not drain between units. A lane only reads the slots
// it filled itself (per-thread cp.async groups, no barrier). Grid: at most
// the blocks that fit on the SMs at once. Dynamic shared memory: M*K floats
// of inputs, then warps * P * 32 slots.
template <int M, int NORM, int MODE, int P>
__device__ void gemv_ring(const f16* __restrict__ W, const float* __restrict__ X, const int* __restrict__ xrow,
                          const f16* __restrict__ nw, float eps, float* __restrict__ Y, int N, int K, RopeArgs ra) {
  extern __shared__ float4 smem4[];
  float* xs = (float*)smem4;
  __shared__ float scale[M];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = blockDim.x >> 5;
  constexpr int R = MODE >= 2 ? 2 : 1;
  const int units = MODE >= 2 ? N / 2 : N;
  const int nvec = K >> 3, C = nvec >> 5, CU = R * C;  // chunks per row / per unit, per lane
  const int gw = blockIdx.x * nwarps + warp, TW = gridDim.x * nwarps;
  const int mine = gw < units ? (units - 1 - gw) / TW + 1 : 0;
  const int total = mine * CU;  // this warp's stream length (warp-uniform)
  uint4* ring = (uint4*)(xs + M * K) + warp * P * 32 + lane;  // slot s: ring[32 * s]
  // Load cursor: lp = this lane's first chunk of the unit being loaded, lc
  // = chunk index within the unit, ls = ring slot.
  const size_t ustride = (size_t)R * nvec;
  const uint4* lp = (const uint4*)W + (size_t)gw * ustride + lane;
  int lc = 0;
  auto issue = [&](int slot) {
    cp_async16(ring + 32 * slot, lp + 32 * lc);
    if (++lc == CU) {
      lc = 0;
      lp += TW * ustride;
    }
  };
#pragma unroll
  for (int p = 0; p < P; p++) {
    if (p < total) issue(p);
    cp_async_commit();
  }
  pdl_trigger();
  int mpos, mslot;
  gemv_rope_meta<M, MODE>(ra, lane, mpos, mslot);
  pdl_wait();
  gemv_stage<M, NORM>(X, xrow, nw, eps, K, xs, scale);
  if (total == 0) return;
  int cu = gw, cr = 0, cc = 0, slot = 0;  // consume cursor
  float acc[2][M], cur[M], yold[M];
#pragma unroll
  for (int m = 0; m < M; m++) acc[0][m] = acc[1][m] = cur[m] = 0.f;
  if (MODE == 1 && lane == 0) {
#pragma unroll
    for (int m = 0; m < M; m++) yold[m] = Y[(size_t)m * N + cu];
  }
  float minv = gemv_rope_freq<M, MODE>(ra, lane, cu);
  for (int q = 0; q < total; q++) {
    cp_async_wait<P - 1>();  // this lane's copy q has landed
    const uint4 w = ring[32 * slot];
    gemv_dot<M>(w, xs, K, (lane + 32 * cc) * 8, cur);  // uses w: the slot is free again
    if (q + P < total) issue(slot);
    cp_async_commit();
    if (++slot == P) slot = 0;
    if (++cc == C) {
      cc = 0;
      if (R == 2 && cr == 0) {
#pragma unroll
        for (int m = 0; m < M; m++) {
          acc[0][m] = cur[m];
          cur[m] = 0.f;
        }
        cr = 1;
      } else {
#pragma unroll
        for (int m = 0; m < M; m++) {
          acc[R - 1][m] = cur[m];
          cur[m] = 0.f;
        }
        gemv_finish<M, NORM, MODE>(acc, yold, scale, cu, lane, Y, N, units, ra, mpos, mslot, minv);
        cr = 0;
        cu += TW;
        if (cu < units) {
          if (MODE == 1 && lane == 0) {
#pragma unroll
            for (int m = 0; m < M; m++) yold[m] = Y[(size_t)m * N + cu];
          }
          minv = gemv_rope_freq<M, MODE>(ra, lane, cu);
        }
      }
    }
  }
  cp_async_wait<0>();
}

#define GEMV_ARGS const f16 *W, const float *X, const int *xrow, const f16 *nw, float eps, float *Y, int N, int K, int upb, int pf, int mt
#define NO_ROPE RopeArgs{0, 0, 0, 0, 0, 0, 0, 0}
#define GEMV_INST(M)                                                                                        \
  extern "C" __global__ void __launch_bounds__(256) gemv_norm_m##M(GEMV_ARGS) {                              \
    gemv<M, 1, 0>(W, X, xrow, nw, eps, Y, N, K, upb, pf, NO_ROPE, mt);                                           \
  }                                                                                                         \
  extern "C" __global__ void __launch_bounds__(256) gemv_resid_m##M(GEMV_ARGS) {                             \
    gemv<M, 0, 1>(W, X, xrow, nw, eps, Y, N, K, upb, pf, NO_ROPE, mt);                                           \
  }                                                                                                         \
  extern "C" __global__ void __launch_bounds__(256) gemv_plain_m##M(GEMV_ARGS) {                             \
    gemv<M, 0, 0>(W, X, xrow, nw, eps, Y, N, K, upb, pf, NO_ROPE, mt);                                           \
  }                                                                                                         \
  extern "C" __global__ void __launch_bounds__(256) gemv_swiglu_m##M(GEMV_ARGS) {                            \
    gemv<M, 1, 2>(W, X, xrow, nw, eps, Y, N, K, upb, pf, NO_ROPE, mt);                                           \
  }                                                                                                         \
  extern "C" __global__ void __launch_bounds__(256) gemv_qkv_rope_m##M(                                      \
      GEMV_ARGS, const int* pos, const int* slots, const float* inv_freq, float* kc, float* vc, int nh, int nkv, \
      int hd) {                                                                                             \
    gemv<M, 1, 3>(W, X, xrow, nw, eps, Y, N, K, upb, pf, RopeArgs{pos, slots, inv_freq, kc, vc, nh, nkv, hd}, mt); \
  }
// Round-2 (shallow) variants of the batch-1 GEMVs, for SPECGATE_GEMV_DEEP=0.
#define GEMV_INST_S(M)                                                                                      \
  extern "C" __global__ void __launch_bounds__(256) gemv_norm_s_m##M(GEMV_ARGS) {                            \
    gemv<M, 1, 0, 0>(W, X, xrow, nw, eps, Y, N, K, upb, pf, NO_ROPE, mt);                                        \
  }                                                                                                         \
  extern "C" __global__ void __launch_bounds__(256) gemv_resid_s_m##M(GEMV_ARGS) {                           \
    gemv<M, 0, 1, 0>(W, X, xrow, nw, eps, Y, N, K, upb, pf, NO_ROPE, mt);                                        \
  }                                                                                                         \
  extern "C" __global__ void __launch_bounds__(256) gemv_plain_s_m##M(GEMV_ARGS) {                           \
    gemv<M, 0, 0, 0>(W, X, xrow, nw, eps, Y, N, K, upb, pf, NO_ROPE, mt);                                        \
  }                                                                                                         \
  extern "C" __global__ void __launch_bounds__(256) gemv_swiglu_s_m##M(GEMV_ARGS) {                          \
    gemv<M, 1, 2, 0>(W, X, xrow, nw, eps, Y, N, K, upb, pf, NO_ROPE, mt);                                        \
  }                                                                                                         \
  extern "C" __global__ void __launch_bounds__(256) gemv_qkv_rope_s_m##M(                                    \
      GEMV_ARGS, const int* pos, const int* slots, const float* inv_freq, float* kc, float* vc, int nh, int nkv, \
      int hd) {                                                                                             \
    gemv<M, 1, 3, 0>(W, X, xrow, nw, eps, Y, N, K, upb, pf, RopeArgs{pos, slots, inv_freq, kc, vc, nh, nkv, hd}, mt); \
  }
// Ring (streaming) variant for batch 1: P = 16 chunks in flight per lane
// (8 and 32 measured no better inside a decode step).
#define GEMV_INST_R(SFX, P)                                                                                 \
  extern "C" __global__ void __launch_bounds__(256) gemv_norm##SFX##_m1(RING_ARGS) {                         \
    gemv_ring<1, 1, 0, P>(W, X, xrow, nw, eps, Y, N, K, NO_ROPE);                                            \
  }                                                                                                         \
  extern "C" __global__ void __launch_bounds__(256) gemv_resid##SFX##_m1(RING_ARGS) {                        \
    gemv_ring<1, 0, 1, P>(W, X, xrow, nw, eps, Y, N, K, NO_ROPE);                                            \
  }                                                                                                         \
  extern "C" __global__ void __launch_bounds__(256) gemv_plain##SFX##_m1(RING_ARGS) {                        \
    gemv_ring<1, 0, 0, P>(W, X, xrow, nw, eps, Y, N, K, NO_ROPE);                                            \
  }                                                                                                         \
  extern "C" __global__ void __launch_bounds__(256) gemv_swiglu##SFX##_m1(RING_ARGS) {                       \
    gemv_ring<1, 1, 2, P>(W, X, xrow, nw, eps, Y, N, K, NO_ROPE);                                            \
  }                                                                                                         \
  extern "C" __global__ void __launch_bounds__(256) gemv_qkv_rope##SFX##_m1(                                 \
      RING_ARGS, const int* pos, const int* slots, const float* inv_freq, float* kc, float* vc, int nh, int nkv, \
      int hd) {                                                                                             \
    gemv_ring<1, 1, 3, P>(W, X, xrow, nw, eps, Y, N, K, RopeArgs{pos, slots, inv_freq, kc, vc, nh, nkv, hd}); \
  }
#define RING_ARGS const f16 *W, const float *X, const int *xrow, const f16 *nw, float eps, float *Y, int N, int K
GEMV_INST_R(_r, 16)
GEMV_INST_S(1)
GEMV_INST(1)
GEMV_INST(2)
GEMV_INST(3)
GEMV_INST(4)
GEMV_INST(5)
GEMV_INST(6)
GEMV_INST(7)
GEMV_INST(8)

// ---------------------------------------------------------------------------
// Large-batch helpers (cuBLAS path).

// rmsnorm_f16: out[t][k] = f16(x[xrow?xrow[t]:t][k] * rsqrt(mean(x^2)+eps) * nw[k]). grid T, block 256.
extern "C" __global__ void rmsnorm_f16(const float* __restrict__ x, const int* __restrict__ xrow,
                                       const f16* __restrict__ nw, float eps, f16* __restrict__ out, int K) {
  __shared__ float red[32];
  const float* src = x + (size_t)(xrow ? xrow[blockIdx.x] : blockIdx.x) * K;
  float ss = 0.f;
  for (int k = threadIdx.x; k < K; k += blockDim.x) ss += src[k] * src[k];
  float s = rsqrtf(block_sum(ss, red) / (float)K + eps);
  f16* o = out + (size_t)blockIdx.x * K;
  for (int k = threadIdx.x; k < K; k += blockDim.x) o[k] = f2h(src[k] * s * h2f(nw[k]));
}

// cast_f16: out[i] = f16(in[i]), i in [0, n).
extern "C" __global__ void cast_f16(const float* __restrict__ in, f16* __restrict__ out, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) out[i] = f2h(in[i]);
}

// swiglu_f32: gu [T][2I] interleaved (gate_j, up_j) -> out [T][I] fp32.
extern "C" __global__ void swiglu_f32(const float* __restrict__ gu, float* __restrict__ out, int I, int T) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < T * I; i += gridDim.x * blockDim.x) {
    int t = i / I, j = i - t * I;
    float g = gu[(size_t)t * 2 * I + 2 * j], u = gu[(size_t)t * 2 * I + 2 * j + 1];
    out[i] = g / (1.f + expf(-g)) * u;
  }
}

// fill_random_f16: w[i] = f16(scale * uniform(-1, 1)) from a hash of (seed, i).
extern "C" __global__ void fill_random_f16(f16* w, long long n, unsigned long long seed, float scale) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    unsigned long long z = seed + (unsigned long long)i * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    float u = (float)(z >> 40) * (1.0f / 16777216.0f);
    w[i] = f2h(scale * (2.f * u - 1.f));
  }
}

// ---------------------------------------------------------------------------
// rope_append: for token t (grid T, block 128), rotate q and k in place in
// qkv [T][qDim + 2*kvDim] with HF's rotate_half convention (pairs i and
// i + hd/2, angle pos*inv_freq[i]), then store k and v at slots[t] of this
// layer's caches kc, vc [slot][kvDim].
extern "C" __global__ void rope_append(float* __restrict__ qkv, const int* __restrict__ pos,
                                       const int* __restrict__ slots, const float* __restrict__ inv_freq,
                                       float* __restrict__ kc, float* __restrict__ vc, int nh, int nkv, int hd) {
  pdl_trigger();
  pdl_wait();
  const int t = blockIdx.x, half = hd / 2, qdim = nh * hd, kvdim = nkv * hd;
  float* row = qkv + (size_t)t * (qdim + 2 * kvdim);
  const float p = (float)pos[t];
  const size_t slot = (size_t)slots[t];
  for (int i = threadIdx.x; i < (nh + nkv) * half; i += blockDim.x) {
    int h = i / half, j = i - h * half;
    float s, c;
    sincosf(p * inv_freq[j], &s, &c);
    float* base = row + h * hd;  // q heads then k heads are contiguous
    float x1 = base[j], x2 = base[j + half];
    float o1, o2;
    rope_rot(x1, x2, c, s, o1, o2);
    base[j] = o1;
    base[j + half] = o2;
    if (h >= nh) {
      float* kd = kc + slot * kvdim + (h - nh) * hd;
      kd[j] = o1;
      kd[j + half] = o2;
    }
  }
  for (int i = threadIdx.x; i < kvdim; i += blockDim.x) vc[slot * kvdim + i] = row[qdim + kvdim + i];
}

// rope_append_perm: like rope_append, from src [T][qDim + 2*kvDim] in the
// fused-QKV row order (q/k heads as interleaved (j, j+hd/2) pairs, v in
// order; what a GEMM over the permuted weight gives) into qkv in the
// standard order, plus k and v at slots[t]. grid T, block 128.
extern "C" __global__ void rope_append_perm(const float* __restrict__ src, float* __restrict__ qkv,
                                            const int* __restrict__ pos, const int* __restrict__ slots,
                                            const float* __restrict__ inv_freq, float* __restrict__ kc,
                                            float* __restrict__ vc, int nh, int nkv, int hd) {
  pdl_trigger();
  pdl_wait();
  const int t = blockIdx.x, half = hd / 2, qdim = nh * hd, kvdim = nkv * hd, N = qdim + 2 * kvdim;
  const int ropeUnits = (nh + nkv) * half;
  const float* in = src + (size_t)t * N;
  float* row = qkv + (size_t)t * N;
  const float p = (float)pos[t];
  const size_t slot = (size_t)slots[t];
  for (int u = threadIdx.x; u < N / 2; u += blockDim.x) {
    const float x1 = in[2 * u], x2 = in[2 * u + 1];
    if (u < ropeUnits) {
      const int h = u / half, j = u - h * half;
      float s, c;
      sincosf(p * inv_freq[j], &s, &c);
      float o1, o2;
      rope_rot(x1, x2, c, s, o1, o2);
      row[h * hd + j] = o1;
      row[h * hd + j + half] = o2;
      if (h >= nh) {
        float* kd = kc + slot * kvdim + (h - nh) * hd;
        kd[j] = o1;
        kd[j + half] = o2;
      }
    } else {
      const int e = 2 * u - 2 * ropeUnits;
      row[qdim + kvdim + e] = x1;
      row[qdim + kvdim + e + 1] = x2;
      vc[slot * kvdim + e] = x1;
      vc[slot * kvdim + e + 1] = x2;
    }
  }
}

// attn_kidx: the slot-list index of a query token's v-th visible key:
// keys v < nc are the cached prefix; for a tree token (mo >= 0) the others
// are the set bits of its ancestor mask over the new tokens, in order.
__device__ __forceinline__ int attn_kidx(int v, int nc, int mo, const u32* __restrict__ mask) {
  if (mo < 0 || v < nc) return v;
  int n = v - nc;
  for (int w = 0;; w++) {
    u32 bits = mask[mo + w];
    const int c = __popc(bits);
    if (n < c) {
      for (; n > 0; n--) bits &= bits - 1;
      return nc + 32 * w + __ffs(bits) - 1;
    }
    n -= c;
  }
}

// ---------------------------------------------------------------------------
// attention over the paged cache, chain or tree. grid (T, nh), block 256.
// Query token t attends to keys j in [0, kvlen[t]) whose slot is
// slot_list[kvoff[t] + j]. Keys j >= cached[t] are new tokens of the same
// request (index i = j - cached[t]); when maskoff[t] >= 0 key i is visible
// only if bit i of mask[maskoff[t] ...] is set (tree ancestors + self);
// otherwise all kvlen[t] keys are visible (causal chain: kvlen = cached+i+1).
// out [T][nh*HD]. Keys are processed in chunks of 1024 with an online
// softmax, fp32 throughout. Scores: one thread per key. Values: a warp takes
// KPW keys at a time (LPK lanes per key, 16-byte loads), 4 steps in flight.
template <int HD>
__device__ void attention(const float* __restrict__ qkv, float* __restrict__ out, const float* __restrict__ kc,
                          const float* __restrict__ vc, const int* __restrict__ slot_list,
                          const int* __restrict__ kvoff, const int* __restrict__ kvlen, const int* __restrict__ cached,
                          const int* __restrict__ maskoff, const u32* __restrict__ mask, int nh, int nkv,
                          float scale, int t0, int smax, int kmin, float* __restrict__ part,
                          int* __restrict__ cnt, int pre, const int* __restrict__ tokidx) {
  constexpr int CH = 1024, NT = 256, NW = NT / 32;
  constexpr int QPL = HD / 4;                  // float4 per row
  constexpr int LPK = QPL < 32 ? QPL : 32;     // lanes per key
  constexpr int KPW = 32 / LPK;                // keys per warp step
  constexpr int FPL = QPL / LPK;               // float4 per lane
  constexpr int NP = NW * KPW;                 // partial accumulators
  __shared__ float4 qs4[QPL];
  __shared__ float sc[CH];
  __shared__ int sl[CH];
  __shared__ float red[32];
  __shared__ float accs[NP * HD];
  __shared__ float ls[NP];
  float* qs = (float*)qs4;
  // tokidx (optional): the launch covers tokens tokidx[t0 ...] (the others
  // run through attn_tile); else tokens t0 ...
  const int t = tokidx ? tokidx[blockIdx.x + t0] : blockIdx.x + t0, h = blockIdx.y, tid = threadIdx.x, sp = blockIdx.z;
  const int lane = tid & 31, w = tid >> 5, sub = lane / LPK, dl = lane - sub * LPK, pid = w * KPW + sub;
  const int kvdim = nkv * HD, qkvdim = nh * HD + 2 * kvdim;
  const int kvh = h / (nh / nkv);
  __shared__ int last;
  pdl_trigger();
  // The launch metadata and the cached prefix's keys and values (keys
  // j < cached[t]) are written by no kernel that may still run: metadata
  // only by the host copy and decode_advance, both ordered before the
  // step's first PDL kernel (decode_advance and embed_f16 launch without
  // PDL), and the QKV kernels store only the new tokens' rows, which the
  // engine never lists as cached in the same batch (ForwardRequest). With
  // pre, they are read before pdl_wait: the first round of keys into
  // registers, the rest of this block's cached keys and values towards L2.
  const int off = kvoff[t], nc = cached[t], mo = maskoff[t];
  // Tree tokens (mo >= 0) attend to their visible keys only, in order: the
  // cached prefix, then the ancestors and itself (the set bits of the mask
  // over the new tokens). Every loop below runs over this compacted key
  // list (virtual index v -> list index kidx(v)), so a tree token's key
  // ranges, split count and per-partial key assignment are those of plain
  // decoding of its path (the same keys, cached, in the same order): its
  // output has the same bits whatever its siblings (session 4; before,
  // masked siblings shifted the keys between partials).
  int len = kvlen[t];
  if (mo >= 0) {
    int vis = 0;
    for (int w = 0; w < (len - nc + 31) >> 5; w++) vis += __popc(mask[mo + w]);
    len = nc + vis;
  }
  // Split over keys (flash-decoding): S depends only on len, so a token's
  // bits do not depend on the batch it is in.
  const int S = max(1, min(smax, (len + kmin - 1) / kmin));
  if (sp >= S) return;
  const int per = (len + S - 1) / S;
  const int kb = min(len, sp * per), ke = min(len, kb + per);
  const float* kbase = kc + kvh * HD;
  const float* vbase = vc + kvh * HD;
  // KR keys per thread per round: the slots, then the key rows, in flight
  // together. SPECGATE_ATTN_KR2 builds 2 for head dims <= 64 (round 3: no
  // gain, and 255 registers per thread, so a block fills an SM's register
  // file and no block of the next kernel can start beside it).
#ifdef SPECGATE_ATTN_KR2
  constexpr int KR = QPL <= 16 ? 2 : 1;
#else
  constexpr int KR = 1;
#endif
  float4 kk[KR][QPL];
  int pslot[KR];
  if (pre) {
    const int pe = min(ke, kb + CH);
#pragma unroll
    for (int r = 0; r < KR; r++) {
      const int j = kb + tid + r * NT;
      pslot[r] = j < pe ? slot_list[off + attn_kidx(j, nc, mo, mask)] : 0;
      if (j < pe && j < nc) {
        const float4* kr = (const float4*)(kbase + (size_t)pslot[r] * kvdim);
#pragma unroll
        for (int e = 0; e < QPL; e++) kk[r][e] = kr[e];
        const char* vr = (const char*)(vbase + (size_t)pslot[r] * kvdim);
        for (int o = 0; o < HD * 4; o += 128) asm volatile("prefetch.global.L2 [%0];" ::"l"(vr + o));
      }
    }
    for (int j = kb + tid + KR * NT; j < min(ke, nc); j += NT) {
      const size_t row = (size_t)slot_list[off + j] * kvdim;
      const char* kr = (const char*)(kbase + row);
      const char* vr = (const char*)(vbase + row);
      for (int o = 0; o < HD * 4; o += 128) {
        asm volatile("prefetch.global.L2 [%0];" ::"l"(kr + o));
        asm volatile("prefetch.global.L2 [%0];" ::"l"(vr + o));
      }
    }
  }
  // UV keys per partial in flight per round of the value phase; with pre
  // and head dims <= 64, the first round's cached value rows are loaded
  // into registers here too.
  constexpr int UV = FPL > 1 ? 4 : 8;
  constexpr bool VPRE = HD <= 64;
  float4 vpre[VPRE ? UV : 1][FPL];
  if (VPRE && pre) {
    const int pe = min(ke, kb + CH);
#pragma unroll
    for (int u = 0; u < UV; u++) {
      const int jj = kb + pid + u * NP;
      if (jj < pe && jj < nc) {
        const float4* vr = (const float4*)(vbase + (size_t)slot_list[off + jj] * kvdim);
#pragma unroll
        for (int f = 0; f < FPL; f++) vpre[u][f] = vr[dl + f * LPK];
      }
    }
  }
  pdl_wait();
  for (int d = tid; d < HD; d += NT) qs[d] = qkv[(size_t)t * qkvdim + h * HD + d] * scale;
  float mrun = NEG_INF, l = 0.f;
  float4 acc[FPL];
#pragma unroll
  for (int f = 0; f < FPL; f++) acc[f].x = acc[f].y = acc[f].z = acc[f].w = 0.f;
  __syncthreads();
  for (int c0 = kb; c0 < ke; c0 += CH) {
    const int c1 = min(ke, c0 + CH);
    float mloc = NEG_INF;
    for (int j0 = c0 + tid; j0 < c1; j0 += KR * NT) {
      int slot2[KR];
      bool ok[KR];
      const bool first = pre && j0 == kb + tid;  // preloaded round
#pragma unroll
      for (int r = 0; r < KR; r++) {
        const int j = j0 + r * NT;
        ok[r] = j < c1;
        slot2[r] = first ? pslot[r] : ok[r] ? slot_list[off + attn_kidx(j, nc, mo, mask)] : 0;
      }
#pragma unroll
      for (int r = 0; r < KR; r++) {
        const int j = j0 + r * NT;
        if (ok[r] && !(first && j < nc)) {
          const float4* kr = (const float4*)(kbase + (size_t)slot2[r] * kvdim);
#pragma unroll
          for (int e = 0; e < QPL; e++) kk[r][e] = kr[e];
        }
      }
#pragma unroll
      for (int r = 0; r < KR; r++) {
        const int j = j0 + r * NT;
        if (j >= c1) break;
        sl[j - c0] = slot2[r];
        float s = NEG_INF;
        if (ok[r]) {
          float s0 = 0.f, s1 = 0.f;
#pragma unroll
          for (int e = 0; e < QPL; e += 2) {
            float4 k4 = kk[r][e], q4 = qs4[e];
            s0 += q4.x * k4.x + q4.y * k4.y + q4.z * k4.z + q4.w * k4.w;
            if (e + 1 < QPL) {
              float4 k5 = kk[r][e + 1], q5 = qs4[e + 1];
              s1 += q5.x * k5.x + q5.y * k5.y + q5.z * k5.z + q5.w * k5.w;
            }
          }
          s = s0 + s1;
        }
        sc[j - c0] = s;
        mloc = fmaxf(mloc, s);
      }
    }
    const float mc = block_max(mloc, red);  // its barriers publish sc and sl
    const float mnew = fmaxf(mrun, mc);
    if (mnew != NEG_INF) {
      const float corr = mrun == NEG_INF ? 0.f : expf(mrun - mnew);
      l *= corr;
#pragma unroll
      for (int f = 0; f < FPL; f++) {
        acc[f].x *= corr; acc[f].y *= corr; acc[f].z *= corr; acc[f].w *= corr;
      }
      // UV keys per partial in flight per round; keys past c1 or masked
      // are skipped (same arithmetic order as one key at a time).
      for (int j = c0 + pid; j < c1; j += UV * NP) {
        float4 v[UV][FPL];
        const bool vfirst = VPRE && pre && j == kb + pid;  // preloaded round
#pragma unroll
        for (int u = 0; u < UV; u++) {
          const int jj = j + u * NP;
          if (vfirst && jj < nc) {
#pragma unroll
            for (int f = 0; f < FPL; f++) v[u][f] = vpre[VPRE ? u : 0][f];
          } else if (jj < c1) {
            const float4* vr = (const float4*)(vbase + (size_t)sl[jj - c0] * kvdim);
#pragma unroll
            for (int f = 0; f < FPL; f++) v[u][f] = vr[dl + f * LPK];
          }
        }
#pragma unroll
        for (int u = 0; u < UV; u++) {
          const int jj = j + u * NP;
          if (jj >= c1) break;
          const float s = sc[jj - c0];
          if (s == NEG_INF) continue;
          const float p = expf(s - mnew);
          l += p;
#pragma unroll
          for (int f = 0; f < FPL; f++) {
            acc[f].x = fmaf(p, v[u][f].x, acc[f].x); acc[f].y = fmaf(p, v[u][f].y, acc[f].y);
            acc[f].z = fmaf(p, v[u][f].z, acc[f].z); acc[f].w = fmaf(p, v[u][f].w, acc[f].w);
          }
        }
      }
      mrun = mnew;
    }
    __syncthreads();
  }
#pragma unroll
  for (int f = 0; f < FPL; f++) *(float4*)(accs + pid * HD + 4 * (dl + f * LPK)) = acc[f];
  if (dl == 0) ls[pid] = l;
  __syncthreads();
  if (S == 1) {
    for (int d = tid; d < HD; d += NT) {
      float a = 0.f, ll = 0.f;
      for (int k = 0; k < NP; k++) {
        a += accs[k * HD + d];
        ll += ls[k];
      }
      out[(size_t)t * nh * HD + h * HD + d] = ll > 0.f ? a / ll : 0.f;
    }
    return;
  }
  // Partial (unnormalised acc[HD], l, m) of split sp to part; the last split
  // block to arrive combines all S in split order (fixed order: same bits
  // whichever block finishes last) and re-arms the counter.
  const int pair = blockIdx.x * nh + h;
  float* mine = part + ((size_t)pair * smax + sp) * (HD + 2);
  for (int d = tid; d < HD; d += NT) {
    float a = 0.f;
    for (int k = 0; k < NP; k++) a += accs[k * HD + d];
    mine[d] = a;
  }
  if (tid == 0) {
    float ll = 0.f;
    for (int k = 0; k < NP; k++) ll += ls[k];
    mine[HD] = ll;
    mine[HD + 1] = mrun;
  }
  __threadfence();
  __syncthreads();
  if (tid == 0) last = atomicAdd(cnt + pair, 1) == S - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  const float* all = part + (size_t)pair * smax * (HD + 2);
  float M = NEG_INF;
  for (int k = 0; k < S; k++) M = fmaxf(M, __ldcg(all + k * (HD + 2) + HD + 1));
  for (int d = tid; d < HD; d += NT) {
    float a = 0.f, ll = 0.f;
    for (int k = 0; k < S; k++) {
      const float m = __ldcg(all + k * (HD + 2) + HD + 1);
      if (m == NEG_INF) continue;
      const float f = expf(m - M);
      a = fmaf(__ldcg(all + k * (HD + 2) + d), f, a);
      ll = fmaf(__ldcg(all + k * (HD + 2) + HD), f, ll);
    }
    out[(size_t)t * nh * HD + h * HD + d] = ll > 0.f ? a / ll : 0.f;
  }
  if (tid == 0) cnt[pair] = 0;
}

#define ATTN_INST(HD)                                                                                     \
  extern "C" __global__ void attention_hd##HD(const float* qkv, float* out, const float* kc, const float* vc, \
                                              const int* slot_list, const int* kvoff, const int* kvlen,      \
                                              const int* cached, const int* maskoff, const u32* mask, int nh, \
                                              int nkv, float scale, int t0, int smax, int kmin, float* part, \
                                              int* cnt, int pre, const int* tokidx) {                        \
    attention<HD>(qkv, out, kc, vc, slot_list, kvoff, kvlen, cached, maskoff, mask, nh, nkv, scale, t0, smax, \
                  kmin, part, cnt, pre, tokidx);                                                             \
  }
ATTN_INST(8)
ATTN_INST(16)
ATTN_INST(32)
ATTN_INST(64)
ATTN_INST(128)
ATTN_INST(256)

// ---------------------------------------------------------------------------
// attn_tile: causal attention for prefill chunks (the new tokens of a chain
// request, consecutive in the batch). Tile i covers the query tokens
// tiles[2i] .. tiles[2i] + tiles[2i+1] - 1 (global token indices of one
// request; at most ATILE_ROWS / G of them, G = nh / nkv); block (i, kvh)
// computes every query head of KV head kvh for them: ROWS rows (row =
// qi * G + g), so each key and value row is read from the cache once per
// tile and kv head instead of once per query token and head. Query token t
// sees keys j < kvlen[t] of its slot list (chain order: cached prefix, then
// the request's new tokens). Keys stream through shared memory in tiles of
// KT with an online softmax; fp32 throughout. Each thread owns 8 rows x 4
// keys of a score tile and 8 rows x HD/16 columns of the output.
// Dynamic shared memory: ATILE_SMEM(HD) bytes. grid (tiles, nkv), block 256.
#define ATILE_ROWS 128
#define ATILE_KT 64
#define ATILE_SMEM(HD) ((ATILE_ROWS * ((HD) + 4) + ATILE_KT * ((HD) + 4) + ATILE_KT * (HD) + ATILE_ROWS * (ATILE_KT + 4)) * 4)
template <int HD>
__device__ void attn_tile(const float* __restrict__ qkv, float* __restrict__ out, const float* __restrict__ kc,
                          const float* __restrict__ vc, const int* __restrict__ slot_list,
                          const int* __restrict__ kvoff, const int* __restrict__ kvlen,
                          const int* __restrict__ tiles, int nh, int nkv, float scale) {
  constexpr int ROWS = ATILE_ROWS, KT = ATILE_KT, NT = 256;
  constexpr int DQ = HD / 4;  // float4 per row
  constexpr int QS = HD + 4, KS = HD + 4, VS = HD, PS = KT + 4;
  constexpr int DO = HD / 64;  // float4 of the output per thread and row
  extern __shared__ float4 smem4[];
  float* qs = (float*)smem4;
  float* ks = qs + ROWS * QS;
  float* vs = ks + KT * KS;
  float* ps = vs + KT * VS;
  __shared__ int sl[KT];
  __shared__ int rlen[ROWS];
  const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
  const int G = nh / nkv, QT = ROWS / G, R = QT * G;
  const int tq0 = tiles[2 * blockIdx.x], nq = min(tiles[2 * blockIdx.x + 1], QT);
  const int kvh = blockIdx.y;
  const int kvdim = nkv * HD, qkvdim = nh * HD + 2 * kvdim;
  pdl_trigger();
  pdl_wait();
  const int off = kvoff[tq0];
  for (int i = tid; i < ROWS * DQ; i += NT) {
    const int r = i / DQ, e = i - r * DQ;
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (r < R && r / G < nq) {
      const int qi = r / G, g = r - qi * G;
      v = ((const float4*)(qkv + (size_t)(tq0 + qi) * qkvdim + (kvh * G + g) * HD))[e];
      v.x *= scale; v.y *= scale; v.z *= scale; v.w *= scale;
    }
    *(float4*)(qs + r * QS + 4 * e) = v;
  }
  for (int r = tid; r < ROWS; r += NT) rlen[r] = (r < R && r / G < nq) ? kvlen[tq0 + r / G] : 0;
  int kend = 0;
  for (int qi = 0; qi < nq; qi++) kend = max(kend, kvlen[tq0 + qi]);
  float m[8], l[8];
  float4 o[8][DO];
#pragma unroll
  for (int a = 0; a < 8; a++) {
    m[a] = NEG_INF;
    l[a] = 0.f;
#pragma unroll
    for (int f = 0; f < DO; f++) o[a][f] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
  for (int k0 = 0; k0 < kend; k0 += KT) {
    const int kn = min(KT, kend - k0);
    __syncthreads();  // the previous tile's readers are done
    if (tid < KT) sl[tid] = tid < kn ? slot_list[off + k0 + tid] : 0;
    __syncthreads();
    for (int i = tid; i < KT * DQ; i += NT) {
      const int j = i / DQ, e = i - j * DQ;
      float4 kv = make_float4(0.f, 0.f, 0.f, 0.f), vv = kv;
      if (j < kn) {
        const size_t row = (size_t)sl[j] * kvdim + kvh * HD;
        kv = ((const float4*)(kc + row))[e];
        vv = ((const float4*)(vc + row))[e];
      }
      *(float4*)(ks + j * KS + 4 * e) = kv;
      *(float4*)(vs + j * VS + 4 * e) = vv;
    }
    __syncthreads();
    float s[8][4];
#pragma unroll
    for (int a = 0; a < 8; a++)
#pragma unroll
      for (int c = 0; c < 4; c++) s[a][c] = 0.f;
#pragma unroll 4
    for (int e = 0; e < DQ; e++) {
      float4 kk[4];
#pragma unroll
      for (int c = 0; c < 4; c++) kk[c] = *(const float4*)(ks + (tx + 16 * c) * KS + 4 * e);
#pragma unroll
      for (int a = 0; a < 8; a++) {
        const float4 q = *(const float4*)(qs + (ty * 8 + a) * QS + 4 * e);
#pragma unroll
        for (int c = 0; c < 4; c++)
          s[a][c] = fmaf(q.x, kk[c].x, fmaf(q.y, kk[c].y, fmaf(q.z, kk[c].z, fmaf(q.w, kk[c].w, s[a][c]))));
      }
    }
#pragma unroll
    for (int a = 0; a < 8; a++) {
      const int row = ty * 8 + a, len = rlen[row];
      float mx = NEG_INF;
#pragma unroll
      for (int c = 0; c < 4; c++) {
        if (k0 + tx + 16 * c >= len) s[a][c] = NEG_INF;
        mx = fmaxf(mx, s[a][c]);
      }
#pragma unroll
      for (int x = 8; x > 0; x >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, x));
      const float mn = fmaxf(m[a], mx);
      const float corr = m[a] == NEG_INF ? 0.f : expf(m[a] - mn);
      float sum = 0.f;
#pragma unroll
      for (int c = 0; c < 4; c++) {
        const float p = s[a][c] == NEG_INF ? 0.f : expf(s[a][c] - mn);
        ps[row * PS + tx + 16 * c] = p;
        sum += p;
      }
#pragma unroll
      for (int x = 8; x > 0; x >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, x);
      l[a] = l[a] * corr + sum;
      m[a] = mn;
#pragma unroll
      for (int f = 0; f < DO; f++) {
        o[a][f].x *= corr; o[a][f].y *= corr; o[a][f].z *= corr; o[a][f].w *= corr;
      }
    }
    __syncthreads();
    const int kn4 = (kn + 3) & ~3;  // keys past kn have p = 0 and zero values
    for (int j = 0; j < kn4; j += 4) {
      float4 vv[4][DO];
#pragma unroll
      for (int u = 0; u < 4; u++)
#pragma unroll
        for (int f = 0; f < DO; f++) vv[u][f] = *(const float4*)(vs + (j + u) * VS + 4 * (tx + 16 * f));
#pragma unroll
      for (int a = 0; a < 8; a++) {
        const float4 p = *(const float4*)(ps + (ty * 8 + a) * PS + j);
#pragma unroll
        for (int f = 0; f < DO; f++) {
          float4& acc = o[a][f];
          acc.x = fmaf(p.x, vv[0][f].x, fmaf(p.y, vv[1][f].x, fmaf(p.z, vv[2][f].x, fmaf(p.w, vv[3][f].x, acc.x))));
          acc.y = fmaf(p.x, vv[0][f].y, fmaf(p.y, vv[1][f].y, fmaf(p.z, vv[2][f].y, fmaf(p.w, vv[3][f].y, acc.y))));
          acc.z = fmaf(p.x, vv[0][f].z, fmaf(p.y, vv[1][f].z, fmaf(p.z, vv[2][f].z, fmaf(p.w, vv[3][f].z, acc.z))));
          acc.w = fmaf(p.x, vv[0][f].w, fmaf(p.y, vv[1][f].w, fmaf(p.z, vv[2][f].w, fmaf(p.w, vv[3][f].w, acc.w))));
        }
      }
    }
  }
#pragma unroll
  for (int a = 0; a < 8; a++) {
    const int row = ty * 8 + a;
    if (rlen[row] == 0) continue;
    const int qi = row / G, g = row - qi * G;
    const float inv = l[a] > 0.f ? 1.f / l[a] : 0.f;
    float* dst = out + (size_t)(tq0 + qi) * nh * HD + (kvh * G + g) * HD;
#pragma unroll
    for (int f = 0; f < DO; f++) {
      float4 v = o[a][f];
      v.x *= inv; v.y *= inv; v.z *= inv; v.w *= inv;
      *(float4*)(dst + 4 * (tx + 16 * f)) = v;
    }
  }
}
#define ATILE_INST(HD)                                                                                   \
  extern "C" __global__ void __launch_bounds__(256) attn_tile_hd##HD(                                    \
      const float* qkv, float* out, const float* kc, const float* vc, const int* slot_list,              \
      const int* kvoff, const int* kvlen, const int* tiles, int nh, int nkv, float scale) {              \
    attn_tile<HD>(qkv, out, kc, vc, slot_list, kvoff, kvlen, tiles, nh, nkv, scale);                     \
  }
ATILE_INST(64)
ATILE_INST(128)

// ---------------------------------------------------------------------------
// decode_advance: multi-step greedy decoding of one sequence (no host
// round trip between steps). The first node of each step: step counter i
// (*step, zeroed by the host before step 0); for i > 0 it stores the
// previous step's argmax as output i-1 and as this step's token, and
// advances the one-token metadata by a position: cached and kvlen by one,
// the slot to slot_list[cached] (the sequence's slot list holds the cached
// prefix, then the slots of every step; kvoff is 0). grid 1, block 1.
extern "C" __global__ void decode_advance(int* tokens, int* pos, int* slots, int* kvlen, int* cached,
                                          const int* __restrict__ slot_list, const int* __restrict__ argidx,
                                          int* out, int* step) {
  const int i = *step;
  if (i > 0) {
    const int tok = argidx[0];
    out[i - 1] = tok;
    tokens[0] = tok;
    pos[0] += 1;
    const int c = cached[0] + 1;
    cached[0] = c;
    kvlen[0] = c + 1;
    slots[0] = slot_list[c];
  }
  *step = i + 1;
}

// ---------------------------------------------------------------------------
// KV compaction: gather then scatter, so overlapping src/dst sets are safe.
// kv_gather: tmp[l][i][:] = cache[l][src[i]][:]  grid (n, L), block 256.
extern "C" __global__ void kv_gather(const float* __restrict__ cache, float* __restrict__ tmp,
                                     const int* __restrict__ src, int n, int kvdim, long long layerStride) {
  const int i = blockIdx.x, l = blockIdx.y;
  const float* s = cache + l * layerStride + (size_t)src[i] * kvdim;
  float* d = tmp + ((size_t)l * n + i) * kvdim;
  for (int k = threadIdx.x; k < kvdim; k += blockDim.x) d[k] = s[k];
}
// kv_scatter: cache[l][dst[i]][:] = tmp[l][i][:].
extern "C" __global__ void kv_scatter(float* __restrict__ cache, const float* __restrict__ tmp,
                                      const int* __restrict__ dst, int n, int kvdim, long long layerStride) {
  const int i = blockIdx.x, l = blockIdx.y;
  float* d = cache + l * layerStride + (size_t)dst[i] * kvdim;
  const float* s = tmp + ((size_t)l * n + i) * kvdim;
  for (int k = threadIdx.x; k < kvdim; k += blockDim.x) d[k] = s[k];
}

// ---------------------------------------------------------------------------
// Sampling on device. One block (1024 threads) per row of logits [R][V].

// argmax_rows: out[r] = argmax logits[r][:], ties to the lowest index.
extern "C" __global__ void argmax_rows(const float* __restrict__ logits, int* __restrict__ out, int V) {
  __shared__ float bv[32];
  __shared__ int bi[32];
  pdl_trigger();
  pdl_wait();
  const float* row = logits + (size_t)blockIdx.x * V;
  float best = NEG_INF;
  int idx = 0x7fffffff;
  for (int i = threadIdx.x; i < V; i += blockDim.x) {
    float v = row[i];
    if (v > best) { best = v; idx = i; }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    float ov = __shfl_xor_sync(0xffffffffu, best, o);
    int oi = __shfl_xor_sync(0xffffffffu, idx, o);
    if (ov > best || (ov == best && oi < idx)) { best = ov; idx = oi; }
  }
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  if (lane == 0) { bv[w] = best; bi[w] = idx; }
  __syncthreads();
  if (w == 0) {
    best = lane < nw ? bv[lane] : NEG_INF;
    idx = lane < nw ? bi[lane] : 0x7fffffff;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      float ov = __shfl_xor_sync(0xffffffffu, best, o);
      int oi = __shfl_xor_sync(0xffffffffu, idx, o);
      if (ov > best || (ov == best && oi < idx)) { best = ov; idx = oi; }
    }
    if (lane == 0) out[blockIdx.x] = idx == 0x7fffffff ? 0 : idx;
  }
}

// sample_rows: temperature / top-k / top-p sampling. For row r with
// uniform u[r] in [0,1): p_i = exp((l_i - max)/temp); the kept set is
// {i : p_i >= tau} where tau is the largest threshold (found by bisection,
// 40 steps) whose set has at least topk members (topk <= 0: no limit) and
// at least topp of the total mass (topp >= 1: no limit); the token is the
// first index whose running kept mass (in index order) exceeds u * kept mass.
// temp <= 0 means argmax. out[r] gets the token.
extern "C" __global__ void sample_rows(const float* __restrict__ logits, const float* __restrict__ u,
                                       int* __restrict__ out, int V, float temp, int topk, float topp) {
  __shared__ float red[32];
  __shared__ float wsum[32];
  const float* row = logits + (size_t)blockIdx.x * V;
  const int tid = threadIdx.x, nt = blockDim.x;
  float mx = NEG_INF;
  for (int i = tid; i < V; i += nt) mx = fmaxf(mx, row[i]);
  mx = block_max(mx, red);
  if (temp <= 0.f) {
    int idx = 0x7fffffff;
    for (int i = tid; i < V; i += nt)
      if (row[i] == mx && i < idx) idx = i;
    float fi = block_max(-(float)idx, red);  // min index via max of negation (exact below 2^24)
    if (tid == 0) out[blockIdx.x] = (int)(-fi);
    return;
  }
  const float inv = 1.f / temp;
  float tot = 0.f;
  for (int i = tid; i < V; i += nt) tot += expf((row[i] - mx) * inv);
  tot = block_sum(tot, red);
  float lo = 0.f, hi = 1.f;  // tau in (0, 1]: p_max = 1 always kept
  const bool limk = topk > 0 && topk < V, limp = topp > 0.f && topp < 1.f;
  if (limk || limp) {
    for (int it = 0; it < 40; it++) {
      float mid = 0.5f * (lo + hi);
      float cnt = 0.f, mass = 0.f;
      for (int i = tid; i < V; i += nt) {
        float p = expf((row[i] - mx) * inv);
        if (p >= mid) { cnt += 1.f; mass += p; }
      }
      cnt = block_sum(cnt, red);
      mass = block_sum(mass, red);
      bool ok = (!limk || cnt >= (float)topk) && (!limp || mass >= topp * tot);
      if (ok) lo = mid; else hi = mid;
    }
  }
  const float tau = lo;  // largest tau known to satisfy both limits (0 = keep all)
  float kept = 0.f;
  for (int i = tid; i < V; i += nt) {
    float p = expf((row[i] - mx) * inv);
    if (p >= tau) kept += p;
  }
  kept = block_sum(kept, red);
  const float target = u[blockIdx.x] * kept;
  // Scan in index order, chunk by chunk of nt elements.
  float run = 0.f;
  int chosen = -1, last = 0;
  const int lane = tid & 31, w = tid >> 5, nw = nt >> 5;
  for (int c0 = 0; c0 < V; c0 += nt) {
    int i = c0 + tid;
    float p = 0.f;
    if (i < V) {
      p = expf((row[i] - mx) * inv);
      if (p < tau) p = 0.f;
    }
    // inclusive warp scan
    float x = p;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      float y = __shfl_up_sync(0xffffffffu, x, o);
      if (lane >= o) x += y;
    }
    __syncthreads();
    if (lane == 31) wsum[w] = x;
    __syncthreads();
    float before = run;
    for (int k = 0; k < w; k++) before += wsum[k];
    float incl = before + x;
    float total = run;
    for (int k = 0; k < nw; k++) total += wsum[k];
    // first index with inclusive mass > target
    float cand = (p > 0.f && incl > target) ? (float)i : 1e30f;
    if (p > 0.f && i < V) last = max(last, i);
    float first = -block_max(-cand, red);
    run = total;
    if (first < 1e29f) { chosen = (int)first; break; }
  }
  float fl = block_max((float)last, red);
  if (tid == 0) out[blockIdx.x] = chosen >= 0 ? chosen : (int)fl;
}

// ---------------------------------------------------------------------------
// sample_rows_p: sampling with per-row parameters, for the engine's device
// sampler. Row r of logits [R][V] (scratch: penalties are applied in place)
// uses prm[r*8 ...] (int32 words): 0 temperature (float), 1 top-k (0 = off),
// 2 top-p (float, >= 1 or <= 0 = off), 3 min-p (float, 0 = off), 4 uniform u
// in [0,1) (float), 5 first and 6 count of its penalty entries, 7 nonzero
// when the row is to be sampled. Penalty entry j subtracts pdel[j] from the
// logit of token ptok[j] (tokens distinct within a row). The transforms are
// the engine's CPU sampler's (engine.Probs): penalties; temperature <= 0:
// argmax (lowest id on ties); else p_i = exp((l_i - max) / temperature), the
// kept set {p_i >= tau} with tau the largest threshold keeping at least
// top-k tokens, then the largest keeping at least top-p of the top-k mass
// (bisection, 40 steps each), then tau >= min-p * max p; the token is the
// first id whose running kept mass exceeds u * kept mass. tok[r] gets the
// token and lp[r] its log-softmax under the raw (unpenalised) logits.
// grid R, block 1024.
extern "C" __global__ void sample_rows_p(float* __restrict__ logits, const int* __restrict__ prm,
                                         const int* __restrict__ ptok, const float* __restrict__ pdel,
                                         int* __restrict__ tok, float* __restrict__ lp, int V) {
  __shared__ float red[32];
  __shared__ float wsum[32];
  const int* P = prm + blockIdx.x * 8;
  if (P[7] == 0) return;
  float* row = logits + (size_t)blockIdx.x * V;
  const int tid = threadIdx.x, nt = blockDim.x;
  const float temp = __int_as_float(P[0]), topp = __int_as_float(P[2]), minp = __int_as_float(P[3]);
  const float u = __int_as_float(P[4]);
  const int topk = P[1], poff = P[5], pn = P[6];
  // raw log-sum-exp (for the chosen token's logprob)
  float mx = NEG_INF;
  for (int i = tid; i < V; i += nt) mx = fmaxf(mx, row[i]);
  mx = block_max(mx, red);
  float se = 0.f;
  for (int i = tid; i < V; i += nt) se += expf(row[i] - mx);
  const float lse = mx + logf(block_sum(se, red));
  __syncthreads();
  for (int j = tid; j < pn; j += nt) row[ptok[poff + j]] -= pdel[poff + j];
  __syncthreads();
  if (pn > 0) {
    mx = NEG_INF;
    for (int i = tid; i < V; i += nt) mx = fmaxf(mx, row[i]);
    mx = block_max(mx, red);
  }
  int chosen = -1;
  if (temp <= 0.f) {
    int idx = 0x7fffffff;
    for (int i = tid; i < V; i += nt)
      if (row[i] == mx && i < idx) idx = i;
    chosen = (int)(-block_max(-(float)idx, red));  // min index (exact below 2^24)
  } else {
    const float inv = 1.f / temp;
    float tau = 0.f;
    if (topk > 0 && topk < V) {
      float lo = 0.f, hi = 1.f;  // p_max = 1 is always kept
      for (int it = 0; it < 40; it++) {
        const float mid = 0.5f * (lo + hi);
        float cnt = 0.f;
        for (int i = tid; i < V; i += nt) cnt += expf((row[i] - mx) * inv) >= mid ? 1.f : 0.f;
        if (block_sum(cnt, red) >= (float)topk) lo = mid; else hi = mid;
      }
      tau = lo;
    }
    if (topp > 0.f && topp < 1.f) {
      float mk = 0.f;  // mass of the top-k survivors
      for (int i = tid; i < V; i += nt) {
        const float p = expf((row[i] - mx) * inv);
        if (p >= tau) mk += p;
      }
      mk = block_sum(mk, red);
      float lo = tau, hi = 1.f;
      for (int it = 0; it < 40; it++) {
        const float mid = 0.5f * (lo + hi);
        float mass = 0.f;
        for (int i = tid; i < V; i += nt) {
          const float p = expf((row[i] - mx) * inv);
          if (p >= mid) mass += p;
        }
        if (block_sum(mass, red) >= topp * mk) lo = mid; else hi = mid;
      }
      tau = lo;
    }
    if (minp > 0.f) tau = fmaxf(tau, minp);  // min-p relative to the max, p_max = 1
    float kept = 0.f;
    for (int i = tid; i < V; i += nt) {
      const float p = expf((row[i] - mx) * inv);
      if (p >= tau) kept += p;
    }
    kept = block_sum(kept, red);
    const float target = u * kept;
    float run = 0.f;
    int last = 0;
    const int lane = tid & 31, w = tid >> 5, nw = nt >> 5;
    for (int c0 = 0; c0 < V; c0 += nt) {
      const int i = c0 + tid;
      float p = 0.f;
      if (i < V) {
        p = expf((row[i] - mx) * inv);
        if (p < tau) p = 0.f;
      }
      float x = p;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const float y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) x += y;
      }
      __syncthreads();
      if (lane == 31) wsum[w] = x;
      __syncthreads();
      float before = run;
      for (int k = 0; k < w; k++) before += wsum[k];
      float total = run;
      for (int k = 0; k < nw; k++) total += wsum[k];
      const float cand = (p > 0.f && before + x > target) ? (float)i : 1e30f;
      if (p > 0.f) last = max(last, i);
      const float first = -block_max(-cand, red);
      run = total;
      if (first < 1e29f) {
        chosen = (int)first;
        break;
      }
    }
    const float fl = block_max((float)last, red);
    if (chosen < 0) chosen = (int)fl;
  }
  if (tid == 0) {
    float d = 0.f;
    for (int j = 0; j < pn; j++)
      if (ptok[poff + j] == chosen) d = pdel[poff + j];
    tok[blockIdx.x] = chosen;
    lp[blockIdx.x] = row[chosen] + d - lse;
  }
}

// rmsnorm_f32: out[t] = rmsnorm(x[xrow[t] or t]) * nw in fp32 (the final
// hidden state, the LM head's input), out [T][K]. grid T, block 256.
extern "C" __global__ void rmsnorm_f32(const float* __restrict__ x, const int* __restrict__ xrow,
                                       const f16* __restrict__ nw, float eps, float* __restrict__ out, int K) {
  __shared__ float red[32];
  const float* src = x + (size_t)(xrow ? xrow[blockIdx.x] : blockIdx.x) * K;
  float ss = 0.f;
  for (int k = threadIdx.x; k < K; k += blockDim.x) ss += src[k] * src[k];
  float s = rsqrtf(block_sum(ss, red) / (float)K + eps);
  float* o = out + (size_t)blockIdx.x * K;
  for (int k = threadIdx.x; k < K; k += blockDim.x) o[k] = src[k] * s * h2f(nw[k]);
}

// spin_ns: one thread busy-waits ns nanoseconds of the global timer. For
// profiling (kernels.Ctx.Spin): it holds the stream while the host queues a
// whole step, so event timestamps between the step's kernels show device
// time only, not the host's launch gaps.
extern "C" __global__ void spin_ns(long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < (unsigned long long)ns);
}
