#include "planner/plan_text.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/files.h"
#include "base/status_macros.h"
#include "base/text_proto.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"
#include "planner/plan_builder.h"
#include "planner/plan_svg.h"

namespace tileplan::planner {
namespace {

std::string TacticText(const kernels::proto::Tactic& t) {
  if (t.params_size() == 0) return "-";
  std::vector<std::string> parts;
  for (const kernels::proto::TacticParam& p : t.params()) {
    parts.push_back(absl::StrCat(p.name(), "=", p.value()));
  }
  return absl::StrJoin(parts, ",");
}

// Left-aligned columns except those listed as right-aligned, two spaces apart.
std::string Columns(const std::vector<std::vector<std::string>>& rows,
                    const std::vector<bool>& right) {
  std::vector<size_t> width(right.size(), 0);
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      const std::string pad(width[c] - row[c].size(), ' ');
      if (c > 0) line += "  ";
      line += right[c] ? pad + row[c] : row[c] + (c + 1 < row.size() ? pad : "");
    }
    out += line + "\n";
  }
  return out;
}

}  // namespace

absl::StatusOr<PlanFormat> ParsePlanFormat(absl::string_view name) {
  if (name == "table") return PlanFormat::kTable;
  if (name == "table-all") return PlanFormat::kTableAll;
  if (name == "memory") return PlanFormat::kMemory;
  if (name == "svg") return PlanFormat::kSvg;
  if (name == "textproto") return PlanFormat::kTextProto;
  if (name == "json") return PlanFormat::kJson;
  if (name == "binary") return PlanFormat::kBinary;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown plan format '", name,
                   "' (table, table-all, memory, svg, textproto, json or binary)"));
}

PlanFormat PlanFormatForPath(absl::string_view path) {
  if (absl::EndsWith(path, ".json")) return PlanFormat::kJson;
  if (absl::EndsWith(path, ".textproto") || absl::EndsWith(path, ".txtpb") ||
      absl::EndsWith(path, ".pbtxt")) {
    return PlanFormat::kTextProto;
  }
  if (absl::EndsWith(path, ".binpb") || absl::EndsWith(path, ".pb")) return PlanFormat::kBinary;
  if (absl::EndsWith(path, ".svg")) return PlanFormat::kSvg;
  return PlanFormat::kTable;
}

std::string HumanBytes(int64_t bytes) {
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes) / 1024;
  int u = 0;
  while (v >= 1024 && u < 3) {
    v /= 1024;
    ++u;
  }
  return absl::StrFormat("%.2f %s", v, units[u]);
}

std::string CompactFusedFrom(const google::protobuf::RepeatedPtrField<std::string>& kinds) {
  if (kinds.empty()) return "-";
  std::vector<std::string> parts;
  for (int i = 0; i < kinds.size();) {
    int j = i;
    while (j < kinds.size() && kinds[j] == kinds[i]) ++j;
    parts.push_back(j - i > 1 ? absl::StrCat(kinds[i], "*", j - i) : kinds[i]);
    i = j;
  }
  return absl::StrJoin(parts, ",");
}

