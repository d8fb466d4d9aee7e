#include "runtime/gpu/gpu_runtime.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "device/cuda_status.h"
#include "device/device_buffer.h"
#include "device/event_timer.h"
#include "kernels/step/step_launcher.h"
#include "runtime/gpu/device_weights.h"
#include "runtime/gpu/program.h"

namespace tileplan::runtime::gpu {
namespace {

namespace pp = planner::proto;

using Clock = std::chrono::steady_clock;
double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

struct GpuRuntime::Impl {
  const device::Device* device = nullptr;
  GpuOptions options;
  pp::ExecutionPlan plan;
  std::unique_ptr<kernels::StepLauncher> launcher;
  std::unique_ptr<DeviceWeights> weights;
  device::DeviceBuffer state;
  device::DeviceBuffer arena;
  device::DeviceBuffer aux;                 // error word, step counter, history
  PlanMemory memory;                        // into state, arena, aux and weights
  std::unique_ptr<ProgramBuilder> builder;  // owns the RoPE tables the programs read
  cudaStream_t stream = nullptr;
  std::vector<std::unique_ptr<Program>> programs;
  const Program* active = nullptr;  // the program whose counters hold in the arena
  // Each prompt's last logits between a prefill and the decode program's argmax in
  // EnqueueGenerate ([max decode batch, V]; the two programs' arena buffers may overlap).
  device::DeviceBuffer first_logits;
  // Pinned host memory through which host inputs reach the device: an asynchronous copy
  // from pageable memory may return before it has read its source, so host inputs are
  // packed here first. `ready` is recorded after the copies out of it; the next upload
  // waits for it before writing.
  std::byte* staging = nullptr;
  size_t staging_bytes = 0;
  cudaEvent_t staging_ready = nullptr;

  ~Impl() {
    programs.clear();  // graphs and steps before the launcher they refer to
    builder.reset();
    launcher.reset();
    if (staging_ready != nullptr) cudaEventSynchronize(staging_ready);
    if (staging != nullptr) cudaFreeHost(staging);
    if (staging_ready != nullptr) cudaEventDestroy(staging_ready);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }

  // Allocates what `layout` asks (nothing when it cannot all fit) and the cuBLASLt workspace,
  // uploads or generates the weights.
  absl::Status Allocate(PlanLayout& layout, const models::Checkpoint* checkpoint,
                        GpuRuntimeInfo& info);
  // Runs every phase once from the host (first launches load lazily and raise shared-memory
  // limits, which must not happen inside a capture), then captures the graphs.
  absl::Status WarmUpAndCapture();

  absl::Status EnqueueProgram(Program& p, bool greedy, cudaStream_t s) {
    auto run = p.persistent.begin();
    for (size_t i = 0; i < p.steps.size(); ++i) {
      if (run != p.persistent.end() && static_cast<int>(i) == run->first_step) {
        TP_RETURN_IF_ERROR(run->step->Enqueue(0, s));
        i = static_cast<size_t>(run->last_step);
        ++run;
        continue;
      }
      TP_RETURN_IF_ERROR(p.steps[i]->Enqueue(0, s));
    }
    if (greedy) {
      TP_RETURN_IF_ERROR(p.argmax->Enqueue(0, s));
      TP_RETURN_IF_ERROR(p.advance->Enqueue(0, s));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<kernels::GraphExec> Capture(Program& p, bool greedy) {
    return kernels::CaptureGraph(stream, [&] { return EnqueueProgram(p, greedy, stream); });
  }

  // Makes `p` the program the arena serves: its counters are zeroed when another program
  // used the arena last.
  absl::Status Activate(const Program& p, cudaStream_t s) {
    if (active == &p) return absl::OkStatus();
    std::byte* base = static_cast<std::byte*>(arena.data());
    for (const auto& [offset, bytes] : p.counters) {
      TP_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(base + offset, 0, static_cast<size_t>(bytes), s));
    }
    active = &p;
    return absl::OkStatus();
  }

  absl::Status Run(Program& p, cudaStream_t s, bool greedy = false) {
    TP_RETURN_IF_ERROR(Activate(p, s));
    const kernels::GraphExec& exec = greedy ? p.loop_exec : p.exec;
    if (!exec.empty()) return exec.Launch(s);
    return EnqueueProgram(p, greedy, s);
  }

  // One copy of int32 inputs (cudaMemcpy2DAsync's terms, in bytes) and whether its source is
  // host memory.
  struct Copy {
    void* dst;
    size_t dpitch;
    const void* src;
    size_t spitch;
    size_t width;
    size_t height;
    bool host;
  };
  // Enqueues `copies` on `s`, host sources packed into the staging buffer first.
  absl::Status Upload(cudaStream_t s, std::initializer_list<Copy> copies) {
    size_t host_bytes = 0;
    for (const Copy& c : copies) {
      if (c.host) host_bytes += c.width * c.height;
    }
    if (host_bytes > 0) {
      if (staging_ready == nullptr) {
        TP_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&staging_ready, cudaEventDisableTiming));
      } else {
        TP_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(staging_ready));
      }
      if (host_bytes > staging_bytes) {
        if (staging != nullptr) TP_CUDA_RETURN_IF_ERROR(cudaFreeHost(staging));
        staging = nullptr;
        staging_bytes = 0;
        const size_t bytes = std::max<size_t>(host_bytes, 64 << 10);
        TP_CUDA_RETURN_IF_ERROR(cudaMallocHost(reinterpret_cast<void**>(&staging), bytes));
        staging_bytes = bytes;
      }
    }
    std::byte* at = staging;
    for (const Copy& c : copies) {
      const void* src = c.src;
      size_t spitch = c.spitch;
      if (c.host) {
        for (size_t row = 0; row < c.height; ++row) {
          std::memcpy(at + row * c.width, static_cast<const std::byte*>(c.src) + row * c.spitch,
                      c.width);
        }
        src = at;
        spitch = c.width;
        at += c.width * c.height;
      }
      TP_CUDA_RETURN_IF_ERROR(
          cudaMemcpy2DAsync(c.dst, c.dpitch, src, spitch, c.width, c.height, cudaMemcpyDefault, s));
    }
    if (host_bytes > 0) TP_CUDA_RETURN_IF_ERROR(cudaEventRecord(staging_ready, s));
    return absl::OkStatus();
  }

