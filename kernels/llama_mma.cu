// Tensor-core projections (rounds 8-9, issues #11/#17). Helpers (f16, u32,
// f2h, ldg_stream, rope_rot, pdl_*, RopeArgs, NO_ROPE) come from llama.cu,
// which precedes this file in the compiled source.
//
// gemv_mma<NORM, MODE, TT>: the projections of llama.cu's gemv (same kinds,
// same fusions: RMSNorm as a scale on the dot products, residual add, SwiGLU
// on interleaved gate/up rows, QKV + RoPE + KV append on RopeRows-ordered
// rows) computed with mma.sync.m16n8k16 (fp16 x fp16 -> fp32). Round 9
// layout: the weights are the A operand (16 rows per row-tile: tile row g is
// weight row 16 rt + 2g and tile row g + 8 is row 16 rt + 2g + 1, so a lane
// holds both rows of a SwiGLU / RoPE unit in its result), the tokens the B
// operand (8 per token tile; a warp takes TT token tiles), K is cut into ks
// contiguous parts (one warp each; ks fixed per (N, K)), each walked in
// chunks of 32 columns in increasing order. Every lane loads its own fp32
// inputs straight from X (token g of its tile, the 8 columns it multiplies)
// and rounds x * nw to fp16 in registers: no staging through shared memory,
// no barrier before the tensor cores. Per K part, the k16 steps 0 and 1 of
// the chunks accumulate into two accumulators (summed at the end of the
// part: step-0 sum + step-1 sum), the ks part sums are added in part order
// (parts 1.. through shared memory, one barrier), and the norm's sum of
// squares is summed per lane in increasing column order (fmaf), over the
// token's 4 lanes by a xor butterfly, then over the parts in part order.
// Each element of an mma result is the dot product of its own A row and B
// column plus its own accumulator, so a token's outputs depend only on its
// own inputs, the weights and the (N, K)-fixed split, never on which or how
// many tokens share its tile, its block row, or TT: a token gets the same
// bits alone (plain decoding) as in a tree step of up to 64 tokens
// (TestGemvMMA, TestGemvQKVRopeMMA).
//
// Fragment layout (PTX ISA, m16n8k16 .row.col f16): lane = 4g + t holds
// A (g, 2t..2t+1), (g+8, 2t..2t+1), (g, 2t+8..), (g+8, 2t+8..); B (k
// 2t..2t+1, n g), (k 2t+8.., n g); C (g, 2t..2t+1), (g+8, 2t..2t+1). The
// K index of a 16-wide step is a permutation of the physical columns (the
// same for A and B): in a chunk of 32 columns starting at kb, lane t uses
// the 8 consecutive columns kb+8t..kb+8t+7 of its rows and of its token
// (one 16-byte weight load per row, two float4 input loads); step 0 takes
// columns +0..3 (logical 2t, 2t+1, 2t+8, 2t+9), step 1 columns +4..7.
//
// Launch: block 32 * ks threads (warp w: K part w), grid (ceil(N / 16),
// ceil(mt / (8 TT))); block row y takes tokens [8 TT y, 8 TT y + 8 TT).
// Dynamic shared memory (ks - 1) * TT * 512 + ks * TT * 32 bytes (part
// sums, sums of squares). N % 8 == 0 (a last tile of 8 rows is padded
// with zero weights), K % (32 * ks) == 0.

#ifndef MMA_D
#define MMA_D 4  // 32-column chunks in flight per lane (two weight rows each)
#endif