// "KV cache per token: 1152 B per layer (latent_cache 1024 B + rope_cache 128 B) x 27 layers\n":
// the state bytes per cached position and sequence, grouped by state name without its layer
// suffix ("k_cache.3" -> "k_cache"); empty when the phase binds no B or Smax or has no state.
std::string CachePerToken(const proto::Phase& phase) {
  int64_t batch = 0, capacity = 0;
  for (const proto::SymbolBinding& b : phase.bindings()) {
    if (b.symbol() == "B") batch = b.extent();
    if (b.symbol() == "Smax") capacity = b.extent();
  }
  const proto::Arena& a = phase.arena();
  if (a.state_sequences() > 0) batch = a.state_sequences();
  if (batch <= 0 || capacity <= 0 || a.states().empty()) return "";
  std::vector<std::pair<std::string, int64_t>> groups;  // first-seen order
  std::map<std::string, int> layers;
  for (const proto::StateSlot& slot : a.states()) {
    const std::string& name = slot.state();
    const size_t dot = name.rfind('.');
    const std::string group = dot == std::string::npos ? name : name.substr(0, dot);
    const int64_t per_token = slot.bytes() / (batch * capacity);
    if (++layers[group] == 1) {
      groups.push_back({group, per_token});
    } else {
      for (auto& [g, bytes] : groups) {
        if (g == group && bytes != per_token) bytes = -1;  // differs between layers
      }
    }
  }
  const int count = layers.begin()->second;
  int64_t total = 0;
  std::vector<std::string> parts;
  for (const auto& [group, bytes] : groups) {
    if (bytes < 0 || layers[group] != count) return "";
    total += bytes;
    parts.push_back(absl::StrCat(group, " ", bytes, " B"));
  }
  return absl::StrCat("KV cache per token: ", total, " B per layer (", absl::StrJoin(parts, " + "),
                      ") x ", count, count == 1 ? " layer\n" : " layers\n");
}

