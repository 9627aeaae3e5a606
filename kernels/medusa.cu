// Draft heads on the device (Medusa, issue #17): the heads' residual blocks
// and a per-row top-k, run inside the target's forward (engine/cuda
// heads.go). Helpers (f16, h2x2, warp_sum, NEG_INF) come from llama.cu,
// which precedes this file in the compiled source.

#define HEADS_HR 8    // rows per heads_resblock block
#define HEADS_KMAX 16 // largest k of heads_topk

// heads_resblock: one residual block of every head over R rows:
//   out[h][r][j] = x_h[r][j] + silu(sum_k W[h][j][k] * x_h[r][k] + bias[h][j])
// where x_h = x + h*xHeadStride ([R][H]; stride 0: every head reads the
// same rows, the final hidden state). W fp16 [nh][H][H], bias fp32 [nh][H],
// out fp32 [nh][R][H]. grid (ceil(H/8), nh, ceil(R/HEADS_HR)), block 256:
// one warp per output j, HEADS_HR rows per block held in shared memory
// (dynamic, HEADS_HR*H floats). H must be a multiple of 8.
extern "C" __global__ void __launch_bounds__(256) heads_resblock(const float* __restrict__ x, long long xHeadStride,
                                                                 const f16* __restrict__ W, const float* __restrict__ bias,
                                                                 float* __restrict__ out, int R, int H) {
  extern __shared__ float xs[];
  const int h = blockIdx.y, r0 = blockIdx.z * HEADS_HR;
  const int nr = min(HEADS_HR, R - r0);
  const float* xh = x + (size_t)h * xHeadStride + (size_t)r0 * H;
  for (int i = threadIdx.x; i < nr * H; i += blockDim.x) xs[i] = xh[i];
  __syncthreads();
  const int lane = threadIdx.x & 31, j = blockIdx.x * 8 + (threadIdx.x >> 5);
  if (j >= H) return;  // whole warps leave together; no barrier follows
  const f16* wr = W + ((size_t)h * H + j) * H;
  float acc[HEADS_HR];
#pragma unroll
  for (int r = 0; r < HEADS_HR; r++) acc[r] = 0.f;
  for (int k0 = lane * 8; k0 < H; k0 += 256) {
    const uint4 wv = *(const uint4*)(wr + k0);
    const float2 w01 = h2x2(wv.x), w23 = h2x2(wv.y), w45 = h2x2(wv.z), w67 = h2x2(wv.w);
#pragma unroll
    for (int r = 0; r < HEADS_HR; r++) {
      if (r < nr) {
        const float* xr = xs + r * H + k0;
        acc[r] += w01.x * xr[0] + w01.y * xr[1] + w23.x * xr[2] + w23.y * xr[3] + w45.x * xr[4] + w45.y * xr[5] +
                  w67.x * xr[6] + w67.y * xr[7];
      }
    }
  }
  const float bj = bias[(size_t)h * H + j];
#pragma unroll
  for (int r = 0; r < HEADS_HR; r++) {
    if (r < nr) {
      const float s = warp_sum(acc[r]) + bj;
      if (lane == 0) out[((size_t)h * R + r0 + r) * H + j] = xs[r * H + j] + s / (1.f + expf(-s));
    }
  }
}

// heads_topk: for each of P = nh*R rows of logits [P][V] (row p = h*R + r:
// head h, hidden row r), the K (<= HEADS_KMAX, <= V) largest values,
// largest first, ties to the lower index, NaN counted as -inf (medusa.TopK's
// order); out[(r*nh + h)*K + j] = ids ? ids[idx] : idx (the token of
// projection row idx). One warp per row: each lane keeps a sorted list of
// its K best over indices lane, lane+32, ..., then K rounds of a warp-wide
// best over the lanes' list heads. grid ceil(P/8), block 256.
__device__ __forceinline__ bool topk_better(float v, int i, float w, int j) { return v > w || (v == w && i < j); }

