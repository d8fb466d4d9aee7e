#include "kernels/step/step_launcher.h"

#include <algorithm>
#include <cstddef>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/align.h"
#include "base/status_macros.h"
#include "device/cuda_status.h"
#include "kernels/cublaslt/cublaslt_runner.h"
#include "kernels/launch/persistent_params.h"

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
        TP_RETURN_IF_ERROR(Prefixed(label_, loader_->Launch(*loaded_, launch,
                                                            {.stream = stream,
                                                             .programmatic = programmatic_,
                                                             .cooperative = cooperative_})));
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
  if (options.communicator != nullptr) {
    l->nccl_ = std::make_unique<NcclLauncher>(*options.communicator, *l->loader_);
  }
  // The library launchers, one line each.
  for (LibraryLauncher* library : {static_cast<LibraryLauncher*>(l->cublaslt_.get()),
                                   static_cast<LibraryLauncher*>(l->nccl_.get())}) {
    if (library != nullptr) l->libraries_.emplace(std::string(library->family()), library);
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

absl::StatusOr<std::unique_ptr<PreparedStep>> StepLauncher::PreparePersistent(
    const PersistentSpec& spec, std::string label) {
  if (spec.stages.empty() || spec.blocks <= 0 || spec.threads <= 0 || spec.threads % 32 != 0 ||
      spec.min_blocks_per_sm <= 0 || spec.prefetch_tasks < 0 || spec.stream_slots < 0 ||
      spec.stream_slots > kMaxStreamSlots ||
      (spec.stream_slots > 0 &&
       (spec.stream_slot_bytes <= 0 || spec.stream_slot_bytes % kStreamAlignment != 0))) {
    return absl::InvalidArgumentError(absl::StrCat(
        label, ": a persistent kernel needs stages, blocks, threads (a multiple of 32), ",
        "at least one block per SM, no negative prefetch, and at most ", kMaxStreamSlots,
        " stream slots of a positive multiple of ", kStreamAlignment, " bytes"));
  }
  std::vector<std::pair<const KernelInstance*, int>> kernels;
  std::vector<PersistentStage> stages;
  std::vector<std::vector<PersistentTask>> per_block(static_cast<size_t>(spec.blocks));
  std::string blob;
  int64_t shared = 0;
  for (size_t s = 0; s < spec.stages.size(); ++s) {
    const PersistentSpec::Stage& st = spec.stages[s];
    const std::string where = absl::StrCat(label, ": stage ", s);
    const PreparedStep* step = st.step;
    if (step == nullptr || step->kind_ != LaunchKind::kTemplates || step->launches_.empty() ||
        st.launch < 0 || st.launch >= static_cast<int>(step->launches_[0].size())) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": not a bound template step with launch ", st.launch));
    }
    if (step->family_ == nullptr || !step->family_->persistent_tasks()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " (", step->label_, "): its family has no persistent tasks"));
    }
    const KernelLaunch& launch = step->launches_[0][static_cast<size_t>(st.launch)];
    if (launch.cluster != std::array<int64_t, 3>{1, 1, 1}) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " (", step->label_, "): it runs in thread-block clusters, which ",
                       "the persistent kernel's tasks cannot"));
    }
    if (launch.block[0] != spec.threads || launch.block[1] != 1 || launch.block[2] != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " (", step->label_, "): its block is ", launch.block[0], "x",
                       launch.block[1], "x", launch.block[2], ", not the kernel's ", spec.threads));
    }
    if (st.wait >= static_cast<int>(s) || st.wait < -1) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": waits for stage ", st.wait, ", which is not an earlier one"));
    }
    kernels.emplace_back(&step->instance_, launch.kernel);
    const int64_t tasks = launch.grid[0] * launch.grid[1] * launch.grid[2];
    PersistentStage record{};
    record.wait = st.wait;
    record.tasks = static_cast<unsigned int>(tasks);
    record.wait_tasks = st.wait >= 0 ? stages[static_cast<size_t>(st.wait)].tasks : 0u;
    record.grid_x = static_cast<unsigned int>(launch.grid[0]);
    record.grid_y = static_cast<unsigned int>(launch.grid[1]);
    record.grid_z = static_cast<unsigned int>(launch.grid[2]);
    record.params = static_cast<long long>(blob.size());
    blob.append(static_cast<const char*>(launch.params.data()), launch.params.size());
    blob.resize(static_cast<size_t>(AlignUp(static_cast<int64_t>(blob.size()), 16)), '\0');
    stages.push_back(record);
    for (int64_t t = 0; t < tasks; ++t) {
      per_block[static_cast<size_t>((st.first_block + t) % spec.blocks)].push_back(
          {static_cast<int>(s), static_cast<unsigned int>(t)});
    }
    shared = std::max(shared, launch.dynamic_shared_memory_bytes);
  }
  PersistentInstance instance =
      PersistentKernelInstance(spec.threads, spec.min_blocks_per_sm, spec.stream_slots, kernels);
  for (size_t s = 0; s < stages.size(); ++s) stages[s].op = instance.stage_ops[s];
  std::vector<PersistentTask> tasks;
  std::vector<int> block_tasks = {0};
  for (const std::vector<PersistentTask>& b : per_block) {
    tasks.insert(tasks.end(), b.begin(), b.end());
    block_tasks.push_back(static_cast<int>(tasks.size()));
  }

  // One buffer: stages | tasks | block_tasks | parameters | done[stages], epoch, finished.
  const int64_t stages_at = 0;
  const int64_t tasks_at =
      AlignUp(stages_at + static_cast<int64_t>(stages.size() * sizeof(PersistentStage)), 256);
  const int64_t blocks_at =
      AlignUp(tasks_at + static_cast<int64_t>(tasks.size() * sizeof(PersistentTask)), 256);
  const int64_t params_at =
      AlignUp(blocks_at + static_cast<int64_t>(block_tasks.size() * sizeof(int)), 256);
  const int64_t counters_at = AlignUp(params_at + static_cast<int64_t>(blob.size()), 256);
  const int64_t counters = static_cast<int64_t>(stages.size()) + 2;
  const int64_t trace_at = AlignUp(counters_at + counters * 4, 256);
  const int64_t bytes =
      spec.trace ? trace_at + static_cast<int64_t>(tasks.size()) * 4 * 8 : counters_at + counters * 4;
  TP_ASSIGN_OR_RETURN(device::DeviceBuffer buffer, device::DeviceBuffer::Allocate(*device_, bytes));
  TP_RETURN_IF_ERROR(buffer.Fill(0));
  TP_RETURN_IF_ERROR(buffer.CopyFromHost(
      stages.data(), static_cast<int64_t>(stages.size() * sizeof(PersistentStage)), stages_at));
  TP_RETURN_IF_ERROR(buffer.CopyFromHost(
      tasks.data(), static_cast<int64_t>(tasks.size() * sizeof(PersistentTask)), tasks_at));
  TP_RETURN_IF_ERROR(buffer.CopyFromHost(
      block_tasks.data(), static_cast<int64_t>(block_tasks.size() * sizeof(int)), blocks_at));
  TP_RETURN_IF_ERROR(
      buffer.CopyFromHost(blob.data(), static_cast<int64_t>(blob.size()), params_at));
  std::byte* base = static_cast<std::byte*>(buffer.data());
  auto* counter_base = reinterpret_cast<unsigned int*>(base + counters_at);
  PersistentParams params{};
  params.stages = base + stages_at;
  params.tasks = base + tasks_at;
  params.block_tasks = reinterpret_cast<const int*>(base + blocks_at);
  params.params = base + params_at;
  params.done = counter_base;
  params.epoch = counter_base + stages.size();
  params.finished = counter_base + stages.size() + 1;
  params.prefetch_tasks = spec.prefetch_tasks;
  const int64_t ring_offset = AlignUp(shared, kStreamAlignment);
  params.ring_offset = static_cast<int>(ring_offset);
  params.slot_bytes = static_cast<unsigned int>(spec.stream_slots > 0 ? spec.stream_slot_bytes : 0);
  params.trace = spec.trace ? reinterpret_cast<unsigned long long*>(base + trace_at) : nullptr;

  KernelLaunch launch;
  launch.grid = {spec.blocks, 1, 1};
  launch.block = {spec.threads, 1, 1};
  launch.dynamic_shared_memory_bytes =
      spec.stream_slots > 0 ? ring_offset + spec.stream_slots * spec.stream_slot_bytes : shared;
  launch.params = KernelParams::Of(params);
  std::unique_ptr<PreparedStep> step =
      PrepareKernels(std::move(label), std::move(instance.instance), {std::move(launch)}, {});
  step->cooperative_ = true;
  step->schedule_ = std::move(buffer);
  if (spec.trace) {
    step->trace_offset_ = trace_at;
    for (size_t b = 0; b + 1 < block_tasks.size(); ++b) {
      for (int t = block_tasks[b]; t < block_tasks[b + 1]; ++t) {
        step->traced_.emplace_back(tasks[static_cast<size_t>(t)].stage, static_cast<int>(b));
      }
    }
  }
  return step;
}

absl::StatusOr<std::vector<PreparedStep::TaskTrace>> PreparedStep::PersistentTrace() const {
  if (trace_offset_ < 0 || !schedule_.has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat(label_, ": not a persistent kernel prepared with a trace"));
  }
  std::vector<uint64_t> raw(traced_.size() * 4);
  TP_RETURN_IF_ERROR(schedule_->CopyToHost(raw.data(), static_cast<int64_t>(raw.size() * 8),
                                           trace_offset_));
  std::vector<TaskTrace> out(traced_.size());
  for (size_t i = 0; i < traced_.size(); ++i) {
    out[i] = {traced_[i].first, traced_[i].second, raw[4 * i], raw[4 * i + 1], raw[4 * i + 2],
              raw[4 * i + 3]};
  }
  return out;
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