namespace {

// "4.29 G", "512.00 M", "12.00 K", "7"; "-" for none.
std::string HumanCount(int64_t n) {
  if (n <= 0) return "-";
  if (n < 1000) return absl::StrCat(n);
  const char* units[] = {"K", "M", "G", "T", "P"};
  double v = static_cast<double>(n) / 1000;
  int u = 0;
  while (v >= 1000 && u < 4) {
    v /= 1000;
    ++u;
  }
  return absl::StrFormat("%.2f %s", v, units[u]);
}

std::string Dims(const google::protobuf::RepeatedField<int64_t>& dims) {
  if (dims.empty()) return "scalar";
  return absl::StrJoin(dims, "x");
}

// The first operand's shape and the first result's: "1x512x2048>1x512x4096".
std::string StepShape(const proto::Step& s) {
  if (s.operands().empty() || s.results().empty()) return "-";
  return absl::StrCat(Dims(s.operands(0).shape()), ">", Dims(s.results(0).shape()));
}

std::string GridText(const proto::Launch& l) {
  bool any = false;
  for (int64_t x : l.grid()) any = any || x != 0;
  if (!any) return "-";
  return absl::StrCat(absl::StrJoin(l.grid(), "x"), l.library_managed() ? " (lib)" : "");
}

absl::string_view BoundText(proto::Step::Bound b) {
  switch (b) {
    case proto::Step::BOUND_MEMORY:
      return "memory";
    case proto::Step::BOUND_MATH:
      return "math";
    case proto::Step::BOUND_LAUNCH:
      return "launch";
    case proto::Step::BOUND_LINK:
      return "link";
    default:
      return "-";
  }
}

// The layer of a step named "l<digits>.<rest>" and <rest>; layer -1 for any other name.
std::pair<int, std::string> LayerOf(const std::string& name) {
  size_t i = 1;
  while (i < name.size() && absl::ascii_isdigit(static_cast<unsigned char>(name[i]))) ++i;
  if (name.size() < 3 || name[0] != 'l' || i == 1 || i >= name.size() || name[i] != '.' || i > 7) {
    return {-1, name};
  }
  return {std::stoi(name.substr(1, i - 1)), name.substr(i + 1)};
}

// Every column of step `i` but the step number, with `name` for its region.
std::vector<std::string> StepCells(const proto::Step& s, const std::string& name) {
  const bool tuned = s.source() == proto::Step::SOURCE_TUNED;
  return {name,
          s.kind(),
          CompactFusedFrom(s.fused_from()),
          s.tactic().family(),
          TacticText(s.tactic()),
          tuned                                          ? "tuned"
          : s.source() == proto::Step::SOURCE_CALIBRATED ? "calibrated"
                                                         : "cost model",
          absl::StrFormat("%.2f", s.estimated_us()),
          tuned ? absl::StrFormat("%.2f", s.measured_us()) : "-",
          HumanBytes(s.bytes()),
          HumanCount(s.flops()),
          GridText(s.launch()),
          std::string(BoundText(s.bound())),
          StepShape(s)};
}

// The phase's step rows, runs of identical consecutive layers folded when asked; `notes` gets,
// per row index, the line to print above that row (the layers a folded run stands for).
std::vector<std::vector<std::string>> StepRows(const proto::Phase& phase, bool fold_layers,
                                               std::map<size_t, std::string>* notes) {
  std::vector<std::vector<std::string>> rows = {{"step", "region", "kind", "fused from", "family",
                                                 "tactic", "source", "est us", "measured us",
                                                 "bytes", "flops", "grid", "bound", "shape"}};
  auto add = [&rows](int step, std::vector<std::string> cells) {
    cells.insert(cells.begin(), absl::StrCat(step));
    rows.push_back(std::move(cells));
  };
  // Blocks: maximal runs of steps of one layer, or single steps outside any layer.
  struct Block {
    int layer, begin, end;
  };
  std::vector<Block> blocks;
  for (int i = 0; i < phase.steps_size(); ++i) {
    const int layer = LayerOf(phase.steps(i).name()).first;
    if (layer >= 0 && !blocks.empty() && blocks.back().layer == layer && blocks.back().end == i) {
      ++blocks.back().end;
    } else {
      blocks.push_back({layer, i, i + 1});
    }
  }
  // A layer block's cells with its layer number replaced: equal signatures, identical layers.
  auto signature = [&phase](const Block& b) {
    std::vector<std::string> cells;
    for (int i = b.begin; i < b.end; ++i) {
      const proto::Step& s = phase.steps(i);
      absl::StrAppend(&cells.emplace_back(),
                      absl::StrJoin(StepCells(s, LayerOf(s.name()).second), "|"));
    }
    return absl::StrJoin(cells, "\n");
  };
  for (size_t k = 0; k < blocks.size();) {
    const Block& b = blocks[k];
    size_t run = 1;
    if (fold_layers && b.layer >= 0) {
      const std::string first = signature(b);
      while (k + run < blocks.size() && blocks[k + run].layer == b.layer + static_cast<int>(run) &&
             signature(blocks[k + run]) == first) {
        ++run;
      }
    }
    if (run == 1) {
      for (int i = b.begin; i < b.end; ++i)
        add(i, StepCells(phase.steps(i), phase.steps(i).name()));
    } else {
      const int last = b.layer + static_cast<int>(run) - 1;
      (*notes)[rows.size()] =
          absl::StrCat("      layers ", b.layer, "-", last, ": ", run,
                       " identical layers, each as below (--show-plan=table-all lists them)");
      for (int i = b.begin; i < b.end; ++i) {
        const proto::Step& s = phase.steps(i);
        add(i, StepCells(s, absl::StrCat("l", b.layer, "-", last, ".", LayerOf(s.name()).second)));
      }
    }
    k += run;
  }
  return rows;
}

// Steps, launches, estimated time (with its share of the phase's) and bytes per region kind,
// the costliest first.
std::string KindSummary(const proto::Phase& phase) {
  struct Sums {
    int steps = 0;
    int64_t launches = 0, bytes = 0;
    double us = 0;
  };
  std::map<std::string, Sums> by_kind;
  double total = 0;
  for (const proto::Step& s : phase.steps()) {
    Sums& k = by_kind[s.kind()];
    ++k.steps;
    k.launches += s.launches();
    k.bytes += s.bytes();
    k.us += s.estimated_us();
    total += s.estimated_us();
  }
  std::vector<std::pair<std::string, Sums>> order(by_kind.begin(), by_kind.end());
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& a, const auto& b) { return a.second.us > b.second.us; });
  std::vector<std::vector<std::string>> rows = {
      {"by kind", "steps", "launches", "est us", "share", "bytes"}};
  for (const auto& [kind, k] : order) {
    rows.push_back(
        {kind, absl::StrCat(k.steps), absl::StrCat(k.launches), absl::StrFormat("%.2f", k.us),
         absl::StrFormat("%.1f%%", total > 0 ? 100 * k.us / total : 0.0), HumanBytes(k.bytes)});
  }
  return Columns(rows, {false, true, true, true, true, true});
}

