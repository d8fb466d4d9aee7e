#include "device/nccl.h"

#include <dlfcn.h>

#include <cstdlib>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tileplan::device {
namespace {

constexpr char kLibrary[] = "libnccl.so.2";

template <typename F>
absl::Status Resolve(void* handle, const char* name, F& out) {
  out = reinterpret_cast<F>(dlsym(handle, name));
  if (out == nullptr) {
    const char* error = dlerror();
    return absl::FailedPreconditionError(
        absl::StrCat(kLibrary, " has no ", name, ": ", error == nullptr ? "(no dlerror)" : error));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<const Nccl*> Nccl::Get() {
  static const absl::StatusOr<const Nccl*>* loaded = [] {
    auto load = []() -> absl::StatusOr<const Nccl*> {
      void* handle = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
      if (handle == nullptr) {
        const char* error = dlerror();
        return absl::FailedPreconditionError(
            absl::StrCat("NCCL is needed for tensor parallelism on GPUs but ", kLibrary,
                         " cannot be loaded: ", error == nullptr ? "(no dlerror)" : error,
                         " (it ships with the CUDA toolkit, in its lib64 directory)"));
      }
      // Never unloaded: its functions serve the whole process.
      auto nccl = std::unique_ptr<Nccl>(new Nccl());
      absl::Status s = Resolve(handle, "ncclGetVersion", nccl->get_version);
      if (s.ok()) s = Resolve(handle, "ncclGetErrorString", nccl->get_error_string);
      if (s.ok()) s = Resolve(handle, "ncclCommInitAll", nccl->comm_init_all);
      if (s.ok()) s = Resolve(handle, "ncclCommDestroy", nccl->comm_destroy);
      if (s.ok()) s = Resolve(handle, "ncclCommCount", nccl->comm_count);
      if (s.ok()) s = Resolve(handle, "ncclCommUserRank", nccl->comm_user_rank);
      if (s.ok()) s = Resolve(handle, "ncclAllReduce", nccl->all_reduce);
      if (s.ok()) s = Resolve(handle, "ncclAllGather", nccl->all_gather);
      if (!s.ok()) return s;
      if (nccl->get_version(&nccl->version_) != ncclSuccess) {
        return absl::FailedPreconditionError(absl::StrCat(kLibrary, ": ncclGetVersion failed"));
      }
      return nccl.release();
    };
    return new absl::StatusOr<const Nccl*>(load());
  }();
  return *loaded;
}

std::string Nccl::VersionString() const {
  // NCCL_VERSION(X, Y, Z) = X * 10000 + Y * 100 + Z from 2.9 on.
  return absl::StrCat(version_ / 10000, ".", version_ / 100 % 100, ".", version_ % 100);
}

absl::Status Nccl::Check(ncclResult_t result, absl::string_view expression) const {
  if (result == ncclSuccess) return absl::OkStatus();
  std::string message = absl::StrCat(expression, " failed: ", get_error_string(result), " (NCCL ",
                                     VersionString(), ")");
  if (result == ncclSystemError || result == ncclInvalidUsage || result == ncclInvalidArgument) {
    return absl::FailedPreconditionError(message);
  }
  return absl::InternalError(message);
}

absl::StatusOr<std::vector<std::unique_ptr<Communicator>>> Communicator::CreateAll(
    const std::vector<int>& ordinals) {
  if (ordinals.empty()) return absl::InvalidArgumentError("communicators: no device");
  if (std::set<int>(ordinals.begin(), ordinals.end()).size() != ordinals.size()) {
    return absl::InvalidArgumentError(
        "communicators: a device is listed twice; NCCL needs one GPU per rank");
  }
  absl::StatusOr<const Nccl*> nccl = Nccl::Get();
  if (!nccl.ok()) return nccl.status();
  // NVLink multicast (NVLS) stays off unless the caller chose otherwise.
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  const int n = static_cast<int>(ordinals.size());
  std::vector<ncclComm_t> comms(ordinals.size(), nullptr);
  absl::Status s = (*nccl)->Check((*nccl)->comm_init_all(comms.data(), n, ordinals.data()),
                                  absl::StrCat("ncclCommInitAll over ", n, " GPUs"));
  if (!s.ok()) return s;
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < n; ++r) {
    out.push_back(std::unique_ptr<Communicator>(
        new Communicator(*nccl, comms[static_cast<size_t>(r)], n, r, ordinals[r])));
  }
  return out;
}

Communicator::~Communicator() {
  if (comm_ != nullptr) nccl_->comm_destroy(comm_);
}

}  // namespace tileplan::device