  // Whether `p` is device memory (of this device: InvalidArgument naming `what` for
  // another's) rather than host memory.
  absl::StatusOr<bool> OnDevice(const void* p, absl::string_view what) const {
    cudaPointerAttributes a{};
    TP_CUDA_RETURN_IF_ERROR(cudaPointerGetAttributes(&a, p));
    if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged) return false;
    if (a.device != device->ordinal()) {
      return absl::InvalidArgumentError(absl::StrCat(what, " is memory of device ", a.device,
                                                     "; the runtime is on ", device->Label()));
    }
    return true;
  }

  // Synchronizes `s` and turns a raised error word into an error.
  absl::Status Finish(cudaStream_t s) {
    TP_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));
    int word = 0;
    TP_CUDA_RETURN_IF_ERROR(cudaMemcpy(&word, memory.error, sizeof(int), cudaMemcpyDeviceToHost));
    if (word != 0) {
      TP_CUDA_RETURN_IF_ERROR(cudaMemset(memory.error, 0, sizeof(int)));
      return absl::InvalidArgumentError(absl::StrCat(
          "a token id outside the vocabulary, a position outside the KV cache or an expert id "
          "outside the experts at flat token index ",
          word - 1, " (its embedding row, cache write or expert output was skipped)"));
    }
    return absl::OkStatus();
  }

  absl::Status Finish() { return Finish(stream); }

  absl::Status CompileAll(GpuRuntimeInfo& info) {
    std::vector<kernels::PreparedStep*> steps;
    std::set<kernels::KernelInstance> unique;
    for (auto& p : programs) {
      for (auto& s : p->steps) steps.push_back(s.get());
      for (auto& run : p->persistent) steps.push_back(run.step.get());
      if (p->decode) {
        steps.push_back(p->argmax.get());
        steps.push_back(p->advance.get());
      }
    }
    for (const kernels::PreparedStep* s : steps) {
      if (s->instance() != nullptr) unique.insert(*s->instance());
    }
    info.kernels_compiled = static_cast<int>(unique.size());
    // Compiled in parallel into the disk cache, then loaded.
    const Clock::time_point start = Clock::now();
    TP_RETURN_IF_ERROR(launcher->Load(steps));
    info.compile_seconds = SecondsSince(start);
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<GpuRuntime::StepTime>> Profile(Program& p, int iterations) {
    TP_RETURN_IF_ERROR(Activate(p, stream));
    const size_t n = p.steps.size();
    std::vector<std::vector<double>> ms(n);
    for (int it = 0; it < iterations; ++it) {
      TP_ASSIGN_OR_RETURN(
          const std::vector<double> step_ms,
          device::TimeEach(
              stream, static_cast<int>(n),
              [&](int i) { return p.steps[static_cast<size_t>(i)]->Enqueue(0, stream); },
              [&] { return Finish(); }));
      for (size_t i = 0; i < n; ++i) ms[i].push_back(step_ms[i]);
    }
    std::vector<GpuRuntime::StepTime> out;
    for (size_t i = 0; i < n; ++i) {
      const pp::Step& step = p.phase->steps(static_cast<int>(i));
      std::sort(ms[i].begin(), ms[i].end());
      out.push_back({static_cast<int>(i), step.name(), step.kind(), step.tactic().family(),
                     ms[i][ms[i].size() / 2]});
    }
    return out;
  }

  absl::StatusOr<Program*> PrefillProgram(int64_t batch, int64_t tokens) {
    Program* best = nullptr;
    std::vector<std::string> buckets;
    for (auto& p : programs) {
      if (p->decode) continue;
      buckets.push_back(absl::StrCat(p->tokens));
      if (p->batch == batch && p->tokens >= tokens &&
          (best == nullptr || p->tokens < best->tokens)) {
        best = p.get();
      }
    }
    if (best == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "no prefill bucket holds ", tokens, " tokens for batch ", batch, " (the plan has batch ",
          plan.options().prefill_batch(), " and buckets T = ", absl::StrJoin(buckets, ", "),
          "; plan with --prefill including ", tokens, ")"));
    }
    return best;
  }

  absl::StatusOr<Program*> DecodeProgram(int64_t batch) {
    std::vector<std::string> buckets;
    for (auto& p : programs) {
      if (!p->decode) continue;
      if (p->batch == batch) return p.get();
      buckets.push_back(absl::StrCat(p->batch));
    }
    return absl::InvalidArgumentError(
        absl::StrCat("no decode bucket for batch ", batch,
                     " (the plan has B = ", absl::StrJoin(buckets, ", "), ")"));
  }

  // Resets the cache and enqueues the prompts [batch, t] (`host`: in host memory), padded to
  // the program's T, as its inputs. A prompt of t < T tokens fills a bucket of T with padding
  // (token 0) at positions t..T-1, whose cache rows later steps overwrite before anything
  // reads them. The padding follows the prompt, or, when the plan keeps only the last token's
  // logits, precedes it so the last token is the bucket's last (attention is causal by
  // position, not by order in the bucket).
  absl::Status WritePrefillInputs(cudaStream_t s, Program& p, const int32_t* tokens, bool host,
                                  int64_t batch, int64_t t) {
    const int64_t pad = p.tokens - t;
    std::vector<int32_t> pos(static_cast<size_t>(p.batch * p.tokens));
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t i = 0; i < p.tokens; ++i) {
        // j: the prompt token at bucket slot i, or -1 for padding.
        const int64_t j = p.last_token_logits ? i - pad : (i < t ? i : -1);
        pos[static_cast<size_t>(b * p.tokens + i)] =
            static_cast<int32_t>(j >= 0 ? j : (p.last_token_logits ? t + i : i));
      }
    }
    TP_RETURN_IF_ERROR(Activate(p, s));
    TP_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(state.data(), 0, static_cast<size_t>(state.size()), s));
    if (pad > 0) {
      TP_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(p.tokens_in, 0, pos.size() * 4, s));
    }
    const size_t row = static_cast<size_t>(t) * 4;
    return Upload(
        s, {{p.tokens_in + (p.last_token_logits ? pad : 0), static_cast<size_t>(p.tokens) * 4,
             tokens, row, row, static_cast<size_t>(batch), host},
            {p.positions_in, pos.size() * 4, pos.data(), pos.size() * 4, pos.size() * 4, 1, true}});
  }

  // Enqueues a decode step's inputs: tokens and positions [batch] (`host_*`: in host memory).
  absl::Status WriteDecodeInputs(cudaStream_t s, Program& p, const int32_t* tokens,
                                 bool host_tokens, const int32_t* positions, bool host_positions,
                                 int64_t batch) {
    TP_RETURN_IF_ERROR(Activate(p, s));
    const size_t bytes = static_cast<size_t>(batch) * 4;
    return Upload(s, {{p.tokens_in, bytes, tokens, bytes, bytes, 1, host_tokens},
                      {p.positions_in, bytes, positions, bytes, bytes, 1, host_positions}});
  }

  absl::Status CheckPrompts(int64_t tokens, int64_t batch) {
    if (batch <= 0 || tokens <= 0 || tokens % batch != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(tokens, " prompt tokens are not ", "a non-zero multiple of batch ", batch));
    }
    return absl::OkStatus();
  }

  // The argument checks every prefill entry shares: `t` tokens per sequence of `batch`, the
  // program that runs them.
  absl::StatusOr<Program*> CheckedPrefill(const int32_t* tokens, int64_t batch, int64_t t) {
    if (tokens == nullptr) return absl::InvalidArgumentError("the prompt tokens are NULL");
    if (batch <= 0 || t <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("a prefill of batch ", batch, " and ", t, " tokens per sequence"));
    }
    return PrefillProgram(batch, t);
  }

  // Enqueues the prefill of the checked prompts and, with `logits`, the copy of its logits.
  absl::Status EnqueuePrefill(cudaStream_t s, Program& p, const int32_t* tokens, bool host_tokens,
                              int64_t batch, int64_t t, float* logits) {
    TP_RETURN_IF_ERROR(WritePrefillInputs(s, p, tokens, host_tokens, batch, t));
    TP_RETURN_IF_ERROR(Run(p, s));
    if (logits == nullptr) return absl::OkStatus();
    const size_t vocab = static_cast<size_t>(Vocab());
    // Rows kept per sequence: t, or 1 when the plan keeps only the last token's logits.
    const size_t kept = p.last_token_logits ? 1 : static_cast<size_t>(t);
    const size_t rows = p.last_token_logits ? 1 : static_cast<size_t>(p.tokens);
    TP_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(logits, kept * vocab * 4, p.logits, rows * vocab * 4,
                                              kept * vocab * 4, static_cast<size_t>(batch),
                                              cudaMemcpyDefault, s));
    return absl::OkStatus();
  }

  int64_t Vocab() const {
    const Program& p = *programs.front();
    return p.bound->shape(p.graph->outputs()[0]).back();
  }

  absl::Status TimedRuns(Program& p, bool greedy, int warmup, int iterations,
                         std::vector<double>& out) {
    for (int i = 0; i < warmup; ++i) TP_RETURN_IF_ERROR(Run(p, stream, greedy));
    TP_ASSIGN_OR_RETURN(const std::vector<double> ms,
                        device::TimeEach(
                            stream, iterations, [&](int) { return Run(p, stream, greedy); },
                            [&] { return Finish(); }));
    out.insert(out.end(), ms.begin(), ms.end());
    return absl::OkStatus();
  }
};

