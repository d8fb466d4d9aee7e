#include "device/device.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "device/cuda_status.h"

namespace tileplan::device {

absl::StatusOr<std::unique_ptr<Device>> Device::Open(int ordinal) {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error == cudaErrorInsufficientDriver) {
    int runtime = 0;
    cudaRuntimeGetVersion(&runtime);
    return absl::FailedPreconditionError(absl::StrCat(
        "no CUDA device: no NVIDIA driver could be loaded (libcuda.so.1), or it is older than "
        "this CUDA runtime ",
        runtime / 1000, ".", runtime % 1000 / 10, " (cudaErrorInsufficientDriver)"));
  }
  if (error != cudaSuccess) {
    return absl::FailedPreconditionError(absl::StrCat("no CUDA device: ", cudaGetErrorString(error),
                                                      " (", cudaGetErrorName(error), ")"));
  }
  if (count == 0) return absl::FailedPreconditionError("no CUDA device: the runtime found none");
  if (ordinal < 0 || ordinal >= count) {
    return absl::InvalidArgumentError(absl::StrCat("CUDA device ordinal ", ordinal,
                                                   " is out of range: this machine has ", count,
                                                   " device(s)"));
  }
  TP_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal));
  cudaDeviceProp prop{};
  TP_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, ordinal));
  DeviceProperties p;
  p.ordinal = ordinal;
  p.name = prop.name;
  p.sm = prop.major * 10 + prop.minor;
  p.sm_count = prop.multiProcessorCount;
  p.l2_bytes = prop.l2CacheSize;
  p.shared_memory_per_block_optin_bytes = static_cast<int64_t>(prop.sharedMemPerBlockOptin);
  p.max_threads_per_sm = prop.maxThreadsPerMultiProcessor;
  p.total_memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  TP_CUDA_RETURN_IF_ERROR(cudaDriverGetVersion(&p.driver_version));
  TP_CUDA_RETURN_IF_ERROR(cudaRuntimeGetVersion(&p.runtime_version));
  if (p.sm < kMinSm) {
    return absl::FailedPreconditionError(absl::StrCat("CUDA device ", ordinal, " (", p.name,
                                                      ") has compute capability sm_", p.sm,
                                                      "; tileplan needs sm_", kMinSm, " or newer"));
  }
  return std::unique_ptr<Device>(new Device(std::move(p)));
}

std::string Device::Label() const {
  return absl::StrCat("device ", properties_.ordinal, " (", properties_.name, ", sm_",
                      properties_.sm, ")");
}

absl::Status Device::MakeCurrent() const {
  TP_CUDA_RETURN_IF_ERROR(cudaSetDevice(properties_.ordinal));
  return absl::OkStatus();
}

absl::Status Device::Synchronize() const {
  TP_RETURN_IF_ERROR(MakeCurrent());
  TP_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  return absl::OkStatus();
}

absl::StatusOr<Device::MemoryInfo> Device::GetMemoryInfo() const {
  TP_RETURN_IF_ERROR(MakeCurrent());
  size_t free_bytes = 0, total_bytes = 0;
  TP_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
  return MemoryInfo{static_cast<int64_t>(free_bytes), static_cast<int64_t>(total_bytes)};
}

}  // namespace tileplan::device
