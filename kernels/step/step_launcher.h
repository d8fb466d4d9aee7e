// The one step launcher (docs/kernels.md, "Running a step"): how the runtime and the tuner
// prepare a region under a tactic, bind it to device buffers, enqueue it and capture it into
// a CUDA Graph, whatever its family. The family says how its steps launch
// (KernelFamily::launch_kind()): templates through the family's own launch half and the
// kernel loader, library steps through the library launcher registered under the family's
// name (cuBLASLt), views not at all. Nothing here names a family.
#ifndef TILEPLAN_KERNELS_STEP_STEP_LAUNCHER_H_
#define TILEPLAN_KERNELS_STEP_STEP_LAUNCHER_H_

#include <cuda_runtime_api.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "device/device.h"
#include "device/device_buffer.h"
#include "device/nccl.h"
#include "kernels/core/bound_graph.h"
#include "kernels/core/kernel_family.h"
#include "kernels/core/template_launch.h"
#include "kernels/launch/kernel_loader.h"
#include "kernels/launch/library_launcher.h"
#include "kernels/launch/nvrtc_compiler.h"
#include "kernels/nccl/nccl_launcher.h"

namespace tileplan::kernels {

class CublasLtRunner;

// A region under a tactic, prepared once (the template instance chosen, the library's
// descriptors and algo resolved), then bound to any number of buffer sets and enqueued.
// Lives no longer than the StepLauncher that prepared it. Not thread-safe.
class PreparedStep {
 public:
  const std::string& label() const { return label_; }
  LaunchKind kind() const { return kind_; }
  // The template instance (template steps), else null.
  const KernelInstance* instance() const {
    return kind_ == LaunchKind::kTemplates ? &instance_ : nullptr;
  }
  // What the step runs: the instance's kernels, the library's resolved config, or nothing.
  std::string Describe() const;

  // Adds a set of buffers the step may run on; returns its index (0 for the first).
  // InvalidArgument naming the step for a missing or misaligned buffer (template steps; a
  // library step checks its buffers when it launches).
  absl::StatusOr<int> Bind(const RegionBuffers& buffers);
  // Enqueues binding `binding` on `stream`: no synchronization, allocation or host copy, so
  // it may be captured into a CUDA Graph. FailedPrecondition for a template step not yet
  // loaded (StepLauncher::Load); errors are prefixed with the label.
  absl::Status Enqueue(int binding, cudaStream_t stream);

  // A persistent kernel prepared with PersistentSpec::trace: its tasks' timestamps from the
  // last launch that finished (synchronous copy; nanoseconds of the GPU's global timer), one
  // record per task in each block's order, the blocks in order. FailedPrecondition for any
  // other step.
  struct TaskTrace {
    int stage = 0;
    int block = 0;
    uint64_t reached = 0, ready = 0, landed = 0, released = 0;
  };
  absl::StatusOr<std::vector<TaskTrace>> PersistentTrace() const;

 private:
  friend class StepLauncher;
  PreparedStep() = default;

  std::string label_;
  LaunchKind kind_ = LaunchKind::kNothing;
  bool programmatic_ = false;
  // Template steps.
  KernelLoader* loader_ = nullptr;
  const KernelFamily* family_ = nullptr;
  std::optional<BoundRegion> region_;
  Tactic tactic_;
  KernelInstance instance_;
  LoadedInstance* loaded_ = nullptr;
  std::vector<std::vector<KernelLaunch>> launches_;  // per binding
  // Library steps.
  std::unique_ptr<LibraryStep> library_;
  std::vector<RegionBuffers> buffers_;  // per binding
  int bindings_ = 0;
  // The persistent kernel: its launch is cooperative, and it owns its schedule's memory.
  bool cooperative_ = false;
  std::optional<device::DeviceBuffer> schedule_;
  int64_t trace_offset_ = -1;                // in schedule_; -1: no trace
  std::vector<std::pair<int, int>> traced_;  // (stage, block) of every task, in task order
};

struct StepOptions {
  // Template launches use programmatic dependent launch (sm_90+; each kernel waits for its
  // inputs in the kernel).
  bool programmatic = false;
};

// The launches of several prepared template steps run as one persistent kernel
// (kernels/launch/persistent.cuh; the plan's PersistentRun says what to put here).
struct PersistentSpec {
  struct Stage {
    const PreparedStep* step = nullptr;  // a template step, bound (binding 0 runs)
    int launch = 0;                      // which of its launches
    int64_t first_block = 0;             // its CTA t runs in block (first_block + t) % blocks
    int wait = -1;                       // the earlier stage it waits for; -1: none
  };
  std::vector<Stage> stages;
  int64_t blocks = 0;
  int threads = 0;            // every stage's launch has this block
  int min_blocks_per_sm = 1;  // the kernel's launch bounds
  int prefetch_tasks = 4;     // tasks of a stage a block prefetches for on entering it
  // The weight stream: slots of `stream_slot_bytes` (a multiple of 128) in every block's
  // shared memory after the stages' own; 0 slots: none.
  int stream_slots = 0;
  int64_t stream_slot_bytes = 0;
  // Record every task's timestamps (PreparedStep::PersistentTrace); a diagnostic.
  bool trace = false;
};

class StepLauncher {
 public:
  struct Options {
    NvrtcCompiler::Options compiler;
    // Device memory for cuBLASLt's workspace, shared by every library step.
    int64_t cublaslt_workspace_bytes = 32 << 20;
    // A tensor-parallel rank's communicator (must outlive the launcher): the collective
    // family's steps run on it (kernels/nccl/nccl_launcher.h). Null: no collective step can
    // be prepared.
    const device::Communicator* communicator = nullptr;
  };
  // The compiler, the kernel loader and the library launchers of `device` (which must outlive
  // the launcher). FailedPrecondition when NVRTC cannot compile for the device.
  static absl::StatusOr<std::unique_ptr<StepLauncher>> Create(const device::Device& device,
                                                              Options options);
  ~StepLauncher();
  StepLauncher(const StepLauncher&) = delete;
  StepLauncher& operator=(const StepLauncher&) = delete;

