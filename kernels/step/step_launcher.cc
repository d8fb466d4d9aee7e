#include "kernels/step/step_launcher.h"

#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "device/cuda_status.h"
#include "kernels/cublaslt/cublaslt_runner.h"

namespace tileplan::kernels {
namespace {

absl::Status Prefixed(absl::string_view label, const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(label, ": ", status.message()));
}

}  // namespace

std::string PreparedStep::Describe() const {
  switch (kind_) {
    case LaunchKind::kNothing:
      return "nothing to launch";
    case LaunchKind::kTemplates:
      return absl::StrJoin(instance_.name_expressions, ", ");
    case LaunchKind::kLibrary:
      return library_->Describe();
  }
  return "";
}

absl::StatusOr<int> PreparedStep::Bind(const RegionBuffers& buffers) {
  if (kind_ == LaunchKind::kTemplates && region_.has_value()) {
    absl::StatusOr<std::vector<KernelLaunch>> launches =
        PrepareLaunches(*family_, *region_, tactic_, buffers);
    TP_RETURN_IF_ERROR(Prefixed(label_, launches.status()));
    launches_.push_back(*std::move(launches));
  } else if (kind_ == LaunchKind::kLibrary) {
    buffers_.push_back(buffers);
  }
  return bindings_++;
}

absl::Status PreparedStep::Enqueue(int binding, cudaStream_t stream) {
  if (binding < 0 || binding >= bindings_) {
    return absl::InvalidArgumentError(
        absl::StrCat(label_, ": no binding ", binding, " (it has ", bindings_, ")"));
  }
  const size_t b = static_cast<size_t>(binding);
  switch (kind_) {
    case LaunchKind::kNothing:
      return absl::OkStatus();
    case LaunchKind::kTemplates:
      if (loaded_ == nullptr) {
        return absl::FailedPreconditionError(absl::StrCat(label_, ": not loaded"));
      }
      for (KernelLaunch& launch : launches_[b]) {
        TP_RETURN_IF_ERROR(Prefixed(
            label_,
            loader_->Launch(*loaded_, launch, {.stream = stream, .programmatic = programmatic_})));
      }
      return absl::OkStatus();
    case LaunchKind::kLibrary:
      return Prefixed(label_, library_->Launch(buffers_[b], stream));
  }
  return absl::InternalError("unreachable");
}

StepLauncher::~StepLauncher() = default;

absl::StatusOr<std::unique_ptr<StepLauncher>> StepLauncher::Create(const device::Device& device,
                                                                   Options options) {
  std::unique_ptr<StepLauncher> l(new StepLauncher());
  l->device_ = &device;
  TP_ASSIGN_OR_RETURN(l->compiler_, NvrtcCompiler::Create(std::move(options.compiler)));
  TP_ASSIGN_OR_RETURN(l->loader_, KernelLoader::Create(device, *l->compiler_));
  TP_ASSIGN_OR_RETURN(
      l->cublaslt_, CublasLtRunner::Create(device, *l->loader_, options.cublaslt_workspace_bytes));
  // The library launchers, one line each.
  for (LibraryLauncher* library : {static_cast<LibraryLauncher*>(l->cublaslt_.get())}) {
    l->libraries_.emplace(std::string(library->family()), library);
  }
  return l;
}

