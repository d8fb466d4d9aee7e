// The CPU backend over the ranks of a tensor-parallel model: one CpuBackend per rank graph
// (models::LowerModel with a TensorParallel, planned or not), each run on its own thread,
// their collective regions meeting in one InProcessGroup. It is how tensor-parallel plans are
// checked against the single-rank oracle without GPUs (verify_model --backend cpu --tp N).
#ifndef TILEPLAN_RUNTIME_CPU_TENSOR_PARALLEL_H_
#define TILEPLAN_RUNTIME_CPU_TENSOR_PARALLEL_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "models/safetensors.h"
#include "regions/ir.h"
#include "runtime/cpu/collectives.h"
#include "runtime/cpu/cpu_backend.h"

namespace tileplan::runtime::cpu {

class TensorParallelCpu {
 public:
  // One rank's graphs: `prefill` alone (CpuBackend::Create), or with `decode`
  // (CpuBackend::CreatePhased).
  struct RankGraphs {
    ir::Graph prefill;
    std::optional<ir::Graph> decode;
  };

  // A backend per entry of `ranks` (rank r = index r), each bound to `checkpoint` as its
  // graphs' sliced weights say, with options.threads split among them (at least one each);
  // options.group and options.rank are set here. Errors name the rank.
  static absl::StatusOr<std::unique_ptr<TensorParallelCpu>> Create(
      std::vector<RankGraphs> ranks, const models::Checkpoint& checkpoint,
      CpuBackend::Options options);

  // CpuBackend::Run on every rank at once; returns the logits, which every rank's graph
  // gathers whole (Internal when two ranks disagree). The first rank error fails the run
  // (the other ranks are released from their collectives) and is returned, naming the rank.
  absl::StatusOr<std::vector<float>> Run(const std::vector<int32_t>& tokens,
                                         const std::vector<int32_t>& positions);

  void Reset();  // empties every rank's KV cache
  int ranks() const { return static_cast<int>(backends_.size()); }
  // Threads of each rank's backend.
  int threads_per_rank() const;

 private:
  explicit TensorParallelCpu(int ranks) : group_(std::make_unique<InProcessGroup>(ranks)) {}

  std::unique_ptr<InProcessGroup> group_;
  std::vector<std::unique_ptr<CpuBackend>> backends_;
};

}  // namespace tileplan::runtime::cpu

#endif  // TILEPLAN_RUNTIME_CPU_TENSOR_PARALLEL_H_