  // Prepares `region` (whose bound graph must outlive the step) under `tactic` of `family`. Errors
  // name the region: InvalidArgument for a tactic the family's launch half refuses, the library's
  // errors for library steps, FailedPrecondition for a library family no launcher serves.
  // Template steps are loaded by Load before they run.
  absl::StatusOr<std::unique_ptr<PreparedStep>> Prepare(const KernelFamily& family,
                                                        const BoundRegion& region,
                                                        const Tactic& tactic,
                                                        const StepOptions& options,
                                                        std::string label);
  // A step of the runtime's own kernels (kernel_loader.h), with one binding of `launches`.
  std::unique_ptr<PreparedStep> PrepareKernels(std::string label, KernelInstance instance,
                                               std::vector<KernelLaunch> launches,
                                               const StepOptions& options);
  // The persistent kernel running `spec`'s stages, with its schedule in device memory (one
  // binding, loaded by Load like any template step, launched cooperatively). InvalidArgument
  // naming the stage for a step that is not a bound template step, a launch whose block is
  // not spec.threads, or a wait that does not name an earlier stage.
  absl::StatusOr<std::unique_ptr<PreparedStep>> PreparePersistent(const PersistentSpec& spec,
                                                                  std::string label);

  // Compiles the template instances of `steps` on all host cores at once (the disk cache),
  // then loads them; the first failure, carrying the NVRTC log.
  absl::Status Load(const std::vector<PreparedStep*>& steps);
  // Compiles `instances` on all host cores into the disk cache; the statuses in order.
  std::vector<absl::Status> Precompile(const std::vector<KernelInstance>& instances) const;

  // The library's configurations for a library family's region (LibraryLauncher::Configs);
  // empty for other families.
  absl::StatusOr<std::vector<Tactic>> LibraryConfigs(const KernelFamily& family,
                                                     const BoundRegion& region, const Tactic& base,
                                                     int limit);

  const device::Device& device() const { return *device_; }
  KernelLoader& loader() { return *loader_; }
  CublasLtRunner& cublaslt() { return *cublaslt_; }

 private:
  StepLauncher() = default;

  const device::Device* device_ = nullptr;
  std::unique_ptr<NvrtcCompiler> compiler_;
  std::unique_ptr<KernelLoader> loader_;
  std::unique_ptr<CublasLtRunner> cublaslt_;
  std::unique_ptr<NcclLauncher> nccl_;
  std::map<std::string, LibraryLauncher*, std::less<>> libraries_;  // by family name
};

// An instantiated CUDA Graph (owning).
class GraphExec {
 public:
  GraphExec() = default;
  explicit GraphExec(cudaGraphExec_t exec) : exec_(exec) {}
  ~GraphExec();
  GraphExec(GraphExec&& other) noexcept : exec_(other.exec_) { other.exec_ = nullptr; }
  GraphExec& operator=(GraphExec&& other) noexcept;

  bool empty() const { return exec_ == nullptr; }
  absl::Status Launch(cudaStream_t stream) const;

 private:
  cudaGraphExec_t exec_ = nullptr;
};

// Captures what `enqueue` puts on `stream` (thread-local capture mode) and instantiates it.
// The capture always ends, also when `enqueue` fails; its error comes first.
absl::StatusOr<GraphExec> CaptureGraph(cudaStream_t stream,
                                       absl::FunctionRef<absl::Status()> enqueue);

}  // namespace tileplan::kernels

#endif  // TILEPLAN_KERNELS_STEP_STEP_LAUNCHER_H_
