#include "runtime/gpu/gpu_runtime.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
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

// Index of the largest element (the first of equal ones).
int32_t ArgMax(const float* v, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (v[i] > v[best]) best = i;
  }
  return static_cast<int32_t>(best);
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

  ~Impl() {
    programs.clear();  // graphs and steps before the launcher they refer to
    builder.reset();
    launcher.reset();
    if (stream != nullptr) cudaStreamDestroy(stream);
  }

  // Allocates what `layout` asks (nothing when it cannot all fit) and the cuBLASLt workspace,
  // uploads or generates the weights.
  absl::Status Allocate(PlanLayout& layout, const models::Checkpoint* checkpoint,
                        GpuRuntimeInfo& info);
  // Runs every phase once from the host (first launches load lazily and raise shared-memory
  // limits, which must not happen inside a capture), then captures the graphs.
  absl::Status WarmUpAndCapture();

  absl::Status EnqueueProgram(Program& p, bool greedy) {
    for (auto& s : p.steps) TP_RETURN_IF_ERROR(s->Enqueue(0, stream));
    if (greedy) {
      TP_RETURN_IF_ERROR(p.argmax->Enqueue(0, stream));
      TP_RETURN_IF_ERROR(p.advance->Enqueue(0, stream));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<kernels::GraphExec> Capture(Program& p, bool greedy) {
    return kernels::CaptureGraph(stream, [&] { return EnqueueProgram(p, greedy); });
  }

  // Makes `p` the program the arena serves: its counters are zeroed when another program
  // used the arena last.
  absl::Status Activate(const Program& p) {
    if (active == &p) return absl::OkStatus();
    std::byte* base = static_cast<std::byte*>(arena.data());
    for (const auto& [offset, bytes] : p.counters) {
      TP_CUDA_RETURN_IF_ERROR(
          cudaMemsetAsync(base + offset, 0, static_cast<size_t>(bytes), stream));
    }
    active = &p;
    return absl::OkStatus();
  }

  absl::Status Run(Program& p, bool greedy = false) {
    TP_RETURN_IF_ERROR(Activate(p));
    const kernels::GraphExec& exec = greedy ? p.loop_exec : p.exec;
    if (!exec.empty()) return exec.Launch(stream);
    return EnqueueProgram(p, greedy);
  }

  // Synchronizes and turns a raised error word into an error.
  absl::Status Finish() {
    TP_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
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

  absl::Status CompileAll(GpuRuntimeInfo& info) {
    std::vector<kernels::PreparedStep*> steps;
    std::set<kernels::KernelInstance> unique;
    for (auto& p : programs) {
      for (auto& s : p->steps) steps.push_back(s.get());
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
    TP_RETURN_IF_ERROR(Activate(p));
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

  // Resets the cache and writes the prompts, padded to the program's T, as its inputs.
  // A prompt of t < T tokens fills a bucket of T with padding at positions t..T-1, whose
  // cache rows later steps overwrite before anything reads them. The padding follows the
  // prompt, or, when the plan keeps only the last token's logits, precedes it so the last
  // token is the bucket's last (attention is causal by position, not by order in the bucket).
  absl::Status WritePrefillInputs(Program& p, const std::vector<int32_t>& tokens, int64_t batch) {
    const int64_t t = static_cast<int64_t>(tokens.size()) / batch;
    const int64_t pad = p.tokens - t;
    std::vector<int32_t> ids(static_cast<size_t>(p.batch * p.tokens), 0);
    std::vector<int32_t> pos(ids.size());
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t i = 0; i < p.tokens; ++i) {
        const size_t k = static_cast<size_t>(b * p.tokens + i);
        // j: the prompt token at bucket slot i, or -1 for padding.
        const int64_t j = p.last_token_logits ? i - pad : (i < t ? i : -1);
        ids[k] = j >= 0 ? tokens[static_cast<size_t>(b * t + j)] : 0;
        pos[k] = static_cast<int32_t>(j >= 0 ? j : (p.last_token_logits ? t + i : i));
      }
    }
    TP_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(state.data(), 0, static_cast<size_t>(state.size()), stream));
    TP_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(p.tokens_in, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice, stream));
    TP_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(p.positions_in, pos.data(), pos.size() * 4,
                                            cudaMemcpyHostToDevice, stream));
    // Pageable copies return once the data is staged; synchronize so `ids` may go.
    TP_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    return absl::OkStatus();
  }

  absl::Status CheckPrompts(const std::vector<int32_t>& tokens, int64_t batch) {
    if (batch <= 0 || tokens.empty() || tokens.size() % static_cast<size_t>(batch) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(tokens.size(), " prompt tokens are not ",
                                                     "a non-zero multiple of batch ", batch));
    }
    return absl::OkStatus();
  }

  absl::Status TimedRuns(Program& p, bool greedy, int warmup, int iterations,
                         std::vector<double>& out) {
    for (int i = 0; i < warmup; ++i) TP_RETURN_IF_ERROR(Run(p, greedy));
    TP_ASSIGN_OR_RETURN(
        const std::vector<double> ms,
        device::TimeEach(
            stream, iterations, [&](int) { return Run(p, greedy); }, [&] { return Finish(); }));
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
    TP_RETURN_IF_ERROR(Activate(*p));
    // Token 0 at position 0: valid inputs whatever another phase left in the arena.
    const size_t inputs = static_cast<size_t>(p->batch * p->tokens) * sizeof(int32_t);
    TP_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(p->tokens_in, 0, inputs, stream));
    TP_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(p->positions_in, 0, inputs, stream));
    TP_RETURN_IF_ERROR(EnqueueProgram(*p, false));
    if (p->decode) TP_RETURN_IF_ERROR(EnqueueProgram(*p, true));
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

