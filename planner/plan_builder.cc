#include "planner/plan_builder.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "kernels/families/registry.h"
#include "models/lowering.h"
#include "planner/memory_planner.h"
#include "planner/persistent_schedule.h"
#include "planner/pipelines.h"
#include "planner/plan_text.h"
#include "planner/tactic_selection.h"
#include "regions/serialization.h"

namespace tileplan::planner {
namespace {

using kernels::BoundGraph;
using kernels::BoundRegion;

ir::proto::DType DTypeToProto(ir::DType dtype) {
  switch (dtype) {
    case ir::DType::kF32:
      return ir::proto::DTYPE_F32;
    case ir::DType::kBF16:
      return ir::proto::DTYPE_BF16;
    case ir::DType::kF16:
      return ir::proto::DTYPE_F16;
    case ir::DType::kI32:
      return ir::proto::DTYPE_I32;
  }
  return ir::proto::DTYPE_UNSPECIFIED;
}

proto::Binding::Storage StorageToProto(StorageKind kind) {
  switch (kind) {
    case StorageKind::kArena:
      return proto::Binding::STORAGE_ARENA;
    case StorageKind::kInput:
      return proto::Binding::STORAGE_INPUT;
    case StorageKind::kWeight:
      return proto::Binding::STORAGE_WEIGHT;
    case StorageKind::kState:
      return proto::Binding::STORAGE_STATE;
  }
  return proto::Binding::STORAGE_UNSPECIFIED;
}

void FillBinding(const BoundGraph& g, const MemoryPlan& memory, ir::ValueId v, proto::Binding* b) {
  const ValuePlacement& p = memory.values[static_cast<size_t>(v)];
  const kernels::Layout& l = g.layout(v);
  b->set_value(g.graph().value(v).name);
  b->set_storage(StorageToProto(p.storage));
  b->set_offset(p.offset);
  b->set_root(g.graph().value(p.root).name);
  b->set_dtype(DTypeToProto(g.dtype(v)));
  for (int64_t e : l.shape) b->add_shape(e);
  for (int64_t s : l.strides) b->add_strides(s);
}

void FillArena(const ir::Graph& graph, const MemoryPlan& memory, proto::Arena* arena) {
  arena->set_alignment(memory.alignment);
  arena->set_arena_bytes(memory.arena_bytes);
  arena->set_peak_live_bytes(memory.peak_live_bytes);
  arena->set_intermediate_bytes(memory.intermediate_bytes);
  arena->set_state_bytes(memory.state_bytes);
  arena->set_weight_bytes(memory.weight_bytes);
  for (const ArenaBuffer& b : memory.buffers) {
    proto::ArenaBuffer* m = arena->add_buffers();
    m->set_offset(b.offset);
    m->set_bytes(b.bytes);
    m->set_first_step(b.first_step);
    m->set_last_step(b.last_step);
    for (ir::ValueId v : b.values) m->add_values(graph.value(v).name);
    m->set_workspace_of(b.workspace_of);
    m->set_counters_of(b.counters_of);
    m->set_input(b.input);
  }
  for (const StateBuffer& s : memory.states) {
    proto::StateSlot* m = arena->add_states();
    m->set_state(graph.value(s.state).name);
    m->set_offset(s.offset);
    m->set_bytes(s.bytes);
  }
}

absl::Status CheckOptions(const PlanOptions& o) {
  auto bad = [](absl::string_view option, absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("plan options: ", option, " ", why));
  };
  if (o.max_context <= 0) return bad("max_context", "must be positive");
  if (o.prefill_batch <= 0) return bad("prefill_batch", "must be positive");
  for (int64_t t : o.prefill_tokens) {
    if (t <= 0 || t > o.max_context) {
      return bad("prefill_tokens",
                 absl::StrCat("has ", t, ", outside [1, max_context = ", o.max_context, "]"));
    }
  }
  for (int64_t b : o.decode_batches) {
    if (b <= 0) return bad("decode_batches", absl::StrCat("has ", b, ", not positive"));
  }
  if (o.decode_context < 0 || o.decode_context > o.max_context) {
    return bad("decode_context", absl::StrCat("is ", o.decode_context,
                                              ", outside [0, max_context = ", o.max_context, "]"));
  }
  if (o.prefill_tokens.empty() && o.decode_batches.empty()) {
    return bad("prefill_tokens and decode_batches", "are both empty: nothing to plan");
  }
  if (o.persistent_blocks_per_sm < 0 || o.persistent_blocks_per_sm > 32) {
    return bad("persistent_blocks_per_sm",
               absl::StrCat("is ", o.persistent_blocks_per_sm, ", outside [0, 32]"));
  }
  if (o.persistent_stream_slots < 0 || o.persistent_stream_slots > kMaxStreamSlots) {
    return bad("persistent_stream_slots", absl::StrCat("is ", o.persistent_stream_slots,
                                                       ", outside [0, ", kMaxStreamSlots, "]"));
  }
  return absl::OkStatus();
}

// ResourceExhausted, with the sizes, when the plan's device memory exceeds the target's: the
// weights, the KV cache (one layout, shared by every phase) and the largest phase's arena,
// as the runtime allocates them. (The runtime checks again against what its GPU has free.)
absl::Status CheckFitsTarget(const proto::ExecutionPlan& plan,
                             const targets::TargetDescription& target) {
  int64_t weights = 0, kv = 0, arena = 0;
  for (const proto::Phase& phase : plan.phases()) {
    weights = std::max(weights, phase.arena().weight_bytes());
    kv = std::max(kv, phase.arena().state_bytes());
    arena = std::max(arena, phase.arena().arena_bytes());
  }
  const int64_t needed = weights + kv + arena;
  if (needed <= target.memory_bytes()) return absl::OkStatus();
  const int64_t ranks = std::max<int64_t>(1, plan.options().tensor_parallel_ranks());
  return absl::ResourceExhaustedError(absl::StrCat(
      "the plan needs ", HumanBytes(needed), " (", needed, " bytes: weights ", HumanBytes(weights),
      ", KV cache ", HumanBytes(kv), " for max_context ", plan.options().max_context(), ", arena ",
      HumanBytes(arena), ")", ranks > 1 ? " per rank" : "", " but ", target.name(), " has ",
      HumanBytes(target.memory_bytes()),
      ": lower the context or the batch, plan for a larger GPU, or split the model over more "
      "GPUs (--tp ",
      ranks * 2, ")"));
}

// Records the graph's packed weights; a name packed differently by two phases is an error.
absl::Status CollectPackedWeights(const ir::Graph& graph,
                                  std::map<std::string, proto::PackedWeight>* packed) {
  TP_ASSIGN_OR_RETURN(ir::proto::Graph as_proto, ir::GraphToProto(graph));
  for (ir::ValueId id : graph.weights()) {
    const ir::Value& w = graph.value(id);
    if (w.checkpoint_tensors.size() < 2 && !w.sliced()) continue;
    proto::PackedWeight m;
    m.set_weight(w.name);
    for (const ir::proto::Declaration& d : as_proto.declarations()) {
      if (d.name() != w.name) continue;
      *m.mutable_type() = d.type();
      *m.mutable_checkpoint_slices() = d.checkpoint_slices();
    }
    for (const std::string& t : w.checkpoint_tensors) m.add_checkpoint_tensors(t);
    auto [it, inserted] = packed->emplace(w.name, m);
    if (!inserted && it->second.SerializeAsString() != m.SerializeAsString()) {
      return absl::InternalError(
          absl::StrCat("packed weight %", w.name, " is packed differently by two phases"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<proto::Phase> PlanPhase(const ir::Graph& graph, const PhaseSpec& spec,
                                       const targets::TargetDescription& target,
                                       const kernels::KernelRegistry& registry,
                                       const TacticCache* cache) {
  TP_ASSIGN_OR_RETURN(BoundGraph g, BoundGraph::Create(graph, spec.bindings, spec.context));
  SelectionContext context;
  context.registry = &registry;
  context.target = &target;
  context.phase =
      spec.kind == proto::Phase::KIND_PREFILL ? ir::Phase::kPrefill : ir::Phase::kDecode;
  context.mode = LaunchMode::kGraph;
  context.cache = cache;
  context.environment =
      spec.environment.empty() ? EnvironmentFingerprint(target) : spec.environment;
  context.excluded_families = spec.excluded_families;
  context.tensor_parallel = spec.tensor_parallel;
  context.calibration = spec.calibration;
  std::map<TacticKey, SelectionContext::CalibratedPick> calibrated_picks;
  context.calibrated_picks = &calibrated_picks;

  const int n = static_cast<int>(graph.regions().size());
  std::vector<TacticChoice> choices;
  choices.reserve(static_cast<size_t>(n));
  MemoryPlanOptions memory_options;
  memory_options.workspace_bytes.resize(static_cast<size_t>(n));
  memory_options.counter_bytes.resize(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    TP_ASSIGN_OR_RETURN(TacticChoice choice, SelectTactic(BoundRegion(g, i), context));
    choices.push_back(std::move(choice));
  }
  std::vector<proto::PersistentRun> runs;
  if (spec.kind == proto::Phase::KIND_DECODE) {
    TP_ASSIGN_OR_RETURN(runs, PlanPersistentRuns(g, choices, target, spec.persistent));
  }
  for (int i = 0; i < n; ++i) {
    const BoundRegion region(g, i);
    const TacticChoice& choice = choices[static_cast<size_t>(i)];
    memory_options.workspace_bytes[static_cast<size_t>(i)] =
        choice.family->WorkspaceBytes(choice.tactic, region);
    memory_options.counter_bytes[static_cast<size_t>(i)] =
        choice.family->CounterBytes(choice.tactic, region);
  }
  memory_options.may_overwrite = [&](int region, int result, int operand) {
    return choices[static_cast<size_t>(region)].family->MayOverwriteOperand(BoundRegion(g, region),
                                                                            result, operand);
  };
  if (const auto b = spec.bindings.find("B");
      spec.state_batch > 0 && b != spec.bindings.end() && spec.state_batch != b->second) {
    if (spec.state_batch < b->second) {
      return absl::InvalidArgumentError(absl::StrCat("state_batch ", spec.state_batch,
                                                     " is below the phase's batch ", b->second));
    }
    // The specialized graph's states lead with the batch, bound or a symbol: their storage
    // scales with it.
    for (ir::ValueId s : graph.states()) {
      const ir::TensorType& type = graph.value(s).type;
      const int64_t bytes = g.storage_bytes(s);
      const bool leads =
          !type.dims.empty() && (type.dims[0].is_static() ? type.dims[0].extent() == b->second
                                                          : type.dims[0].symbol() == "B");
      if (!leads || bytes % b->second != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("state %", graph.value(s).name, " (", type.ToString(),
                         ") does not lead with the batch, so phases of several batches cannot "
                         "share it"));
      }
      memory_options.state_bytes.push_back(bytes / b->second * spec.state_batch);
    }
  }
  TP_ASSIGN_OR_RETURN(MemoryPlan memory, PlanMemory(g, memory_options));
  TP_RETURN_IF_ERROR(CheckMemoryPlan(g, memory, memory_options));

  proto::Phase phase;
  phase.set_kind(spec.kind);
  phase.set_name(spec.name);
  for (const auto& [symbol, extent] : spec.bindings) {
    proto::SymbolBinding* b = phase.add_bindings();
    b->set_symbol(symbol);
    b->set_extent(extent);
  }
  phase.set_context(spec.context);
  phase.set_cuda_graph(context.mode == LaunchMode::kGraph);
  for (const std::string& pass : spec.pipeline) phase.add_pipeline(pass);
  TP_ASSIGN_OR_RETURN(*phase.mutable_graph(), ir::GraphToProto(graph));

  std::vector<std::vector<std::string>> reuses(static_cast<size_t>(n));
  for (const Reuse& u : memory.reuses) {
    const ir::Region& r = graph.regions()[static_cast<size_t>(u.region)];
    reuses[static_cast<size_t>(u.region)].push_back(
        absl::StrCat("%", graph.value(r.results[static_cast<size_t>(u.result)]).name, " over %",
                     graph.value(r.operands[static_cast<size_t>(u.operand)]).name));
  }
  int64_t launches = 0, bytes = 0;
  double estimated_us = 0;
  for (int i = 0; i < n; ++i) {
    const ir::Region& r = graph.regions()[static_cast<size_t>(i)];
    const TacticChoice& c = choices[static_cast<size_t>(i)];
    const BoundRegion region(g, i);
    proto::Step* s = phase.add_steps();
    s->set_region(i);
    s->set_kind(r.kind);
    s->set_name(r.results.empty() ? std::string() : graph.value(r.results[0]).name);
    for (const std::string& k : r.fused_from) s->add_fused_from(k);
    *s->mutable_tactic() = kernels::TacticToProto(c.tactic);
    s->set_source(c.source == TacticSource::kTuned        ? proto::Step::SOURCE_TUNED
                  : c.source == TacticSource::kCalibrated ? proto::Step::SOURCE_CALIBRATED
                                                          : proto::Step::SOURCE_COST_MODEL);
    s->set_estimated_us(c.estimate.us);
    if (c.measured_us) s->set_measured_us(*c.measured_us);
    s->set_bytes(c.estimate.bytes);
    s->set_flops(c.estimate.flops);
    s->set_launches(c.estimate.launches);
    if (c.estimate.launches > 0) {
      const CostEstimate& e = c.estimate;
      s->set_bound(e.link_us > std::max({e.launch_us, e.memory_us, e.compute_us})
                       ? proto::Step::BOUND_LINK
                   : e.launch_us > std::max(e.memory_us, e.compute_us) ? proto::Step::BOUND_LAUNCH
                   : e.compute_us > e.memory_us                        ? proto::Step::BOUND_MATH
                                                                       : proto::Step::BOUND_MEMORY);
    }
    const kernels::LaunchGeometry geometry = c.family->Geometry(c.tactic, region);
    proto::Launch* launch = s->mutable_launch();
    for (int64_t x : geometry.grid) launch->add_grid(x);
    for (int64_t x : geometry.block) launch->add_block(x);
    launch->set_dynamic_shared_memory_bytes(geometry.dynamic_shared_memory_bytes);
    launch->set_library_managed(geometry.library_managed);
    for (ir::ValueId v : r.operands) FillBinding(g, memory, v, s->add_operands());
    for (ir::ValueId v : r.results) FillBinding(g, memory, v, s->add_results());
    if (const int32_t w = memory.workspace[static_cast<size_t>(i)]; w >= 0) {
      s->set_workspace_offset(memory.buffers[static_cast<size_t>(w)].offset);
      s->set_workspace_bytes(memory_options.workspace_bytes[static_cast<size_t>(i)]);
    }
    if (const int32_t c = memory.counters[static_cast<size_t>(i)]; c >= 0) {
      s->set_counters_offset(memory.buffers[static_cast<size_t>(c)].offset);
      s->set_counters_bytes(memory_options.counter_bytes[static_cast<size_t>(i)]);
    }
    proto::Provenance* p = s->mutable_provenance();
    p->set_cache_key(c.key.ToString());
    for (const std::string& line : c.considered) p->add_considered(line);
    for (const std::string& line : reuses[static_cast<size_t>(i)]) p->add_reuses(line);
    launches += c.estimate.launches;
    bytes += c.estimate.bytes;
    estimated_us += c.estimate.us;
  }
  for (proto::PersistentRun& run : runs) {
    for (int i = run.first_step(); i <= run.last_step(); ++i) {
      launches -= choices[static_cast<size_t>(i)].estimate.launches;
      estimated_us -= choices[static_cast<size_t>(i)].estimate.us;
    }
    launches += 1;
    estimated_us += run.estimated_us();
    *phase.add_persistent() = std::move(run);
  }
  phase.set_launches(static_cast<int32_t>(launches));
  phase.set_bytes(bytes);
  phase.set_estimated_us(estimated_us);
  FillArena(graph, memory, phase.mutable_arena());
  if (const auto b = spec.bindings.find("B"); b != spec.bindings.end()) {
    phase.mutable_arena()->set_state_sequences(std::max(spec.state_batch, b->second));
  }
  return phase;
}

absl::StatusOr<proto::ExecutionPlan> BuildExecutionPlan(const models::ModelConfig& config,
                                                        const targets::TargetDescription& target,
                                                        const PlanOptions& options,
                                                        const TacticCache* cache) {
  TP_RETURN_IF_ERROR(CheckOptions(options));
  if (config.max_position_embeddings > 0 && options.max_context > config.max_position_embeddings) {
    return absl::InvalidArgumentError(absl::StrCat(
        "plan options: max_context ", options.max_context,
        " exceeds the model's max_position_embeddings ", config.max_position_embeddings,
        " (config.json): positions past it are outside what the model was made for"));
  }
  if (options.tensor_parallel > 1 && !(target.achievable_interconnect_bandwidth_gbps() > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "plan options: tensor parallelism over ", options.tensor_parallel, " ranks, but target ",
        target.name(), " describes no interconnect between its GPUs (docs/targets.md)"));
  }
  TP_ASSIGN_OR_RETURN(
      ir::Graph primitive,
      models::LowerModel(config, models::TensorParallel{options.tensor_parallel, options.rank}));
  const kernels::KernelRegistry& registry = kernels::GlobalKernelRegistry();
  for (const std::string& name : options.excluded_families) {
    if (registry.Find(name) == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("plan options: excluded_families names '", name, "', not a kernel family"));
    }
  }

  proto::ExecutionPlan plan;
  plan.set_format_version(kPlanFormatVersion);
  plan.set_model(options.model_name.empty() ? std::string(models::ArchitectureName(config.arch))
                                            : options.model_name);
  *plan.mutable_target() = target;
  proto::PlanOptions* o = plan.mutable_options();
  for (int64_t t : options.prefill_tokens) o->add_prefill_tokens(t);
  o->set_prefill_batch(options.prefill_batch);
  for (int64_t b : options.decode_batches) o->add_decode_batches(b);
  o->set_max_context(options.max_context);
  const int64_t decode_context =
      options.decode_context > 0 ? options.decode_context : options.max_context;
  o->set_decode_context(decode_context);
  o->set_decode_backend(options.decode_backend);
  o->set_persistent_blocks_per_sm(options.persistent_blocks_per_sm);
  o->set_persistent_stream_slots(options.persistent_stream_slots);
  o->set_prefill_last_token_logits(options.prefill_last_token_logits);
  // --nomla_prefill is one more family left out, recorded with the others so that the tuner
  // skips it too.
  std::vector<std::string> excluded = options.excluded_families;
  if (!options.prefill_mla_expanded &&
      std::find(excluded.begin(), excluded.end(), "mla_prefill") == excluded.end()) {
    excluded.push_back("mla_prefill");
  }
  for (const std::string& name : excluded) o->add_excluded_families(name);
  if (options.tensor_parallel > 1) {
    o->set_tensor_parallel_ranks(options.tensor_parallel);
    o->set_tensor_parallel_rank(options.rank);
  }
  const CostCalibration* calibration = nullptr;
  if (options.calibrate) {
    calibration = options.calibration != nullptr ? options.calibration
                                                 : CostCalibration::Bundled(target.name());
  }
  if (calibration != nullptr && calibration->num_samples() > 0) {
    o->set_cost_calibration(absl::StrCat(calibration->proto().target(), ": ",
                                         calibration->num_samples(), " samples of ",
                                         calibration->proto().families_size(), " families"));
  } else {
    calibration = nullptr;
  }

  std::map<std::string, proto::PackedWeight> packed;
  // Runs the phase's pipeline on a copy of the primitive graph, then plans the result.
  auto plan_phase = [&](PhaseSpec spec, absl::StatusOr<PassPipeline> pipeline) -> absl::Status {
    if (!pipeline.ok()) return pipeline.status();
    ir::Graph graph = primitive;
    if (options.print.out != nullptr && (options.print.after_all || !options.print.after.empty())) {
      *options.print.out << "// ===== " << spec.name << "\n";
    }
    absl::StatusOr<bool> ran = pipeline->Run(graph, options.print);
    if (!ran.ok()) {
      return absl::Status(ran.status().code(),
                          absl::StrCat(spec.name, ": ", ran.status().message()));
    }
    spec.pipeline = pipeline->PassNames();
    spec.environment = options.environment;
    spec.tensor_parallel = options.tensor_parallel;
    spec.calibration = calibration;
    spec.persistent.backend = options.decode_backend;
    spec.persistent.blocks_per_sm = options.persistent_blocks_per_sm;
    spec.persistent.stream_slots = options.persistent_stream_slots;
    spec.excluded_families = excluded;
    TP_RETURN_IF_ERROR(CollectPackedWeights(graph, &packed));
    absl::StatusOr<proto::Phase> phase = PlanPhase(graph, spec, target, registry, cache);
    if (!phase.ok()) {
      return absl::Status(phase.status().code(),
                          absl::StrCat(spec.name, ": ", phase.status().message()));
    }
    *plan.add_phases() = *std::move(phase);
    return absl::OkStatus();
  };
  // Every phase shares the KV cache: laid out for the largest batch of any phase.
  int64_t state_batch = options.prefill_tokens.empty() ? 1 : options.prefill_batch;
  for (int64_t b : options.decode_batches) state_batch = std::max(state_batch, b);
  for (int64_t tokens : options.prefill_tokens) {
    PhaseSpec spec;
    spec.state_batch = state_batch;
    spec.kind = proto::Phase::KIND_PREFILL;
    spec.name = absl::StrCat("prefill T=", tokens);
    spec.bindings = {{"B", options.prefill_batch}, {"Smax", options.max_context}, {"T", tokens}};
    spec.context = tokens;
    PipelineOptions pipeline;
    pipeline.tokens = tokens;
    pipeline.batch = options.prefill_batch;
    pipeline.last_token_logits = options.prefill_last_token_logits;
    TP_RETURN_IF_ERROR(plan_phase(std::move(spec), BuildPrefillPipeline(pipeline)));
  }
  for (int64_t batch : options.decode_batches) {
    PhaseSpec spec;
    spec.kind = proto::Phase::KIND_DECODE;
    spec.name = absl::StrCat("decode B=", batch);
    spec.state_batch = state_batch;
    spec.bindings = {{"B", batch}, {"Smax", options.max_context}, {"T", 1}};
    spec.context = decode_context;
    PipelineOptions pipeline;
    pipeline.fuse_moe = options.decode_fuse_moe;
    pipeline.fuse_rope_attention = options.decode_fuse_rope_attention;
    pipeline.rope_attention_max_batch = options.decode_rope_attention_max_batch;
    pipeline.norm_linear_max_rows = options.decode_norm_linear_max_rows;
    pipeline.fuse_norm_moe = options.decode_fuse_norm_moe;
    pipeline.batch = batch;
    TP_RETURN_IF_ERROR(plan_phase(std::move(spec), BuildDecodePipeline(pipeline)));
  }
  for (auto& [name, weight] : packed) *plan.add_weight_packing() = std::move(weight);
  TP_RETURN_IF_ERROR(CheckFitsTarget(plan, target));
  return plan;
}

}  // namespace tileplan::planner