std::string PhaseHeader(const proto::Phase& phase) {
  std::vector<std::string> bindings;
  for (const proto::SymbolBinding& b : phase.bindings()) {
    bindings.push_back(absl::StrCat(b.symbol(), "=", b.extent()));
  }
  return absl::StrCat("\n", phase.name(), " (", absl::StrJoin(bindings, ", "), "; context ",
                      phase.context(), phase.cuda_graph() ? "; CUDA graph" : "", "; pipeline: ",
                      phase.pipeline().empty() ? "none" : absl::StrJoin(phase.pipeline(), ", "),
                      ")\n");
}

std::string PlanHeader(const proto::ExecutionPlan& plan) {
  const targets::TargetDescription& t = plan.target();
  const std::string& calibration = plan.options().cost_calibration();
  std::string header =
      absl::StrFormat("plan %s on %s (%s, sm_%d, %d SMs): %d phases; cost model %s\n", plan.model(),
                      t.name(), t.gpu(), t.sm(), t.sm_count(), plan.phases_size(),
                      calibration.empty() ? std::string("uncalibrated")
                                          : absl::StrCat("calibrated (", calibration, ")"));
  if (const int64_t ranks = plan.options().tensor_parallel_ranks(); ranks > 1) {
    absl::StrAppendFormat(
        &header,
        "tensor parallel: rank %d of %d over %s (%.0f GB/s achievable per direction); every "
        "rank runs these steps on its slices of the weights, the collectives (family "
        "collective) meeting the other ranks; memory below is per rank\n",
        plan.options().tensor_parallel_rank(), ranks, t.interconnect(),
        t.achievable_interconnect_bandwidth_gbps());
  }
  return header;
}

// One line per persistent run: its steps, stages, blocks, the per-SM spread of its tasks and
// bytes, and its estimate against the same steps as kernels.
std::string PersistentSummary(const proto::Phase& phase) {
  std::string out;
  for (const proto::PersistentRun& run : phase.persistent()) {
    absl::StrAppend(
        &out,
        absl::StrFormat(
            "persistent kernel: steps %d-%d as %d stages in one launch, %d blocks of %d threads "
            "(%d per SM), %s shared memory; per SM %d-%d tasks, %s-%s; %s; estimated %.2f us "
            "(as kernels %.2f us)\n",
            run.first_step(), run.last_step(), run.stages_size(), run.blocks(), run.threads(),
            run.blocks_per_sm(), HumanBytes(run.dynamic_shared_memory_bytes()), run.min_sm_tasks(),
            run.max_sm_tasks(), HumanBytes(run.min_sm_bytes()), HumanBytes(run.max_sm_bytes()),
            run.stream_slots() > 0
                ? absl::StrFormat("weights of %d of %d stages streamed through %d slots of %s",
                                  run.streamed_stages(), run.stages_size(), run.stream_slots(),
                                  HumanBytes(run.stream_slot_bytes()))
                : absl::StrFormat("prefetch %d tasks ahead", run.prefetch_tasks()),
            run.estimated_us(), run.kernels_us()));
  }
  return out;
}

}  // namespace

