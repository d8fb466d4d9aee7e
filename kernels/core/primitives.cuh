// Device primitives shared by every kernel template: 16-bit storage types and their
// conversions, vectorized global loads and stores, warp reductions, and the inline PTX the
// templates use (cp.async, ldmatrix, mma.sync).
//
// NVRTC-clean: this file includes nothing, not even the CUDA headers. Fixed widths rely on
// the widths every CUDA target gives the built-in types: unsigned short 16 bits, int and
// unsigned int 32 bits, long long and unsigned long long 64 bits.
#pragma once

namespace tileplan {

// bfloat16 and IEEE binary16 storage: the raw 16 bits. All arithmetic happens in float.
struct bf16 {
  unsigned short bits;
};
struct f16 {
  unsigned short bits;
};

template <typename A, typename B>
struct is_same {
  static constexpr bool value = false;
};
template <typename A>
struct is_same<A, A> {
  static constexpr bool value = true;
};

// Programmatic dependent launch (sm_90 and later): waits until the grids this one depends on
// have completed and their writes are visible, then lets the next grid in the stream begin
// its launch, so launch latency overlaps the tail of the previous kernel. A grid launched
// without the programmatic attribute returns from the wait at once: every kernel calls this
// first and behaves exactly as under plain stream order.
__device__ __forceinline__ void grid_dependency_sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// The CTA a kernel body runs as: its index in the grid and the grid's extent. A kernel
// launched on its own runs as the hardware's block (this_cta()); the persistent kernel
// (kernels/launch/persistent.cuh) runs the bodies of many launches' CTAs, one after another,
// in each of its blocks. Bodies read the CTA from here, never from blockIdx or gridDim.
struct Cta {
  unsigned int x, y, z;
  unsigned int nx, ny, nz;
};
__device__ __forceinline__ Cta this_cta() {
  return {blockIdx.x, blockIdx.y, blockIdx.z, gridDim.x, gridDim.y, gridDim.z};
}

// Counters of the persistent kernel: a load that makes every write released before the
// value it reads visible to this thread (and, by a following __syncthreads, to its block),
// and an increment that releases this thread's earlier writes and those of its block that a
// __syncthreads ordered before it.
__device__ __forceinline__ unsigned int load_acquire(const unsigned int* p) {
  unsigned int v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void add_release(unsigned int* p, unsigned int v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// The GPU's global nanosecond timer (comparable across SMs).
__device__ __forceinline__ unsigned long long global_timer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Starts bringing the 128-byte line that holds `p` into L2; no result, no wait.
__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

// Bulk copies into shared memory completed through an mbarrier (sm_90 and later; the
// persistent kernel's weight stream, kernels/launch/persistent.cuh). A barrier counts one
// arrival per phase: the issuing thread arrives once announcing the bytes to come, the
// copies complete them, and waiters test the phase's parity. Addresses are shared-state-space
// addresses (shared_address below), `bytes` a multiple of 16, both ends 16-byte aligned.
__device__ __forceinline__ void mbarrier_init(unsigned int bar, unsigned int count) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
#endif
}
// Makes initialized barriers visible to the async proxy (the bulk copies).
__device__ __forceinline__ void mbarrier_init_fence() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}
__device__ __forceinline__ void mbarrier_arrive_expect_tx(unsigned int bar, unsigned int bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
#endif
}
// One arrival (of the count the barrier was initialized with) on the current phase.
__device__ __forceinline__ void mbarrier_arrive(unsigned int bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
#endif
}
// Blocks until the barrier's phase of parity `parity` has completed.
__device__ __forceinline__ void mbarrier_wait(unsigned int bar, unsigned int parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "wait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n"
      "}" ::"r"(bar),
      "r"(parity)
      : "memory");
#endif
}
// Orders this thread's earlier shared-memory accesses (and, after a barrier, its block's)
// before later async-proxy writes: a buffer read by threads can then be refilled by a copy.
__device__ __forceinline__ void fence_proxy_async_shared() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}
__device__ __forceinline__ void bulk_copy_to_shared(unsigned int dst, const void* src,
                                                    unsigned int bytes, unsigned int bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
          dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
#endif
}

