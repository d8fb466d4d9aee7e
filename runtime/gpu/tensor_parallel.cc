#include "runtime/gpu/tensor_parallel.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace tileplan::runtime::gpu {
namespace {

absl::Status ForRank(int rank, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat("rank ", rank, ": ", status.message()));
}

// Runs f(r) for r in [0, n) on n threads; the lowest failing rank's error, naming it.
absl::Status OnEveryRank(int n, const std::function<absl::Status(int)>& f) {
  std::vector<absl::Status> statuses(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] { statuses[static_cast<size_t>(r)] = f(r); });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    if (!statuses[static_cast<size_t>(r)].ok()) return ForRank(r, statuses[static_cast<size_t>(r)]);
  }
  return absl::OkStatus();
}

template <typename T>
absl::StatusOr<std::vector<T>> Agreed(std::vector<std::vector<T>> results) {
  for (size_t r = 1; r < results.size(); ++r) {
    if (results[r] != results[0]) {
      return absl::InternalError(absl::StrCat("rank ", r, "'s result differs from rank 0's"));
    }
  }
  return std::move(results[0]);
}

}  // namespace

absl::StatusOr<std::unique_ptr<TensorParallelGpu>> TensorParallelGpu::Create(
    const std::vector<planner::proto::ExecutionPlan>& plans, const models::Checkpoint* checkpoint,
    GpuOptions options, std::vector<int> ordinals) {
  const int n = static_cast<int>(plans.size());
  if (n == 0) return absl::InvalidArgumentError("tensor-parallel runtime: no plan");
  for (int r = 0; r < n; ++r) {
    const planner::proto::PlanOptions& o = plans[static_cast<size_t>(r)].options();
    if (std::max<int64_t>(1, o.tensor_parallel_ranks()) != n || o.tensor_parallel_rank() != r) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor-parallel runtime: plan ", r, " is rank ", o.tensor_parallel_rank(),
                       " of ", o.tensor_parallel_ranks(), ", expected rank ", r, " of ", n));
    }
  }
  if (ordinals.empty()) {
    for (int r = 0; r < n; ++r) ordinals.push_back(r);
  }
  if (static_cast<int>(ordinals.size()) != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor-parallel runtime: ", ordinals.size(), " devices for ", n, " ranks"));
  }
  std::unique_ptr<TensorParallelGpu> tp(new TensorParallelGpu());
  for (int ordinal : ordinals) {
    TP_ASSIGN_OR_RETURN(std::unique_ptr<device::Device> d, device::Device::Open(ordinal));
    tp->devices_.push_back(std::move(d));
  }
  TP_ASSIGN_OR_RETURN(tp->communicators_, device::Communicator::CreateAll(ordinals));
  tp->runtimes_.resize(static_cast<size_t>(n));
  TP_RETURN_IF_ERROR(OnEveryRank(n, [&](int r) -> absl::Status {
    const size_t k = static_cast<size_t>(r);
    TP_RETURN_IF_ERROR(tp->devices_[k]->MakeCurrent());
    GpuOptions rank_options = options;
    rank_options.communicator = tp->communicators_[k].get();
    TP_ASSIGN_OR_RETURN(tp->runtimes_[k],
                        GpuRuntime::Create(*tp->devices_[k], plans[k], checkpoint, rank_options));
    return absl::OkStatus();
  }));
  return tp;
}

TensorParallelGpu::~TensorParallelGpu() {
  // The runtimes' graphs hold the communicators' work: destroy them first.
  runtimes_.clear();
  communicators_.clear();
}

absl::Status TensorParallelGpu::ForEachRank(
    const std::function<absl::Status(int, GpuRuntime&)>& f) {
  return OnEveryRank(ranks(), [&](int r) -> absl::Status {
    TP_RETURN_IF_ERROR(devices_[static_cast<size_t>(r)]->MakeCurrent());
    return f(r, *runtimes_[static_cast<size_t>(r)]);
  });
}

namespace {

// `call` on every rank of `tp` at once; rank 0's result, which every other rank's must equal.
template <typename T>
absl::StatusOr<std::vector<T>> OnAllAgreed(
    TensorParallelGpu& tp, const std::function<absl::StatusOr<std::vector<T>>(GpuRuntime&)>& call) {
  std::vector<std::vector<T>> out(static_cast<size_t>(tp.ranks()));
  TP_RETURN_IF_ERROR(tp.ForEachRank([&](int r, GpuRuntime& rt) -> absl::Status {
    TP_ASSIGN_OR_RETURN(out[static_cast<size_t>(r)], call(rt));
    return absl::OkStatus();
  }));
  return Agreed(std::move(out));
}

}  // namespace

absl::StatusOr<std::vector<float>> TensorParallelGpu::Prefill(const std::vector<int32_t>& tokens,
                                                              int64_t batch) {
  return OnAllAgreed<float>(*this, [&](GpuRuntime& rt) { return rt.Prefill(tokens, batch); });
}

absl::StatusOr<std::vector<float>> TensorParallelGpu::Decode(
    const std::vector<int32_t>& tokens, const std::vector<int32_t>& positions) {
  return OnAllAgreed<float>(*this, [&](GpuRuntime& rt) { return rt.Decode(tokens, positions); });
}

absl::StatusOr<std::vector<int32_t>> TensorParallelGpu::Generate(
    const std::vector<int32_t>& prompts, int64_t batch, int new_tokens) {
  return OnAllAgreed<int32_t>(
      *this, [&](GpuRuntime& rt) { return rt.Generate(prompts, batch, new_tokens); });
}

}  // namespace tileplan::runtime::gpu
