#include "runtime/gpu/gpu_runtime.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/align.h"
#include "base/status_macros.h"
#include "device/cuda_status.h"
#include "device/device_buffer.h"
#include "device/event_timer.h"
#include "kernels/core/bound_graph.h"
#include "kernels/core/kernel_family.h"
#include "kernels/families/registry.h"
#include "kernels/launch/kernel_loader.h"
#include "kernels/step/step_launcher.h"
#include "regions/ir.pb.h"
#include "regions/parser.h"
#include "regions/rope.h"
#include "regions/serialization.h"
#include "runtime/gpu/device_weights.h"

namespace tileplan::runtime::gpu {
namespace {

namespace pp = planner::proto;
using kernels::BoundGraph;
using kernels::BoundRegion;

using Clock = std::chrono::steady_clock;
double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

int64_t ElementBytes(ir::proto::DType dtype) {
  switch (dtype) {
    case ir::proto::DTYPE_BF16:
    case ir::proto::DTYPE_F16:
      return 2;
    default:
      return 4;
  }
}

// Bytes from a binding's first element to one past its last.
int64_t SpanBytes(const pp::Binding& b) {
  int64_t span = 1;
  for (int i = 0; i < b.shape_size() && i < b.strides_size(); ++i) {
    if (b.shape(i) == 0) return 0;
    span += (b.shape(i) - 1) * b.strides(i);
  }
  return span * ElementBytes(b.dtype());
}

// Index of the largest element (the first of equal ones).
int32_t ArgMax(const float* v, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (v[i] > v[best]) best = i;
  }
  return static_cast<int32_t>(best);
}

// One phase of the plan, with its graphs once captured.
struct Program {
  const pp::Phase* phase = nullptr;
  bool decode = false;
  int64_t batch = 0, tokens = 0;
  // Prefill only: the logits are each sequence's last token's ([B, 1, V]; the planner's
  // last_token_logits), so prompts are aligned to the end of the bucket.
  bool last_token_logits = false;
  std::unique_ptr<ir::Graph> graph;
  std::unique_ptr<BoundGraph> bound;
  std::vector<std::unique_ptr<kernels::PreparedStep>> steps;  // each bound once (binding 0)
  int32_t* tokens_in = nullptr;
  int32_t* positions_in = nullptr;
  float* logits = nullptr;
  std::vector<std::pair<int64_t, int64_t>> counters;  // arena offset, bytes
  kernels::GraphExec exec;
  // Decode only: argmax of the logits into tokens_in, then decode_advance.
  std::unique_ptr<ir::Graph> argmax_graph;
  std::unique_ptr<BoundGraph> argmax_bound;
  std::unique_ptr<kernels::PreparedStep> argmax;
  std::unique_ptr<kernels::PreparedStep> advance;
  device::DeviceBuffer argmax_scratch;  // workspace and counters of the argmax
  kernels::GraphExec loop_exec;
};

}  // namespace

struct GpuRuntime::Impl {
  const device::Device* device = nullptr;
  GpuOptions options;
  pp::ExecutionPlan plan;
  std::unique_ptr<kernels::StepLauncher> launcher;
  std::unique_ptr<DeviceWeights> weights;
  device::DeviceBuffer state;
  device::DeviceBuffer arena;
  device::DeviceBuffer aux;  // error word, step counter, history
  std::vector<device::DeviceBuffer> rope_tables;
  std::map<std::string, const float*> rope_by_key;
  std::map<std::string, std::pair<int64_t, int64_t>, std::less<>> state_slots;  // offset, bytes
  int* error = nullptr;
  int* step_counter = nullptr;
  int32_t* history = nullptr;  // [max_context, max decode batch]
  int64_t history_capacity = 0;
  cudaStream_t stream = nullptr;
  std::vector<std::unique_ptr<Program>> programs;
  const Program* active = nullptr;  // the program whose counters hold in the arena

  ~Impl() {
    programs.clear();  // graphs and steps before the launcher they refer to
    launcher.reset();
    if (stream != nullptr) cudaStreamDestroy(stream);
  }

