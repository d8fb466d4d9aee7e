// The launch half of the CUDA-template kernel families (docs/kernels.md, "CUDA templates"):
// which template instantiation a tactic selects for a region, and the launches (kernel,
// geometry, parameters) that run it on given device buffers.
//
// Template arguments are the tactic's parameters under the family's tunable names
// (threads, rows_per_cta, split_k, tile_q, ...) plus what the region fixes: element types,
// head dim, the row bound of a decode linear, the epilogue, and the vector width where the
// family has no `vec` parameter. Nothing here touches a device: PrepareLaunches only
// computes, so it is tested (and the descriptions checked against the templates) on any
// machine; kernels/kernel_loader.h compiles, loads and launches.
#ifndef TILEPLAN_KERNELS_CUDA_LAUNCH_H_
#define TILEPLAN_KERNELS_CUDA_LAUNCH_H_

#include <compare>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/bound_graph.h"
#include "kernels/kernel_family.h"
#include "runtime/device/module.h"

namespace tileplan::kernels {

// One template file and the instantiations a tactic needs (name expressions), in launch
// order; the unit of NVRTC compilation and of the module caches.
struct KernelInstance {
  std::string source;  // e.g. "gemv_split_k.cuh"
  std::vector<std::string> name_expressions;

  friend auto operator<=>(const KernelInstance&, const KernelInstance&) = default;
};

// The families implemented by NVRTC templates, sorted.
const std::vector<std::string>& CudaTemplateFamilies();
bool IsCudaTemplateFamily(absl::string_view family);

// The instantiation `tactic` selects for `region`. InvalidArgument naming the region when
// the family is not a template family, a parameter is missing, or the region has a dtype
// or shape the templates do not instantiate.
absl::StatusOr<KernelInstance> InstanceFor(const BoundRegion& region, const Tactic& tactic);

// Device addresses bound to one region.
struct RegionBuffers {
  std::vector<void*> operands;  // element 0 of each operand's layout, in operand order
  std::vector<void*> results;   // element 0 of each result's layout (in-place: the operand's)
  // KernelFamily::WorkspaceBytes bytes, 16-byte aligned (null when that is 0): scratch
  // whose contents do not outlive the launch.
  void* workspace = nullptr;
  // KernelFamily::CounterBytes bytes (null when that is 0): completion counters of the
  // single-launch split reductions, zero before the first launch and left zero by every
  // launch, so storage no other step writes is zeroed once.
  void* counters = nullptr;
  // Kinds with a rope: head_dim / 2 floats, runtime/cpu RopeInvFreq of the region's rope
  // attributes (the float32 frequencies of docs/ir.md).
  const float* rope_inv_freq = nullptr;
  // Optional int, zero before the launch: token ids (embedding) and cache positions
  // (kv writes) out of range raise it to at least (flat token index + 1) and are skipped.
  // Null: the kernel traps on them instead, so a bad index never passes silently.
  int* error = nullptr;
};

// Kernel parameters as cudaLaunchKernel takes them: each value copied into its own 8-byte
// slot. Add exactly the kernel's parameter types in order (pointers, int, long long, float).
class KernelArgs {
 public:
  template <typename T>
  KernelArgs& Add(T value) {
    static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8, "kernel parameter");
    uint64_t slot = 0;
    std::memcpy(&slot, &value, sizeof(T));
    slots_.push_back(slot);
    return *this;
  }
  size_t size() const { return slots_.size(); }
  // Valid until the next Add or until the KernelArgs moves.
  void** pointers();

 private:
  std::vector<uint64_t> slots_;
  std::vector<void*> pointers_;
};

struct PreparedLaunch {
  int kernel = 0;  // index into KernelInstance::name_expressions
  device::LaunchConfig config;
  KernelArgs args;
};

// The launches that run `region` under `tactic` (of `family`) on `buffers`, in order. The
// geometry is the family's (KernelFamily::Geometry); InvalidArgument names the region and
// the operand when a buffer is missing or misaligned for the tactic's vector width, and
// Internal reports a family geometry that disagrees with the template's launch contract.
absl::StatusOr<std::vector<PreparedLaunch>> PrepareLaunches(const KernelFamily& family,
                                                            const BoundRegion& region,
                                                            const Tactic& tactic,
                                                            const RegionBuffers& buffers);

// Whether launching a region of `kind` needs RegionBuffers::rope_inv_freq (rope, the fused
// RoPE + KV-write kinds and their _attention forms).
bool NeedsRopeFrequencies(absl::string_view kind);

// The runtime's own kernels (cuda/runtime_support.cuh): random weights of a float dtype
// generated on the device, the step that chains greedy decode steps in one CUDA Graph, and
// a kernel that executes __trap() (a testing aid: it kills the CUDA context).
KernelInstance FillUniformInstance(ir::DType dtype);
KernelInstance DecodeAdvanceInstance();
KernelInstance TrapFaultInstance();

// Host encoding of floating-point elements as the device stores them (little-endian; bf16
// and f16 round to nearest even, NaN kept); i32 is not a floating-point dtype.
std::string EncodeFloats(ir::DType dtype, const std::vector<float>& values);
std::vector<float> DecodeFloats(ir::DType dtype, absl::string_view bytes);
// `value` rounded to `dtype` and widened back (identity for f32).
float RoundToDType(ir::DType dtype, float value);

}  // namespace tileplan::kernels

#endif  // TILEPLAN_KERNELS_CUDA_LAUNCH_H_