absl::Status ParseProgrammaticLaunch(absl::string_view text, GpuOptions& options) {
  using P = GpuOptions::ProgrammaticLaunch;
  if (text == "never") {
    options.programmatic_launch = P::kNever;
  } else if (text == "decode") {
    options.programmatic_launch = P::kDecode;
  } else if (text == "always") {
    options.programmatic_launch = P::kAlways;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("programmatic dependent launch '", text,
                                                   "' is not one of never, decode, always"));
  }
  return absl::OkStatus();
}

GpuRuntime::GpuRuntime(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GpuRuntime::~GpuRuntime() = default;

absl::Status GpuRuntime::Impl::Allocate(PlanLayout& layout, const models::Checkpoint* checkpoint,
                                        GpuRuntimeInfo& info) {
  memory.history_capacity = std::max<int64_t>(1, plan.options().max_context());
  const int64_t aux_bytes = 256 + memory.history_capacity * layout.max_decode_batch * 4;
  const int64_t weight_bytes = layout.weights->total_bytes();
  const int64_t total = weight_bytes + layout.state_bytes + layout.arena_bytes +
                        options.cublaslt_workspace_bytes + aux_bytes;
  TP_ASSIGN_OR_RETURN(const device::Device::MemoryInfo free, device->GetMemoryInfo());
  if (total > free.free_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the plan needs ", total, " bytes on ", device->Label(), " (weights ", weight_bytes,
        ", KV cache ", layout.state_bytes, ", arena ", layout.arena_bytes, ", cuBLASLt workspace ",
        options.cublaslt_workspace_bytes, ", other ", aux_bytes, ") but only ", free.free_bytes,
        " of ", free.total_bytes, " bytes are free"));
  }

  TP_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  kernels::StepLauncher::Options launcher_options;
  launcher_options.cublaslt_workspace_bytes = options.cublaslt_workspace_bytes;
  launcher_options.communicator = options.communicator;
  TP_ASSIGN_OR_RETURN(launcher,
                      kernels::StepLauncher::Create(*device, std::move(launcher_options)));

  const Clock::time_point weights_start = Clock::now();
  if (checkpoint != nullptr) {
    TP_ASSIGN_OR_RETURN(weights,
                        DeviceWeights::Load(*device, *std::move(layout.weights), *checkpoint));
  } else {
    TP_ASSIGN_OR_RETURN(weights, DeviceWeights::Random(*device, *std::move(layout.weights),
                                                       launcher->loader(), options.seed));
  }
  info.weights_seconds = SecondsSince(weights_start);
  TP_ASSIGN_OR_RETURN(state, device::DeviceBuffer::Allocate(*device, layout.state_bytes));
  TP_ASSIGN_OR_RETURN(arena, device::DeviceBuffer::Allocate(*device, layout.arena_bytes));
  TP_ASSIGN_OR_RETURN(aux, device::DeviceBuffer::Allocate(*device, aux_bytes));
  TP_RETURN_IF_ERROR(arena.Fill(0));
  TP_RETURN_IF_ERROR(aux.Fill(0));
  memory.arena = &arena;
  memory.state = &state;
  memory.weights = weights.get();
  memory.state_slots = std::move(layout.state_slots);
  memory.error = aux.as<int>();
  memory.step_counter = aux.as<int>() + 1;
  memory.history = reinterpret_cast<int32_t*>(static_cast<std::byte*>(aux.data()) + 256);
  info.weight_bytes = weights->bytes();
  info.state_bytes = layout.state_bytes;
  info.arena_bytes = layout.arena_bytes;
  return absl::OkStatus();
}

