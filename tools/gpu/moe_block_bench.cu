// moe_block_bench: the moe_gemv kernels (kernels/families/moe_fused/moe_gemv.cuh) of
// Qwen3-30B-A3B's MoE block at one token, chained over L layers in a CUDA Graph with
// programmatic dependent launch, timed with parts of the chain left out and beside prototype
// variants, to place the block's time on its critical path (docs/PERF.md, "The MoE block's
// critical path, and L2 prefetch tried"). Each layer has its own weights (1.2 GB), so every
// layer streams from HBM; a line per chain gives the median of 30 replays per layer.
//
//   nvcc -O3 -arch=sm_90a -std=c++17 -I. -Ikernels/families/moe_fused -Ikernels/families/moe \
//       -Ikernels/core tools/gpu/moe_block_bench.cu -o moe_block_bench
//   ./moe_block_bench [LAYERS=16] [PERSISTING_L2_MIB]
//
// The chains: the shipped route, gate/up and down kernels (and each alone), with select = 0
// (the router's last CTA selects the top-k) and select = 1 (the gate/up CTAs select it,
// docs/kernels.md), checked bit for bit against each other, and each with the prototypes'
// straight-loop gate/up or down in its place; "V2", a router
// that writes the logits only, gate/up CTAs that select the top-k themselves (one token: slot
// j is selection j) and publish the routing, and a down GEMV that reads it after its wait,
// checked bit for bit against the shipped kernels first; the MoE norm as its own kernel or
// folded into V2's router; a QKV-sized GEMV (5120 x 2048) from HBM and from L2; and L2
// prefetches of that GEMV's weights from a second stream beside a 6 us kernel, line by line or
// by the copy engine (cp.async.bulk.prefetch), with evict-last and evict-first cache hints.
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <string>
#include <cstring>
#include <cmath>
#include "moe_gemv.cuh"
using namespace tileplan;
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1);} } while (0)

__global__ void fill(bf16* p, long long n, unsigned seed, float scale) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    unsigned h = (unsigned)(i * 2654435761u) ^ seed; h ^= h >> 13; h *= 0x5bd1e995u; h ^= h >> 15;
    float v = ((h & 0xffff) / 65535.f - 0.5f) * scale;
    p[i] = from_float<bf16>(v);
  }
}
__global__ void empty_kernel(int) { grid_dependency_sync(); }

constexpr int H = 2048, E = 128, I = 768, K = 8, NT = 1, TH = 256, GR = 8, DR = 4, RR = 4, VEC = 8;

__device__ __forceinline__ void prefetch_el(const void* p) { asm volatile("prefetch.global.L2::evict_last [%0];" ::"l"(p)); }

// The logits of the CTA's kRows experts for one token (x through `xform`), its warps splitting
// the hidden size and summing through `sums`, as moe_route computes them.
template <int kThreads, int kRows, typename XForm>
__device__ __forceinline__ void logits_of_cta(const bf16* x, const bf16* router, float* logits, int hidden, int experts,
                                              const XForm& xform, float (&sums)[kThreads / 32][kRows]) {
  const int warp = threadIdx.x / 32;
  int index[1] = {0};
  const bf16* w[kRows];
  float acc[kRows][1];
  moe_row_pointers<bf16, kRows>(router, blockIdx.x * kRows, experts, hidden, w);
  moe_zero(acc);
  moe_warp_dots<bf16, bf16, kRows, 1, VEC>(w, x, 0, index, hidden, warp * 32, kThreads, acc, xform);
  moe_each_sum(acc, [&](int a, int, float sum, int) { sums[warp][a] = sum; });
  __syncthreads();
  if (threadIdx.x < kRows) {
    float sum = 0.f;
    for (int wi = 0; wi < kThreads / 32; ++wi) sum += sums[wi][threadIdx.x];
    logits[blockIdx.x * kRows + threadIdx.x] = sum;
  }
}

// Variant: the router writes logits only (no arrival counter, no last CTA); every gate/up CTA
// selects the top-k itself from the logits (one token), and the first tile of each slot
// publishes the slot's expert, selection and weight for moe_down (read after its wait).
template <int kThreads, int kRows>
// With next_bytes > 0 it also prefetches [next, next + next_bytes) into L2 with evict_last
// before its wait (another layer's weights).
__global__ void __launch_bounds__(kThreads) route_logits(const bf16* __restrict__ x, const bf16* __restrict__ router, float* logits, int hidden, int experts,
    const char* next, long long next_bytes) {
  constexpr int kWarps = kThreads / 32;
  __shared__ float sums[kWarps][kRows];
  moe_prefetch_rows<bf16, kRows, kThreads>(router, blockIdx.x * kRows, experts, hidden);
  for (long long o = (blockIdx.x * (long long)kThreads + threadIdx.x) * 128; o < next_bytes; o += (long long)gridDim.x * kThreads * 128) prefetch_el(next + o);
  grid_dependency_sync();
  logits_of_cta<kThreads, kRows>(x, router, logits, hidden, experts, MoeInputAsIs(), sums);
}