// topk_init / topk_insert: a lane's sorted list (tv, ti) of its K best
// (value, index) pairs, largest first, ties to the lower index.
__device__ __forceinline__ void topk_init(float (&tv)[HEADS_KMAX], int (&ti)[HEADS_KMAX]) {
#pragma unroll
  for (int j = 0; j < HEADS_KMAX; j++) {
    tv[j] = NEG_INF;
    ti[j] = 0x7fffffff;
  }
}
__device__ __forceinline__ void topk_insert(float (&tv)[HEADS_KMAX], int (&ti)[HEADS_KMAX], int K, float v, int i) {
  if (!topk_better(v, i, tv[K - 1], ti[K - 1])) return;
  int j = K - 1;
  while (j > 0 && topk_better(v, i, tv[j - 1], ti[j - 1])) {
    tv[j] = tv[j - 1];
    ti[j] = ti[j - 1];
    j--;
  }
  tv[j] = v;
  ti[j] = i;
}

// topk_warp_out: the warp's K best over its lanes' lists (K rounds of a
// warp-wide best over the list heads), o[j] = ids ? ids[idx] : idx (0 for
// an empty slot), written by lane 0.
__device__ __forceinline__ void topk_warp_out(const float (&tv)[HEADS_KMAX], const int (&ti)[HEADS_KMAX], int K,
                                              int lane, const int* __restrict__ ids, int* __restrict__ o) {
  int ptr = 0;
  for (int j = 0; j < K; j++) {
    float bv = ptr < K ? tv[ptr] : NEG_INF;
    int bi = ptr < K ? ti[ptr] : 0x7fffffff;
    int bl = lane;
#pragma unroll
    for (int s = 16; s > 0; s >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, s);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, s);
      const int ol = __shfl_xor_sync(0xffffffffu, bl, s);
      if (topk_better(ov, oi, bv, bi) || (ov == bv && oi == bi && ol < bl)) {
        bv = ov;
        bi = oi;
        bl = ol;
      }
    }
    if (lane == bl) ptr++;
    if (lane == 0) o[j] = bi == 0x7fffffff ? 0 : (ids ? ids[bi] : bi);
  }
}

extern "C" __global__ void __launch_bounds__(256) heads_topk(const float* __restrict__ logits, const int* __restrict__ ids,
                                                             int* __restrict__ out, int P, int R, int nh, int V, int K) {
  const int lane = threadIdx.x & 31, p = blockIdx.x * 8 + (threadIdx.x >> 5);
  if (p >= P) return;  // whole warps
  const float* row = logits + (size_t)p * V;
  float tv[HEADS_KMAX];
  int ti[HEADS_KMAX];
  topk_init(tv, ti);
  for (int i = lane; i < V; i += 32) {
    float v = row[i];
    if (!(v == v)) v = NEG_INF;
    topk_insert(tv, ti, K, v, i);
  }
  const int h = p / R, r = p - h * R;
  topk_warp_out(tv, ti, K, lane, ids, out + ((size_t)r * nh + h) * K);
}

// ---------------------------------------------------------------------------
// Fused path (fewer, PDL-launched kernels): heads_norm_resblock (final norm
// of the rows + the first residual layer of every head), heads_proj_tile
// (the projection of 8 head rows x 64 vocabulary rows per block with each
// tile's top-k), heads_topk_merge (the top-k over the tiles' candidates).

#define HEADS_TILE 64 // vocabulary rows per heads_proj_tile block
#define HEADS_PB 8    // head rows (pairs) per heads_proj_tile block