absl::Status GpuRuntime::Impl::WarmUpAndCapture() {
  for (auto& p : programs) {
    TP_RETURN_IF_ERROR(Activate(*p, stream));
    // Token 0 at position 0: valid inputs whatever another phase left in the arena.
    const size_t inputs = static_cast<size_t>(p->batch * p->tokens) * sizeof(int32_t);
    TP_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(p->tokens_in, 0, inputs, stream));
    TP_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(p->positions_in, 0, inputs, stream));
    TP_RETURN_IF_ERROR(EnqueueProgram(*p, false, stream));
    if (p->decode) TP_RETURN_IF_ERROR(EnqueueProgram(*p, true, stream));
    TP_RETURN_IF_ERROR(Finish());
  }
  if (options.cuda_graphs) {
    for (auto& p : programs) {
      TP_ASSIGN_OR_RETURN(p->exec, Capture(*p, false));
      if (p->decode) {
        TP_ASSIGN_OR_RETURN(p->loop_exec, Capture(*p, true));
      }
    }
  }
  TP_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(aux.data(), 0, 8, stream));
  TP_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(state.data(), 0, static_cast<size_t>(state.size()), stream));
  TP_RETURN_IF_ERROR(Finish());
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<GpuRuntime>> GpuRuntime::Create(const device::Device& device,
                                                               const pp::ExecutionPlan& plan,
                                                               const models::Checkpoint* checkpoint,
                                                               const GpuOptions& options) {
  const Clock::time_point start = Clock::now();
  if (plan.target().sm() != device.sm()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the plan targets ", plan.target().name(), " (sm_", plan.target().sm(), ") but ",
        device.Label(), " is sm_", device.sm(), "; plan for this device's target"));
  }
  const int64_t ranks = std::max<int64_t>(1, plan.options().tensor_parallel_ranks());
  const device::Communicator* communicator = options.communicator;
  if (ranks > 1 && communicator == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("the plan is rank ", plan.options().tensor_parallel_rank(), " of ", ranks,
                     " tensor-parallel ranks: it runs with a communicator of its ranks "
                     "(GpuOptions::communicator; runtime/gpu/tensor_parallel.h runs every rank)"));
  }
  if (communicator != nullptr && (communicator->ranks() != ranks ||
                                  communicator->rank() != plan.options().tensor_parallel_rank() ||
                                  communicator->ordinal() != device.ordinal())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the communicator is rank ", communicator->rank(), " of ", communicator->ranks(),
        " on device ", communicator->ordinal(), " but the plan is rank ",
        plan.options().tensor_parallel_rank(), " of ", ranks, " on device ", device.ordinal()));
  }
  TP_RETURN_IF_ERROR(device.MakeCurrent());
  auto impl = std::make_unique<Impl>();
  GpuRuntimeInfo info;
  impl->device = &device;
  impl->options = options;
  impl->plan = plan;
  TP_ASSIGN_OR_RETURN(PlanLayout layout, LayOutPlan(impl->plan));
  TP_RETURN_IF_ERROR(impl->Allocate(layout, checkpoint, info));
  impl->builder = std::make_unique<ProgramBuilder>(device, impl->plan, impl->memory,
                                                   *impl->launcher, impl->options);
  for (int i = 0; i < impl->plan.phases_size(); ++i) {
    TP_ASSIGN_OR_RETURN(std::unique_ptr<Program> program,
                        impl->builder->Build(impl->plan.phases(i), std::move(layout.graphs[i])));
    impl->programs.push_back(std::move(program));
  }
  TP_RETURN_IF_ERROR(impl->CompileAll(info));
  for (const auto& p : impl->programs) {
    if (p->decode) {
      TP_ASSIGN_OR_RETURN(impl->first_logits, device::DeviceBuffer::Allocate(
                                                  device, layout.max_decode_batch * impl->Vocab() *
                                                              static_cast<int64_t>(sizeof(float))));
      break;
    }
  }
  std::set<std::string> algos;
  for (auto& p : impl->programs) {
    for (int i = 0; i < p->phase->steps_size(); ++i) {
      const kernels::PreparedStep& s = *p->steps[static_cast<size_t>(i)];
      if (s.kind() == kernels::LaunchKind::kLibrary) {
        algos.insert(
            absl::StrCat(p->phase->name(), " ", p->phase->steps(i).name(), ": ", s.Describe()));
      }
    }
  }
  info.gemm_algos.assign(algos.begin(), algos.end());

  TP_RETURN_IF_ERROR(impl->WarmUpAndCapture());
  info.setup_seconds = SecondsSince(start);
  auto runtime = std::unique_ptr<GpuRuntime>(new GpuRuntime(std::move(impl)));
  runtime->info_ = std::move(info);
  return runtime;
}

