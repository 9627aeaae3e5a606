// Tensor-core projections (round 8, issues #11/#17). Helpers (f16, u32,
// ldg_stream, warp_sum, rope_rot, pdl_*, RopeArgs) come from llama.cu, which
// precedes this file in the compiled source.
//
// gemv_mma<NORM, MODE, MMA_TILES>: the projections of llama.cu's gemv (same
// kinds, same fusions: RMSNorm as a scale on the dot products, residual add,
// SwiGLU on interleaved gate/up rows, QKV + RoPE + KV append on
// RopeRows-ordered rows) computed with mma.sync.m16n8k16 (fp16 x fp16 ->
// fp32). Tokens are the M dimension, padded to 16 per M-tile (a block takes
// up to MMA_TILES of them); weight rows are the N dimension, 8 per n-tile; K is cut
// into ks contiguous parts (one warp each) and each part is walked in
// chunks of 32 columns in increasing order, the partials of the ks parts
// added in part order. Each element of an mma's result is the dot product
// of its own A row and B column (plus its own accumulator), so a token's
// outputs depend only on its own inputs, the weights and the (N, K)-fixed
// split, never on which or how many other tokens share the M-tile: a
// token gets the same bits alone (plain decoding) as in a tree step of up
// to 64 tokens (TestGemvMMA). The inputs are staged in shared memory as
// fp16 (x * nw for the norm kinds; the norm's rsqrt scale is applied to
// the fp32 result, as in gemv), rows past the block's tokens are zeros in
// registers.
//
// Fragment layout (PTX ISA, m16n8k16 .row.col f16): lane = 4g + t holds
// A (g, 2t..2t+1), (g+8, 2t..2t+1), (g, 2t+8..), (g+8, 2t+8..); B (k
// 2t..2t+1, n g), (k 2t+8.., n g); C (g, 2t..2t+1), (g+8, 2t..2t+1). The
// K index of a 16-wide step is a permutation of the physical columns
// (applied identically to A and B): in a chunk of 32 columns starting at kb,
// lane t reads 8 consecutive columns kb+8t..kb+8t+7 of its rows with one
// 16-byte load; step 0 takes columns +0..3 (logical 2t, 2t+1, 2t+8, 2t+9),
// step 1 columns +4..7.
//
// Launch: block 32 * nt * ks threads (warp w: n-tile w % nt, K part w / nt),
// grid (ceil(N/8 / nt), ceil(mt / mpb)); block row y takes tokens
// [y * mpb, y * mpb + mpb) (mpb a multiple of 16, at most 16 * MMA_TILES:
// up to MMA_TILES M-tiles per warp, each chunk of weights loaded once for
// all of them);
// dynamic shared memory min(mt, mpb) * (K + 32) * 2 bytes of inputs +
// (ks - 1) * nt * MMA_TILES * 512 bytes of partials. N % 8 == 0, K % (32 * ks) == 0.

#ifndef MMA_D
#define MMA_D 4  // 32-column chunks of weights in flight per lane
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

