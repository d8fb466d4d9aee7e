// The ranks of a tensor-parallel model on the GPUs of one host: one device, NCCL communicator
// and GpuRuntime per rank (rank r on the r-th device), each rank's plan its own
// (planner::PlanOptions::tensor_parallel and rank). Every call runs on all ranks at once, one
// thread each, because a rank's collectives wait for the others: the ranks take the same
// inputs and, their logits gathered by each rank's all_gather, return the same outputs.
#ifndef TILEPLAN_RUNTIME_GPU_TENSOR_PARALLEL_H_
#define TILEPLAN_RUNTIME_GPU_TENSOR_PARALLEL_H_

#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "device/device.h"
#include "device/nccl.h"
#include "models/safetensors.h"
#include "planner/plan.pb.h"
#include "runtime/gpu/gpu_runtime.h"

namespace tileplan::runtime::gpu {

class TensorParallelGpu {
 public:
  // plans[r] is rank r's plan (of plans.size() ranks); `ordinals` the devices (empty: 0 ..
  // ranks - 1). Opens the devices, makes the communicators and creates the runtimes, the
  // ranks in parallel. InvalidArgument when the plans are not ranks 0..N-1 of N; the first
  // rank's error otherwise, naming the rank.
  static absl::StatusOr<std::unique_ptr<TensorParallelGpu>> Create(
      const std::vector<planner::proto::ExecutionPlan>& plans, const models::Checkpoint* checkpoint,
      GpuOptions options, std::vector<int> ordinals = {});
  ~TensorParallelGpu();

  int ranks() const { return static_cast<int>(runtimes_.size()); }
  GpuRuntime& runtime(int rank) { return *runtimes_[static_cast<size_t>(rank)]; }
  const device::Device& device(int rank) const { return *devices_[static_cast<size_t>(rank)]; }

  // Runs `f(rank, runtime)` for every rank at once, one thread each (the rank's device
  // current); the first failing rank's error, naming it.
  absl::Status ForEachRank(const std::function<absl::Status(int, GpuRuntime&)>& f);

  // The GpuRuntime calls on every rank with the same arguments; rank 0's result (Internal
  // when another rank's differs).
  absl::StatusOr<std::vector<float>> Prefill(const std::vector<int32_t>& tokens, int64_t batch);
  absl::StatusOr<std::vector<float>> Decode(const std::vector<int32_t>& tokens,
                                            const std::vector<int32_t>& positions);
  absl::StatusOr<std::vector<int32_t>> Generate(const std::vector<int32_t>& prompts, int64_t batch,
                                                int new_tokens);

 private:
  TensorParallelGpu() = default;

  std::vector<std::unique_ptr<device::Device>> devices_;
  std::vector<std::unique_ptr<device::Communicator>> communicators_;
  std::vector<std::unique_ptr<GpuRuntime>> runtimes_;
};

}  // namespace tileplan::runtime::gpu

#endif  // TILEPLAN_RUNTIME_GPU_TENSOR_PARALLEL_H_