// A TMA copy of the box at element coordinates (x innermost, y) of the tensor `map` (a
// TmaDescriptor kernel parameter) to shared address `dst`, completing on barrier `bar`;
// elements outside the tensor arrive as zeros and count toward the barrier's bytes.
__device__ __forceinline__ void tma_load_2d(unsigned int dst, const void* map, int x, int y,
                                            unsigned int bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, "
      "{%2, %3}], [%4];" ::"r"(dst),
      "l"(reinterpret_cast<unsigned long long>(map)), "r"(x), "r"(y), "r"(bar)
      : "memory");
#endif
}

// Thread-block clusters (sm_90): this CTA's rank in its cluster, the cluster's CTA count, a
// barrier of every thread of the cluster (release of the shared-memory writes before it,
// acquire of the others'), and a 16-byte store into CTA `rank`'s shared memory at the address
// `addr` has in this CTA's (distributed shared memory; a store does not wait for its
// round trip, so a CTA pushes its partial results to their owners rather than pulling).
__device__ __forceinline__ unsigned int cluster_rank() {
  unsigned int r = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
#endif
  return r;
}
__device__ __forceinline__ unsigned int cluster_size() {
  unsigned int n = 1;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(n));
#endif
  return n;
}
__device__ __forceinline__ void cluster_sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
#endif
}
// The two halves of a cluster barrier: an arrival that orders nothing, and the wait for every
// thread of the cluster to have arrived. A CTA may touch another's shared memory only once that
// CTA has started: arriving first thing and waiting just before the first such access costs
// nothing where the cluster's CTAs all started long before.
__device__ __forceinline__ void cluster_arrive_relaxed() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.relaxed;" ::: "memory");
#endif
}
__device__ __forceinline__ void cluster_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void store_shared_cluster_v4(unsigned int addr, unsigned int rank,
                                                        float a, float b, float c, float d) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "{\n"
      ".reg .b32 remote;\n"
      "mapa.shared::cluster.u32 remote, %0, %1;\n"
      "st.shared::cluster.v4.f32 [remote], {%2, %3, %4, %5};\n"
      "}" ::"r"(addr),
      "r"(rank), "f"(a), "f"(b), "f"(c), "f"(d)
      : "memory");
#endif
}

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

// silu(v) = v * sigmoid(v), the activation of every SwiGLU (elementwise, the GEMV and GEMM
// epilogues, the MoE gate/up).
__device__ __forceinline__ float silu(float v) { return v / (1.f + expf(-v)); }

__device__ __forceinline__ float to_float(float v) { return v; }
// bf16 is the upper half of a float32: widening is exact.
__device__ __forceinline__ float to_float(bf16 v) {
  return __uint_as_float(static_cast<unsigned int>(v.bits) << 16);
}
__device__ __forceinline__ float to_float(f16 v) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.bits));
  return f;
}

// Narrowing rounds to nearest, ties to even; NaN stays NaN (quiet, sign kept).
template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ bf16 from_float<bf16>(float v) {
  unsigned int u = __float_as_uint(v);
  bf16 r;
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    r.bits = static_cast<unsigned short>((u >> 16) | 0x0040u);
    return r;
  }
  u += 0x7fffu + ((u >> 16) & 1u);
  r.bits = static_cast<unsigned short>(u >> 16);
  return r;
}
template <>
__device__ __forceinline__ f16 from_float<f16>(float v) {
  f16 r;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r.bits) : "f"(v));
  return r;
}

// Element i of a vector held as 32-bit words (the order of memory).
template <typename T>
__device__ __forceinline__ float word_element(const unsigned int* words, int i) {
  if constexpr (sizeof(T) == 4) {
    return __uint_as_float(words[i]);
  } else {
    T t;
    t.bits = static_cast<unsigned short>(words[i / 2] >> (16 * (i % 2)));
    return to_float(t);
  }
}

// Reads N consecutive elements starting at p into 32-bit words with the widest accesses
// the vector allows. REQUIRES: p aligned to N * sizeof(T) bytes (16 at most).
template <typename T, int N>
struct RawVec {
  static constexpr int kBytes = N * static_cast<int>(sizeof(T));
  static constexpr int kWords = kBytes < 4 ? 1 : kBytes / 4;
  unsigned int w[kWords];
};

