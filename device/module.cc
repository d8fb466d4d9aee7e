#include "device/module.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "device/cuda_status.h"

namespace tileplan::device {
namespace {

std::string DimsString(const std::array<int64_t, 3>& d) { return absl::StrJoin(d, "x"); }

absl::Status CheckDims(const LaunchConfig& c, absl::string_view kernel) {
  const int64_t threads = c.block[0] * c.block[1] * c.block[2];
  const bool grid_ok = c.grid[0] >= 1 && c.grid[0] <= 0x7fffffff && c.grid[1] >= 1 &&
                       c.grid[1] <= 65535 && c.grid[2] >= 1 && c.grid[2] <= 65535;
  const bool block_ok =
      c.block[0] >= 1 && c.block[1] >= 1 && c.block[2] >= 1 && c.block[2] <= 64 && threads <= 1024;
  const int64_t cluster = c.cluster[0] * c.cluster[1] * c.cluster[2];
  bool cluster_ok = cluster >= 1 && cluster <= 8;
  for (int i = 0; i < 3; ++i)
    cluster_ok = cluster_ok && c.cluster[i] >= 1 && c.grid[i] % c.cluster[i] == 0;
  if (!cluster_ok) {
    return absl::InvalidArgumentError(absl::StrCat("launch of ", kernel, ": clusters of ",
                                                   DimsString(c.cluster), " do not tile grid ",
                                                   DimsString(c.grid), " in clusters of 1 to 8"));
  }
  if (!grid_ok || !block_ok || c.dynamic_shared_memory_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "launch of ", kernel, ": grid ", DimsString(c.grid), ", block ", DimsString(c.block),
        ", dynamic shared memory ", c.dynamic_shared_memory_bytes,
        " bytes is outside the CUDA limits (grid.x < 2^31, grid.y/z <= 65535, 1024 threads)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Kernel::SetMaxDynamicSharedMemory(int64_t bytes) const {
  absl::Status status = TP_CUDA_STATUS(
      cudaFuncSetAttribute(reinterpret_cast<const void*>(handle_),
                           cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat("kernel ", name_,
                                                    ": raising dynamic shared "
                                                    "memory to ",
                                                    bytes, " bytes: ", status.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> Kernel::StaticSharedMemoryBytes() const {
  cudaFuncAttributes attributes{};
  absl::Status status =
      TP_CUDA_STATUS(cudaFuncGetAttributes(&attributes, reinterpret_cast<const void*>(handle_)));
  if (!status.ok()) {
    return absl::Status(
        status.code(),
        absl::StrCat("kernel ", name_, ": reading its attributes: ", status.message()));
  }
  return static_cast<int64_t>(attributes.sharedSizeBytes);
}

absl::Status Kernel::Launch(const LaunchConfig& config, void** args) const {
  TP_RETURN_IF_ERROR(CheckDims(config, name_));
  const dim3 grid(static_cast<unsigned>(config.grid[0]), static_cast<unsigned>(config.grid[1]),
                  static_cast<unsigned>(config.grid[2]));
  const dim3 block(static_cast<unsigned>(config.block[0]), static_cast<unsigned>(config.block[1]),
                   static_cast<unsigned>(config.block[2]));
  absl::Status status;
  const bool clustered = config.cluster[0] * config.cluster[1] * config.cluster[2] > 1;
  if (config.programmatic || config.cooperative || clustered) {
    cudaLaunchConfig_t launch = {};
    launch.gridDim = grid;
    launch.blockDim = block;
    launch.dynamicSmemBytes = static_cast<size_t>(config.dynamic_shared_memory_bytes);
    launch.stream = config.stream;
    cudaLaunchAttribute attributes[3] = {};
    unsigned int count = 0;
    if (config.programmatic) {
      attributes[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attributes[count++].val.programmaticStreamSerializationAllowed = 1;
    }
    if (config.cooperative) {
      attributes[count].id = cudaLaunchAttributeCooperative;
      attributes[count++].val.cooperative = 1;
    }
    if (clustered) {
      attributes[count].id = cudaLaunchAttributeClusterDimension;
      attributes[count].val.clusterDim.x = static_cast<unsigned>(config.cluster[0]);
      attributes[count].val.clusterDim.y = static_cast<unsigned>(config.cluster[1]);
      attributes[count++].val.clusterDim.z = static_cast<unsigned>(config.cluster[2]);
    }
    launch.attrs = attributes;
    launch.numAttrs = count;
    status =
        TP_CUDA_STATUS(cudaLaunchKernelExC(&launch, reinterpret_cast<const void*>(handle_), args));
  } else {
    status = TP_CUDA_STATUS(
        cudaLaunchKernel(reinterpret_cast<const void*>(handle_), grid, block, args,
                         static_cast<size_t>(config.dynamic_shared_memory_bytes), config.stream));
  }
  if (!status.ok()) {
    return absl::Status(
        status.code(),
        absl::StrCat("launch of ", name_, " (grid ", DimsString(config.grid),
                     clustered ? absl::StrCat(" in clusters of ", DimsString(config.cluster)) : "",
                     ", block ",
                     DimsString(config.block), ", ", config.dynamic_shared_memory_bytes,
                     " bytes dynamic shared memory): ", status.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Module>> Module::Load(const Device& device, absl::string_view image,
                                                     absl::string_view label) {
  TP_RETURN_IF_ERROR(device.MakeCurrent());
  cudaLibrary_t library = nullptr;
  absl::Status status = TP_CUDA_STATUS(
      cudaLibraryLoadData(&library, image.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
  if (!status.ok()) {
    return absl::Status(status.code(),
                        absl::StrCat("loading module ", label, " (", image.size(), " bytes) on ",
                                     device.Label(), ": ", status.message()));
  }
  return std::unique_ptr<Module>(new Module(device, library, std::string(label)));
}

Module::~Module() {
  if (device_->MakeCurrent().ok()) cudaLibraryUnload(library_);
}

absl::StatusOr<Kernel> Module::GetKernel(absl::string_view lowered_name) const {
  const std::string name(lowered_name);
  cudaKernel_t kernel = nullptr;
  const cudaError_t error = cudaLibraryGetKernel(&kernel, library_, name.c_str());
  if (error == cudaErrorSymbolNotFound) {
    cudaGetLastError();
    return absl::NotFoundError(absl::StrCat("module ", label_, " has no kernel ", name));
  }
  TP_RETURN_IF_ERROR(CudaErrorToStatus(error, "cudaLibraryGetKernel", __FILE__, __LINE__));
  return Kernel(kernel, name);
}

}  // namespace tileplan::device