__device__ __forceinline__ void mma16816(float (&d)[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ u32 pack_h2(float lo, float hi) {
  return (u32)f2h(lo) | ((u32)f2h(hi) << 16);
}

// mma_b: the B fragments (4 packed fp16 pairs) of 8 input columns (a, b),
// times the norm weights gw (NORM), adding their squares to ss in column
// order.
template <int NORM>
__device__ __forceinline__ void mma_b(const float4 a, const float4 b, const uint4 gw, float& ss, u32 (&f)[4]) {
  const float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
  float s = ss;
#pragma unroll
  for (int j = 0; j < 8; j++) s = fmaf(v[j], v[j], s);
  ss = s;
  float w[8];
  if (NORM) {
    const u32 gg[4] = {gw.x, gw.y, gw.z, gw.w};
#pragma unroll
    for (int j = 0; j < 4; j++) {
      const float2 h = h2x2(gg[j]);
      w[2 * j] = v[2 * j] * h.x;
      w[2 * j + 1] = v[2 * j + 1] * h.y;
    }
  } else {
#pragma unroll
    for (int j = 0; j < 8; j++) w[j] = v[j];
  }
#pragma unroll
  for (int j = 0; j < 4; j++) f[j] = pack_h2(w[2 * j], w[2 * j + 1]);
}

// mma_store_rope: gemv_store's MODE 3 for unit u (rows 2u, 2u + 1: v0,
// v1) of one token (qkv row yr, position pos, cache slot slot; minv the
// unit's inverse frequency).
__device__ __forceinline__ void mma_store_rope(float v0, float v1, int u, float* yr, int pos, int slot, float minv,
                                               const RopeArgs& ra) {
  const int half = ra.hd >> 1, kvdim = ra.nkv * ra.hd, qdim = ra.nh * ra.hd;
  const int ropeUnits = (ra.nh + ra.nkv) * half;
  const size_t sl = (size_t)slot;
  if (u < ropeUnits) {
    const int hh = u / half, jj = u - hh * half;
    float s, c;
    sincosf((float)pos * minv, &s, &c);
    float o1, o2;
    rope_rot(v0, v1, c, s, o1, o2);
    yr[hh * ra.hd + jj] = o1;
    yr[hh * ra.hd + jj + half] = o2;
    if (hh >= ra.nh) {
      float* kd = ra.kc + sl * kvdim + (hh - ra.nh) * ra.hd;
      kd[jj] = o1;
      kd[jj + half] = o2;
    }
  } else {
    const int e = 2 * u - 2 * ropeUnits;  // index into v
    yr[qdim + kvdim + e] = v0;
    yr[qdim + kvdim + e + 1] = v1;
    ra.vc[sl * kvdim + e] = v0;
    ra.vc[sl * kvdim + e + 1] = v1;
  }
}

template <int NORM, int MODE, int TT>
__device__ void gemv_mma(const f16* __restrict__ W, const float* __restrict__ X, const int* __restrict__ xrow,
                         const f16* __restrict__ nw, float eps, float* __restrict__ Y, int N, int K, int ks, int mtot,
                         RopeArgs ra) {
  extern __shared__ float4 smem4[];
  const int lane = threadIdx.x & 31, kpart = threadIdx.x >> 5;
  const int g = lane >> 2, t4 = lane & 3;
  constexpr int MPB = 8 * TT;  // tokens per block row
  const int m0 = blockIdx.y * MPB, mt = min(MPB, mtot - m0);
  const int r0 = 16 * blockIdx.x + 2 * g;  // this lane's weight rows r0, r0 + 1
  const bool rows = r0 < N;
  const int kp = K / ks, C = kp >> 5;
  const int kb0 = kpart * kp + 8 * t4;  // this lane's first column
  const uint4* wa = (const uint4*)(W + (size_t)(rows ? r0 : 0) * K + kb0);
  const uint4* wb = wa + (K >> 3);
  const uint4 z4 = make_uint4(0, 0, 0, 0);
  // Weights (and norm weights) do not depend on earlier kernels: load the
  // first chunks now.
  uint4 qa[MMA_D], qb[MMA_D], gw[MMA_D];
#pragma unroll
  for (int i = 0; i < MMA_D; i++) {
    qa[i] = qb[i] = gw[i] = z4;
    if (i < C) {
      if (rows) {
        qa[i] = ldg_stream(wa + 4 * i);
        qb[i] = ldg_stream(wb + 4 * i);
      }
      if (NORM) gw[i] = *(const uint4*)(nw + kb0 + 32 * i);
    }
  }
  // MODE 3: positions and slots of the tokens this lane stores (launch
  // metadata, written by no kernel) and its unit's inverse frequency.
  int mpos[TT][2], mslot[TT][2];
  float minv = 0.f;
  if (MODE == 3 && kpart == 0 && rows) {
    const int half = ra.hd >> 1, u = r0 >> 1;
    if (u < (ra.nh + ra.nkv) * half) minv = ra.inv_freq[u % half];
#pragma unroll
    for (int tt = 0; tt < TT; tt++)
#pragma unroll
      for (int j = 0; j < 2; j++) {
        const int m = 8 * tt + 2 * t4 + j;
        mpos[tt][j] = m < mt ? ra.pos[m0 + m] : 0;
        mslot[tt][j] = m < mt ? ra.slots[m0 + m] : 0;
      }
  }
  pdl_trigger();
  pdl_wait();
  // This lane's input rows: token 8 tt + g of the block row.
  const float* src[TT];
#pragma unroll
  for (int tt = 0; tt < TT; tt++) {
    const int m = 8 * tt + g;
    src[tt] = m < mt ? X + (size_t)(xrow ? xrow[m0 + m] : m0 + m) * K + kb0 : nullptr;
  }
  // MODE 1: the residual rows this lane updates, loaded with the inputs.
  float2 yold[TT][2];
  if (MODE == 1 && kpart == 0 && rows) {
#pragma unroll
    for (int tt = 0; tt < TT; tt++)
#pragma unroll
      for (int j = 0; j < 2; j++) {
        const int m = 8 * tt + 2 * t4 + j;
        if (m < mt) yold[tt][j] = *(const float2*)(Y + (size_t)(m0 + m) * N + r0);
      }
  }
  float acc[TT][4], acd[TT][4], ss[TT];
#pragma unroll
  for (int tt = 0; tt < TT; tt++) {
    ss[tt] = 0.f;
#pragma unroll
    for (int e = 0; e < 4; e++) acc[tt][e] = acd[tt][e] = 0.f;
  }
  constexpr int TB = TT <= 2 ? TT : 1;  // token tiles whose inputs load in one round trip
  for (int c0 = 0; c0 < C; c0 += MMA_D) {
    if (c0 > 0) {
#pragma unroll
      for (int i = 0; i < MMA_D; i++) {
        if (c0 + i < C) {
          if (rows) {
            qa[i] = ldg_stream(wa + 4 * (c0 + i));
            qb[i] = ldg_stream(wb + 4 * (c0 + i));
          }
          if (NORM) gw[i] = *(const uint4*)(nw + kb0 + 32 * (c0 + i));
        }
      }
    }
#pragma unroll
    for (int tb = 0; tb < TT; tb += TB) {
      float4 xv[TB][MMA_D][2];
#pragma unroll
      for (int u = 0; u < TB; u++)
#pragma unroll
        for (int i = 0; i < MMA_D; i++)
          if (src[tb + u] && c0 + i < C) {
            const float4* p = (const float4*)(src[tb + u] + 32 * (c0 + i));
            xv[u][i][0] = p[0];
            xv[u][i][1] = p[1];
          }
#pragma unroll
      for (int u = 0; u < TB; u++) {
        const int tt = tb + u;
#pragma unroll
        for (int i = 0; i < MMA_D; i++) {
          if (c0 + i >= C) break;
          u32 f[4] = {0, 0, 0, 0};
          if (src[tt]) mma_b<NORM>(xv[u][i][0], xv[u][i][1], gw[i], ss[tt], f);
          mma16816(acc[tt], qa[i].x, qb[i].x, qa[i].y, qb[i].y, f[0], f[1]);
          mma16816(acd[tt], qa[i].z, qb[i].z, qa[i].w, qb[i].w, f[2], f[3]);
        }
      }
    }
  }
  // Part sums (parts 1.. to shared memory) and the sums of squares of each
  // part's columns per token (xor butterfly over the token's 4 lanes).
  float4* part = smem4;
  float* ssm = (float*)(smem4 + (ks - 1) * TT * 32);
#pragma unroll
  for (int tt = 0; tt < TT; tt++) {
#pragma unroll
    for (int e = 0; e < 4; e++) acc[tt][e] += acd[tt][e];
    if (NORM) {
      float s = ss[tt];
      s += __shfl_xor_sync(0xffffffffu, s, 1);
      s += __shfl_xor_sync(0xffffffffu, s, 2);
      if (t4 == 0) ssm[(kpart * TT + tt) * 8 + g] = s;
    }
    if (kpart > 0) part[((kpart - 1) * TT + tt) * 32 + lane] = make_float4(acc[tt][0], acc[tt][1], acc[tt][2], acc[tt][3]);
  }
  if (ks > 1 || NORM) __syncthreads();
  if (kpart != 0 || !rows) return;
  for (int p = 1; p < ks; p++) {
#pragma unroll
    for (int tt = 0; tt < TT; tt++) {
      const float4 r = part[((p - 1) * TT + tt) * 32 + lane];
      acc[tt][0] += r.x; acc[tt][1] += r.y; acc[tt][2] += r.z; acc[tt][3] += r.w;
    }
  }
  // Epilogue: lane (g, t) holds tokens 8 tt + 2t + j (j = 0, 1) of rows r0
  // (acc[tt][j]) and r0 + 1 (acc[tt][2 + j]).
  const int units = MODE >= 2 ? N / 2 : N;
  const int u = r0 >> 1;
#pragma unroll
  for (int tt = 0; tt < TT; tt++) {
#pragma unroll
    for (int j = 0; j < 2; j++) {
      const int m = 8 * tt + 2 * t4 + j;
      if (m >= mt) continue;
      float v0 = acc[tt][j], v1 = acc[tt][2 + j];
      if (NORM) {
        float s = 0.f;
        for (int p = 0; p < ks; p++) s += ssm[(p * TT + tt) * 8 + 2 * t4 + j];
        const float sc = rsqrtf(s / (float)K + eps);
        v0 *= sc;
        v1 *= sc;
      }
      float* yr = Y + (size_t)(m0 + m) * (MODE == 2 ? units : N);
      if (MODE == 0) {
        *(float2*)(yr + r0) = make_float2(v0, v1);
      } else if (MODE == 1) {
        *(float2*)(yr + r0) = make_float2(yold[tt][j].x + v0, yold[tt][j].y + v1);
      } else if (MODE == 2) {
        yr[u] = v0 / (1.f + expf(-v0)) * v1;
      } else {
        mma_store_rope(v0, v1, u, yr, mpos[tt][j], mslot[tt][j], minv, ra);
      }
    }
  }
}

#define MMA_ARGS const f16 *W, const float *X, const int *xrow, const f16 *nw, float eps, float *Y, int N, int K, int ks, int mt
// One instantiation per token tiles per warp: 1 (block rows of 8 tokens:
// plain decoding and, over ceil(M / 8) block rows, every step since round
// 10), 2 (16 tokens per block row: Tuning.GemvMMATiles 2, round 9's default
// above 8 tokens) and 8 (64 tokens per block row, each weight chunk loaded
// once for all of them: Tuning.GemvMMATiles 4). Same arithmetic per token,
// so the same bits.
#define MMA_INST(TT)                                                                                          \
  extern "C" __global__ void __launch_bounds__(256) gemv_mma_norm_t##TT(MMA_ARGS) {                           \
    gemv_mma<1, 0, TT>(W, X, xrow, nw, eps, Y, N, K, ks, mt, NO_ROPE);                                        \
  }                                                                                                           \
  extern "C" __global__ void __launch_bounds__(256) gemv_mma_resid_t##TT(MMA_ARGS) {                          \
    gemv_mma<0, 1, TT>(W, X, xrow, nw, eps, Y, N, K, ks, mt, NO_ROPE);                                        \
  }                                                                                                           \
  extern "C" __global__ void __launch_bounds__(256) gemv_mma_plain_t##TT(MMA_ARGS) {                          \
    gemv_mma<0, 0, TT>(W, X, xrow, nw, eps, Y, N, K, ks, mt, NO_ROPE);                                        \
  }                                                                                                           \
  extern "C" __global__ void __launch_bounds__(256) gemv_mma_swiglu_t##TT(MMA_ARGS) {                         \
    gemv_mma<1, 2, TT>(W, X, xrow, nw, eps, Y, N, K, ks, mt, NO_ROPE);                                        \
  }                                                                                                           \
  extern "C" __global__ void __launch_bounds__(256) gemv_mma_qkv_rope_t##TT(                                  \
      MMA_ARGS, const int* pos, const int* slots, const float* inv_freq, float* kc, float* vc, int nh, int nkv, \
      int hd) {                                                                                               \
    gemv_mma<1, 3, TT>(W, X, xrow, nw, eps, Y, N, K, ks, mt, RopeArgs{pos, slots, inv_freq, kc, vc, nh, nkv, hd}); \
  }
MMA_INST(1)
MMA_INST(2)
MMA_INST(8)