template <int NORM, int MODE, int MMA_TILES>
__device__ void gemv_mma(const f16* __restrict__ W, const float* __restrict__ X, const int* __restrict__ xrow,
                         const f16* __restrict__ nw, float eps, float* __restrict__ Y, int N, int K, int ks, int mtot,
                         int mpb, RopeArgs ra) {
  extern __shared__ float4 smem4[];
  __shared__ float scale[16 * MMA_TILES];
  const int S = K + 32;  // row stride in halves: rows 16 banks apart (K % 64 == 0)
  f16* xs = (f16*)smem4;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = blockDim.x >> 5;
  const int NT = nwarps / ks, nt = warp % NT, kpart = warp / NT;
  const int g = lane >> 2, t4 = lane & 3;
  // Block row blockIdx.y takes tokens [m0, m0 + mt) (mpb per row: a multiple
  // of 16, fewer than 64 where 64 tokens' inputs do not fit in shared memory);
  // each M-tile's arithmetic is the same whichever block runs it.
  const int m0 = blockIdx.y * mpb, mt = min(mpb, mtot - m0);
  const int ntl = (mt + 15) >> 4;  // M-tiles
  if (xrow) xrow += m0; else X += (size_t)m0 * K;
  Y += (size_t)m0 * (MODE == 2 ? N / 2 : N);
  float* red = (float*)(xs + mt * S);
  const int tile = blockIdx.x * NT + nt;
  const bool active = tile < (N >> 3);
  const int kp = K / ks, C = kp >> 5;
  const int kb0 = kpart * kp + 8 * t4;  // this lane's first column
  const int col = tile * 8 + 2 * t4;    // this lane's output rows col, col + 1
  const uint4* wr = (const uint4*)(W + (size_t)(active ? tile * 8 + g : 0) * K + kb0);
  // Weights do not depend on earlier kernels: load the first chunks now.
  uint4 q[MMA_D];
#pragma unroll
  for (int i = 0; i < MMA_D; i++)
    if (active && i < C) q[i] = ldg_stream(wr + 4 * i);
  // MODE 3: positions and slots of this lane's tokens (launch metadata,
  // written by no kernel) and the unit's inverse frequency.
  int mpos[MMA_TILES][2], mslot[MMA_TILES][2];
  float minv = 0.f;
  if (MODE == 3 && kpart == 0 && active) {
    const int half = ra.hd >> 1, u = col >> 1;
    if (u < (ra.nh + ra.nkv) * half) minv = ra.inv_freq[u % half];
#pragma unroll
    for (int ti = 0; ti < MMA_TILES; ti++)
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const int m = 16 * ti + g + 8 * h;
        mpos[ti][h] = m < mt ? ra.pos[m0 + m] : 0;
        mslot[ti][h] = m < mt ? ra.slots[m0 + m] : 0;
      }
  }
  pdl_trigger();
  pdl_wait();
  // Stage the tokens: warp w takes tokens 4w..4w+3, 4(w + nwarps).., loads
  // all their columns (up to 4 float4 per lane and token at a time), sums
  // squares per lane in increasing column order then over the warp
  // (scale[m], norm kinds) and stores xs[m][k] = f16(x[k] * nw[k]).
  {
    constexpr int TW = 4, GK = 4;
    for (int mb = warp * TW; mb < mt; mb += nwarps * TW) {
      const float* src[TW];
#pragma unroll
      for (int j = 0; j < TW; j++) {
        const int m = min(mb + j, mt - 1);
        src[j] = X + (size_t)(xrow ? xrow[m] : m) * K;
      }
      float ss[TW];
#pragma unroll
      for (int j = 0; j < TW; j++) ss[j] = 0.f;
      for (int k0 = lane * 4; k0 < K; k0 += 128 * GK) {
        float4 v[TW][GK];
        uint2 gw[GK];
#pragma unroll
        for (int i = 0; i < GK; i++) {
          const int k = k0 + 128 * i;
          if (k < K) {
            if (NORM) gw[i] = *(const uint2*)(nw + k);
#pragma unroll
            for (int j = 0; j < TW; j++)
              if (mb + j < mt) v[j][i] = *(const float4*)(src[j] + k);
          }
        }
#pragma unroll
        for (int i = 0; i < GK; i++) {
          const int k = k0 + 128 * i;
          if (k >= K) break;
          float2 g0 = make_float2(1.f, 1.f), g1 = g0;
          if (NORM) g0 = h2x2(gw[i].x), g1 = h2x2(gw[i].y);
#pragma unroll
          for (int j = 0; j < TW; j++) {
            if (mb + j >= mt) break;
            const float4 a = v[j][i];
            if (NORM) ss[j] += a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w;
            float4 b = a;
            if (NORM) {
              b.x *= g0.x; b.y *= g0.y; b.z *= g1.x; b.w *= g1.y;
            }
            *(uint2*)(xs + (mb + j) * S + k) = make_uint2(pack_h2(b.x, b.y), pack_h2(b.z, b.w));
          }
        }
      }
      if (NORM) {
#pragma unroll
        for (int j = 0; j < TW; j++) {
          if (mb + j >= mt) break;
          const float s = warp_sum(ss[j]);
          if (lane == 0) scale[mb + j] = rsqrtf(s / (float)K + eps);
        }
      }
    }
  }
  __syncthreads();
  // MODE 1: the residual rows this lane updates, loaded while the tensor
  // cores run.
  float2 yold[MMA_TILES][2];
  if (MODE == 1 && kpart == 0 && active) {
#pragma unroll
    for (int ti = 0; ti < MMA_TILES; ti++)
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const int m = 16 * ti + g + 8 * h;
        if (m < mt) yold[ti][h] = *(const float2*)(Y + (size_t)m * N + col);
      }
  }
  float acc[MMA_TILES][4];
