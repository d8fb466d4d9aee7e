// How a kernel's parameters are declared once for the kernel and its host launcher
// (kernels/families/<family>/<family>_params.h; docs/kernels.md, "Parameters"). A kernel's
// parameter list is an X-macro, TILEPLAN_<KERNEL>_PARAMS(FIRST, NEXT), expanding to
//   FIRST(host type, kernel type, name) NEXT(host type, kernel type, name) ...
// whose kernel types may name the template's parameters (`const T* __restrict__ x`) and
// whose host types have the same size and alignment (`const void*` for a pointer to a
// template type). The kernel is declared with TILEPLAN_KERNEL_PARAMETERS(list), which is
// exactly those typed parameters: the compiler sees real kernel arguments, so read-only
// `const __restrict__` pointers keep their loads on the non-coherent path (fields of one
// struct parameter would lose it). The host fills the struct TILEPLAN_PARAMS_STRUCT(Name,
// list) declares, and the launch passes each of its fields as one kernel parameter
// (FieldAddresses), so the host cannot drift from the kernel. Plain C++ with no headers:
// NVRTC compiles it too.
#pragma once

#define TILEPLAN_KERNEL_PARAM_FIRST_(host, kernel, name) kernel name
#define TILEPLAN_KERNEL_PARAM_NEXT_(host, kernel, name) , kernel name
// The kernel's parameter list.
#define TILEPLAN_KERNEL_PARAMETERS(LIST) \
  LIST(TILEPLAN_KERNEL_PARAM_FIRST_, TILEPLAN_KERNEL_PARAM_NEXT_)

// The parameters' names, in order: a kernel passes its own parameters on to its body.
#define TILEPLAN_KERNEL_ARG_FIRST_(host, kernel, name) name
#define TILEPLAN_KERNEL_ARG_NEXT_(host, kernel, name) , name
#define TILEPLAN_KERNEL_ARGUMENTS(LIST) LIST(TILEPLAN_KERNEL_ARG_FIRST_, TILEPLAN_KERNEL_ARG_NEXT_)

// A kernel's task for the persistent kernel (kernels/launch/persistent.cuh), declared inside
// a struct template with the kernel's template parameters: the parameters as a struct of
// the kernel's types (laid out as the host's struct, which the persistent kernel keeps in
// device memory), and `prefetch` and `run`, which call the kernel's two halves,
// PREFETCH(cta, parameters...) and BODY(cta, parameters...) (each a parenthesized template
// id), on one CTA of the launch.
#define TILEPLAN_TASK_FIELD_(host, kernel, name) kernel name;
#define TILEPLAN_TASK_ARG_FIRST_(host, kernel, name) p.name
#define TILEPLAN_TASK_ARG_NEXT_(host, kernel, name) , p.name
#define TILEPLAN_KERNEL_TASK_COMMON_(LIST, PREFETCH, BODY)                           \
  struct Params {                                                                    \
    LIST(TILEPLAN_TASK_FIELD_, TILEPLAN_TASK_FIELD_)                                 \
  };                                                                                 \
  static __device__ __forceinline__ void prefetch(const Cta& cta, const void* raw) { \
    const Params& p = *static_cast<const Params*>(raw);                              \
    PREFETCH(cta, LIST(TILEPLAN_TASK_ARG_FIRST_, TILEPLAN_TASK_ARG_NEXT_));          \
  }                                                                                  \
  static __device__ __forceinline__ void run(const Cta& cta, const void* raw) {      \
    const Params& p = *static_cast<const Params*>(raw);                              \
    BODY(cta, LIST(TILEPLAN_TASK_ARG_FIRST_, TILEPLAN_TASK_ARG_NEXT_));              \
  }
