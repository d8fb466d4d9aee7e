// NCCL, the collectives library of tensor parallelism, loaded at run time: `libnccl.so.2`
// (the CUDA toolkit's) is opened with dlopen the first time a process needs it, so that no
// binary needs NCCL to start and a machine without it fails only the runs that use it, with a
// message that says so. Communicators of the GPUs of one process (one rank per GPU).
//
// Keep NVLink multicast off on shared machines: callers set NCCL_NVLS_ENABLE=0 in the
// environment before the first communicator (Communicator::CreateAll does, unless the
// variable is set already).
#ifndef TILEPLAN_DEVICE_NCCL_H_
#define TILEPLAN_DEVICE_NCCL_H_

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tileplan::device {

// The NCCL functions tileplan calls, resolved from the library.
class Nccl {
 public:
  // The process's NCCL, loaded once. FailedPrecondition naming the library and dlerror() when
  // it cannot be opened or lacks a function.
  static absl::StatusOr<const Nccl*> Get();

  // The library's NCCL_VERSION_CODE (22809 for 2.28.9).
  int version() const { return version_; }
  // "2.28.9".
  std::string VersionString() const;
  // OK for ncclSuccess; else Internal (FailedPrecondition for a system or invalid-usage error)
  // with `expression` and NCCL's description.
  absl::Status Check(ncclResult_t result, absl::string_view expression) const;

  decltype(&ncclGetVersion) get_version = nullptr;
  decltype(&ncclGetErrorString) get_error_string = nullptr;
  decltype(&ncclCommInitAll) comm_init_all = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclCommCount) comm_count = nullptr;
  decltype(&ncclCommUserRank) comm_user_rank = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclAllGather) all_gather = nullptr;

 private:
  Nccl() = default;
  int version_ = 0;
};

// One rank's communicator.
class Communicator {
 public:
  // One communicator per device of `ordinals` (rank r on ordinals[r]), all of this process
  // (ncclCommInitAll). InvalidArgument for no device or a device listed twice.
  static absl::StatusOr<std::vector<std::unique_ptr<Communicator>>> CreateAll(
      const std::vector<int>& ordinals);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int ranks() const { return ranks_; }
  int rank() const { return rank_; }
  int ordinal() const { return ordinal_; }
  ncclComm_t comm() const { return comm_; }
  const Nccl& nccl() const { return *nccl_; }

 private:
  Communicator(const Nccl* nccl, ncclComm_t comm, int ranks, int rank, int ordinal)
      : nccl_(nccl), comm_(comm), ranks_(ranks), rank_(rank), ordinal_(ordinal) {}

  const Nccl* nccl_;
  ncclComm_t comm_;
  int ranks_, rank_, ordinal_;
};

}  // namespace tileplan::device

#endif  // TILEPLAN_DEVICE_NCCL_H_