template <typename T, int N>
__device__ __forceinline__ RawVec<T, N> load_raw(const T* p) {
  RawVec<T, N> r;
  constexpr int kBytes = RawVec<T, N>::kBytes;
  if constexpr (kBytes >= 16) {
    static_assert(kBytes % 16 == 0, "vector size");
#pragma unroll
    for (int c = 0; c < kBytes / 16; ++c) {
      const uint4 v = reinterpret_cast<const uint4*>(p)[c];
      r.w[4 * c + 0] = v.x;
      r.w[4 * c + 1] = v.y;
      r.w[4 * c + 2] = v.z;
      r.w[4 * c + 3] = v.w;
    }
  } else if constexpr (kBytes == 8) {
    const uint2 v = *reinterpret_cast<const uint2*>(p);
    r.w[0] = v.x;
    r.w[1] = v.y;
  } else if constexpr (kBytes == 4) {
    r.w[0] = *reinterpret_cast<const unsigned int*>(p);
  } else {
    static_assert(kBytes == 2, "vector size");
    r.w[0] = *reinterpret_cast<const unsigned short*>(p);
  }
  return r;
}

template <typename T, int N>
__device__ __forceinline__ void store_raw(T* p, const RawVec<T, N>& r) {
  constexpr int kBytes = RawVec<T, N>::kBytes;
  if constexpr (kBytes >= 16) {
#pragma unroll
    for (int c = 0; c < kBytes / 16; ++c) {
      reinterpret_cast<uint4*>(p)[c] =
          make_uint4(r.w[4 * c + 0], r.w[4 * c + 1], r.w[4 * c + 2], r.w[4 * c + 3]);
    }
  } else if constexpr (kBytes == 8) {
    *reinterpret_cast<uint2*>(p) = make_uint2(r.w[0], r.w[1]);
  } else if constexpr (kBytes == 4) {
    *reinterpret_cast<unsigned int*>(p) = r.w[0];
  } else {
    *reinterpret_cast<unsigned short*>(p) = static_cast<unsigned short>(r.w[0]);
  }
}

template <typename T, int N>
__device__ __forceinline__ void load_floats(const T* p, float (&out)[N]) {
  const RawVec<T, N> r = load_raw<T, N>(p);
#pragma unroll
  for (int i = 0; i < N; ++i) out[i] = word_element<T>(r.w, i);
}

template <typename T, int N>
__device__ __forceinline__ void store_floats(T* p, const float (&in)[N]) {
  RawVec<T, N> r;
  if constexpr (sizeof(T) == 4) {
#pragma unroll
    for (int i = 0; i < N; ++i) r.w[i] = __float_as_uint(in[i]);
  } else {
#pragma unroll
    for (int i = 0; i < RawVec<T, N>::kWords; ++i) r.w[i] = 0;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      r.w[i / 2] |= static_cast<unsigned int>(from_float<T>(in[i]).bits) << (16 * (i % 2));
    }
  }
  store_raw<T, N>(p, r);
}

template <typename T, int N>
__device__ __forceinline__ void copy_vec(T* dst, const T* src) {
  store_raw<T, N>(dst, load_raw<T, N>(src));
}

template <typename T, int N>
__device__ __forceinline__ void zero_vec(T* dst) {
  RawVec<T, N> r;
#pragma unroll
  for (int i = 0; i < RawVec<T, N>::kWords; ++i) r.w[i] = 0;
  store_raw<T, N>(dst, r);
}