// One token's top-k from the logits by warp 0 (Qwen3-MoE routing: softmax, renormalized),
// returned to the whole CTA: the expert of selection `slot`. The CTAs of tile 0 publish their
// slot's expert, selection and weight (the routing table of moe_fused_params.h) for the down
// GEMV, and CTA 0 the slot count.
__device__ __forceinline__ int select_slot(const float* logits, int* table, float* weights, int experts, int top_k, int slot, int tile) {
  __shared__ int s_e;
  if (threadIdx.x < 32) {
    float l[4];
    for (int j = 0; j < 4; ++j) { const int e = j * 32 + threadIdx.x; l[j] = e < experts ? load_cg(logits + e) : 0.f; }
    int id; float wt;
    moe_topk_select<4>(l, experts, top_k, 1, 1, 1, 1.f, id, wt);
    if (threadIdx.x == slot) {
      s_e = id;
      if (tile == 0) { table[kMoeTableHeader + slot] = id; table[kMoeTableHeader + top_k + slot] = slot; weights[slot] = wt; }
    }
    if (blockIdx.x == 0 && threadIdx.x == 0) table[0] = top_k;
  }
  __syncthreads();
  return s_e;
}

template <int kThreads, int kRows>
__global__ void __launch_bounds__(kThreads, 6) gate_up_topk(const bf16* __restrict__ x, const bf16* __restrict__ gate, const bf16* __restrict__ up,
    const float* logits, int* table, float* weights, float* act, int hidden, int inter, int experts, int top_k, int routed_tiles) {
  using Shape = MoeBlockShape<kThreads, kRows, 2, 1, VEC>;
  constexpr int kRowsPerWarp = Shape::kRowsPerWarp, kPass = Shape::kPass;
  grid_dependency_sync();
  const int slot = blockIdx.x / routed_tiles, tile = blockIdx.x % routed_tiles;
  const int s_e = select_slot(logits, table, weights, experts, top_k, slot, tile);
  const long long e = s_e;
  const bf16* w_gate = gate + e * inter * hidden;
  const bf16* w_up = up + e * inter * hidden;
  int index[1] = {0};
  const int r0 = tile * kRows + (threadIdx.x / 32) * kRowsPerWarp;
  for (int p0 = 0; p0 < kRowsPerWarp; p0 += kPass) {
    const bf16* w[2 * kPass];
    float acc[2 * kPass][1];
    moe_row_pointers<bf16, kPass>(w_gate, r0 + p0, inter, hidden, w);
    moe_row_pointers<bf16, kPass>(w_up, r0 + p0, inter, hidden, w + kPass);
    moe_zero(acc);
    moe_warp_dots<bf16, bf16, 2 * kPass, 1, VEC>(w, x, 0, index, hidden, 0, 32, acc);
    float g_acc[kPass][1], u_acc[kPass][1];
    for (int a = 0; a < kPass; ++a) { g_acc[a][0] = acc[a][0]; u_acc[a][0] = acc[kPass + a][0]; }
    float u[moe_sums_per_lane(kPass)];
    moe_warp_sums<kPass, 1>(u_acc, u);
    moe_each_sum(g_acc, [&](int a, int t, float g, int j) {
      const int r = r0 + p0 + a;
      if (r >= inter) return;
      act[static_cast<long long>(slot) * inter + r] = silu(g) * u[j];
    });
  }
}

// moe_down for one token with the routing read after the wait (written by gate_up_topk).
template <int kThreads, int kRows>
__global__ void __launch_bounds__(kThreads) down_after(const bf16* __restrict__ down, const int* table, const float* weights,
    const float* __restrict__ act, const bf16* residual, bf16* out, int inter, int cols, int top_k) {
  constexpr int kWarps = kThreads / 32;
  constexpr int kPass = moe_rows_per_pass(kThreads, kRows, 1, 1, VEC);
  __shared__ float down_sums[kWarps][kPass];
  __shared__ int s_expert[16];
  __shared__ float s_coef[16];
  grid_dependency_sync();
  if (threadIdx.x < top_k) { s_expert[threadIdx.x] = load_cg(table + kMoeTableHeader + threadIdx.x); s_coef[threadIdx.x] = load_cg(weights + threadIdx.x); }
  __syncthreads();
  const int warp = threadIdx.x / 32;
  const int routed_vecs = inter / VEC;
  const int total = top_k * routed_vecs;
  const int r_base = blockIdx.x * kRows;
  for (int p0 = 0; p0 < kRows; p0 += kPass) {
    float acc[kPass][1];
    moe_zero(acc);
#pragma unroll 4
    for (int i = threadIdx.x; i < total; i += kThreads) {
      const int j = i / routed_vecs;
      const long long k = static_cast<long long>(i - j * routed_vecs) * VEC;
      const bf16* base = down + static_cast<long long>(s_expert[j]) * cols * inter;
      float wv[kPass][VEC];
      for (int a = 0; a < kPass; ++a) load_floats<bf16, VEC>(base + static_cast<long long>(r_base + p0 + a) * inter + k, wv[a]);
      float hv[VEC];
      load_floats<float, VEC>(act + static_cast<long long>(j) * inter + k, hv);
      const float c = s_coef[j];
      for (int a = 0; a < kPass; ++a) { float dot = 0.f; for (int e = 0; e < VEC; ++e) dot += wv[a][e] * hv[e]; acc[a][0] += c * dot; }
    }
    moe_each_sum(acc, [&](int a, int t, float sum, int) { down_sums[warp][a] = sum; });
    __syncthreads();
    if (threadIdx.x < kPass) {
      float sum = 0.f;
      for (int w = 0; w < kWarps; ++w) sum += down_sums[w][threadIdx.x];
      const int r = r_base + p0 + threadIdx.x;
      sum += to_float(residual[r]);
      out[r] = from_float<bf16>(sum);
    }
    __syncthreads();
  }
}