int64_t GpuRuntime::vocab_size() const { return impl_->Vocab(); }
int64_t GpuRuntime::max_context() const { return impl_->plan.options().max_context(); }
int64_t GpuRuntime::prefill_batch() const { return impl_->plan.options().prefill_batch(); }

absl::Status GpuRuntime::Reset() {
  TP_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(impl_->state.data(), 0,
                                          static_cast<size_t>(impl_->state.size()), impl_->stream));
  return impl_->Finish();
}

absl::StatusOr<std::vector<float>> GpuRuntime::Prefill(const std::vector<int32_t>& tokens,
                                                       int64_t batch) {
  TP_RETURN_IF_ERROR(impl_->CheckPrompts(static_cast<int64_t>(tokens.size()), batch));
  const int64_t t = static_cast<int64_t>(tokens.size()) / batch;
  TP_ASSIGN_OR_RETURN(Program * p, impl_->CheckedPrefill(tokens.data(), batch, t));
  const int64_t kept = p->last_token_logits ? 1 : t;
  std::vector<float> logits(static_cast<size_t>(batch * kept * vocab_size()));
  TP_RETURN_IF_ERROR(
      impl_->EnqueuePrefill(impl_->stream, *p, tokens.data(), true, batch, t, logits.data()));
  TP_RETURN_IF_ERROR(impl_->Finish());
  return logits;
}