absl::StatusOr<std::unique_ptr<PreparedStep>> StepLauncher::Prepare(const KernelFamily& family,
                                                                    const BoundRegion& region,
                                                                    const Tactic& tactic,
                                                                    const StepOptions& options,
                                                                    std::string label) {
  std::unique_ptr<PreparedStep> step(new PreparedStep());
  step->label_ = std::move(label);
  step->kind_ = family.launch_kind();
  switch (step->kind_) {
    case LaunchKind::kNothing:
      break;
    case LaunchKind::kTemplates: {
      absl::StatusOr<KernelInstance> instance = InstanceFor(family, region, tactic);
      TP_RETURN_IF_ERROR(Prefixed(step->label_, instance.status()));
      step->instance_ = *std::move(instance);
      step->loader_ = loader_.get();
      step->family_ = &family;
      step->region_.emplace(region);
      step->tactic_ = tactic;
      step->programmatic_ = options.programmatic;
      break;
    }
    case LaunchKind::kLibrary: {
      auto it = libraries_.find(family.name());
      if (it == libraries_.end()) {
        return absl::FailedPreconditionError(
            absl::StrCat(step->label_, ": no library launches family ", family.name()));
      }
      absl::StatusOr<std::unique_ptr<LibraryStep>> library =
          it->second->PrepareStep(region, tactic);
      TP_RETURN_IF_ERROR(Prefixed(step->label_, library.status()));
      step->library_ = *std::move(library);
      break;
    }
  }
  return step;
}

std::unique_ptr<PreparedStep> StepLauncher::PrepareKernels(std::string label,
                                                           KernelInstance instance,
                                                           std::vector<KernelLaunch> launches,
                                                           const StepOptions& options) {
  std::unique_ptr<PreparedStep> step(new PreparedStep());
  step->label_ = std::move(label);
  step->kind_ = LaunchKind::kTemplates;
  step->loader_ = loader_.get();
  step->instance_ = std::move(instance);
  step->programmatic_ = options.programmatic;
  step->launches_.push_back(std::move(launches));
  step->bindings_ = 1;
  return step;
}

absl::Status StepLauncher::Load(const std::vector<PreparedStep*>& steps) {
  std::set<KernelInstance> unique;
  for (const PreparedStep* s : steps) {
    if (s->instance() != nullptr) unique.insert(*s->instance());
  }
  for (const absl::Status& s : Precompile({unique.begin(), unique.end()})) TP_RETURN_IF_ERROR(s);
  for (PreparedStep* s : steps) {
    if (s->instance() == nullptr) continue;
    absl::StatusOr<LoadedInstance*> loaded = loader_->Load(s->instance_);
    TP_RETURN_IF_ERROR(Prefixed(s->label_, loaded.status()));
    s->loaded_ = *loaded;
  }
  return absl::OkStatus();
}

std::vector<absl::Status> StepLauncher::Precompile(
    const std::vector<KernelInstance>& instances) const {
  return loader_->Precompile(instances);
}

absl::StatusOr<std::vector<Tactic>> StepLauncher::LibraryConfigs(const KernelFamily& family,
                                                                 const BoundRegion& region,
                                                                 const Tactic& base, int limit) {
  auto it = libraries_.find(family.name());
  if (family.launch_kind() != LaunchKind::kLibrary || it == libraries_.end()) {
    return std::vector<Tactic>{};
  }
  return it->second->Configs(region, base, limit);
}

GraphExec::~GraphExec() {
  if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
}

GraphExec& GraphExec::operator=(GraphExec&& other) noexcept {
  if (this != &other) {
    if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
    exec_ = other.exec_;
    other.exec_ = nullptr;
  }
  return *this;
}

absl::Status GraphExec::Launch(cudaStream_t stream) const {
  TP_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(exec_, stream));
  return absl::OkStatus();
}

absl::StatusOr<GraphExec> CaptureGraph(cudaStream_t stream,
                                       absl::FunctionRef<absl::Status()> enqueue) {
  TP_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const absl::Status enqueued = enqueue();
  cudaGraph_t graph = nullptr;
  const absl::Status ended = TP_CUDA_STATUS(cudaStreamEndCapture(stream, &graph));
  TP_RETURN_IF_ERROR(enqueued);
  TP_RETURN_IF_ERROR(ended);
  cudaGraphExec_t exec = nullptr;
  const absl::Status inst = TP_CUDA_STATUS(cudaGraphInstantiate(&exec, graph, 0));
  cudaGraphDestroy(graph);
  TP_RETURN_IF_ERROR(inst);
  return GraphExec(exec);
}

}  // namespace tileplan::kernels