// heads_norm_resblock: as heads_resblock with x_h[r] = rmsnorm(x[xrow[r]]) *
// nw for every head (the final hidden state of logits row r). grid
// (ceil(H/8), nh, ceil(R/HEADS_HR)), block 256, dynamic smem HEADS_HR*H floats.
extern "C" __global__ void __launch_bounds__(256) heads_norm_resblock(const float* __restrict__ x, const int* __restrict__ xrow,
                                                                      const f16* __restrict__ nw, float eps,
                                                                      const f16* __restrict__ W, const float* __restrict__ bias,
                                                                      float* __restrict__ out, int R, int H) {
  extern __shared__ float xs[];
  __shared__ float scale[HEADS_HR];
  pdl_wait();
  const int h = blockIdx.y, r0 = blockIdx.z * HEADS_HR;
  const int nr = min(HEADS_HR, R - r0);
  for (int i = threadIdx.x; i < nr * H; i += blockDim.x) {
    const int r = i / H;
    xs[i] = x[(size_t)xrow[r0 + r] * H + (i - r * H)];
  }
  __syncthreads();
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
  if (wid < nr) {
    float ss = 0.f;
    for (int k = lane; k < H; k += 32) ss += xs[wid * H + k] * xs[wid * H + k];
    ss = warp_sum(ss);
    if (lane == 0) scale[wid] = rsqrtf(ss / (float)H + eps);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < nr * H; i += blockDim.x) {
    const int r = i / H;
    xs[i] = xs[i] * scale[r] * h2f(nw[i - r * H]);
  }
  __syncthreads();
  pdl_trigger();
  const int j = blockIdx.x * 8 + wid;
  if (j >= H) return;
  const f16* wr = W + ((size_t)h * H + j) * H;
  float acc[HEADS_HR];
#pragma unroll
  for (int r = 0; r < HEADS_HR; r++) acc[r] = 0.f;
  for (int k0 = lane * 8; k0 < H; k0 += 256) {
    const uint4 wv = *(const uint4*)(wr + k0);
    const float2 w01 = h2x2(wv.x), w23 = h2x2(wv.y), w45 = h2x2(wv.z), w67 = h2x2(wv.w);
#pragma unroll
    for (int r = 0; r < HEADS_HR; r++) {
      if (r < nr) {
        const float* xr = xs + r * H + k0;
        acc[r] += w01.x * xr[0] + w01.y * xr[1] + w23.x * xr[2] + w23.y * xr[3] + w45.x * xr[4] + w45.y * xr[5] +
                  w67.x * xr[6] + w67.y * xr[7];
      }
    }
  }
  const float bj = bias[(size_t)h * H + j];
#pragma unroll
  for (int r = 0; r < HEADS_HR; r++) {
    if (r < nr) {
      const float s = warp_sum(acc[r]) + bj;
      if (lane == 0) out[((size_t)h * R + r0 + r) * H + j] = xs[r * H + j] + s / (1.f + expf(-s));
    }
  }
}