absl::StatusOr<std::vector<float>> GpuRuntime::Decode(const std::vector<int32_t>& tokens,
                                                      const std::vector<int32_t>& positions) {
  if (tokens.empty() || tokens.size() != positions.size()) {
    return absl::InvalidArgumentError(absl::StrCat("decode needs one position per token; got ",
                                                   tokens.size(), " tokens and ", positions.size(),
                                                   " positions"));
  }
  std::vector<float> logits(tokens.size() * static_cast<size_t>(vocab_size()));
  TP_RETURN_IF_ERROR(EnqueueDecode(impl_->stream, tokens.data(), positions.data(),
                                   static_cast<int64_t>(tokens.size()), logits.data()));
  return logits;
}

absl::StatusOr<std::vector<int32_t>> GpuRuntime::Generate(const std::vector<int32_t>& prompts,
                                                          int64_t batch, int new_tokens) {
  TP_RETURN_IF_ERROR(impl_->CheckPrompts(static_cast<int64_t>(prompts.size()), batch));
  const int64_t t = static_cast<int64_t>(prompts.size()) / batch;
  std::vector<int32_t> out(static_cast<size_t>(batch * std::max(new_tokens, 0)));
  TP_RETURN_IF_ERROR(
      EnqueueGenerate(impl_->stream, prompts.data(), batch, t, new_tokens, out.data()));
  return out;
}

absl::Status GpuRuntime::EnqueuePrefill(cudaStream_t stream, const int32_t* tokens, int64_t batch,
                                        int64_t tokens_per_sequence, float* logits) {
  TP_RETURN_IF_ERROR(impl_->device->MakeCurrent());
  TP_ASSIGN_OR_RETURN(Program * p, impl_->CheckedPrefill(tokens, batch, tokens_per_sequence));
  TP_ASSIGN_OR_RETURN(const bool device_tokens, impl_->OnDevice(tokens, "the prompt tokens"));
  bool device_logits = true;
  if (logits != nullptr) {
    TP_ASSIGN_OR_RETURN(device_logits, impl_->OnDevice(logits, "the logits"));
  }
  TP_RETURN_IF_ERROR(impl_->EnqueuePrefill(stream, *p, tokens, !device_tokens, batch,
                                           tokens_per_sequence, logits));
  if (!device_tokens || !device_logits) return impl_->Finish(stream);
  return absl::OkStatus();
}

absl::Status GpuRuntime::EnqueueDecode(cudaStream_t stream, const int32_t* tokens,
                                       const int32_t* positions, int64_t batch, float* logits) {
  TP_RETURN_IF_ERROR(impl_->device->MakeCurrent());
  if (tokens == nullptr || positions == nullptr || logits == nullptr) {
    return absl::InvalidArgumentError("decode: tokens, positions and logits must not be NULL");
  }
  TP_ASSIGN_OR_RETURN(Program * p, impl_->DecodeProgram(batch));
  TP_ASSIGN_OR_RETURN(const bool device_tokens, impl_->OnDevice(tokens, "the tokens"));
  TP_ASSIGN_OR_RETURN(const bool device_positions, impl_->OnDevice(positions, "the positions"));
  TP_ASSIGN_OR_RETURN(const bool device_logits, impl_->OnDevice(logits, "the logits"));
  if (!device_positions) {
    for (int64_t b = 0; b < batch; ++b) {
      if (positions[b] < 0 || positions[b] >= max_context()) {
        return absl::InvalidArgumentError(absl::StrCat("position ", positions[b],
                                                       " is outside the KV cache of ",
                                                       max_context(), " rows per sequence"));
      }
    }
  }
  TP_RETURN_IF_ERROR(impl_->WriteDecodeInputs(stream, *p, tokens, !device_tokens, positions,
                                              !device_positions, batch));
  TP_RETURN_IF_ERROR(impl_->Run(*p, stream));
  TP_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(logits, p->logits,
                                          static_cast<size_t>(batch * vocab_size()) * sizeof(float),
                                          cudaMemcpyDefault, stream));
  if (!device_tokens || !device_positions || !device_logits) return impl_->Finish(stream);
  return absl::OkStatus();
}