std::string PlanTable(const proto::ExecutionPlan& plan, bool fold_layers) {
  std::string out = PlanHeader(plan);
  int packed = 0, sliced = 0;
  for (const proto::PackedWeight& w : plan.weight_packing()) {
    if (w.checkpoint_tensors_size() > 1) ++packed;
    if (w.checkpoint_slices_size() > 0) ++sliced;
  }
  absl::StrAppend(&out, "packed weights: ", packed);
  if (sliced > 0) absl::StrAppend(&out, "; weights sliced for this rank: ", sliced);
  absl::StrAppend(&out, "\n");
  for (const proto::Phase& phase : plan.phases()) {
    absl::StrAppend(&out, PhaseHeader(phase));
    std::map<size_t, std::string> notes;
    const std::string table = Columns(StepRows(phase, fold_layers, &notes),
                                      {true, false, false, false, false, false, false, true, true,
                                       true, true, false, false, false});
    size_t row = 0;
    for (absl::string_view line : absl::StrSplit(table, '\n', absl::SkipEmpty())) {
      if (auto it = notes.find(row); it != notes.end()) absl::StrAppend(&out, it->second, "\n");
      absl::StrAppend(&out, line, "\n");
      ++row;
    }
    const bool decode = phase.kind() == proto::Phase::KIND_DECODE;
    absl::StrAppend(&out, "launches per ", decode ? "decode" : "prefill",
                    " step: ", phase.launches(), "\n");
    absl::StrAppend(&out, absl::StrFormat("estimated %.2f us, %s moved\n", phase.estimated_us(),
                                          HumanBytes(phase.bytes())));
    absl::StrAppend(&out, PersistentSummary(phase));
    const proto::Arena& a = phase.arena();
    absl::StrAppend(&out, "memory: arena ", HumanBytes(a.arena_bytes()), ", peak live ",
                    HumanBytes(a.peak_live_bytes()), ", intermediates ",
                    HumanBytes(a.intermediate_bytes()), ", KV cache ", HumanBytes(a.state_bytes()),
                    ", weights ", HumanBytes(a.weight_bytes()), "\n");
    absl::StrAppend(&out, CachePerToken(phase));
    absl::StrAppend(&out, KindSummary(phase));
  }
  return out;
}

std::string PlanMemory(const proto::ExecutionPlan& plan) {
  std::string out = PlanHeader(plan);
  for (const proto::Phase& phase : plan.phases()) {
    absl::StrAppend(&out, PhaseHeader(phase));
    const proto::Arena& a = phase.arena();
    absl::StrAppend(&out, "arena ", HumanBytes(a.arena_bytes()), " (", a.arena_bytes(),
                    " bytes, alignment ", a.alignment(), "), peak live ",
                    HumanBytes(a.peak_live_bytes()), "\n");
    std::vector<std::vector<std::string>> rows = {{"offset", "bytes", "steps", "holds"}};
    for (const proto::ArenaBuffer& b : a.buffers()) {
      std::string holds;
      if (b.workspace_of() >= 0) {
        holds = absl::StrCat("workspace of step ", b.workspace_of());
      } else if (b.counters_of() >= 0) {
        holds = absl::StrCat("counters of step ", b.counters_of());
      } else {
        holds = absl::StrJoin(b.values(), ", ");
        if (b.input()) holds = absl::StrCat("input ", holds);
      }
      rows.push_back({absl::StrCat(b.offset()), HumanBytes(b.bytes()),
                      absl::StrCat(b.first_step(), "-", b.last_step()), holds});
    }
    out += Columns(rows, {true, true, true, false});
    if (!a.states().empty()) {
      std::vector<std::vector<std::string>> states = {{"state offset", "bytes", "state"}};
      for (const proto::StateSlot& s : a.states()) {
        states.push_back({absl::StrCat(s.offset()), HumanBytes(s.bytes()), s.state()});
      }
      out += Columns(states, {true, true, false});
    }
  }
  return out;
}

