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
#include "regions/rope.h"
#include "runtime/cpu/collectives.h"
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
  // The collective regions' group of tensor-parallel ranks and this backend's rank in it;
  // null when the backend runs the whole model.
  InProcessGroup* group = nullptr;
  int rank = 0;
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

}  // namespace tileplan::runtime::cpu

#endif  // TILEPLAN_RUNTIME_CPU_CPU_KERNELS_H_
