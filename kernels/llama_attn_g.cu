// Grouped attention for multi-token steps (round 7, exact tree
// verification). Helpers (attn_kidx, block_max, pdl_*, NEG_INF) come from
// llama.cu, which precedes this file in the compiled source.

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
//
// Round 11: R7 = false (the default kernels) differs from round 7's code
// (R7 = true, attention_g3_hd64_r7, Tuning.AttnGroupR7, kept for A/B runs)
// in two places that leave every operation and its operands as they were:
// a compiler barrier after each head's score, so the compiler no longer
// hoists all G heads' query rows from shared memory into registers at once
// (G x HD/4 float4 beside the key row's: 255 registers and ~0.5-0.8 KB of
// spills per thread at G 3 / head dim 64 with NVRTC 11.8, 171 and none
// with the barrier), and the G block maxima of a chunk in one pair of
// barriers (block_max_g) instead of G pairs (a max does not depend on its
// order).
template <int G>
__device__ __forceinline__ void block_max_g(float (&v)[G], float* red) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
#pragma unroll
  for (int g = 0; g < G; g++) v[g] = warp_max(v[g]);
  __syncthreads();
  if (lane == 0) {
#pragma unroll
    for (int g = 0; g < G; g++) red[g * nw + w] = v[g];
  }
  __syncthreads();
#pragma unroll
  for (int g = 0; g < G; g++) v[g] = warp_max(lane < nw ? red[g * nw + lane] : NEG_INF);
}

template <int HD, int G, bool R7>
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
  __shared__ float red[32];  // block_max_g: G x NW <= 32
  static_assert(G * NW <= 32, "red holds G x NW warp maxima");
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
        if (!R7) asm volatile("" ::: "memory");
      }
    }
    float mnew[G];
    if (R7) {
#pragma unroll
      for (int g = 0; g < G; g++) mnew[g] = fmaxf(mrun[g], block_max(mloc[g], red));  // barriers publish sc, sl
    } else {
      block_max_g<G>(mloc, red);  // barriers publish sc, sl
#pragma unroll
      for (int g = 0; g < G; g++) mnew[g] = fmaxf(mrun[g], mloc[g]);
    }
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

#define ATTNG_KERNEL(NAME, HD, G, R7)                                                                        \
  extern "C" __global__ void NAME(const float* qkv, float* out, const float* kc, const float* vc,               \
                                  const int* slot_list, const int* kvoff, const int* kvlen, const int* cached, \
                                  const int* maskoff, const u32* mask, int nh, int nkv, float scale, int t0,  \
                                  int smax, int kmin, float* part, int* cnt, int pre, const int* tokidx) {     \
    attention_g<HD, G, R7>(qkv, out, kc, vc, slot_list, kvoff, kvlen, cached, maskoff, mask, nh, nkv, scale,  \
                           t0, smax, kmin, part, cnt, pre, tokidx);                                           \
  }
#define ATTNG_INST(HD, G) ATTNG_KERNEL(attention_g##G##_hd##HD, HD, G, false)
// Round 7's code for the shipped target's shape (Tuning.AttnGroupR7).
ATTNG_KERNEL(attention_g3_hd64_r7, 64, 3, true)
ATTNG_INST(64, 2)
ATTNG_INST(64, 3)
ATTNG_INST(64, 4)
ATTNG_INST(128, 2)
ATTNG_INST(128, 4)