template <int kThreads>
__global__ void __launch_bounds__(kThreads) rmsnorm1(const bf16* __restrict__ x, const bf16* __restrict__ g, bf16* __restrict__ y, int n, float eps) {
  __shared__ float red[kThreads / 32];
  __shared__ float scale;
  grid_dependency_sync();
  float ss = 0.f;
  for (int v = threadIdx.x; v < n / VEC; v += kThreads) { float xv[VEC]; load_floats<bf16, VEC>(x + v * VEC, xv); for (int e = 0; e < VEC; ++e) ss += xv[e] * xv[e]; }
  ss = group_sum<32>(ss);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = ss;
  __syncthreads();
  if (threadIdx.x == 0) { float s = 0.f; for (int i = 0; i < kThreads / 32; ++i) s += red[i]; scale = rsqrtf(s / n + eps); }
  __syncthreads();
  for (int v = threadIdx.x; v < n / VEC; v += kThreads) { float xv[VEC], gv[VEC]; load_floats<bf16, VEC>(x + v * VEC, xv); load_floats<bf16, VEC>(g + v * VEC, gv);
    for (int e = 0; e < VEC; ++e) xv[e] = to_float(from_float<bf16>(xv[e] * scale * gv[e])); store_floats<bf16, VEC>(y + v * VEC, xv); }
}
// route_logits with the norm folded: every CTA sums x's squares, normalizes on the fly, and the
// CTAs share the store of xn for the gate/up GEMV.
template <int kThreads, int kRows>
__global__ void __launch_bounds__(kThreads) route_logits_norm(const bf16* __restrict__ x, const bf16* __restrict__ g, bf16* __restrict__ xn, const bf16* __restrict__ router, float* logits, int hidden, int experts, float eps) {
  constexpr int kWarps = kThreads / 32;
  __shared__ float sums[kWarps][kRows];
  __shared__ float red[kWarps];
  __shared__ float s_scale;
  moe_prefetch_rows<bf16, kRows, kThreads>(router, blockIdx.x * kRows, experts, hidden);
  moe_prefetch_rows<bf16, 1, kThreads>(g, 0, 1, hidden);
  grid_dependency_sync();
  const int warp = threadIdx.x / 32;
  float ss = 0.f;
  for (int v = threadIdx.x; v < hidden / VEC; v += kThreads) { float xv[VEC]; load_floats<bf16, VEC>(x + v * VEC, xv); for (int e = 0; e < VEC; ++e) ss += xv[e] * xv[e]; }
  ss = group_sum<32>(ss);
  if (threadIdx.x % 32 == 0) red[warp] = ss;
  __syncthreads();
  if (threadIdx.x == 0) { float s = 0.f; for (int i = 0; i < kWarps; ++i) s += red[i]; s_scale = rsqrtf(s / hidden + eps); }
  __syncthreads();
  const float scale = s_scale;
  auto normalize = [&](int, long long k, float(&v)[VEC]) { float gv[VEC]; load_floats<bf16, VEC>(g + k, gv);
    for (int e = 0; e < VEC; ++e) v[e] = to_float(from_float<bf16>(v[e] * scale * gv[e])); };
  logits_of_cta<kThreads, kRows>(x, router, logits, hidden, experts, normalize, sums);
  for (int v = blockIdx.x + threadIdx.x * gridDim.x; v < hidden / VEC; v += kThreads * gridDim.x) {
    float xv[VEC]; load_floats<bf16, VEC>(x + v * VEC, xv); normalize(0, (long long)v * VEC, xv); store_floats<bf16, VEC>(xn + v * VEC, xv); }
}


__device__ __forceinline__ unsigned long long pol_ef() { unsigned long long p; asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p)); return p; }
__device__ __forceinline__ uint4 ld16(const void* p, unsigned long long pol, bool ef) {
  uint4 v;
  if (ef) asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p), "l"(pol));
  else asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
