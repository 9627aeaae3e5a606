// Register-tiled GEMV for multi-token steps (round 7, exact tree
// verification). Helpers (gemv_stage, RopeArgs, rope_rot, h2x2, ldg_stream,
// pdl_*) come from llama.cu, which precedes this file in the compiled
// source.
//
// gemv_wide<RW, TT, NORM, MODE>: the same GEMV as gemv<M, NORM, MODE> of
// llama.cu (same modes, same arguments but the chunking), giving every
// (row, token) exactly the bits the batch-1 kernels give: lane L of a warp
// sums the row's 16-byte weight chunks L, L+32, L+64, ... in increasing
// order, each chunk as 8 fmaf in column order from 0, then the 32 lane
// partials are added in warp_sum's butterfly order (offsets 16, 8, 4, 2, 1),
// then the norm scale, then the epilogue. What differs is the work per
// warp: a warp holds its RW weight rows' chunks in registers (at most
// CPL chunks per lane and row: K <= 256 * CPL) for the whole kernel, loaded
// once before pdl_wait, and runs over the block's token chunk TT tokens at
// a time, so one weight load serves every token (the M <= 8 kernels read
// the weights once per 8-token chunk and do one row per warp: 4 bytes of
// shared memory read per FMA, here 4 / RW). The RW x TT partials of a tile
// are reduced with a reduce-scatter over the same butterfly (each level
// adds the same two partials as warp_sum does, lane L then holding one
// (row, token) group): 31 shuffles per tile instead of 5 per value.
// grid (ceil(N / (warps * RW)), ceil(mt / tc)), block warps * 32; dynamic
// shared memory tc * K floats (the block's tokens [tc*y, tc*y + tc), staged
// by gw_stage) plus K halves (nw).

__host__ __device__ constexpr int gw_ilog2(int n) { return n <= 1 ? 0 : 1 + gw_ilog2(n / 2); }

// h2x2v: h2x2 as a volatile asm, so the compiler converts a weight chunk
// where it is used (per token tile) instead of hoisting the conversions of
// every chunk out of the tile loop (206 registers, one block per SM).
__device__ __forceinline__ float2 h2x2v(u32 v) {
  float2 r;
  asm volatile("{.reg .f16 lo, hi;\n\tmov.b32 {lo, hi}, %2;\n\tcvt.f32.f16 %0, lo;\n\tcvt.f32.f16 %1, hi;}"
               : "=f"(r.x), "=f"(r.y) : "r"(v));
  return r;
}

// gw_reduce: a[NV] per lane -> lane L holds, in a[0 .. NK), the warp sums
// of values (L >> (5 - S)) * NK + [0, NK), S = log2(NV / NK). Bits equal
// to warp_sum of each value: every level adds own + partner exactly as the
// butterfly does (fp addition commutes, so whichever lane computes a sum
// gets warp_sum's bits).
template <int NV, int NK>
__device__ __forceinline__ void gw_reduce(float (&a)[NV], int lane) {
  constexpr int S = gw_ilog2(NV / NK);
#pragma unroll
  for (int s = 0; s < S; s++) {
    const int o = 16 >> s, h = (NV >> s) >> 1;
    const bool up = (lane & o) != 0;
#pragma unroll
    for (int i = 0; i < h; i++) {
      const float send = up ? a[i] : a[i + h];
      const float keep = up ? a[i + h] : a[i];
      a[i] = keep + __shfl_xor_sync(0xffffffffu, send, o);
    }
  }
#pragma unroll
  for (int o = 16 >> S; o > 0; o >>= 1)
#pragma unroll
    for (int i = 0; i < NK; i++) a[i] += __shfl_xor_sync(0xffffffffu, a[i], o);
}

