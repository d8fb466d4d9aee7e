#include "planner/plan_text.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"

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
  if (name == "textproto") return PlanFormat::kTextProto;
  if (name == "json") return PlanFormat::kJson;
  if (name == "binary") return PlanFormat::kBinary;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown plan format '", name, "' (table, textproto, json or binary)"));
}

PlanFormat PlanFormatForPath(absl::string_view path) {
  if (absl::EndsWith(path, ".json")) return PlanFormat::kJson;
  if (absl::EndsWith(path, ".textproto") || absl::EndsWith(path, ".txtpb") ||
      absl::EndsWith(path, ".pbtxt")) {
    return PlanFormat::kTextProto;
  }
  if (absl::EndsWith(path, ".binpb") || absl::EndsWith(path, ".pb")) return PlanFormat::kBinary;
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

std::string PlanTable(const proto::ExecutionPlan& plan) {
  const targets::TargetDescription& t = plan.target();
  std::string out = absl::StrFormat("plan %s on %s (%s, sm_%d, %d SMs): %d phases\n", plan.model(),
                                    t.name(), t.gpu(), t.sm(), t.sm_count(), plan.phases_size());
  absl::StrAppend(&out, "packed weights: ", plan.weight_packing_size(), "\n");
  for (const proto::Phase& phase : plan.phases()) {
    std::vector<std::string> bindings;
    for (const proto::SymbolBinding& b : phase.bindings()) {
      bindings.push_back(absl::StrCat(b.symbol(), "=", b.extent()));
    }
    absl::StrAppend(&out, "\n", phase.name(), " (", absl::StrJoin(bindings, ", "), "; context ",
                    phase.context(), phase.cuda_graph() ? "; CUDA graph" : "", "; pipeline: ",
                    phase.pipeline().empty() ? "none" : absl::StrJoin(phase.pipeline(), ", "),
                    ")\n");
    std::vector<std::vector<std::string>> rows = {{"step", "region", "kind", "fused from", "family",
                                                   "tactic", "source", "est us", "measured us",
                                                   "bytes"}};
    for (int i = 0; i < phase.steps_size(); ++i) {
      const proto::Step& s = phase.steps(i);
      rows.push_back(
          {absl::StrCat(i), s.name(), s.kind(), CompactFusedFrom(s.fused_from()),
           s.tactic().family(), TacticText(s.tactic()),
           s.source() == proto::Step::SOURCE_TUNED ? "tuned" : "cost model",
           absl::StrFormat("%.2f", s.estimated_us()),
           s.source() == proto::Step::SOURCE_TUNED ? absl::StrFormat("%.2f", s.measured_us()) : "-",
           HumanBytes(s.bytes())});
    }
    out += Columns(rows, {true, false, false, false, false, false, false, true, true, true});
    const bool decode = phase.kind() == proto::Phase::KIND_DECODE;
    absl::StrAppend(&out, "launches per ", decode ? "decode" : "prefill",
                    " step: ", phase.launches(), "\n");
    absl::StrAppend(&out, absl::StrFormat("estimated %.2f us, %s moved\n", phase.estimated_us(),
                                          HumanBytes(phase.bytes())));
    const proto::Arena& a = phase.arena();
    absl::StrAppend(&out, "memory: arena ", HumanBytes(a.arena_bytes()), ", peak live ",
                    HumanBytes(a.peak_live_bytes()), ", intermediates ",
                    HumanBytes(a.intermediate_bytes()), ", KV cache ", HumanBytes(a.state_bytes()),
                    ", weights ", HumanBytes(a.weight_bytes()), "\n");
    absl::StrAppend(&out, CachePerToken(phase));
  }
  return out;
}

absl::StatusOr<std::string> FormatPlan(const proto::ExecutionPlan& plan, PlanFormat format) {
  switch (format) {
    case PlanFormat::kTable:
      return PlanTable(plan);
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

}  // namespace tileplan::planner