__device__ __forceinline__ float dot8(uint4 w, const float (&x)[8]) {
  const unsigned ws[4] = {w.x, w.y, w.z, w.w};
  float s = 0.f;
  for (int i = 0; i < 4; ++i) s += __uint_as_float(ws[i] << 16) * x[2 * i] + __uint_as_float(ws[i] & 0xffff0000u) * x[2 * i + 1];
  return s;
}
// A dense one-row GEMV like the tuned QKV one: 2 rows a CTA of 256 threads, each thread one
// 16-byte vector of each row (K = 2048); rows prefetched to L2 before the wait.
__global__ void __launch_bounds__(256) gemv2(const bf16* __restrict__ w, const bf16* __restrict__ x, bf16* __restrict__ y, int k) {
  __shared__ float red[8][2];
  const bf16* r0 = w + (long long)blockIdx.x * 2 * k;
  prefetch_l2(r0 + threadIdx.x * 16);
  grid_dependency_sync();
  float xv[8]; load_floats<bf16, 8>(x + threadIdx.x * 8, xv);
  float a0 = dot8(ld16(r0 + threadIdx.x * 8, 0, false), xv), a1 = dot8(ld16(r0 + k + threadIdx.x * 8, 0, false), xv);
  a0 = group_sum<32>(a0); a1 = group_sum<32>(a1);
  if (threadIdx.x % 32 == 0) { red[threadIdx.x / 32][0] = a0; red[threadIdx.x / 32][1] = a1; }
  __syncthreads();
  if (threadIdx.x < 2) { float s = 0.f; for (int i = 0; i < 8; ++i) s += red[i][threadIdx.x]; y[blockIdx.x * 2 + threadIdx.x] = from_float<bf16>(s); }
}
// gate_up_topk for 8 rows of 256 threads with the expert weights loaded evict_first (kEF) or plainly.
template <bool kEF>
__global__ void __launch_bounds__(256, 6) gate_up_ef(const bf16* __restrict__ x, const bf16* __restrict__ gate, const bf16* __restrict__ up,
    const float* logits, int* table, float* weights, float* act, int hidden, int inter, int experts, int top_k, int routed_tiles) {
  grid_dependency_sync();
  const int slot = blockIdx.x / routed_tiles, tile = blockIdx.x % routed_tiles;
  const int s_e = select_slot(logits, table, weights, experts, top_k, slot, tile);
  const unsigned long long pol = kEF ? pol_ef() : 0ull;
  const int r = tile * 8 + threadIdx.x / 32, lane = threadIdx.x % 32;
  const bf16* gr = gate + ((long long)s_e * inter + r) * hidden;
  const bf16* ur = up + ((long long)s_e * inter + r) * hidden;
  float g = 0.f, u = 0.f;
#pragma unroll 4
  for (int v = lane; v < hidden / 8; v += 32) {
    const uint4 gw = ld16(gr + v * 8, pol, kEF), uw = ld16(ur + v * 8, pol, kEF);
    float xv[8]; load_floats<bf16, 8>(x + v * 8, xv);
    g += dot8(gw, xv); u += dot8(uw, xv);
  }
  g = group_sum<32>(g); u = group_sum<32>(u);
  if (lane == 0) act[(long long)slot * inter + r] = silu(g) * u;
}
template <bool kEF>
__global__ void __launch_bounds__(256, 4) down_ef(const bf16* __restrict__ down, const int* table, const float* weights,
    const float* __restrict__ act, const bf16* residual, bf16* out, int inter, int cols, int top_k) {
  constexpr int kRows = 4;
  __shared__ float red[8][kRows];
  __shared__ int s_expert[16];
  __shared__ float s_coef[16];
  grid_dependency_sync();
  if (threadIdx.x < top_k) { s_expert[threadIdx.x] = load_cg(table + kMoeTableHeader + threadIdx.x); s_coef[threadIdx.x] = load_cg(weights + threadIdx.x); }
  __syncthreads();
  const unsigned long long pol = kEF ? pol_ef() : 0ull;
  const int vecs = inter / 8, total = top_k * vecs, r0 = blockIdx.x * kRows;
  float acc[kRows] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll 4
  for (int i = threadIdx.x; i < total; i += 256) {
    const int j = i / vecs;
    const long long k = (long long)(i - j * vecs) * 8;
    const bf16* base = down + (long long)s_expert[j] * cols * inter + (long long)r0 * inter + k;
    uint4 w[kRows];
    for (int a = 0; a < kRows; ++a) w[a] = ld16(base + (long long)a * inter, pol, kEF);
    float hv[8]; load_floats<float, 8>(act + (long long)j * inter + k, hv);
    const float c = s_coef[j];
    for (int a = 0; a < kRows; ++a) acc[a] += c * dot8(w[a], hv);
  }
  for (int a = 0; a < kRows; ++a) { const float s = group_sum<32>(acc[a]); if (threadIdx.x % 32 == 0) red[threadIdx.x / 32][a] = s; }
  __syncthreads();
  if (threadIdx.x < kRows) {
    float s = 0.f;
    for (int w = 0; w < 8; ++w) s += red[w][threadIdx.x];
    const int r = r0 + threadIdx.x;
    out[r] = from_float<bf16>(s + to_float(residual[r]));
  }
}


