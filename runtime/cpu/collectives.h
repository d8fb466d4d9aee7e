// The in-process stand-in for a communicator of tensor-parallel ranks, used by the CPU
// backend to run the collective regions of docs/ir.md (`all_reduce`, `all_gather`,
// `sharded_argmax`): each rank's backend runs on its own thread and meets the others at every
// collective. The arithmetic is the CPU oracle's: contributions are combined in rank order,
// sums in double, so every rank gets bit-identical results whatever the thread timing.
#ifndef TILEPLAN_RUNTIME_CPU_COLLECTIVES_H_
#define TILEPLAN_RUNTIME_CPU_COLLECTIVES_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace tileplan::runtime::cpu {

class InProcessGroup {
 public:
  // REQUIRES: ranks >= 1.
  explicit InProcessGroup(int ranks);
  InProcessGroup(const InProcessGroup&) = delete;
  InProcessGroup& operator=(const InProcessGroup&) = delete;

  int ranks() const { return ranks_; }

  // Every rank's `data`, indexed by rank, once all `ranks` have called Exchange with the same
  // `tag` (which names the collective, e.g. "all_reduce %l0.attn_out") and the same data size;
  // blocks until then. A rank that arrives with another tag or size aborts the group
  // (FailedPrecondition naming both), as does Abort(); every waiting and later call then
  // returns that status.
  using Contributions = std::shared_ptr<const std::vector<std::vector<float>>>;
  absl::StatusOr<Contributions> Exchange(int rank, const std::string& tag, std::vector<float> data);

  // Fails every waiting and later Exchange with `status` (a rank that failed calls it, so the
  // others do not wait for it forever). The first status wins.
  void Abort(absl::Status status);
  // Clears an abort, for the next run. REQUIRES: no Exchange in progress.
  void Reset();

 private:
  const int ranks_;
  absl::Mutex mu_;
  absl::CondVar arrived_cv_;
  int arrived_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  std::string tag_ ABSL_GUARDED_BY(mu_);
  size_t size_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::vector<float>> pending_ ABSL_GUARDED_BY(mu_);
  Contributions done_ ABSL_GUARDED_BY(mu_);
  absl::Status aborted_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tileplan::runtime::cpu

#endif  // TILEPLAN_RUNTIME_CPU_COLLECTIVES_H_
