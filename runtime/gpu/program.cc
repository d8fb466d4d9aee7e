#include "runtime/gpu/program.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/align.h"
#include "base/status_macros.h"
#include "kernels/core/kernel_family.h"
#include "kernels/families/registry.h"
#include "kernels/launch/kernel_loader.h"
#include "planner/plan_builder.h"
#include "regions/parser.h"
#include "regions/rope.h"
#include "regions/serialization.h"
#include "regions/verifier.h"

namespace tileplan::runtime::gpu {
namespace {

namespace pp = planner::proto;
using kernels::BoundGraph;
using kernels::BoundRegion;

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

}  // namespace

absl::StatusOr<PlanLayout> LayOutPlan(const pp::ExecutionPlan& plan) {
  if (plan.format_version() != planner::kPlanFormatVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the plan has format_version ", plan.format_version(), "; this runtime reads version ",
        planner::kPlanFormatVersion, " (docs/plan.md, \"Versioning\")"));
  }
  if (plan.phases().empty()) return absl::InvalidArgumentError("the plan has no phases");
  PlanLayout out;
  std::vector<const ir::Graph*> graph_ptrs;
  const pp::Arena& first_arena = plan.phases(0).arena();
  for (const pp::Phase& phase : plan.phases()) {
    absl::StatusOr<ir::Graph> parsed = ir::GraphFromProto(phase.graph());
    if (!parsed.ok()) {
      return absl::Status(parsed.status().code(),
                          absl::StrCat(phase.name(), ": graph: ", parsed.status().message()));
    }
    ir::Graph g = *std::move(parsed);
    if (absl::Status verified = ir::Verify(g); !verified.ok()) {
      return absl::Status(verified.code(),
                          absl::StrCat(phase.name(), ": graph: ", verified.message()));
    }
    out.graphs.push_back(std::make_unique<ir::Graph>(std::move(g)));
    graph_ptrs.push_back(out.graphs.back().get());
    out.arena_bytes = std::max(out.arena_bytes, phase.arena().arena_bytes());
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
          phase.name(), " lays out the KV cache differently from ", plan.phases(0).name()));
    }
  }
  out.state_bytes = first_arena.state_bytes();
  for (const pp::StateSlot& s : first_arena.states()) {
    out.state_slots[s.state()] = {s.offset(), s.bytes()};
  }
  TP_ASSIGN_OR_RETURN(out.weights, WeightLayout::ForGraphs(graph_ptrs));
  for (const pp::Phase& phase : plan.phases()) {
    for (const pp::SymbolBinding& b : phase.bindings()) {
      if (phase.kind() == pp::Phase::KIND_DECODE && b.symbol() == "B") {
        out.max_decode_batch = std::max(out.max_decode_batch, b.extent());
      }
    }
  }
  return out;
}

