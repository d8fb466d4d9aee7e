#include "runtime/cpu/collectives.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace tileplan::runtime::cpu {

InProcessGroup::InProcessGroup(int ranks)
    : ranks_(ranks < 1 ? 1 : ranks), pending_(static_cast<size_t>(ranks_)) {}

absl::StatusOr<InProcessGroup::Contributions> InProcessGroup::Exchange(int rank,
                                                                       const std::string& tag,
                                                                       std::vector<float> data) {
  absl::MutexLock lock(&mu_);
  if (!aborted_.ok()) return aborted_;
  if (rank < 0 || rank >= ranks_) {
    aborted_ = absl::InvalidArgumentError(
        absl::StrCat(tag, ": rank ", rank, " is outside the group of ", ranks_, " ranks"));
    arrived_cv_.SignalAll();
    return aborted_;
  }
  if (arrived_ == 0) {
    tag_ = tag;
    size_ = data.size();
  } else if (tag != tag_ || data.size() != size_) {
    aborted_ = absl::FailedPreconditionError(
        absl::StrCat("collective mismatch: rank ", rank, " reached ", tag, " (", data.size(),
                     " elements) while other ranks wait in ", tag_, " (", size_, " elements)"));
    arrived_cv_.SignalAll();
    return aborted_;
  }
  const uint64_t generation = generation_;
  pending_[static_cast<size_t>(rank)] = std::move(data);
  if (++arrived_ == ranks_) {
    done_ = std::make_shared<const std::vector<std::vector<float>>>(std::move(pending_));
    pending_.assign(static_cast<size_t>(ranks_), {});
    arrived_ = 0;
    ++generation_;
    arrived_cv_.SignalAll();
    return done_;
  }
  // done_ stays this generation's until every rank, this one included, arrives again.
  while (generation_ == generation && aborted_.ok()) arrived_cv_.Wait(&mu_);
  if (generation_ == generation) return aborted_;
  return done_;
}

void InProcessGroup::Abort(absl::Status status) {
  absl::MutexLock lock(&mu_);
  if (aborted_.ok()) {
    aborted_ = status.ok() ? absl::AbortedError("the group was aborted") : std::move(status);
  }
  arrived_cv_.SignalAll();
}

void InProcessGroup::Reset() {
  absl::MutexLock lock(&mu_);
  aborted_ = absl::OkStatus();
  arrived_ = 0;
  pending_.assign(static_cast<size_t>(ranks_), {});
  done_.reset();
}

}  // namespace tileplan::runtime::cpu
