// Float32 reference implementations of the region kinds of docs/ir.md, used by CpuBackend.
// A fused kind runs the kernels of the primitive kinds it replaces, in order, so a planned
// graph computes what its primitive graph computes. Each kernel checks its operand and result
// shapes and attributes and returns InvalidArgument naming the region on any mismatch; it never
// reads or writes out of bounds.
#ifndef TILEPLAN_RUNTIME_CPU_CPU_KERNELS_H_
#define TILEPLAN_RUNTIME_CPU_CPU_KERNELS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "regions/ir.h"
#include "runtime/cpu/thread_pool.h"

namespace tileplan::runtime::cpu {

// One operand or result while a region executes: float dtypes use `f`, i32 uses `i`.
// Contiguous row-major. Results arrive allocated with their declared shape (for an
// in-place result, the operand's storage).
struct TensorArg {
  ir::DType dtype = ir::DType::kF32;
  std::vector<int64_t> shape;
  float* f = nullptr;
  int32_t* i = nullptr;
  int64_t num_elements() const;
};

struct KernelContext {
  const ir::Region* region = nullptr;
  std::string label;  // names the region in messages, e.g. "region 7 'linear' (%l0.q)"
  std::vector<TensorArg> operands;
  std::vector<TensorArg> results;
  ThreadPool* pool = nullptr;
};

using Kernel = absl::Status (*)(KernelContext& ctx);

struct KindInfo {
  const char* kind;
  int min_operands;
  int max_operands;
  int num_results;  // -1: one or more (split)
  Kernel kernel;
};

// nullptr for a kind this backend does not implement.
const KindInfo* FindKind(absl::string_view kind);
// Every implemented kind, sorted.
std::vector<std::string> KindNames();

// RoPE parameters, read from a rope region's attributes.
struct RopeParams {
  double theta = 10000.0;
  std::string type = "default";  // "default" or "llama3"
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 0;
};
absl::StatusOr<RopeParams> RopeParamsFromAttributes(const ir::Attributes& attrs);

// inv_freq[i] for i < head_dim / 2, in float32 as transformers computes it:
// 1 / theta^(2i / head_dim); for llama3, frequencies whose wavelength 2π/inv_freq exceeds
// original_max / low_freq_factor are divided by `factor`, those below original_max /
// high_freq_factor are kept, and the band between is interpolated with
// s = (original_max / wavelength − low_freq_factor) / (high_freq_factor − low_freq_factor):
// (1 − s) · inv_freq / factor + s · inv_freq.
std::vector<float> RopeInvFreq(const RopeParams& params, int64_t head_dim);

}  // namespace tileplan::runtime::cpu

#endif  // TILEPLAN_RUNTIME_CPU_CPU_KERNELS_H_