// gw_stage: gemv_stage's result (xs = x * nw in its halves layout, scale[m]
// = rsqrt(mean(x^2) + eps) with the same per-lane order and warp_sum) in
// one round trip to memory: the raw rows and nw are copied asynchronously
// into shared memory (nws: K halves after the inputs), then the sums of
// squares and the scaling run from shared memory.
template <int NORM>
__device__ __forceinline__ void gw_stage(const float* __restrict__ X, const int* __restrict__ xrow,
                                         const f16* __restrict__ nw, float eps, int K, float* xs, f16* nws,
                                         float* scale, int mc) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = blockDim.x >> 5, nt = blockDim.x;
  const int k4n = K >> 2, half = K >> 1;
  for (int idx = tid; idx < mc * k4n; idx += nt) {
    const int m = idx / k4n, k4 = idx - m * k4n;
    cp_async16(xs + m * K + ((k4 & 1) ? half : 0) + (k4 >> 1) * 4, X + (size_t)(xrow ? xrow[m] : m) * K + 4 * k4);
  }
  if (NORM)
    for (int i = tid; i < (K >> 3); i += nt) cp_async16(nws + 8 * i, nw + 8 * i);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  if (!NORM) return;
  for (int m = warp; m < mc; m += nwarps) {
    const float* row = xs + m * K;
    float ss = 0.f;
    for (int k = lane * 4; k < K; k += 128) {  // gemv_stage's order: columns lane*4 + 128 i, increasing
      const int k4 = k >> 2;
      const float4 v = *(const float4*)(row + ((k4 & 1) ? half : 0) + (k4 >> 1) * 4);
      ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
    ss = warp_sum(ss);
    if (lane == 0) scale[m] = rsqrtf(ss / (float)K + eps);
  }
  __syncthreads();
  for (int idx = tid; idx < mc * k4n; idx += nt) {
    const int m = idx / k4n, k4 = idx - m * k4n;
    float4* p = (float4*)(xs + m * K + ((k4 & 1) ? half : 0) + (k4 >> 1) * 4);
    const uint2 g = *(const uint2*)(nws + 4 * k4);
    const float2 g0 = h2x2(g.x), g1 = h2x2(g.y);
    float4 v = *p;
    v.x *= g0.x; v.y *= g0.y; v.z *= g1.x; v.w *= g1.y;
    *p = v;
  }
  __syncthreads();
}