// A load that bypasses L1 (which is not coherent across SMs): for data another CTA wrote
// in this launch, after a __threadfence on both sides.
__device__ __forceinline__ float load_cg(const float* p) {
  float v;
  asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(v) : "l"(p));
  return v;
}
__device__ __forceinline__ float2 load_cg(const float2* p) {
  float2 v;
  asm volatile("ld.global.cg.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "l"(p));
  return v;
}
__device__ __forceinline__ float4 load_cg(const float4* p) {
  float4 v;
  asm volatile("ld.global.cg.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "l"(p));
  return v;
}
__device__ __forceinline__ int load_cg(const int* p) {
  int v;
  asm volatile("ld.global.cg.s32 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}
__device__ __forceinline__ unsigned long long load_cg(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.global.cg.u64 %0, [%1];" : "=l"(v) : "l"(p));
  return v;
}

// The arrival of a CTA at the end of a split reduction: each of the `count` CTAs sharing
// `counter` writes its partial results, then every thread of its block calls this. It
// returns true, to every thread of the block, in the last CTA to arrive, which then sees the
// other CTAs' partials (read them with load_cg) and re-arms the counter to zero when done.
__device__ __forceinline__ bool last_to_arrive(unsigned int* counter, unsigned int count) {
  __shared__ bool last;
  __threadfence();  // this thread's partials before the arrival
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(counter, 1u) == count - 1;
  __syncthreads();
  if (last) __threadfence();
  return last;
}

// Sum over aligned groups of kWidth consecutive lanes (a power of two <= 32); every lane
// of the warp must call it, and every lane of a group gets the group's sum.
template <int kWidth = 32>
__device__ __forceinline__ float group_sum(float v) {
#pragma unroll
  for (int o = kWidth / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <int kWidth = 32>
__device__ __forceinline__ float group_max(float v) {
#pragma unroll
  for (int o = kWidth / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sums kN values (a power of two) over the 32 lanes of a warp and scatters the sums:
// afterwards lane L holds in v[j] the sum of original index L * kN / 32 + j for
// j < max(1, kN / 32) (with kN < 32, the 32 / kN lanes sharing L * kN / 32 hold the same
// sum). Every lane must call it. Each halving step exchanges half the remaining values,
// so the warp needs about kN shuffles instead of 5 kN for kN separate reductions.
template <int kN, int kLive, int kOffset>
__device__ __forceinline__ void warp_reduce_scatter_step(float (&v)[kN], int lane) {
  if constexpr (kLive > 1) {
    constexpr int kHalf = kLive / 2;
    const bool upper = (lane & kOffset) != 0;
#pragma unroll
    for (int i = 0; i < kHalf; ++i) {
      const float send = upper ? v[i] : v[i + kHalf];
      const float keep = upper ? v[i + kHalf] : v[i];
      v[i] = keep + __shfl_xor_sync(0xffffffffu, send, kOffset);
    }
  } else {
    v[0] += __shfl_xor_sync(0xffffffffu, v[0], kOffset);
  }
  if constexpr (kOffset > 1) {
    warp_reduce_scatter_step<kN, (kLive > 1 ? kLive / 2 : 1), kOffset / 2>(v, lane);
  }
}

template <int kN>
__device__ __forceinline__ void warp_reduce_scatter(float (&v)[kN]) {
  static_assert(kN >= 1 && (kN & (kN - 1)) == 0, "a power of two");
  warp_reduce_scatter_step<kN, kN, 16>(v, threadIdx.x % 32);
}

__device__ __forceinline__ unsigned long long warp_max_u64(unsigned long long v) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) {
    const unsigned long long other = __shfl_xor_sync(0xffffffffu, v, o);
    v = other > v ? other : v;
  }
  return v;
}

__host__ __device__ constexpr int ceil_pow2(int v) {
  int p = 1;
  while (p < v) p *= 2;
  return p;
}

// Shared-memory tiles of 16-bit elements whose rows are read by ldmatrix and written by
// cp.async store each row's 16-byte chunks XOR-swizzled by the row index: chunk c of row r
// sits at chunk c ^ (r & mask). The mask is the largest of 7, 3, 1 that keeps a chunk inside
// its row of `chunks` chunks; with mask 7 and rows a multiple of 128 bytes apart, the eight
// rows an ldmatrix phase reads (consecutive rows, one logical chunk) fall on eight distinct
// 16-byte bank groups, with no padding.
__host__ __device__ constexpr int chunk_swizzle_mask(int chunks) {
  return chunks % 8 == 0 ? 7 : chunks % 4 == 0 ? 3 : chunks % 2 == 0 ? 1 : 0;
}

// Element (row, col) of a swizzled tile of kRowElems-element rows.
template <int kRowElems, int kMask, typename T>
__device__ __forceinline__ T* swizzled(T* tile, int row, int col) {
  return tile + row * kRowElems + ((((col >> 3) ^ (row & kMask)) << 3) | (col & 7));
}

// The shared-state-space address of a generic pointer into shared memory.
__device__ __forceinline__ unsigned int shared_address(const void* p) {
  unsigned int a;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
  return a;
}

// The same address by the compiler's own conversion, which it folds into the address
// arithmetic around it, where shared_address's asm block has it rebuild the generic pointer
// from the shared window before every conversion. In a loop whose issue rate bounds it
// (expert_gemm's main loop) that is most of the address work; elsewhere the folding can cost
// registers (Qwen3-0.6B's prefill on the H200 ran 4.5% slower with every template on it), so
// each template chooses.
__device__ __forceinline__ unsigned int shared_address_folded(const void* p) {
  return static_cast<unsigned int>(__cvta_generic_to_shared(p));
}

// Asynchronous 16-byte global -> shared copy (sm_80+) to a shared-state-space address
// (shared_address; cp_async_16 takes a generic pointer); `valid == false` fills zeros and
// reads nothing.
__device__ __forceinline__ void cp_async_16_shared(unsigned int smem, const void* gmem,
                                                   bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem), "l"(gmem),
               "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, bool valid) {
  cp_async_16_shared(shared_address(smem), gmem, valid);
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}

// ldmatrix: 8x8 b16 matrices from shared memory. Lane L gives the address of row L % 8 of
// matrix L / 8 (every lane must pass a valid address, also where the count leaves its
// address unused); register i of a lane receives matrix i's elements (L / 4, 2 (L % 4) + {0,1}),
// or with .trans those of the transposed matrix.
__device__ __forceinline__ void ldmatrix_x2(unsigned int (&r)[2], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(shared_address(row)));
}
// ldmatrix_x4 from a shared-state-space address (shared_address, shared_address_folded).
__device__ __forceinline__ void ldmatrix_x4_at(unsigned int (&r)[4], unsigned int row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(row));
}
__device__ __forceinline__ void ldmatrix_x4(unsigned int (&r)[4], const void* row) {
  ldmatrix_x4_at(r, shared_address(row));
}
__device__ __forceinline__ void ldmatrix_x2_trans(unsigned int (&r)[2], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(shared_address(row)));
}

__device__ __forceinline__ void ldmatrix_x4_trans(unsigned int (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row)));
}