__global__ void spin_kernel(long long ns) {
  grid_dependency_sync();
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < (unsigned long long)ns);
}
template <bool kLast>
__global__ void l2_prefetch(const char* p, long long bytes) {
  for (long long o = (blockIdx.x * (long long)blockDim.x + threadIdx.x) * 128; o < bytes; o += (long long)gridDim.x * blockDim.x * 128) {
    if (kLast) prefetch_el(p + o); else prefetch_l2(p + o);
  }
}


template <bool kLast>
__global__ void l2_prefetch_bulk(const char* p, long long bytes) {
  constexpr int kChunk = 16384;
  unsigned long long pol;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
  for (long long o = (blockIdx.x * (long long)blockDim.x + threadIdx.x) * kChunk; o < bytes; o += (long long)gridDim.x * blockDim.x * kChunk) {
    const unsigned n = (unsigned)(bytes - o < kChunk ? bytes - o : kChunk);
    if (kLast) asm volatile("cp.async.bulk.prefetch.L2.global.L2::cache_hint [%0], %1, %2;" ::"l"(p + o), "r"(n), "l"(pol) : "memory");
    else asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p + o), "r"(n) : "memory");
  }
}

struct Layer { bf16 *qkv, *y, *g, *xn, *h, *router, *gate, *up, *down, *x, *out; float *logits, *weights, *act; int* table; unsigned* counter; };