template <int RW, int TT, int CPL, int NORM, int MODE>
__device__ void gemv_wide(const f16* __restrict__ W, const float* __restrict__ X, const int* __restrict__ xrow,
                          const f16* __restrict__ nw, float eps, float* __restrict__ Y, int N, int K, int mt, int tc,
                          RopeArgs ra) {
  extern __shared__ float4 smem4[];
  float* xs = (float*)smem4;
  __shared__ float scale[64];
  constexpr int R = MODE >= 2 ? 2 : 1;  // rows per unit; a warp's rows are whole units (RW even for R = 2)
  constexpr int NV = RW * TT;
  static_assert(NV <= 32 && (NV & (NV - 1)) == 0, "RW * TT must be a power of two <= 32");
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  const int units = MODE >= 2 ? N / 2 : N;
  const int row0 = (blockIdx.x * nwarps + warp) * RW;
  const int nvec = K >> 3;
  const int m0 = blockIdx.y * tc, mc = min(tc, mt - m0);
  // The warp's weights, loaded once (they do not depend on earlier kernels).
  uint4 q[RW][CPL];
#pragma unroll
  for (int r = 0; r < RW; r++)
#pragma unroll
    for (int j = 0; j < CPL; j++)
      if (row0 + r < N && lane + 32 * j < nvec) q[r][j] = ldg_stream((const uint4*)(W + (size_t)(row0 + r) * K) + lane + 32 * j);
  pdl_trigger();
  pdl_wait();
  const int* xr = xrow ? xrow + m0 : xrow;
  const float* Xc = xrow ? X : X + (size_t)m0 * K;
  gw_stage<NORM>(Xc, xr, nw, eps, K, xs, (f16*)(xs + tc * K), scale, mc);
  if (row0 >= N) return;
  const int half = K >> 1;
  for (int t0 = 0; t0 < mc; t0 += TT) {
    float a[NV];
#pragma unroll
    for (int i = 0; i < NV; i++) a[i] = 0.f;
#pragma unroll
    for (int j = 0; j < CPL; j++) {
      if (lane + 32 * j >= nvec) break;
      const int o = (lane + 32 * j) * 4;  // gemv_stage's layout: chunk c's halves at 4c and K/2 + 4c
      float2 w[RW][4];
#pragma unroll
      for (int r = 0; r < RW; r++) {
        w[r][0] = h2x2v(q[r][j].x); w[r][1] = h2x2v(q[r][j].y); w[r][2] = h2x2v(q[r][j].z); w[r][3] = h2x2v(q[r][j].w);
      }
#pragma unroll
      for (int t = 0; t < TT; t++) {
        const int m = min(t0 + t, mc - 1);  // past the chunk: a valid row, result not stored
        const float4 x0 = *(const float4*)(xs + m * K + o), x1 = *(const float4*)(xs + m * K + half + o);
#pragma unroll
        for (int r = 0; r < RW; r++) {
          float s = a[t * RW + r];
          s = fmaf(w[r][0].x, x0.x, s); s = fmaf(w[r][0].y, x0.y, s); s = fmaf(w[r][1].x, x0.z, s); s = fmaf(w[r][1].y, x0.w, s);
          s = fmaf(w[r][2].x, x1.x, s); s = fmaf(w[r][2].y, x1.y, s); s = fmaf(w[r][3].x, x1.z, s); s = fmaf(w[r][3].y, x1.w, s);
          a[t * RW + r] = s;
        }
      }
    }
    gw_reduce<NV, R>(a, lane);
    constexpr int S = gw_ilog2(NV / R);
    const int g = lane >> (5 - S), i = g * R;  // value index t * RW + r of a[0]
    const int t = i / RW, r = i - t * RW, row = row0 + r, m = t0 + t;
    if (m >= mc || row >= N || (lane & ((32 >> S) - 1))) continue;  // one lane per group stores
    float v0 = a[0], v1 = a[R - 1];
    if (NORM) {
      v0 *= scale[m];
      v1 *= scale[m];
    }
    const size_t mg = (size_t)(m0 + m);  // token index within the launch
    if (MODE == 0) Y[mg * N + row] = v0;
    if (MODE == 1) Y[mg * N + row] = Y[mg * N + row] + v0;
    if (MODE == 2) Y[mg * units + (row >> 1)] = v0 / (1.f + expf(-v0)) * v1;
    if (MODE == 3) {
      // gemv_store's MODE 3 for unit u = row / 2 and token mg
      const int u = row >> 1, hf = ra.hd >> 1, kvdim = ra.nkv * ra.hd, qdim = ra.nh * ra.hd;
      const int ropeUnits = (ra.nh + ra.nkv) * hf;
      float* yr = Y + mg * N;
      const size_t slot = (size_t)ra.slots[mg];
      if (u < ropeUnits) {
        const int h = u / hf, jj = u - h * hf;
        const float minv = ra.inv_freq[u % hf];
        float sn, cs;
        sincosf((float)ra.pos[mg] * minv, &sn, &cs);
        float o1, o2;
        rope_rot(v0, v1, cs, sn, o1, o2);
        yr[h * ra.hd + jj] = o1;
        yr[h * ra.hd + jj + hf] = o2;
        if (h >= ra.nh) {
          float* kd = ra.kc + slot * kvdim + (h - ra.nh) * ra.hd;
          kd[jj] = o1;
          kd[jj + hf] = o2;
        }
      } else {
        const int e = 2 * u - 2 * ropeUnits;
        yr[qdim + kvdim + e] = v0;
        yr[qdim + kvdim + e + 1] = v1;
        ra.vc[slot * kvdim + e] = v0;
        ra.vc[slot * kvdim + e + 1] = v1;
      }
    }
  }
}

#define GW_ARGS const f16 *W, const float *X, const int *xrow, const f16 *nw, float eps, float *Y, int N, int K, int mt, int tc
#define GW_INST(RW, CPL, TT, SFX)                                                                             \
  extern "C" __global__ void __launch_bounds__(256, 2) gemv_norm_w##RW##c##CPL##SFX(GW_ARGS) {                 \
    gemv_wide<RW, TT, CPL, 1, 0>(W, X, xrow, nw, eps, Y, N, K, mt, tc, NO_ROPE);                               \
  }                                                                                                           \
  extern "C" __global__ void __launch_bounds__(256, 2) gemv_resid_w##RW##c##CPL##SFX(GW_ARGS) {                \
    gemv_wide<RW, TT, CPL, 0, 1>(W, X, xrow, nw, eps, Y, N, K, mt, tc, NO_ROPE);                               \
  }                                                                                                           \
  extern "C" __global__ void __launch_bounds__(256, 2) gemv_plain_w##RW##c##CPL##SFX(GW_ARGS) {                \
    gemv_wide<RW, TT, CPL, 0, 0>(W, X, xrow, nw, eps, Y, N, K, mt, tc, NO_ROPE);                               \
  }                                                                                                           \
  extern "C" __global__ void __launch_bounds__(256, 2) gemv_swiglu_w##RW##c##CPL##SFX(GW_ARGS) {               \
    gemv_wide<RW, TT, CPL, 1, 2>(W, X, xrow, nw, eps, Y, N, K, mt, tc, NO_ROPE);                               \
  }                                                                                                           \
  extern "C" __global__ void __launch_bounds__(256, 2) gemv_qkv_rope_w##RW##c##CPL##SFX(                       \
      GW_ARGS, const int* pos, const int* slots, const float* inv_freq, float* kc, float* vc, int nh, int nkv,   \
      int hd) {                                                                                               \
    gemv_wide<RW, TT, CPL, 1, 3>(W, X, xrow, nw, eps, Y, N, K, mt, tc, RopeArgs{pos, slots, inv_freq, kc, vc, nh, nkv, hd}); \
  }