int64_t GpuRuntime::vocab_size() const {
  const Program& p = *impl_->programs.front();
  return p.bound->shape(p.graph->outputs()[0]).back();
}
int64_t GpuRuntime::max_context() const { return impl_->plan.options().max_context(); }
int64_t GpuRuntime::prefill_batch() const { return impl_->plan.options().prefill_batch(); }

absl::Status GpuRuntime::Reset() {
  TP_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(impl_->state.data(), 0,
                                          static_cast<size_t>(impl_->state.size()), impl_->stream));
  return impl_->Finish();
}

absl::StatusOr<std::vector<float>> GpuRuntime::Prefill(const std::vector<int32_t>& tokens,
                                                       int64_t batch) {
  TP_RETURN_IF_ERROR(impl_->CheckPrompts(tokens, batch));
  const int64_t t = static_cast<int64_t>(tokens.size()) / batch;
  TP_ASSIGN_OR_RETURN(Program * p, impl_->PrefillProgram(batch, t));
  TP_RETURN_IF_ERROR(impl_->WritePrefillInputs(*p, tokens, batch));
  TP_RETURN_IF_ERROR(impl_->Run(*p));
  const int64_t vocab = vocab_size();
  // Rows kept per sequence: t, or 1 when the plan keeps only the last token's logits.
  const int64_t kept = p->last_token_logits ? 1 : t;
  const int64_t rows = p->last_token_logits ? 1 : p->tokens;
  std::vector<float> logits(static_cast<size_t>(batch * kept * vocab));
  for (int64_t b = 0; b < batch; ++b) {
    TP_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
        logits.data() + b * kept * vocab, p->logits + b * rows * vocab,
        static_cast<size_t>(kept * vocab) * sizeof(float), cudaMemcpyDeviceToHost, impl_->stream));
  }
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
  for (int32_t pos : positions) {
    if (pos < 0 || pos >= max_context()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "position ", pos, " is outside the KV cache of ", max_context(), " rows per sequence"));
    }
  }
  const int64_t batch = static_cast<int64_t>(tokens.size());
  TP_ASSIGN_OR_RETURN(Program * p, impl_->DecodeProgram(batch));
  TP_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(p->tokens_in, tokens.data(), tokens.size() * 4,
                                          cudaMemcpyHostToDevice, impl_->stream));
  TP_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(p->positions_in, positions.data(), positions.size() * 4,
                                          cudaMemcpyHostToDevice, impl_->stream));
  TP_RETURN_IF_ERROR(impl_->Run(*p));
  const int64_t vocab = vocab_size();
  std::vector<float> logits(static_cast<size_t>(batch * vocab));
  TP_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(logits.data(), p->logits, logits.size() * sizeof(float),
                                          cudaMemcpyDeviceToHost, impl_->stream));
  TP_RETURN_IF_ERROR(impl_->Finish());
  return logits;
}