#pragma unroll
  for (int ti = 0; ti < MMA_TILES; ti++)
#pragma unroll
    for (int e = 0; e < 4; e++) acc[ti][e] = 0.f;
  if (active) {
    const uint4 z = make_uint4(0, 0, 0, 0);
    for (int c0 = 0; c0 < C; c0 += MMA_D) {
      if (c0 > 0) {
#pragma unroll
        for (int i = 0; i < MMA_D; i++)
          if (c0 + i < C) q[i] = ldg_stream(wr + 4 * (c0 + i));
      }
#pragma unroll
      for (int i = 0; i < MMA_D; i++) {
        const int c = c0 + i;
        if (c >= C) break;
#pragma unroll
        for (int ti = 0; ti < MMA_TILES; ti++) {
          if (ti >= ntl) break;
          const int ra_ = 16 * ti + g, rb_ = ra_ + 8;
          const uint4 a = ra_ < mt ? *(const uint4*)(xs + ra_ * S + kb0 + 32 * c) : z;
          const uint4 b = rb_ < mt ? *(const uint4*)(xs + rb_ * S + kb0 + 32 * c) : z;
          mma16816(acc[ti], a.x, b.x, a.y, b.y, q[i].x, q[i].y);
          mma16816(acc[ti], a.z, b.z, a.w, b.w, q[i].z, q[i].w);
        }
      }
    }
  }
  if (ks > 1) {  // partials of K parts 1..ks-1, added to part 0's in part order
    float4* rp = (float4*)red;
    if (kpart > 0 && active) {
#pragma unroll
      for (int ti = 0; ti < MMA_TILES; ti++)
        if (ti < ntl)
          rp[(((kpart - 1) * NT + nt) * MMA_TILES + ti) * 32 + lane] =
              make_float4(acc[ti][0], acc[ti][1], acc[ti][2], acc[ti][3]);
    }
    __syncthreads();
    if (kpart == 0 && active) {
      for (int p = 1; p < ks; p++) {
#pragma unroll
        for (int ti = 0; ti < MMA_TILES; ti++) {
          if (ti >= ntl) break;
          const float4 r = rp[(((p - 1) * NT + nt) * MMA_TILES + ti) * 32 + lane];
          acc[ti][0] += r.x; acc[ti][1] += r.y; acc[ti][2] += r.z; acc[ti][3] += r.w;
        }
      }
    }
  }
  if (kpart != 0 || !active) return;
  // Epilogue: lane (g, t) holds tokens 16 ti + g and 16 ti + g + 8, W rows
  // col and col + 1.
  const int units = MODE >= 2 ? N / 2 : N;