// A task that streams nothing through the persistent kernel's shared-memory ring: `stream`
// names no bytes, so `run_streamed` is never called.
#define TILEPLAN_KERNEL_TASK(LIST, PREFETCH, BODY)                                         \
  TILEPLAN_KERNEL_TASK_COMMON_(LIST, PREFETCH, BODY)                                       \
  static __device__ __forceinline__ unsigned int stream(const Cta&, const void*, bool,     \
                                                        unsigned int, unsigned int) {      \
    return 0u;                                                                             \
  }                                                                                        \
  static __device__ __forceinline__ void run_streamed(const Cta& cta, const void* raw,     \
                                                      const char*) {                       \
    run(cta, raw);                                                                         \
  }
// A task whose inputs that no earlier step writes (its weights) can be copied into shared
// memory ahead of it (the persistent kernel's ring, kernels/launch/persistent.cuh):
// STREAM(cta, issue, dst, bar, parameters...) returns the bytes of the CTA's tile, 0 when it
// has none, and with `issue` starts the bulk copies of the tile to shared address `dst`,
// completing on barrier `bar` (one thread calls it so); STREAMED(cta, tile, parameters...)
// is the body reading the tile from shared memory at `tile`.
#define TILEPLAN_KERNEL_TASK_STREAMED(LIST, PREFETCH, BODY, STREAM, STREAMED)              \
  TILEPLAN_KERNEL_TASK_COMMON_(LIST, PREFETCH, BODY)                                       \
  static __device__ __forceinline__ unsigned int stream(                                   \
      const Cta& cta, const void* raw, bool issue, unsigned int dst, unsigned int bar) {   \
    const Params& p = *static_cast<const Params*>(raw);                                    \
    return STREAM(cta, issue, dst, bar, LIST(TILEPLAN_TASK_ARG_FIRST_, TILEPLAN_TASK_ARG_NEXT_)); \
  }                                                                                        \
  static __device__ __forceinline__ void run_streamed(const Cta& cta, const void* raw,     \
                                                      const char* tile) {                  \
    const Params& p = *static_cast<const Params*>(raw);                                    \
    STREAMED(cta, tile, LIST(TILEPLAN_TASK_ARG_FIRST_, TILEPLAN_TASK_ARG_NEXT_));          \
  }


#define TILEPLAN_PARAM_FIELD_(host, kernel, name) host name;
#define TILEPLAN_PARAM_COUNT_(host, kernel, name) +1
#define TILEPLAN_PARAM_ADDRESS_(host, kernel, name) \
  tileplan_fields_[tileplan_count_++] = &this->name;
// The host's struct: one field per parameter, in order, and their addresses. NVRTC compiles
// only the kernels, which take the fields themselves.
#ifdef __CUDACC_RTC__
#define TILEPLAN_PARAMS_STRUCT(NAME, LIST)
#else
#define TILEPLAN_PARAMS_STRUCT(NAME, LIST)                                               \
  struct NAME {                                                                          \
    LIST(TILEPLAN_PARAM_FIELD_, TILEPLAN_PARAM_FIELD_)                                   \
    static constexpr int kParams = 0 LIST(TILEPLAN_PARAM_COUNT_, TILEPLAN_PARAM_COUNT_); \
    /* Writes the address of every field, in order; returns kParams. */                  \
    int FieldAddresses(const void** tileplan_fields_) const {                            \
      int tileplan_count_ = 0;                                                           \
      LIST(TILEPLAN_PARAM_ADDRESS_, TILEPLAN_PARAM_ADDRESS_)                             \
      return tileplan_count_;                                                            \
    }                                                                                    \
  };
#endif

namespace tileplan {
// A TMA tensor map (CUtensorMap) held as a kernel parameter: 128 opaque bytes, 64-byte
// aligned. A launch half leaves it empty and names it in KernelLaunch::tensor_maps; the
// launch layer encodes it before the launch (kernels/launch/kernel_loader.cc). Kernels take
// it as `const __grid_constant__ TmaDescriptor`, whose address the TMA instructions read.
struct alignas(64) TmaDescriptor {
  unsigned long long bits[16];
};
}  // namespace tileplan