// Two floats as a packed pair of 16-bit T (bf16 or f16): `lo` in bits 0-15, each rounded to
// nearest even as from_float rounds finite values. sm_80 and later convert the pair in one
// instruction (a NaN becomes the canonical NaN there, keeping no payload).
template <typename T>
__device__ __forceinline__ unsigned int pack2(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  unsigned int r;
  if constexpr (is_same<T, bf16>::value) {
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  } else {
    static_assert(is_same<T, f16>::value, "pack2 packs bf16 or f16");
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  }
  return r;
#else
  return static_cast<unsigned int>(from_float<T>(lo).bits) |
         (static_cast<unsigned int>(from_float<T>(hi).bits) << 16);
#endif
}

// d += a * b on tensor cores: a 16x16 (row), b 16x8 (col), T = bf16 or f16 inputs, f32
// accumulators. Fragment layouts are those of the PTX ISA for mma.m16n8k16 (lane = 4 * g +
// q): a = {A[g][2q..], A[g+8][2q..], A[g][2q+8..], A[g+8][2q+8..]}, b = {B[2q..][g],
// B[2q+8..][g]}, d = {D[g][2q], D[g][2q+1], D[g+8][2q], D[g+8][2q+1]}.
template <typename T>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const unsigned int (&a)[4],
                                             unsigned int b0, unsigned int b1) {
  if constexpr (is_same<T, bf16>::value) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    static_assert(is_same<T, f16>::value, "mma inputs are bf16 or f16");
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

}  // namespace tileplan