absl::Status GpuRuntime::EnqueueGenerate(cudaStream_t stream, const int32_t* prompts, int64_t batch,
                                         int64_t prompt_tokens, int new_tokens, int32_t* out) {
  TP_RETURN_IF_ERROR(impl_->device->MakeCurrent());
  const int64_t t = prompt_tokens;
  TP_ASSIGN_OR_RETURN(Program * prefill, impl_->CheckedPrefill(prompts, batch, t));
  if (out == nullptr) return absl::InvalidArgumentError("generate: out must not be NULL");
  if (new_tokens < 1) {
    return absl::InvalidArgumentError(absl::StrCat("new_tokens is ", new_tokens, "; at least 1"));
  }
  if (t + new_tokens - 1 > max_context()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a prompt of ", t, " tokens and ", new_tokens, " new tokens need ",
                     t + new_tokens - 1, " KV-cache rows per sequence; the cache has ",
                     max_context(), " (plan with a larger --max-context)"));
  }
  TP_ASSIGN_OR_RETURN(Program * decode, impl_->DecodeProgram(batch));
  TP_ASSIGN_OR_RETURN(const bool device_prompts, impl_->OnDevice(prompts, "the prompt tokens"));
  TP_ASSIGN_OR_RETURN(const bool device_out, impl_->OnDevice(out, "the output tokens"));
  Program& d = *decode;
  const size_t vocab = static_cast<size_t>(vocab_size());
  const size_t b = static_cast<size_t>(batch);

  TP_RETURN_IF_ERROR(
      impl_->EnqueuePrefill(stream, *prefill, prompts, !device_prompts, batch, t, nullptr));
  // Each prompt's last logits, through a buffer of their own (the two programs' arena
  // buffers may overlap), into the decode program's logits; its argmax is the first token.
  const size_t last_row = prefill->last_token_logits ? 0 : static_cast<size_t>(t - 1);
  const size_t rows = prefill->last_token_logits ? 1 : static_cast<size_t>(prefill->tokens);
  float* first = impl_->first_logits.as<float>();
  TP_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(first, vocab * 4, prefill->logits + last_row * vocab,
                                            rows * vocab * 4, vocab * 4, b,
                                            cudaMemcpyDeviceToDevice, stream));
  TP_RETURN_IF_ERROR(impl_->Activate(d, stream));
  TP_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(d.logits, first, b * vocab * 4, cudaMemcpyDeviceToDevice, stream));
  // decode_advance records the first token as step 0 and moves the positions to t.
  const std::vector<int32_t> positions(b, static_cast<int32_t>(t - 1));
  TP_RETURN_IF_ERROR(
      impl_->Upload(stream, {{d.positions_in, b * 4, positions.data(), b * 4, b * 4, 1, true}}));
  TP_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(impl_->memory.step_counter, 0, sizeof(int), stream));
  TP_RETURN_IF_ERROR(d.argmax->Enqueue(0, stream));
  TP_RETURN_IF_ERROR(d.advance->Enqueue(0, stream));
  for (int i = 1; i < new_tokens; ++i) TP_RETURN_IF_ERROR(impl_->Run(d, stream, /*greedy=*/true));
  // history is [step, batch]; out is [batch, new_tokens].
  const size_t n = static_cast<size_t>(new_tokens);
  for (size_t s = 0; s < b; ++s) {
    TP_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(out + s * n, 4, impl_->memory.history + s, b * 4, 4,
                                              n, cudaMemcpyDefault, stream));
  }
  if (!device_prompts || !device_out) return impl_->Finish(stream);
  return absl::OkStatus();
}

absl::Status GpuRuntime::Synchronize(cudaStream_t stream) {
  TP_RETURN_IF_ERROR(impl_->device->MakeCurrent());
  return impl_->Finish(stream);
}

absl::StatusOr<std::vector<double>> GpuRuntime::TimePrefill(const std::vector<int32_t>& tokens,
                                                            int64_t batch, int warmup,
                                                            int iterations) {
  TP_RETURN_IF_ERROR(impl_->CheckPrompts(static_cast<int64_t>(tokens.size()), batch));
  const int64_t t = static_cast<int64_t>(tokens.size()) / batch;
  TP_ASSIGN_OR_RETURN(Program * p, impl_->CheckedPrefill(tokens.data(), batch, t));
  TP_RETURN_IF_ERROR(impl_->WritePrefillInputs(impl_->stream, *p, tokens.data(), true, batch, t));
  TP_RETURN_IF_ERROR(impl_->Finish());
  std::vector<double> ms;
  TP_RETURN_IF_ERROR(impl_->TimedRuns(*p, false, warmup, iterations, ms));
  return ms;
}