static bool g_pdl = true;
template <typename... KArgs, typename... Args>
void launch(cudaStream_t s, void (*k)(KArgs...), int grid, int block, size_t smem, Args... args) {
  cudaLaunchConfig_t cfg{}; cfg.gridDim = dim3(grid); cfg.blockDim = dim3(block); cfg.dynamicSmemBytes = smem; cfg.stream = s;
  cudaLaunchAttribute at[1]; at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization; at[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = at; cfg.numAttrs = g_pdl ? 1 : 0;
  CK(cudaLaunchKernelEx(&cfg, k, static_cast<KArgs>(args)...));
}
// kSel: the product's select = 1 (the router writes the logits only, the gate/up CTAs select).
template <bool kSel> void route_t(cudaStream_t s, Layer& l) {
  launch(s, &moe_route<bf16, bf16, bf16, float, float, TH, RR, VEC, 4, NT, false, kSel>, E / RR, TH, 12 * NT * K, (const bf16*)l.x, 0LL,
         (const bf16*)nullptr, 1e-6f, (bf16*)nullptr, (const bf16*)l.router, l.logits, l.weights, l.table, kSel ? nullptr : l.counter, NT, H, E, K, 1, 1, 1, 1.f, K);
}
template <bool kSel> void gate_t(cudaStream_t s, Layer& l) {
  launch(s, &moe_gate_up<bf16, bf16, float, TH, GR, VEC, NT, 4, kSel>, K * (I / GR), TH, 0, (const bf16*)l.x, 0LL, (const bf16*)l.gate, (const bf16*)l.up,
         (const bf16*)nullptr, (const bf16*)nullptr, (const int*)l.table, l.act, (float*)nullptr, NT, H, I, 0, K, I / GR, 0,
         (const float*)l.logits, l.table, l.weights, E, K, 1, 1, 1, 1.f);
}
template <bool kSel> void down_t(cudaStream_t s, Layer& l) {
  launch(s, &moe_down<bf16, bf16, TH, DR, VEC, NT, kSel>, H / DR, TH, (size_t)MoeDownSharedBytes(K, NT), (const bf16*)l.down, (const bf16*)nullptr,
         (const int*)l.table, (const float*)l.weights, (const float*)l.act, (const float*)nullptr, (const bf16*)l.x, 0LL, l.out, NT, I, 0, H, K, 0,
         (float*)nullptr, (unsigned*)nullptr);
}
void route(cudaStream_t s, Layer& l) { route_t<false>(s, l); }
void gate(cudaStream_t s, Layer& l) { gate_t<false>(s, l); }
void down(cudaStream_t s, Layer& l) { down_t<false>(s, l); }
void route2(cudaStream_t s, Layer& l) { launch(s, &route_logits<TH, RR>, E / RR, TH, 0, (const bf16*)l.x, (const bf16*)l.router, l.logits, H, E, (const char*)nullptr, 0LL); }
void gate2(cudaStream_t s, Layer& l) { launch(s, &gate_up_topk<TH, GR>, K * (I / GR), TH, 0, (const bf16*)l.x, (const bf16*)l.gate, (const bf16*)l.up,
    (const float*)l.logits, l.table, l.weights, l.act, H, I, E, K, I / GR); }
void down2(cudaStream_t s, Layer& l) { launch(s, &down_after<TH, DR>, H / DR, TH, 0, (const bf16*)l.down, (const int*)l.table, (const float*)l.weights,
    (const float*)l.act, (const bf16*)l.x, l.out, I, H, K); }
void norm(cudaStream_t s, Layer& l) { launch(s, &rmsnorm1<TH>, 1, TH, 0, (const bf16*)l.h, (const bf16*)l.g, l.x, H, 1e-6f); }
void route2n(cudaStream_t s, Layer& l) { launch(s, &route_logits_norm<TH, RR>, E / RR, TH, 0, (const bf16*)l.h, (const bf16*)l.g, l.x, (const bf16*)l.router, l.logits, H, E, 1e-6f); }
void qkv(cudaStream_t s, Layer& l) { launch(s, &gemv2, 5120 / 2, 256, 0, (const bf16*)l.qkv, (const bf16*)l.x, l.y, H); }
void route2p(cudaStream_t s, Layer& l, Layer& next) { launch(s, &route_logits<TH, RR>, E / RR, TH, 0, (const bf16*)l.x, (const bf16*)l.router, l.logits, H, E, (const char*)next.qkv, 5120LL * H * 2); }
template <bool kEF> void gate3(cudaStream_t s, Layer& l) { launch(s, &gate_up_ef<kEF>, K * (I / 8), 256, 0, (const bf16*)l.x, (const bf16*)l.gate, (const bf16*)l.up,
    (const float*)l.logits, l.table, l.weights, l.act, H, I, E, K, I / 8); }
template <bool kEF> void down3(cudaStream_t s, Layer& l) { launch(s, &down_ef<kEF>, H / 4, 256, 0, (const bf16*)l.down, (const int*)l.table, (const float*)l.weights,
    (const float*)l.act, (const bf16*)l.x, l.out, I, H, K); }
void empty(cudaStream_t s, int ctas) { launch(s, &empty_kernel, ctas, TH, 0, 0); }

int main(int argc, char** argv) {
  const int L = argc > 1 ? atoi(argv[1]) : 16, iters = 30;
  if (argc > 2) { size_t mb = atoi(argv[2]); CK(cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, mb << 20)); size_t got; CK(cudaDeviceGetLimit(&got, cudaLimitPersistingL2CacheSize)); printf("persisting L2 %zu bytes\n", got); }
  std::vector<Layer> ls(L);
  cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  auto alloc = [&](bf16** p, long long n, unsigned seed, float sc) { CK(cudaMalloc(p, n * 2)); fill<<<1024, 256, 0, s>>>(*p, n, seed, sc); };
  unsigned seed = 1;
  for (auto& l : ls) {
    alloc(&l.router, (long long)E * H, seed++, 0.2f); alloc(&l.gate, (long long)E * I * H, seed++, 0.05f);
    alloc(&l.up, (long long)E * I * H, seed++, 0.05f); alloc(&l.down, (long long)E * H * I, seed++, 0.05f);
    alloc(&l.qkv, 5120LL * H, seed++, 0.05f); alloc(&l.y, 5120, seed++, 1.f); alloc(&l.x, H, seed++, 2.f); alloc(&l.h, H, seed++, 2.f); alloc(&l.g, H, seed++, 2.f); alloc(&l.xn, H, seed++, 1.f); alloc(&l.out, H, seed++, 1.f);
    CK(cudaMalloc(&l.logits, E * 4)); CK(cudaMalloc(&l.weights, K * 4)); CK(cudaMalloc(&l.act, K * I * 4));
    CK(cudaMalloc(&l.table, MoeTableInts(K, NT) * 4)); CK(cudaMalloc(&l.counter, 64)); CK(cudaMemset(l.counter, 0, 64));
  }
  CK(cudaStreamSynchronize(s));
  for (auto& l : ls) { g_pdl = false; route(s, l); gate(s, l); down(s, l); }
  CK(cudaStreamSynchronize(s));
  { int t[12]; CK(cudaMemcpy(t, ls[0].table, sizeof t, cudaMemcpyDeviceToHost)); printf("slots %d experts %d %d %d %d %d %d %d %d\n", t[0], t[4], t[5], t[6], t[7], t[8], t[9], t[10], t[11]); }
  {
    std::vector<unsigned short> o1(H), o2(H);
    CK(cudaMemcpy(o1.data(), ls[0].out, H * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemset(ls[0].table, 0xff, MoeTableInts(K, NT) * 4)); CK(cudaMemset(ls[0].out, 0, H * 2));
    g_pdl = false; route2(s, ls[0]); gate2(s, ls[0]); down2(s, ls[0]); CK(cudaStreamSynchronize(s));
    CK(cudaMemcpy(o2.data(), ls[0].out, H * 2, cudaMemcpyDeviceToHost));
    int diff = 0; double maxd = 0;
    for (int i = 0; i < H; ++i) { float a1, a2; unsigned u1 = (unsigned)o1[i] << 16, u2 = (unsigned)o2[i] << 16; memcpy(&a1, &u1, 4); memcpy(&a2, &u2, 4);
      if (o1[i] != o2[i]) ++diff; maxd = std::max(maxd, (double)fabsf(a1 - a2)); }
    printf("variant vs shipped: %d of %d outputs differ, max abs diff %g\n", diff, H, maxd);
    CK(cudaMemset(ls[0].table, 0xff, MoeTableInts(K, NT) * 4)); CK(cudaMemset(ls[0].out, 0, H * 2));
    g_pdl = false; route_t<true>(s, ls[0]); gate_t<true>(s, ls[0]); down_t<true>(s, ls[0]); CK(cudaStreamSynchronize(s));
    CK(cudaMemcpy(o2.data(), ls[0].out, H * 2, cudaMemcpyDeviceToHost));
    diff = 0; maxd = 0;
    for (int i = 0; i < H; ++i) { float a1, a2; unsigned u1 = (unsigned)o1[i] << 16, u2 = (unsigned)o2[i] << 16; memcpy(&a1, &u1, 4); memcpy(&a2, &u2, 4);
      if (o1[i] != o2[i]) ++diff; maxd = std::max(maxd, (double)fabsf(a1 - a2)); }
    printf("select = 1 vs shipped: %d of %d outputs differ, max abs diff %g\n", diff, H, maxd);
    CK(cudaMemset(ls[0].table, 0xff, MoeTableInts(K, NT) * 4)); CK(cudaMemset(ls[0].out, 0, H * 2));
    g_pdl = false; route2(s, ls[0]); gate3<true>(s, ls[0]); down3<true>(s, ls[0]); CK(cudaStreamSynchronize(s));
    CK(cudaMemcpy(o2.data(), ls[0].out, H * 2, cudaMemcpyDeviceToHost));
    diff = 0; maxd = 0;
    for (int i = 0; i < H; ++i) { float a1, a2; unsigned u1 = (unsigned)o1[i] << 16, u2 = (unsigned)o2[i] << 16; memcpy(&a1, &u1, 4); memcpy(&a2, &u2, 4);
      if (o1[i] != o2[i]) ++diff; maxd = std::max(maxd, (double)fabsf(a1 - a2)); }
    printf("variant EF vs shipped: %d of %d outputs differ, max abs diff %g\n", diff, H, maxd);
    g_pdl = false; route(s, ls[0]); gate(s, ls[0]); down(s, ls[0]); CK(cudaStreamSynchronize(s));
  }
  cudaStream_t s2; CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking)); cudaEvent_t ev, ev2; CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming)); CK(cudaEventCreateWithFlags(&ev2, cudaEventDisableTiming));
  cudaEvent_t a, b; CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
  auto time = [&](const char* name, bool pdl, auto&& body) {
    g_pdl = pdl;
    cudaGraph_t g; cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    for (auto& l : ls) body(l);
    CK(cudaStreamEndCapture(s, &g)); CK(cudaGraphInstantiate(&ge, g, 0));
    for (int w = 0; w < 3; ++w) CK(cudaGraphLaunch(ge, s));
    std::vector<float> ms;
    for (int i = 0; i < iters; ++i) { CK(cudaEventRecord(a, s)); CK(cudaGraphLaunch(ge, s)); CK(cudaEventRecord(b, s)); CK(cudaEventSynchronize(b)); float m; CK(cudaEventElapsedTime(&m, a, b)); ms.push_back(m); }
    std::sort(ms.begin(), ms.end());
    printf("%-40s %8.2f us/layer\n", name, ms[iters / 2] * 1000.f / L);
    CK(cudaGraphExecDestroy(ge)); CK(cudaGraphDestroy(g));
  };
  for (int rep = 0; rep < 2; ++rep) {
    time("S0 select=0 route+gate_up+down pdl", true, [&](Layer& l) { route(s, l); gate(s, l); down(s, l); });
    time("S1 select=1 route+gate_up+down pdl", true, [&](Layer& l) { route_t<true>(s, l); gate_t<true>(s, l); down_t<true>(s, l); });
    time("S2 select=1 route+gate_up, down3 plain", true, [&](Layer& l) { route_t<true>(s, l); gate_t<true>(s, l); down3<false>(s, l); });
    time("S3 V2 logits+gate3 plain+down_after", true, [&](Layer& l) { route2(s, l); gate3<false>(s, l); down2(s, l); });
    time("S4 V2 logits+gate_up_topk+down3 plain", true, [&](Layer& l) { route2(s, l); gate2(s, l); down3<false>(s, l); });
    time("S5 select=1 route, gate3 plain+down3 plain", true, [&](Layer& l) { route_t<true>(s, l); gate3<false>(s, l); down3<false>(s, l); });
    time("route+gate_up+down pdl", true, [&](Layer& l) { route(s, l); gate(s, l); down(s, l); });
    time("route+gate_up+down no-pdl", false, [&](Layer& l) { route(s, l); gate(s, l); down(s, l); });
    time("gate_up+down pdl", true, [&](Layer& l) { gate(s, l); down(s, l); });
    time("route pdl", true, [&](Layer& l) { route(s, l); });
    time("gate_up pdl", true, [&](Layer& l) { gate(s, l); });
    time("down pdl", true, [&](Layer& l) { down(s, l); });
    time("route+gate_up pdl", true, [&](Layer& l) { route(s, l); gate(s, l); });
    time("empty(32)+gate_up+down pdl", true, [&](Layer& l) { empty(s, 32); gate(s, l); down(s, l); });
    time("V2 logits+gate_up_topk+down_after pdl", true, [&](Layer& l) { route2(s, l); gate2(s, l); down2(s, l); });
    time("V2 logits only pdl", true, [&](Layer& l) { route2(s, l); });
    time("V2 gate_up_topk+down_after pdl", true, [&](Layer& l) { gate2(s, l); down2(s, l); });
    time("norm+route+gate_up+down pdl", true, [&](Layer& l) { norm(s, l); route(s, l); gate(s, l); down(s, l); });
    time("norm+V2 pdl", true, [&](Layer& l) { norm(s, l); route2(s, l); gate2(s, l); down2(s, l); });
    time("V2 norm folded (route2n) pdl", true, [&](Layer& l) { route2n(s, l); gate2(s, l); down2(s, l); });
    time("norm only pdl", true, [&](Layer& l) { norm(s, l); });
    time("G0 qkv gemv only", true, [&](Layer& l) { qkv(s, l); });
    time("G0 qkv gemv only, layer 0's weights (L2)", true, [&](Layer& l) { qkv(s, ls[0]); });
    time("G1 qkv+V2(gate3/down3 plain)", true, [&](Layer& l) { qkv(s, l); route2(s, l); gate3<false>(s, l); down3<false>(s, l); });
    time("G1b V2(gate3/down3 plain) no qkv", true, [&](Layer& l) { route2(s, l); gate3<false>(s, l); down3<false>(s, l); });
    time("G2 qkv+V2 + next qkv prefetch evict_last", true, [&](Layer& l) { Layer& n = ls[(&l - ls.data() + 1) % L]; qkv(s, l); route2p(s, l, n); gate3<false>(s, l); down3<false>(s, l); });
    time("G3 qkv+V2 + prefetch + MoE evict_first", true, [&](Layer& l) { Layer& n = ls[(&l - ls.data() + 1) % L]; qkv(s, l); route2p(s, l, n); gate3<true>(s, l); down3<true>(s, l); });
    time("G4 qkv+V2 + MoE evict_first", true, [&](Layer& l) { qkv(s, l); route2(s, l); gate3<true>(s, l); down3<true>(s, l); });
    time("P0 spin(6us)+qkv", true, [&](Layer& l) { launch(s, &spin_kernel, 32, 128, 0, 6000LL); qkv(s, l); });
    time("P0b spin(6us) only", true, [&](Layer& l) { launch(s, &spin_kernel, 32, 128, 0, 6000LL); });
    for (int ctas : {16, 64}) {
      for (int last = 0; last < 2; ++last) {
        char name[96]; snprintf(name, sizeof name, "P1 spin(6us)+qkv, side prefetch %d CTAs%s", ctas, last ? " evict_last" : "");
        time(name, true, [&](Layer& l) {
          CK(cudaEventRecord(ev, s)); CK(cudaStreamWaitEvent(s2, ev, 0));
          if (last) l2_prefetch<true><<<ctas, 256, 0, s2>>>((const char*)l.qkv, 5120LL * H * 2);
          else l2_prefetch<false><<<ctas, 256, 0, s2>>>((const char*)l.qkv, 5120LL * H * 2);
          launch(s, &spin_kernel, 32, 128, 0, 6000LL); qkv(s, l);
          if (&l == &ls.back()) { CK(cudaEventRecord(ev2, s2)); CK(cudaStreamWaitEvent(s, ev2, 0)); }
        });
      }
    }
    for (int last = 0; last < 2; ++last) {
      char name[96]; snprintf(name, sizeof name, "P2 spin(6us)+qkv, side bulk prefetch 4x32%s", last ? " evict_last" : "");
      time(name, true, [&](Layer& l) {
        CK(cudaEventRecord(ev, s)); CK(cudaStreamWaitEvent(s2, ev, 0));
        if (last) l2_prefetch_bulk<true><<<4, 32, 0, s2>>>((const char*)l.qkv, 5120LL * H * 2);
        else l2_prefetch_bulk<false><<<4, 32, 0, s2>>>((const char*)l.qkv, 5120LL * H * 2);
        launch(s, &spin_kernel, 32, 128, 0, 6000LL); qkv(s, l);
        if (&l == &ls.back()) { CK(cudaEventRecord(ev2, s2)); CK(cudaStreamWaitEvent(s, ev2, 0)); }
      });
    }
    time("P3 qkv+V2, side bulk prefetch of next qkv at route, MoE evict_first", true, [&](Layer& l) {
      Layer& n = ls[(&l - ls.data() + 1) % L];
      qkv(s, l);
      CK(cudaEventRecord(ev, s)); CK(cudaStreamWaitEvent(s2, ev, 0));
      l2_prefetch_bulk<true><<<4, 32, 0, s2>>>((const char*)n.qkv, 5120LL * H * 2);
      route2(s, l); gate3<true>(s, l); down3<true>(s, l);
      if (&l == &ls.back()) { CK(cudaEventRecord(ev2, s2)); CK(cudaStreamWaitEvent(s, ev2, 0)); }
    });
    time("empty(128) x1 pdl", true, [&](Layer& l) { empty(s, 128); });
    time("empty(128) x3 pdl", true, [&](Layer& l) { empty(s, 128); empty(s, 128); empty(s, 128); });
    time("empty(768) x1 pdl", true, [&](Layer& l) { empty(s, 768); });
  }
  return 0;
}
