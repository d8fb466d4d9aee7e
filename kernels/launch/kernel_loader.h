// Compiles (kernels/nvrtc_compiler.h), loads (device/module.h) and launches kernel
// template instances on one device: each instance is compiled once per machine (the disk
// cache) and loaded once per process.
#ifndef TILEPLAN_KERNELS_LAUNCH_KERNEL_LOADER_H_
#define TILEPLAN_KERNELS_LAUNCH_KERNEL_LOADER_H_

#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "device/device.h"
#include "device/module.h"
#include "kernels/core/template_launch.h"
#include "kernels/launch/nvrtc_compiler.h"
#include "kernels/launch/runtime_support_params.h"

namespace tileplan::kernels {

// A loaded instance: its kernels in the order of KernelInstance::name_expressions.
struct LoadedInstance {
  std::unique_ptr<device::Module> module;
  std::vector<device::Kernel> kernels;
  // The dynamic shared memory each kernel may use so far: 48 KiB less its static shared
  // memory, until a launch that needs more raises it.
  std::vector<int64_t> shared_limit;
};

// How a launch is enqueued: what the kernel launch itself does not say.
struct LaunchOptions {
  cudaStream_t stream = nullptr;  // null: the legacy default stream
  // Programmatic dependent launch (sm_90+, device::LaunchConfig::programmatic).
  bool programmatic = false;
  // A cooperative launch (device::LaunchConfig::cooperative).
  bool cooperative = false;
};

// The runtime's own kernels (runtime_support.cuh): random weights of a float dtype generated
// on the device, the step that chains greedy decode steps in one CUDA Graph, and a kernel that
// executes __trap() (a testing aid: it kills the CUDA context).
KernelInstance FillUniformInstance(ir::DType dtype);
// add_bias_rows for a result of `dtype` and a bias of `bias_dtype` (float dtypes only).
KernelInstance AddBiasRowsInstance(ir::DType dtype, ir::DType bias_dtype);
// Its launch: out [rows, n] += bias [n].
KernelLaunch AddBiasRowsLaunch(const AddBiasRowsParams& params);
KernelInstance DecodeAdvanceInstance();
KernelInstance TrapFaultInstance();
// decode_advance for `batch` sequences (one CTA).
KernelLaunch DecodeAdvanceLaunch(const DecodeAdvanceParams& params, int64_t batch);

// The persistent kernel (persistent.cuh) at `threads` threads per block, launch bounds of
// `min_blocks_per_sm` and `stream_slots` weight-stream slots (0: none), whose stage i runs
// kernel stages[i].second of instance stages[i].first as a task: the instance (its tasks'
// files included, each task type once, in first-use order) and each stage's op, the index
// of its task type.
struct PersistentInstance {
  KernelInstance instance;
  std::vector<int> stage_ops;
};
PersistentInstance PersistentKernelInstance(
    int threads, int min_blocks_per_sm, int stream_slots,
    const std::vector<std::pair<const KernelInstance*, int>>& stages);

class KernelLoader {
 public:
  // `device` and `compiler` must outlive the loader. FailedPrecondition when NVRTC cannot
  // compile for the device's architecture.
  static absl::StatusOr<std::unique_ptr<KernelLoader>> Create(const device::Device& device,
                                                              const NvrtcCompiler& compiler);

  // The instance compiled for this device's sm_XX and loaded; errors carry the NVRTC log.
  // Thread-safe; the result lives as long as the loader.
  absl::StatusOr<LoadedInstance*> Load(const KernelInstance& instance);

  // Compiles `instances` for this device's sm_XX on all host cores at once, into the disk
  // cache, so that Load then finds them there; the statuses in order (a failure carries the
  // NVRTC log). Thread-safe.
  std::vector<absl::Status> Precompile(const std::vector<KernelInstance>& instances) const;

  // Launches one prepared launch of a loaded instance (asynchronously, on its stream),
  // raising the kernel's dynamic shared memory limit first when the launch needs more than
  // 48 KiB. Not thread-safe for one LoadedInstance (the raised limit is recorded in it).
  absl::Status Launch(LoadedInstance& loaded, KernelLaunch& launch, const LaunchOptions& options);

  // Load + Launch of every launch, in order.
  absl::Status Run(const KernelInstance& instance, std::vector<KernelLaunch>& launches,
                   const LaunchOptions& options);

  // Enqueues out[i] = offset + scale * u(seed, i) for i < n, u uniform in [-1, 1), on
  // `stream` (cuda/runtime_support.cuh fill_uniform; float dtypes only): random weights and
  // tuning inputs generated on the device.
  absl::Status FillUniform(void* out, ir::DType dtype, int64_t n, uint64_t seed, float scale,
                           float offset, cudaStream_t stream);

  // Enqueues a kernel that executes __trap() on `stream` (cuda/runtime_support.cuh
  // trap_fault): the launch fails and the device's CUDA context is unusable afterwards, for
  // this whole process. A testing aid for the paths that must survive a faulting kernel.
  absl::Status LaunchTrapFault(cudaStream_t stream);

  const device::Device& device() const { return *device_; }

 private:
  KernelLoader(const device::Device& device, const NvrtcCompiler& compiler)
      : device_(&device), compiler_(&compiler) {}

  const device::Device* device_;
  const NvrtcCompiler* compiler_;
  std::mutex mu_;
  std::map<KernelInstance, std::unique_ptr<LoadedInstance>> loaded_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tileplan::kernels

#endif  // TILEPLAN_KERNELS_LAUNCH_KERNEL_LOADER_H_