absl::StatusOr<std::vector<double>> GpuRuntime::TimeDecode(int64_t batch, int64_t context,
                                                           int warmup, int iterations) {
  if (context < 1 || context > max_context()) {
    return absl::InvalidArgumentError(absl::StrCat("decode context ", context, " is outside [1, ",
                                                   max_context(), "], the KV cache's rows"));
  }
  TP_ASSIGN_OR_RETURN(Program * p, impl_->DecodeProgram(batch));
  const std::vector<int32_t> tokens(static_cast<size_t>(batch), 1);
  const std::vector<int32_t> positions(static_cast<size_t>(batch),
                                       static_cast<int32_t>(context - 1));
  TP_RETURN_IF_ERROR(impl_->WriteDecodeInputs(impl_->stream, *p, tokens.data(), true,
                                              positions.data(), true, batch));
  TP_RETURN_IF_ERROR(impl_->Finish());
  std::vector<double> ms;
  TP_RETURN_IF_ERROR(impl_->TimedRuns(*p, false, warmup, iterations, ms));
  return ms;
}

absl::StatusOr<std::vector<GpuRuntime::StepTime>> GpuRuntime::ProfilePrefill(int64_t batch,
                                                                             int64_t tokens,
                                                                             int iterations) {
  TP_ASSIGN_OR_RETURN(Program * p, impl_->PrefillProgram(batch, tokens));
  return impl_->Profile(*p, std::max(1, iterations));
}

absl::StatusOr<std::vector<GpuRuntime::StepTime>> GpuRuntime::ProfileDecode(int64_t batch,
                                                                            int iterations) {
  TP_ASSIGN_OR_RETURN(Program * p, impl_->DecodeProgram(batch));
  return impl_->Profile(*p, std::max(1, iterations));
}

absl::StatusOr<std::vector<GpuRuntime::StageTrace>> GpuRuntime::PersistentDecodeTrace(
    int64_t batch) {
  TP_ASSIGN_OR_RETURN(Program * p, impl_->DecodeProgram(batch));
  if (p->persistent.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(p->phase->name(), " has no persistent run to trace"));
  }
  auto median = [](std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::vector<StageTrace> rows;
  for (size_t r = 0; r < p->persistent.size(); ++r) {
    TP_ASSIGN_OR_RETURN(const std::vector<kernels::PreparedStep::TaskTrace> tasks,
                        p->persistent[r].step->PersistentTrace());
    const planner::proto::PersistentRun& run = p->phase->persistent(static_cast<int>(r));
    const size_t stages = static_cast<size_t>(run.stages_size());
    std::vector<uint64_t> first_ready(stages, UINT64_MAX);
    // The task released last in each stage: its release ends the stage.
    std::vector<const kernels::PreparedStep::TaskTrace*> last(stages, nullptr);
    auto last_release = [&](size_t s) -> uint64_t {
      return last[s] != nullptr ? last[s]->released : 0;
    };
    std::vector<std::vector<double>> tile_wait(stages), run_us(stages);
    uint64_t start = UINT64_MAX;
    // Microseconds from timer reading `from` to `to` (negative where `to` is earlier).
    auto micros = [](uint64_t from, uint64_t to) {
      return 1e-3 * (static_cast<double>(to) - static_cast<double>(from));
    };
    for (const kernels::PreparedStep::TaskTrace& t : tasks) {
      const size_t s = static_cast<size_t>(t.stage);
      if (s >= stages) return absl::InternalError("a traced task of an unknown stage");
      start = std::min(start, t.reached);
      first_ready[s] = std::min(first_ready[s], t.ready);
      if (last[s] == nullptr || t.released > last[s]->released) last[s] = &t;
      tile_wait[s].push_back(micros(t.ready, t.landed));
      run_us[s].push_back(micros(t.landed, t.released));
    }
    for (size_t s = 0; s < stages; ++s) {
      const uint64_t before = s == 0 ? start : last_release(s - 1);
      const planner::proto::Step& step = p->phase->steps(run.stages(static_cast<int>(s)).step());
      StageTrace row;
      row.step = run.stages(static_cast<int>(s)).step();
      row.name = step.name();
      row.kind = step.kind();
      row.tasks = run.stages(static_cast<int>(s)).tasks();
      row.span_us = micros(before, last_release(s));
      row.handover_us = micros(before, first_ready[s]);
      row.tile_wait_us = median(tile_wait[s]);
      row.run_us = median(run_us[s]);
      if (last[s] != nullptr) {
        row.last_ready_us = micros(before, last[s]->ready);
        row.last_run_us = micros(last[s]->landed, last[s]->released);
      }
      rows.push_back(std::move(row));
    }
  }
  return rows;
}

}  // namespace tileplan::runtime::gpu