struct ProgramBuilder::Impl {
  const device::Device* device;
  const pp::ExecutionPlan& plan;
  device::DeviceBuffer& arena;
  device::DeviceBuffer& state;
  const DeviceWeights* weights;
  const StateSlots& state_slots;
  int* error;
  int* step_counter;
  int32_t* history;
  int64_t history_capacity;
  kernels::StepLauncher* launcher;
  const GpuOptions& options;
  std::vector<device::DeviceBuffer> rope_tables;
  std::map<std::string, const float*> rope_by_key;

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
  absl::StatusOr<std::unique_ptr<Program>> Build(const pp::Phase& phase,
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
        TP_ASSIGN_OR_RETURN(
            buffers.rope_inv_freq,
            RopeTable(region.region(),
                      region.result(ir::RopeHeadResult(region.region())).shape.back()));
      }
      buffers.error = error;
      TP_ASSIGN_OR_RETURN(std::unique_ptr<kernels::PreparedStep> prepared,
                          PrepareStep(*family, region, tactic, p->decode, buffers, label));
      p->steps.push_back(std::move(prepared));
    }
    TP_RETURN_IF_ERROR(BuildPersistent(*p));
    if (p->tokens_in == nullptr || p->positions_in == nullptr || p->logits == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          phase.name(), ": the phase must read %tokens and %positions and write %logits"));
    }
    if (p->decode) TP_RETURN_IF_ERROR(BuildDecodeLoop(*p));
    return p;
  }

  // The persistent kernels of the phase's runs, over its prepared steps.
  absl::Status BuildPersistent(Program& p) {
    const pp::Phase& phase = *p.phase;
    int previous_last = -1;
    for (const pp::PersistentRun& run : phase.persistent()) {
      const std::string label = absl::StrCat(phase.name(), " persistent kernel (steps ",
                                             run.first_step(), "-", run.last_step(), ")");
      if (run.first_step() <= previous_last || run.first_step() > run.last_step() ||
          run.last_step() >= static_cast<int>(p.steps.size()) || run.blocks() <= 0 ||
          run.threads() <= 0 || run.blocks_per_sm() <= 0 || run.stages().empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(label, ": the run's steps, blocks or stages are not a valid schedule"));
      }
      previous_last = run.last_step();
      kernels::PersistentSpec spec;
      spec.blocks = run.blocks();
      spec.threads = run.threads();
      spec.min_blocks_per_sm = run.blocks_per_sm();
      spec.prefetch_tasks = run.prefetch_tasks();
      spec.stream_slots = run.stream_slots();
      spec.stream_slot_bytes = run.stream_slot_bytes();
      spec.trace = options.persistent_trace;
      int previous_step = run.first_step() - 1;
      for (const pp::PersistentStage& stage : run.stages()) {
        if (stage.step() <= previous_step || stage.step() > run.last_step()) {
          return absl::InvalidArgumentError(absl::StrCat(label, ": stage of step ", stage.step(),
                                                         " outside the run or out of step order"));
        }
        previous_step = stage.step();
        const pp::Step& step = phase.steps(stage.step());
        if (step.launches() != 1) {
          return absl::InvalidArgumentError(absl::StrCat(
              label, ": step ", stage.step(), " launches ", step.launches(), " kernels, not 1"));
        }
        spec.stages.push_back({p.steps[static_cast<size_t>(stage.step())].get(), 0,
                               stage.first_block(), stage.wait()});
      }
      // Every launching step of the run is a stage (the stages are distinct steps in order).
      int launching = 0;
      for (int i = run.first_step(); i <= run.last_step(); ++i) {
        launching += phase.steps(i).launches() > 0 ? 1 : 0;
      }
      if (launching != run.stages_size()) {
        return absl::InvalidArgumentError(absl::StrCat(label, ": ", launching,
                                                       " steps launch kernels but the run has ",
                                                       run.stages_size(), " stages"));
      }
      TP_ASSIGN_OR_RETURN(std::unique_ptr<kernels::PreparedStep> step,
                          launcher->PreparePersistent(spec, label));
      p.persistent.push_back({run.first_step(), run.last_step(), std::move(step)});
    }
    return absl::OkStatus();
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
};

ProgramBuilder::ProgramBuilder(const device::Device& device, const pp::ExecutionPlan& plan,
                               const PlanMemory& memory, kernels::StepLauncher& launcher,
                               const GpuOptions& options)
    : impl_(new Impl{&device,
                     plan,
                     *memory.arena,
                     *memory.state,
                     memory.weights,
                     memory.state_slots,
                     memory.error,
                     memory.step_counter,
                     memory.history,
                     memory.history_capacity,
                     &launcher,
                     options,
                     {},
                     {}}) {}

ProgramBuilder::~ProgramBuilder() = default;

absl::StatusOr<std::unique_ptr<Program>> ProgramBuilder::Build(const pp::Phase& phase,
                                                               std::unique_ptr<ir::Graph> graph) {
  return impl_->Build(phase, std::move(graph));
}

}  // namespace tileplan::runtime::gpu