#pragma unroll
  for (int ti = 0; ti < MMA_TILES; ti++) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int m = 16 * ti + g + 8 * h;
      if (m >= mt) continue;
      float v0 = acc[ti][2 * h], v1 = acc[ti][2 * h + 1];
      if (NORM) {
        v0 *= scale[m];
        v1 *= scale[m];
      }
      if (MODE == 0) {
        *(float2*)(Y + (size_t)m * N + col) = make_float2(v0, v1);
      } else if (MODE == 1) {
        *(float2*)(Y + (size_t)m * N + col) = make_float2(yold[ti][h].x + v0, yold[ti][h].y + v1);
      } else if (MODE == 2) {
        Y[(size_t)m * units + (col >> 1)] = v0 / (1.f + expf(-v0)) * v1;
      } else {
        // gemv_store's MODE 3 for unit u = col / 2 of token m.
        const int u = col >> 1;
        const int half = ra.hd >> 1, kvdim = ra.nkv * ra.hd, qdim = ra.nh * ra.hd;
        const int ropeUnits = (ra.nh + ra.nkv) * half;
        float* row = Y + (size_t)m * N;
        const size_t slot = (size_t)mslot[ti][h];
        if (u < ropeUnits) {
          const int hh = u / half, j = u - hh * half;
          float s, c;
          sincosf((float)mpos[ti][h] * minv, &s, &c);
          float o1, o2;
          rope_rot(v0, v1, c, s, o1, o2);
          row[hh * ra.hd + j] = o1;
          row[hh * ra.hd + j + half] = o2;
          if (hh >= ra.nh) {
            float* kd = ra.kc + slot * kvdim + (hh - ra.nh) * ra.hd;
            kd[j] = o1;
            kd[j + half] = o2;
          }
        } else {
          const int e = 2 * u - 2 * ropeUnits;  // index into v
          row[qdim + kvdim + e] = v0;
          row[qdim + kvdim + e + 1] = v1;
          ra.vc[slot * kvdim + e] = v0;
          ra.vc[slot * kvdim + e + 1] = v1;
        }
      }
    }
  }
}

#define MMA_ARGS const f16 *W, const float *X, const int *xrow, const f16 *nw, float eps, float *Y, int N, int K, int ks, int mt, int mpb
// One instantiation per M-tiles-per-block count (1: small code for steps of
// up to 16 tokens, where the kernel is latency bound; 4: up to 64 tokens
// with each weight chunk loaded once for all of them). Same arithmetic per
// M-tile, so the same bits.
#define MMA_INST(TL)                                                                                          \
  extern "C" __global__ void __launch_bounds__(256) gemv_mma_norm_t##TL(MMA_ARGS) {                           \
    gemv_mma<1, 0, TL>(W, X, xrow, nw, eps, Y, N, K, ks, mt, mpb, NO_ROPE);                                   \
  }                                                                                                           \
  extern "C" __global__ void __launch_bounds__(256) gemv_mma_resid_t##TL(MMA_ARGS) {                          \
    gemv_mma<0, 1, TL>(W, X, xrow, nw, eps, Y, N, K, ks, mt, mpb, NO_ROPE);                                   \
  }                                                                                                           \
  extern "C" __global__ void __launch_bounds__(256) gemv_mma_plain_t##TL(MMA_ARGS) {                          \
    gemv_mma<0, 0, TL>(W, X, xrow, nw, eps, Y, N, K, ks, mt, mpb, NO_ROPE);                                   \
  }                                                                                                           \
  extern "C" __global__ void __launch_bounds__(256) gemv_mma_swiglu_t##TL(MMA_ARGS) {                         \
    gemv_mma<1, 2, TL>(W, X, xrow, nw, eps, Y, N, K, ks, mt, mpb, NO_ROPE);                                   \
  }                                                                                                           \
  extern "C" __global__ void __launch_bounds__(256) gemv_mma_qkv_rope_t##TL(                                  \
      MMA_ARGS, const int* pos, const int* slots, const float* inv_freq, float* kc, float* vc, int nh, int nkv, \
      int hd) {                                                                                               \
    gemv_mma<1, 3, TL>(W, X, xrow, nw, eps, Y, N, K, ks, mt, mpb, RopeArgs{pos, slots, inv_freq, kc, vc, nh, nkv, hd}); \
  }
MMA_INST(1)
MMA_INST(4)
