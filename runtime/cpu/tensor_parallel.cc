#include "runtime/cpu/tensor_parallel.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace tileplan::runtime::cpu {
namespace {

absl::Status ForRank(int rank, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat("rank ", rank, ": ", status.message()));
}

}  // namespace

absl::StatusOr<std::unique_ptr<TensorParallelCpu>> TensorParallelCpu::Create(
    std::vector<RankGraphs> ranks, const models::Checkpoint& checkpoint,
    CpuBackend::Options options) {
  if (ranks.empty()) {
    return absl::InvalidArgumentError("tensor-parallel cpu backend: no rank graphs");
  }
  const int n = static_cast<int>(ranks.size());
  std::unique_ptr<TensorParallelCpu> tp(new TensorParallelCpu(n));
  int threads = options.threads;
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  options.threads = std::max(1, threads / n);
  options.group = tp->group_.get();
  for (int r = 0; r < n; ++r) {
    options.rank = r;
    RankGraphs& g = ranks[static_cast<size_t>(r)];
    absl::StatusOr<std::unique_ptr<CpuBackend>> backend =
        g.decode.has_value() ? CpuBackend::CreatePhased(g.prefill, *g.decode, checkpoint, options)
                             : CpuBackend::Create(g.prefill, checkpoint, options);
    if (!backend.ok()) return ForRank(r, backend.status());
    tp->backends_.push_back(*std::move(backend));
  }
  return tp;
}

int TensorParallelCpu::threads_per_rank() const { return backends_.front()->num_threads(); }

void TensorParallelCpu::Reset() {
  for (auto& b : backends_) b->Reset();
}

absl::StatusOr<std::vector<float>> TensorParallelCpu::Run(const std::vector<int32_t>& tokens,
                                                          const std::vector<int32_t>& positions) {
  const size_t n = backends_.size();
  group_->Reset();
  std::vector<absl::StatusOr<std::vector<float>>> results(n, absl::UnknownError("not run"));
  // The first failing rank's own error; the others then fail with it as the group's abort.
  absl::Mutex mu;
  absl::Status first;
  int first_rank = -1;
  std::vector<std::thread> threads;
  for (size_t r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      results[r] = backends_[r]->Run(tokens, positions);
      if (!results[r].ok()) {
        {
          absl::MutexLock lock(&mu);
          if (first_rank < 0) {
            first_rank = static_cast<int>(r);
            first = results[r].status();
          }
        }
        group_->Abort(ForRank(static_cast<int>(r), results[r].status()));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  if (first_rank >= 0) return ForRank(first_rank, first);
  for (size_t r = 1; r < n; ++r) {
    if (*results[r] != *results[0]) {
      return absl::InternalError(
          absl::StrCat("rank ", r, "'s gathered logits differ from rank 0's"));
    }
  }
  return *std::move(results[0]);
}

}  // namespace tileplan::runtime::cpu