// heads_proj_tile: for head rows (pairs) p in [blockIdx.y*HEADS_PB, +HEADS_PB)
// of y [P][H] (pair p = h*R + r) and vocabulary rows v in [blockIdx.x*HEADS_TILE,
// +HEADS_TILE) of the projection (proj + h*projHeadStride, fp16 [V][H]):
// l = proj[v] . y[p]; writes each pair's tile top-k (value, index; ties to
// the lower index, NaN as -inf, missing entries (-inf, INT_MAX)) to
// cv/ci [P][gridDim.x][K]. block 256, dynamic smem HEADS_PB*H floats.
extern "C" __global__ void __launch_bounds__(256) heads_proj_tile(const float* __restrict__ y, const f16* __restrict__ proj,
                                                                  long long projHeadStride, float* __restrict__ cv,
                                                                  int* __restrict__ ci, int P, int R, int V, int H, int K) {
  extern __shared__ float ys[];
  __shared__ float lg[HEADS_PB][HEADS_TILE];
  pdl_wait();
  const int p0 = blockIdx.y * HEADS_PB, np = min(HEADS_PB, P - p0);
  const int v0 = blockIdx.x * HEADS_TILE;
  for (int i = threadIdx.x; i < np * H; i += blockDim.x) ys[i] = y[(size_t)p0 * H + i];
  __syncthreads();
  pdl_trigger();
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
  for (int q = 0; q < HEADS_TILE / 8; q++) {
    const int vt = wid * (HEADS_TILE / 8) + q, v = v0 + vt;
    float acc[HEADS_PB];
#pragma unroll
    for (int pp = 0; pp < HEADS_PB; pp++) acc[pp] = 0.f;
    if (v < V) {
      // heads of the block's pairs may differ (own projections): per pair
      for (int k0 = lane * 8; k0 < H; k0 += 256) {
        const uint4 wv0 = *(const uint4*)(proj + (size_t)v * H + k0);  // head 0's (the shared one)
#pragma unroll
        for (int pp = 0; pp < HEADS_PB; pp++) {
          if (pp < np) {
            const int hh = (p0 + pp) / R;
            const uint4 wv = projHeadStride == 0 || hh == 0 ? wv0 : *(const uint4*)(proj + (size_t)hh * projHeadStride + (size_t)v * H + k0);
            const float2 w01 = h2x2(wv.x), w23 = h2x2(wv.y), w45 = h2x2(wv.z), w67 = h2x2(wv.w);
            const float* yr = ys + pp * H + k0;
            acc[pp] += w01.x * yr[0] + w01.y * yr[1] + w23.x * yr[2] + w23.y * yr[3] + w45.x * yr[4] + w45.y * yr[5] +
                       w67.x * yr[6] + w67.y * yr[7];
          }
        }
      }
    }
#pragma unroll
    for (int pp = 0; pp < HEADS_PB; pp++) {
      float s = warp_sum(acc[pp]);
      if (!(s == s) || v >= V) s = NEG_INF;
      if (lane == 0) lg[pp][vt] = s;
    }
  }
  __syncthreads();
  if (wid >= np) return;
  // warp wid: the tile top-k of pair p0+wid; lane holds entries lane, lane+32
  const int pp = wid;
  float a = lg[pp][lane], b = lg[pp][lane + 32];
  int ia = v0 + lane, ib = v0 + lane + 32;
  if (ia >= V) ia = 0x7fffffff;
  if (ib >= V) ib = 0x7fffffff;
  float* ov = cv + ((size_t)(p0 + pp) * gridDim.x + blockIdx.x) * K;
  int* oi = ci + ((size_t)(p0 + pp) * gridDim.x + blockIdx.x) * K;
  for (int j = 0; j < K; j++) {
    // the lane's better entry, then the warp's best (value desc, index asc)
    float bv = a;
    int bi = ia;
    if (topk_better(b, ib, a, ia)) {
      bv = b;
      bi = ib;
    }
#pragma unroll
    for (int s = 16; s > 0; s >>= 1) {
      const float ov2 = __shfl_xor_sync(0xffffffffu, bv, s);
      const int oi2 = __shfl_xor_sync(0xffffffffu, bi, s);
      if (topk_better(ov2, oi2, bv, bi)) {
        bv = ov2;
        bi = oi2;
      }
    }
    if (lane == 0) {
      ov[j] = bv;
      oi[j] = bi;
    }
    if (bi != 0x7fffffff) {  // retire the winner (indices are distinct)
      if (ia == bi) {
        a = NEG_INF;
        ia = 0x7fffffff;
      }
      if (ib == bi) {
        b = NEG_INF;
        ib = 0x7fffffff;
      }
    }
  }
}

// heads_topk_merge: one warp per pair p of P: the K best of its T*K tile
// candidates cv/ci [P][T*K] (as heads_topk), written as heads_topk does:
// out[(r*nh + h)*K + j] = ids ? ids[idx] : idx. grid ceil(P/8), block 256.
extern "C" __global__ void __launch_bounds__(256) heads_topk_merge(const float* __restrict__ cv, const int* __restrict__ ci,
                                                                   const int* __restrict__ ids, int* __restrict__ out,
                                                                   int P, int R, int nh, int N, int K) {
  pdl_wait();
  const int lane = threadIdx.x & 31, p = blockIdx.x * 8 + (threadIdx.x >> 5);
  if (p >= P) return;
  const float* rv = cv + (size_t)p * N;
  const int* ri = ci + (size_t)p * N;
  float tv[HEADS_KMAX];
  int ti[HEADS_KMAX];
  topk_init(tv, ti);
  for (int i = lane; i < N; i += 32) topk_insert(tv, ti, K, rv[i], ri[i]);
  const int h = p / R, r = p - h * R;
  topk_warp_out(tv, ti, K, lane, ids, out + ((size_t)r * nh + h) * K);
}