absl::StatusOr<std::string> FormatPlan(const proto::ExecutionPlan& plan, PlanFormat format,
                                       int svg_phase) {
  switch (format) {
    case PlanFormat::kTable:
      return PlanTable(plan, /*fold_layers=*/true);
    case PlanFormat::kTableAll:
      return PlanTable(plan, /*fold_layers=*/false);
    case PlanFormat::kMemory:
      return PlanMemory(plan);
    case PlanFormat::kSvg:
      return PlanSvg(plan, svg_phase >= 0 ? svg_phase : DefaultSvgPhase(plan));
    case PlanFormat::kTextProto: {
      std::string out;
      if (!google::protobuf::TextFormat::PrintToString(plan, &out)) {
        return absl::InternalError("the plan could not be printed as textproto");
      }
      return out;
    }
    case PlanFormat::kJson: {
      google::protobuf::util::JsonPrintOptions options;
      options.add_whitespace = true;
      options.always_print_primitive_fields = true;
      options.preserve_proto_field_names = true;
      std::string out;
      if (!google::protobuf::util::MessageToJsonString(plan, &out, options).ok()) {
        return absl::InternalError("the plan could not be printed as JSON");
      }
      return out;
    }
    case PlanFormat::kBinary: {
      std::string out;
      google::protobuf::io::StringOutputStream stream(&out);
      google::protobuf::io::CodedOutputStream coded(&stream);
      coded.SetSerializationDeterministic(true);
      if (!plan.SerializeToCodedStream(&coded)) {
        return absl::InternalError("the plan could not be serialized");
      }
      coded.Trim();
      return out;
    }
  }
  return absl::InternalError("unknown plan format");
}

absl::StatusOr<proto::ExecutionPlan> ParsePlan(absl::string_view data, PlanFormat format) {
  proto::ExecutionPlan plan;
  switch (format) {
    case PlanFormat::kTextProto: {
      TP_RETURN_IF_ERROR(ParseTextProto(data, "plan", &plan));
      break;
    }
    case PlanFormat::kJson: {
      google::protobuf::util::JsonParseOptions options;
      options.ignore_unknown_fields = true;
      const auto s = google::protobuf::util::JsonStringToMessage(std::string(data), &plan, options);
      if (!s.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("plan: not a plan's JSON: ", std::string(s.message())));
      }
      break;
    }
    case PlanFormat::kBinary: {
      if (data.size() > static_cast<size_t>(std::numeric_limits<int>::max()) ||
          !plan.ParseFromArray(data.data(), static_cast<int>(data.size()))) {
        return absl::InvalidArgumentError(
            absl::StrCat("plan: ", data.size(), " bytes that are not a plan's wire format"));
      }
      break;
    }
    default:
      return absl::InvalidArgumentError(
          "plan: only the textproto, json and binary forms can be read back (the table, "
          "memory and svg forms leave things out)");
  }
  if (format != PlanFormat::kBinary) {
    // Text escapes can put bytes into a string field that are not UTF-8, which the wire
    // format refuses: such a plan could not be passed on in binary, so it is refused here.
    std::string wire;
    proto::ExecutionPlan check;
    if (!plan.SerializeToString(&wire) || !check.ParseFromString(wire)) {
      return absl::InvalidArgumentError(
          "plan: a string field holds bytes that are not UTF-8 (the binary form refuses them)");
    }
  }
  if (plan.format_version() != kPlanFormatVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the plan has format_version ", plan.format_version(), "; this version of tileplan reads ",
        kPlanFormatVersion, " (docs/plan.md, \"Versioning\")"));
  }
  if (plan.phases().empty()) return absl::InvalidArgumentError("the plan has no phases");
  return plan;
}

absl::StatusOr<proto::ExecutionPlan> ReadPlanFile(const std::string& path) {
  const PlanFormat format = PlanFormatForPath(path);
  if (format != PlanFormat::kTextProto && format != PlanFormat::kJson &&
      format != PlanFormat::kBinary) {
    return absl::InvalidArgumentError(
        absl::StrCat(path,
                     ": a plan file is read by its name: .json, .textproto (.txtpb, "
                     ".pbtxt) or .binpb (.pb)"));
  }
  TP_ASSIGN_OR_RETURN(const std::string data, ReadRegularFile(path, kMaxPlanFileBytes));
  absl::StatusOr<proto::ExecutionPlan> plan = ParsePlan(data, format);
  if (!plan.ok()) {
    return absl::Status(plan.status().code(), absl::StrCat(path, ": ", plan.status().message()));
  }
  return plan;
}

}  // namespace tileplan::planner
