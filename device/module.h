// Loaded device code: a cubin (or PTX) image loaded with cudaLibraryLoadData, its kernels
// looked up with cudaLibraryGetKernel and launched with cudaLaunchKernel. Everything goes
// through the CUDA runtime, never the driver API, so no binary links libcuda.so.
#ifndef TILEPLAN_DEVICE_MODULE_H_
#define TILEPLAN_DEVICE_MODULE_H_

#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "device/device.h"

namespace tileplan::device {

struct LaunchConfig {
  std::array<int64_t, 3> grid = {1, 1, 1};
  std::array<int64_t, 3> block = {1, 1, 1};
  int64_t dynamic_shared_memory_bytes = 0;
  cudaStream_t stream = nullptr;  // null: the legacy default stream
  // Programmatic dependent launch (sm_90+): the grid may begin launching while the previous
  // grid in the stream finishes; it must wait for it in the kernel (every kernel template
  // calls grid_dependency_sync() first, kernels/core/primitives.cuh).
  bool programmatic = false;
  // Every block of the grid resident at once, or the launch fails (a kernel whose blocks
  // wait for one another: the persistent kernel).
  bool cooperative = false;
  // Thread-block clusters of these dimensions (sm_90+; each divides the grid's, at most 8
  // blocks); {1, 1, 1}: none.
  std::array<int64_t, 3> cluster = {1, 1, 1};
};

// A kernel of a loaded Module; valid while the Module lives.
class Kernel {
 public:
  Kernel(cudaKernel_t handle, std::string name) : handle_(handle), name_(std::move(name)) {}

  const std::string& name() const { return name_; }  // the lowered (mangled) name
  cudaKernel_t handle() const { return handle_; }

  // Raises the kernel's dynamic shared memory limit (needed when the dynamic and the static
  // shared memory together exceed 48 KiB).
  absl::Status SetMaxDynamicSharedMemory(int64_t bytes) const;
  // The shared memory the kernel declares statically, in bytes.
  absl::StatusOr<int64_t> StaticSharedMemoryBytes() const;

  // Launches with `args`, one pointer per kernel parameter in order (cudaLaunchKernel's
  // convention). InvalidArgument for a grid or block outside the CUDA limits or a launch
  // the runtime rejects; errors name the kernel and the geometry. Asynchronous: faults of
  // the running kernel surface at the next synchronizing call.
  absl::Status Launch(const LaunchConfig& config, void** args) const;

  // Launch with the parameters given by value, e.g. kernel.Launch(config, x, w, out, n).
  // Each argument's type must be exactly the kernel parameter's type (pointers, int,
  // float, long long): the runtime copies sizeof(argument) bytes per parameter.
  template <typename... Args>
  absl::Status LaunchWith(const LaunchConfig& config, Args... args) const {
    void* pointers[] = {static_cast<void*>(&args)..., nullptr};
    return Launch(config, pointers);
  }

 private:
  cudaKernel_t handle_;
  std::string name_;
};

class Module {
 public:
  // Loads a cubin or PTX image on `device` (made current), which must outlive the Module.
  // `label` names the image in errors (e.g. the template and architecture).
  static absl::StatusOr<std::unique_ptr<Module>> Load(const Device& device, absl::string_view image,
                                                      absl::string_view label);
  ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // NotFound naming the module when it has no kernel of that (lowered) name.
  absl::StatusOr<Kernel> GetKernel(absl::string_view lowered_name) const;

 private:
  Module(const Device& device, cudaLibrary_t library, std::string label)
      : device_(&device), library_(library), label_(std::move(label)) {}

  const Device* device_;
  cudaLibrary_t library_;
  std::string label_;
};

}  // namespace tileplan::device

#endif  // TILEPLAN_DEVICE_MODULE_H_