absl::StatusOr<std::vector<int32_t>> GpuRuntime::Generate(const std::vector<int32_t>& prompts,
                                                          int64_t batch, int new_tokens) {
  TP_RETURN_IF_ERROR(impl_->CheckPrompts(prompts, batch));
  const int64_t t = static_cast<int64_t>(prompts.size()) / batch;
  if (new_tokens < 1) {
    return absl::InvalidArgumentError(absl::StrCat("new_tokens is ", new_tokens, "; at least 1"));
  }
  if (t + new_tokens - 1 > max_context()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a prompt of ", t, " tokens and ", new_tokens, " new tokens need ",
                     t + new_tokens - 1, " KV-cache rows per sequence; the cache has ",
                     max_context(), " (plan with a larger --max-context)"));
  }
  Program* decode = nullptr;
  if (new_tokens > 1) {
    TP_ASSIGN_OR_RETURN(decode, impl_->DecodeProgram(batch));
  }
  TP_ASSIGN_OR_RETURN(std::vector<float> logits, Prefill(prompts, batch));
  const int64_t vocab = vocab_size();
  // Logit rows per prompt: t, or 1 when the plan keeps only the last token's.
  const int64_t kept = static_cast<int64_t>(logits.size()) / (batch * vocab);
  std::vector<int32_t> first(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) {
    first[static_cast<size_t>(b)] = ArgMax(logits.data() + ((b + 1) * kept - 1) * vocab, vocab);
  }
  std::vector<int32_t> out(static_cast<size_t>(batch * new_tokens));
  for (int64_t b = 0; b < batch; ++b) out[static_cast<size_t>(b * new_tokens)] = first[b];
  if (decode == nullptr) return out;

  const std::vector<int32_t> positions(static_cast<size_t>(batch), static_cast<int32_t>(t));
  cudaStream_t stream = impl_->stream;
  TP_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(decode->tokens_in, first.data(), first.size() * 4,
                                          cudaMemcpyHostToDevice, stream));
  TP_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(decode->positions_in, positions.data(),
                                          positions.size() * 4, cudaMemcpyHostToDevice, stream));
  TP_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(impl_->memory.step_counter, 0, sizeof(int), stream));
  for (int i = 1; i < new_tokens; ++i) TP_RETURN_IF_ERROR(impl_->Run(*decode, /*greedy=*/true));
  std::vector<int32_t> history(static_cast<size_t>((new_tokens - 1) * batch));
  TP_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(history.data(), impl_->memory.history, history.size() * 4,
                                          cudaMemcpyDeviceToHost, stream));
  TP_RETURN_IF_ERROR(impl_->Finish());
  for (int i = 1; i < new_tokens; ++i) {
    for (int64_t b = 0; b < batch; ++b) {
      out[static_cast<size_t>(b * new_tokens + i)] =
          history[static_cast<size_t>((i - 1) * batch + b)];
    }
  }
  return out;
}

absl::StatusOr<std::vector<double>> GpuRuntime::TimePrefill(const std::vector<int32_t>& tokens,
                                                            int64_t batch, int warmup,
                                                            int iterations) {
  TP_RETURN_IF_ERROR(impl_->CheckPrompts(tokens, batch));
  const int64_t t = static_cast<int64_t>(tokens.size()) / batch;
  TP_ASSIGN_OR_RETURN(Program * p, impl_->PrefillProgram(batch, t));
  TP_RETURN_IF_ERROR(impl_->WritePrefillInputs(*p, tokens, batch));
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
  TP_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(p->tokens_in, tokens.data(), tokens.size() * 4,
                                          cudaMemcpyHostToDevice, impl_->stream));
  TP_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(p->positions_in, positions.data(), positions.size() * 4,
                                          cudaMemcpyHostToDevice, impl_->stream));
  TP_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(impl_->stream));
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

}  // namespace tileplan::runtime::gpu