  absl::StatusOr<std::byte*> Resolve(const pp::Binding& b, const std::string& step) {
    const int64_t span = SpanBytes(b);
    auto check = [&](int64_t size, absl::string_view space) -> absl::Status {
      if (b.offset() < 0 || b.offset() + span > size) {
        return absl::InvalidArgumentError(
            absl::StrCat(step, ": %", b.value(), " at bytes [", b.offset(), ", ", b.offset() + span,
                         ") lies outside the ", space, " of ", size, " bytes"));
      }
      return absl::OkStatus();
    };
    switch (b.storage()) {
      case pp::Binding::STORAGE_ARENA:
      case pp::Binding::STORAGE_INPUT:
        TP_RETURN_IF_ERROR(check(arena.size(), "arena"));
        return static_cast<std::byte*>(arena.data()) + b.offset();
      case pp::Binding::STORAGE_WEIGHT: {
        const WeightSlot* slot = weights->layout().Find(b.root());
        if (slot == nullptr) {
          return absl::InvalidArgumentError(
              absl::StrCat(step, ": %", b.value(), " names the unknown weight ", b.root()));
        }
        TP_RETURN_IF_ERROR(check(slot->bytes, absl::StrCat("weight ", b.root())));
        TP_ASSIGN_OR_RETURN(void* base, weights->Address(b.root()));
        return static_cast<std::byte*>(base) + b.offset();
      }
      case pp::Binding::STORAGE_STATE: {
        // The offset is into the whole state space; it must lie in the named state's slot.
        auto it = state_slots.find(b.root());
        if (it == state_slots.end()) {
          return absl::InvalidArgumentError(
              absl::StrCat(step, ": %", b.value(), " names the unknown state ", b.root()));
        }
        const auto [slot_offset, slot_bytes] = it->second;
        if (b.offset() < slot_offset || b.offset() + span > slot_offset + slot_bytes) {
          return absl::InvalidArgumentError(
              absl::StrCat(step, ": %", b.value(), " at bytes [", b.offset(), ", ",
                           b.offset() + span, ") lies outside the state ", b.root(), " at [",
                           slot_offset, ", ", slot_offset + slot_bytes, ")"));
        }
        return static_cast<std::byte*>(state.data()) + b.offset();
      }
      default:
        return absl::InvalidArgumentError(
            absl::StrCat(step, ": %", b.value(), " has no storage class"));
    }
  }

  absl::StatusOr<const float*> RopeTable(const ir::Region& region, int64_t head_dim) {
    TP_ASSIGN_OR_RETURN(const ir::RopeParams params, ir::RopeParamsFromAttributes(region.attrs));
    const std::vector<float> freq = ir::RopeInvFreq(params, head_dim);
    std::string key(reinterpret_cast<const char*>(freq.data()), freq.size() * sizeof(float));
    if (auto it = rope_by_key.find(key); it != rope_by_key.end()) return it->second;
    TP_ASSIGN_OR_RETURN(device::DeviceBuffer table,
                        device::DeviceBuffer::Allocate(*device, key.size()));
    TP_RETURN_IF_ERROR(table.CopyFromHost(freq.data(), static_cast<int64_t>(key.size())));
    const float* p = table.as<float>();
    rope_tables.push_back(std::move(table));
    rope_by_key.emplace(std::move(key), p);
    return p;
  }

  bool Programmatic(bool decode) const {
    using P = GpuOptions::ProgrammaticLaunch;
    return device->sm() >= 90 && (options.programmatic_launch == P::kAlways ||
                                  (options.programmatic_launch == P::kDecode && decode));
  }

  // The step of `region` under `tactic`, bound to `buffers`.
  absl::StatusOr<std::unique_ptr<kernels::PreparedStep>> PrepareStep(
      const kernels::KernelFamily& family, const BoundRegion& region, const kernels::Tactic& tactic,
      bool decode, const kernels::RegionBuffers& buffers, std::string label) {
    TP_ASSIGN_OR_RETURN(
        std::unique_ptr<kernels::PreparedStep> step,
        launcher->Prepare(family, region, tactic, {.programmatic = Programmatic(decode)},
                          std::move(label)));
    TP_RETURN_IF_ERROR(step->Bind(buffers).status());
    return step;
  }