GW_INST(4, 2, 8, )
GW_INST(2, 2, 8, )
GW_INST(2, 4, 8, )
GW_INST(4, 2, 4, t4)
GW_INST(2, 2, 4, t4)
GW_INST(2, 4, 4, t4)

// ---------------------------------------------------------------------------
// attention_g<HD, G>: attention<HD> of llama.cu (same arguments, same
// metadata, same bits for every (token, head)) with the G query heads of
// one KV head in one block: grid (T, nkv, smax) instead of (T, nh, smax),
// so each key and value row is loaded once for G heads and a step of many
// tokens (a tree verification of 64 tokens: 384 blocks of 238 registers,
// three waves on an H100) needs G times fewer blocks. Every head runs
// attention<HD>'s arithmetic in its order (scores with the same
// expressions, the online softmax per 1024-key chunk with a block max per
// head, partial pid's keys pid, pid + NP, ... in order, the partials and
// the splits combined in index order), interleaved with the other heads'.
template <int HD, int G>
__device__ void attention_g(const float* __restrict__ qkv, float* __restrict__ out, const float* __restrict__ kc,
                            const float* __restrict__ vc, const int* __restrict__ slot_list,
                            const int* __restrict__ kvoff, const int* __restrict__ kvlen, const int* __restrict__ cached,
                            const int* __restrict__ maskoff, const u32* __restrict__ mask, int nh, int nkv,
                            float scale, int t0, int smax, int kmin, float* __restrict__ part,
                            int* __restrict__ cnt, int pre, const int* __restrict__ tokidx) {
  constexpr int CH = 1024, NT = 256, NW = NT / 32;
  constexpr int QPL = HD / 4;
  constexpr int LPK = QPL < 32 ? QPL : 32;
  constexpr int KPW = 32 / LPK;
  constexpr int FPL = QPL / LPK;
  constexpr int NP = NW * KPW;
  __shared__ float4 qs4[G][QPL];
  __shared__ float sc[G][CH];
  __shared__ int sl[CH];
  __shared__ float red[32];
  __shared__ float accs[G][NP * HD];
  __shared__ float ls[G][NP];
  const int t = tokidx ? tokidx[blockIdx.x + t0] : blockIdx.x + t0, kvh = blockIdx.y, tid = threadIdx.x, sp = blockIdx.z;
  const int lane = tid & 31, w = tid >> 5, sub = lane / LPK, dl = lane - sub * LPK, pid = w * KPW + sub;
  const int kvdim = nkv * HD, qkvdim = nh * HD + 2 * kvdim;
  const int h0 = kvh * G;  // heads h0 .. h0 + G - 1 (GQA: h / (nh / nkv) == kvh)
  __shared__ int last[G];
  pdl_trigger();
  const int off = kvoff[t], nc = cached[t], mo = maskoff[t];
  int len = kvlen[t];
  if (mo >= 0) {
    int vis = 0;
    for (int w = 0; w < (len - nc + 31) >> 5; w++) vis += __popc(mask[mo + w]);
    len = nc + vis;
  }
  const int S = max(1, min(smax, (len + kmin - 1) / kmin));
  if (sp >= S) return;
  const int per = (len + S - 1) / S;
  const int kb = min(len, sp * per), ke = min(len, kb + per);
  const float* kbase = kc + kvh * HD;
  const float* vbase = vc + kvh * HD;
  float4 kk[QPL];
  int pslot = 0;
  if (pre) {
    const int pe = min(ke, kb + CH);
    const int j = kb + tid;
    pslot = j < pe ? slot_list[off + attn_kidx(j, nc, mo, mask)] : 0;
    if (j < pe && j < nc) {
      const float4* kr = (const float4*)(kbase + (size_t)pslot * kvdim);
#pragma unroll
      for (int e = 0; e < QPL; e++) kk[e] = kr[e];
      const char* vr = (const char*)(vbase + (size_t)pslot * kvdim);
      for (int o = 0; o < HD * 4; o += 128) asm volatile("prefetch.global.L2 [%0];" ::"l"(vr + o));
    }
    for (int j = kb + tid + NT; j < min(ke, nc); j += NT) {
      const size_t row = (size_t)slot_list[off + j] * kvdim;
      const char* kr = (const char*)(kbase + row);
      const char* vr = (const char*)(vbase + row);
      for (int o = 0; o < HD * 4; o += 128) {
        asm volatile("prefetch.global.L2 [%0];" ::"l"(kr + o));
        asm volatile("prefetch.global.L2 [%0];" ::"l"(vr + o));
      }
    }
  }
  constexpr int UV = FPL > 1 ? 4 : 8;
  pdl_wait();
  for (int i = tid; i < G * HD; i += NT) {
    const int g = i / HD, d = i - g * HD;
    ((float*)qs4[g])[d] = qkv[(size_t)t * qkvdim + (h0 + g) * HD + d] * scale;
  }
  float mrun[G], l[G];
  float4 acc[G][FPL];
#pragma unroll
  for (int g = 0; g < G; g++) {
    mrun[g] = NEG_INF;
    l[g] = 0.f;
#pragma unroll
    for (int f = 0; f < FPL; f++) acc[g][f].x = acc[g][f].y = acc[g][f].z = acc[g][f].w = 0.f;
  }
  __syncthreads();
  for (int c0 = kb; c0 < ke; c0 += CH) {
    const int c1 = min(ke, c0 + CH);
    float mloc[G];
#pragma unroll
    for (int g = 0; g < G; g++) mloc[g] = NEG_INF;
    for (int j0 = c0 + tid; j0 < c1; j0 += NT) {
      const bool first = pre && j0 == kb + tid;
      const int slot2 = first ? pslot : slot_list[off + attn_kidx(j0, nc, mo, mask)];
      if (!(first && j0 < nc)) {
        const float4* kr = (const float4*)(kbase + (size_t)slot2 * kvdim);
#pragma unroll
        for (int e = 0; e < QPL; e++) kk[e] = kr[e];
      }
      sl[j0 - c0] = slot2;
#pragma unroll
      for (int g = 0; g < G; g++) {
        float s0 = 0.f, s1 = 0.f;
#pragma unroll
        for (int e = 0; e < QPL; e += 2) {
          float4 k4 = kk[e], q4 = qs4[g][e];
          s0 += q4.x * k4.x + q4.y * k4.y + q4.z * k4.z + q4.w * k4.w;
          if (e + 1 < QPL) {
            float4 k5 = kk[e + 1], q5 = qs4[g][e + 1];
            s1 += q5.x * k5.x + q5.y * k5.y + q5.z * k5.z + q5.w * k5.w;
          }
        }
        const float s = s0 + s1;
        sc[g][j0 - c0] = s;
        mloc[g] = fmaxf(mloc[g], s);
      }
    }
    float mnew[G];
#pragma unroll
    for (int g = 0; g < G; g++) mnew[g] = fmaxf(mrun[g], block_max(mloc[g], red));  // barriers publish sc, sl
#pragma unroll
    for (int g = 0; g < G; g++) {
      if (mnew[g] == NEG_INF) continue;
      const float corr = mrun[g] == NEG_INF ? 0.f : expf(mrun[g] - mnew[g]);
      l[g] *= corr;
#pragma unroll
      for (int f = 0; f < FPL; f++) {
        acc[g][f].x *= corr; acc[g][f].y *= corr; acc[g][f].z *= corr; acc[g][f].w *= corr;
      }
    }
    for (int j = c0 + pid; j < c1; j += UV * NP) {
      float4 v[UV][FPL];
#pragma unroll
      for (int u = 0; u < UV; u++) {
        const int jj = j + u * NP;
        if (jj < c1) {
          const float4* vr = (const float4*)(vbase + (size_t)sl[jj - c0] * kvdim);
#pragma unroll
          for (int f = 0; f < FPL; f++) v[u][f] = vr[dl + f * LPK];
        }
      }
#pragma unroll
      for (int u = 0; u < UV; u++) {
        const int jj = j + u * NP;
        if (jj >= c1) break;
#pragma unroll
        for (int g = 0; g < G; g++) {
          if (mnew[g] == NEG_INF) continue;
          const float s = sc[g][jj - c0];
          if (s == NEG_INF) continue;
          const float p = expf(s - mnew[g]);
          l[g] += p;
#pragma unroll
          for (int f = 0; f < FPL; f++) {
            acc[g][f].x = fmaf(p, v[u][f].x, acc[g][f].x); acc[g][f].y = fmaf(p, v[u][f].y, acc[g][f].y);
            acc[g][f].z = fmaf(p, v[u][f].z, acc[g][f].z); acc[g][f].w = fmaf(p, v[u][f].w, acc[g][f].w);
          }
        }
      }
    }
#pragma unroll
    for (int g = 0; g < G; g++)
      if (mnew[g] != NEG_INF) mrun[g] = mnew[g];
    __syncthreads();
  }
#pragma unroll
  for (int g = 0; g < G; g++) {
#pragma unroll
    for (int f = 0; f < FPL; f++) *(float4*)(accs[g] + pid * HD + 4 * (dl + f * LPK)) = acc[g][f];
    if (dl == 0) ls[g][pid] = l[g];
  }
  __syncthreads();
  if (S == 1) {
    for (int i = tid; i < G * HD; i += NT) {
      const int g = i / HD, d = i - g * HD;
      float a = 0.f, ll = 0.f;
      for (int k = 0; k < NP; k++) {
        a += accs[g][k * HD + d];
        ll += ls[g][k];
      }
      out[(size_t)t * nh * HD + (h0 + g) * HD + d] = ll > 0.f ? a / ll : 0.f;
    }
    return;
  }
  for (int i = tid; i < G * HD; i += NT) {
    const int g = i / HD, d = i - g * HD;
    float* mine = part + ((size_t)(blockIdx.x * nh + h0 + g) * smax + sp) * (HD + 2);
    float a = 0.f;
    for (int k = 0; k < NP; k++) a += accs[g][k * HD + d];
    mine[d] = a;
  }
  if (tid < G) {
    const int g = tid;
    float* mine = part + ((size_t)(blockIdx.x * nh + h0 + g) * smax + sp) * (HD + 2);
    float ll = 0.f;
    for (int k = 0; k < NP; k++) ll += ls[g][k];
    mine[HD] = ll;
    mine[HD + 1] = mrun[g];
  }
  __threadfence();
  __syncthreads();
  if (tid < G) last[tid] = atomicAdd(cnt + blockIdx.x * nh + h0 + tid, 1) == S - 1;
  __syncthreads();
  __threadfence();
  for (int g = 0; g < G; g++) {
    if (!last[g]) continue;
    const int pair = blockIdx.x * nh + h0 + g;
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
      out[(size_t)t * nh * HD + (h0 + g) * HD + d] = ll > 0.f ? a / ll : 0.f;
    }
    if (tid == 0) cnt[pair] = 0;
  }
}

#define ATTNG_INST(HD, G)                                                                                    \
  extern "C" __global__ void attention_g##G##_hd##HD(                                                         \
      const float* qkv, float* out, const float* kc, const float* vc, const int* slot_list, const int* kvoff,  \
      const int* kvlen, const int* cached, const int* maskoff, const u32* mask, int nh, int nkv, float scale,  \
      int t0, int smax, int kmin, float* part, int* cnt, int pre, const int* tokidx) {                          \
    attention_g<HD, G>(qkv, out, kc, vc, slot_list, kvoff, kvlen, cached, maskoff, mask, nh, nkv, scale, t0,  \
                       smax, kmin, part, cnt, pre, tokidx);                                                   \
  }
ATTNG_INST(64, 2)
ATTNG_INST(64, 3)
ATTNG_INST(64, 4)
ATTNG_INST(128, 2)
ATTNG_INST(128, 4)