  // `graph` is phase.graph() parsed.
  absl::StatusOr<std::unique_ptr<Program>> BuildProgram(const pp::Phase& phase,
                                                        std::unique_ptr<ir::Graph> graph) {
    auto p = std::make_unique<Program>();
    p->phase = &phase;
    p->decode = phase.kind() == pp::Phase::KIND_DECODE;
    p->graph = std::move(graph);
    kernels::ShapeBindings bindings;
    for (const pp::SymbolBinding& b : phase.bindings()) bindings[b.symbol()] = b.extent();
    p->batch = bindings.count("B") ? bindings["B"] : 0;
    p->tokens = bindings.count("T") ? bindings["T"] : 0;
    if (p->batch <= 0 || p->tokens <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(phase.name(), ": the phase binds no positive B and T"));
    }
    TP_ASSIGN_OR_RETURN(BoundGraph bound,
                        BoundGraph::Create(*p->graph, std::move(bindings), phase.context()));
    p->bound = std::make_unique<BoundGraph>(std::move(bound));
    if (p->graph->outputs().size() != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(phase.name(), ": the phase must have one output, %logits"));
    }
    const std::vector<int64_t>& logits_shape = p->bound->shape(p->graph->outputs()[0]);
    if (logits_shape.size() != 3 || logits_shape[0] != p->batch ||
        (logits_shape[1] != p->tokens && logits_shape[1] != 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat(phase.name(), ": %logits is [", absl::StrJoin(logits_shape, ","),
                       "]; expected [", p->batch, ",", p->tokens, ",V] or [", p->batch, ",1,V]"));
    }
    p->last_token_logits = !p->decode && p->tokens > 1 && logits_shape[1] == 1;

    const kernels::KernelRegistry& registry = kernels::GlobalKernelRegistry();
    std::byte* const arena_base = static_cast<std::byte*>(arena.data());
    for (const pp::Step& step : phase.steps()) {
      const std::string label =
          absl::StrCat(phase.name(), " step ", p->steps.size(), " (", step.name(), ")");
      kernels::RegionBuffers buffers;
      if (step.region() < 0 || step.region() >= static_cast<int>(p->graph->regions().size())) {
        return absl::InvalidArgumentError(absl::StrCat(label, ": no region ", step.region()));
      }
      const BoundRegion region(*p->bound, step.region());
      TP_ASSIGN_OR_RETURN(const kernels::Tactic tactic, kernels::TacticFromProto(step.tactic()));
      const kernels::KernelFamily* family = registry.Find(tactic.family);
      if (family == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat(label, ": unknown kernel family '", tactic.family, "'"));
      }
      if (tactic.family_version != family->version()) {
        return absl::FailedPreconditionError(absl::StrCat(
            label, ": the plan was made for ", tactic.family, " v", tactic.family_version,
            "; this build has v", family->version(), " (plan again)"));
      }
      if (step.operands_size() != region.num_operands() ||
          step.results_size() != region.num_results()) {
        return absl::InvalidArgumentError(
            absl::StrCat(label, ": bindings do not match ", region.Label()));
      }
      for (const pp::Binding& b : step.operands()) {
        TP_ASSIGN_OR_RETURN(std::byte * a, Resolve(b, label));
        buffers.operands.push_back(a);
        if (b.value() == "tokens") p->tokens_in = reinterpret_cast<int32_t*>(a);
        if (b.value() == "positions") p->positions_in = reinterpret_cast<int32_t*>(a);
      }
      for (const pp::Binding& b : step.results()) {
        TP_ASSIGN_OR_RETURN(std::byte * a, Resolve(b, label));
        buffers.results.push_back(a);
        if (b.value() == "logits") p->logits = reinterpret_cast<float*>(a);
      }
      if (step.workspace_bytes() > 0) {
        if (step.workspace_offset() + step.workspace_bytes() > arena.size()) {
          return absl::InvalidArgumentError(absl::StrCat(label, ": workspace outside the arena"));
        }
        buffers.workspace = arena_base + step.workspace_offset();
      }
      if (step.counters_bytes() > 0) {
        if (step.counters_offset() + step.counters_bytes() > arena.size()) {
          return absl::InvalidArgumentError(absl::StrCat(label, ": counters outside the arena"));
        }
        buffers.counters = arena_base + step.counters_offset();
        p->counters.emplace_back(step.counters_offset(), step.counters_bytes());
      }
      if (ir::HasRope(region.region())) {
        TP_ASSIGN_OR_RETURN(buffers.rope_inv_freq,
                            RopeTable(region.region(), region.result(0).shape.back()));
      }
      buffers.error = error;
      TP_ASSIGN_OR_RETURN(std::unique_ptr<kernels::PreparedStep> prepared,
                          PrepareStep(*family, region, tactic, p->decode, buffers, label));
      p->steps.push_back(std::move(prepared));
    }
    if (p->tokens_in == nullptr || p->positions_in == nullptr || p->logits == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          phase.name(), ": the phase must read %tokens and %positions and write %logits"));
    }
    if (p->decode) TP_RETURN_IF_ERROR(BuildDecodeLoop(*p));
    return p;
  }

  // The argmax of the decode logits into the token input, and the position advance.
  absl::Status BuildDecodeLoop(Program& p) {
    const int64_t vocab = p.bound->shape(p.graph->outputs()[0]).back();
    TP_ASSIGN_OR_RETURN(ir::Graph g, ir::ParseGraph(absl::StrCat(
                                         "graph @greedy {\n  input %logits: f32[", p.batch, ",1,",
                                         vocab, "]\n  %next: i32[", p.batch,
                                         ",1] = argmax(%logits)\n", "  output %next\n}\n")));
    p.argmax_graph = std::make_unique<ir::Graph>(std::move(g));
    TP_ASSIGN_OR_RETURN(BoundGraph bound, BoundGraph::Create(*p.argmax_graph, {}, 1));
    p.argmax_bound = std::make_unique<BoundGraph>(std::move(bound));
    const BoundRegion region(*p.argmax_bound, 0);
    // The first family that runs the argmax (they are sorted by name), at its default tactic.
    const kernels::KernelFamily* family = nullptr;
    for (const kernels::KernelFamily* f : kernels::GlobalKernelRegistry().FamiliesFor("argmax")) {
      if (f->CanImplement(region, plan.target()).ok()) {
        family = f;
        break;
      }
    }
    if (family == nullptr) {
      return absl::InternalError(absl::StrCat(region.Label(), ": no kernel family runs it"));
    }
    TP_ASSIGN_OR_RETURN(const kernels::Tactic tactic, family->DefaultTactic(region, plan.target()));
    const int64_t ws = AlignUp(family->WorkspaceBytes(tactic, region), 256);
    const int64_t counters = family->CounterBytes(tactic, region);
    TP_ASSIGN_OR_RETURN(p.argmax_scratch, device::DeviceBuffer::Allocate(
                                              *device, ws + std::max<int64_t>(counters, 4)));
    TP_RETURN_IF_ERROR(p.argmax_scratch.Fill(0));
    kernels::RegionBuffers buffers;
    buffers.operands = {p.logits};
    buffers.results = {p.tokens_in};
    std::byte* scratch = static_cast<std::byte*>(p.argmax_scratch.data());
    if (ws > 0) buffers.workspace = scratch;
    if (counters > 0) buffers.counters = scratch + ws;
    TP_ASSIGN_OR_RETURN(p.argmax, PrepareStep(*family, region, tactic, /*decode=*/true, buffers,
                                              absl::StrCat(p.phase->name(), " greedy argmax")));

    DecodeAdvanceParams advance{};
    advance.tokens = p.tokens_in;
    advance.positions = p.positions_in;
    advance.history = history;
    advance.step = step_counter;
    advance.batch = static_cast<int>(p.batch);
    advance.capacity = static_cast<int>(history_capacity);
    p.advance = launcher->PrepareKernels(absl::StrCat(p.phase->name(), " decode_advance"),
                                         kernels::DecodeAdvanceInstance(),
                                         {kernels::DecodeAdvanceLaunch(advance, p.batch)},
                                         {.programmatic = Programmatic(/*decode=*/true)});
    return absl::OkStatus();
  }

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
    TP_CUDA_RETURN_IF_ERROR(cudaMemcpy(&word, error, sizeof(int), cudaMemcpyDeviceToHost));
    if (word != 0) {
      TP_CUDA_RETURN_IF_ERROR(cudaMemset(error, 0, sizeof(int)));
      return absl::InvalidArgumentError(absl::StrCat(
          "a token id outside the vocabulary or a position outside the KV cache at flat token "
          "index ",
          word - 1, " (its embedding row or cache write was skipped)"));
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
  if (plan.phases().empty()) return absl::InvalidArgumentError("the plan has no phases");
  TP_RETURN_IF_ERROR(device.MakeCurrent());
  auto impl = std::make_unique<Impl>();
  GpuRuntimeInfo info;
  impl->device = &device;
  impl->options = options;
  impl->plan = plan;

  // Sizes first: nothing is allocated for a plan that cannot fit.
  std::vector<std::unique_ptr<ir::Graph>> graphs;
  std::vector<const ir::Graph*> graph_ptrs;
  int64_t arena_bytes = 0;
  const pp::Arena& first_arena = impl->plan.phases(0).arena();
  for (const pp::Phase& phase : impl->plan.phases()) {
    TP_ASSIGN_OR_RETURN(ir::Graph g, ir::GraphFromProto(phase.graph()));
    graphs.push_back(std::make_unique<ir::Graph>(std::move(g)));
    graph_ptrs.push_back(graphs.back().get());
    arena_bytes = std::max(arena_bytes, phase.arena().arena_bytes());
    // Every phase must lay the KV cache out the same way: they share it.
    bool same = phase.arena().states_size() == first_arena.states_size() &&
                phase.arena().state_bytes() == first_arena.state_bytes();
    for (int i = 0; same && i < phase.arena().states_size(); ++i) {
      same = phase.arena().states(i).state() == first_arena.states(i).state() &&
             phase.arena().states(i).offset() == first_arena.states(i).offset() &&
             phase.arena().states(i).bytes() == first_arena.states(i).bytes();
    }
    if (!same) {
      return absl::InvalidArgumentError(absl::StrCat(
          phase.name(), " lays out the KV cache differently from ", impl->plan.phases(0).name()));
    }
  }
  for (const pp::StateSlot& s : first_arena.states()) {
    impl->state_slots[s.state()] = {s.offset(), s.bytes()};
  }
  TP_ASSIGN_OR_RETURN(WeightLayout layout, WeightLayout::ForGraphs(graph_ptrs));
  int64_t max_decode_batch = 1;
  for (const pp::Phase& phase : impl->plan.phases()) {
    for (const pp::SymbolBinding& b : phase.bindings()) {
      if (phase.kind() == pp::Phase::KIND_DECODE && b.symbol() == "B") {
        max_decode_batch = std::max(max_decode_batch, b.extent());
      }
    }
  }
  impl->history_capacity = std::max<int64_t>(1, impl->plan.options().max_context());
  const int64_t aux_bytes = 256 + impl->history_capacity * max_decode_batch * 4;
  const int64_t total = layout.total_bytes() + first_arena.state_bytes() + arena_bytes +
                        options.cublaslt_workspace_bytes + aux_bytes;
  TP_ASSIGN_OR_RETURN(const device::Device::MemoryInfo memory, device.GetMemoryInfo());
  if (total > memory.free_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the plan needs ", total, " bytes on ", device.Label(), " (weights ", layout.total_bytes(),
        ", KV cache ", first_arena.state_bytes(), ", arena ", arena_bytes, ", cuBLASLt workspace ",
        options.cublaslt_workspace_bytes, ", other ", aux_bytes, ") but only ", memory.free_bytes,
        " of ", memory.total_bytes, " bytes are free"));
  }

  TP_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&impl->stream, cudaStreamNonBlocking));
  kernels::StepLauncher::Options launcher_options;
  launcher_options.cublaslt_workspace_bytes = options.cublaslt_workspace_bytes;
  TP_ASSIGN_OR_RETURN(impl->launcher,
                      kernels::StepLauncher::Create(device, std::move(launcher_options)));

  const Clock::time_point weights_start = Clock::now();
  if (checkpoint != nullptr) {
    TP_ASSIGN_OR_RETURN(impl->weights, DeviceWeights::Load(device, std::move(layout), *checkpoint));
  } else {
    TP_ASSIGN_OR_RETURN(
        impl->weights,
        DeviceWeights::Random(device, std::move(layout), impl->launcher->loader(), options.seed));
  }
  info.weights_seconds = SecondsSince(weights_start);
  TP_ASSIGN_OR_RETURN(impl->state,
                      device::DeviceBuffer::Allocate(device, first_arena.state_bytes()));
  TP_ASSIGN_OR_RETURN(impl->arena, device::DeviceBuffer::Allocate(device, arena_bytes));
  TP_ASSIGN_OR_RETURN(impl->aux, device::DeviceBuffer::Allocate(device, aux_bytes));
  TP_RETURN_IF_ERROR(impl->arena.Fill(0));
  TP_RETURN_IF_ERROR(impl->aux.Fill(0));
  impl->error = impl->aux.as<int>();
  impl->step_counter = impl->aux.as<int>() + 1;
  impl->history = reinterpret_cast<int32_t*>(static_cast<std::byte*>(impl->aux.data()) + 256);
  info.weight_bytes = impl->weights->bytes();
  info.state_bytes = first_arena.state_bytes();
  info.arena_bytes = arena_bytes;

  for (int i = 0; i < impl->plan.phases_size(); ++i) {
    TP_ASSIGN_OR_RETURN(std::unique_ptr<Program> program,
                        impl->BuildProgram(impl->plan.phases(i), std::move(graphs[i])));
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

  // Run every phase once from the host (first launches load lazily and raise shared-memory
  // limits, which must not happen inside a capture), then capture.
  for (auto& p : impl->programs) {
    TP_RETURN_IF_ERROR(impl->Activate(*p));
    // Token 0 at position 0: valid inputs whatever another phase left in the arena.
    const size_t inputs = static_cast<size_t>(p->batch * p->tokens) * sizeof(int32_t);
    TP_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(p->tokens_in, 0, inputs, impl->stream));
    TP_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(p->positions_in, 0, inputs, impl->stream));
    TP_RETURN_IF_ERROR(impl->EnqueueProgram(*p, false));
    if (p->decode) TP_RETURN_IF_ERROR(impl->EnqueueProgram(*p, true));
    TP_RETURN_IF_ERROR(impl->Finish());
  }
  if (options.cuda_graphs) {
    for (auto& p : impl->programs) {
      TP_ASSIGN_OR_RETURN(p->exec, impl->Capture(*p, false));
      if (p->decode) {
        TP_ASSIGN_OR_RETURN(p->loop_exec, impl->Capture(*p, true));
      }
    }
  }
  TP_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(impl->aux.data(), 0, 8, impl->stream));
  TP_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(impl->state.data(), 0,
                                          static_cast<size_t>(impl->state.size()), impl->stream));
  TP_RETURN_IF_ERROR(impl->Finish());
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
  TP_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(impl_->step_counter, 0, sizeof(int), stream));
  for (int i = 1; i < new_tokens; ++i) TP_RETURN_IF_ERROR(impl_->Run(*decode, /*greedy=*/true));
  std::vector<int32_t> history(static_cast<size_t>((new_tokens - 1) * batch));
  TP_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(history.data(), impl_->history, history.size() * 4,
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
