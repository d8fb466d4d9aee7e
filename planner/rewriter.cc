#include "planner/rewriter.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace tileplan::planner {

std::string RegionLabel(const ir::Graph& graph, int index) {
  const ir::Region& r = graph.regions()[static_cast<size_t>(index)];
  return absl::StrCat("region #", index, " '", r.kind, "' (%", graph.value(r.results[0]).name, ")");
}

const ir::Region* Producer(const ir::Graph& graph, ir::ValueId value) {
  const ir::Value& v = graph.value(value);
  if (v.kind != ir::ValueKind::kResult) return nullptr;
  return &graph.regions()[static_cast<size_t>(v.producer)];
}

bool IsResultOf(const ir::Graph& graph, ir::ValueId value, absl::string_view kind, int result) {
  const ir::Region* p = Producer(graph, value);
  return p != nullptr && p->kind == kind && graph.value(value).result_index == result;
}

UseMap::UseMap(const ir::Graph& graph)
    : uses_(static_cast<size_t>(graph.num_values())),
      is_output_(static_cast<size_t>(graph.num_values()), false),
      inplace_writer_(static_cast<size_t>(graph.num_values()), -1) {
  for (size_t i = 0; i < graph.regions().size(); ++i) {
    const ir::Region& r = graph.regions()[i];
    for (size_t k = 0; k < r.operands.size(); ++k) {
      uses_[r.operands[k]].push_back(Use{static_cast<int>(i), static_cast<int>(k)});
    }
    for (const ir::ResultAlias& alias : r.result_aliases) {
      if (alias.kind == ir::AliasKind::kInPlace) {
        inplace_writer_[r.operands[alias.operand]] = static_cast<int>(i);
      }
    }
  }
  for (ir::ValueId out : graph.outputs()) is_output_[out] = true;
}

int UseMap::SoleUser(ir::ValueId value) const {
  const std::vector<Use>& u = uses_[value];
  return u.size() == 1 && !is_output_[value] ? u[0].region : -1;
}

int UseMap::SoleUserOfKind(const ir::Graph& graph, ir::ValueId value, absl::string_view kind,
                           int operand) const {
  const int user = SoleUser(value);
  if (user < 0) return -1;
  const ir::Region& r = graph.regions()[static_cast<size_t>(user)];
  if (r.kind != kind || r.operands[static_cast<size_t>(operand)] != value) return -1;
  return user;
}

bool UseMap::UsedOnlyBy(ir::ValueId value, const std::set<int>& regions) const {
  if (is_output_[value]) return false;
  for (const Use& use : uses_[value]) {
    if (!regions.count(use.region)) return false;
  }
  return true;
}

int FindAnchor(const ir::Graph& graph, const UseMap& uses, const std::vector<int>& match,
               const std::vector<ir::ValueId>& operands, const std::vector<ir::ValueId>& exported) {
  const std::set<int> members(match.begin(), match.end());
  int last_writer = -1;
  for (int index : match) {
    for (const ir::ResultAlias& alias :
         graph.regions()[static_cast<size_t>(index)].result_aliases) {
      if (alias.kind == ir::AliasKind::kInPlace) last_writer = std::max(last_writer, index);
    }
  }
  std::vector<int> candidates(members.rbegin(), members.rend());
  for (int p : candidates) {
    if (p < last_writer) break;
    bool ok = true;
    for (ir::ValueId v : operands) {
      const ir::Value& value = graph.value(v);
      if (value.kind == ir::ValueKind::kResult &&
          (value.producer >= p || members.count(value.producer))) {
        ok = false;
      }
      const int writer = uses.InPlaceWriter(v);
      if (writer >= 0 && writer < p && !members.count(writer)) ok = false;
    }
    for (ir::ValueId v : exported) {
      for (const Use& use : uses.uses(v)) {
        if (!members.count(use.region) && use.region <= p) ok = false;
      }
    }
    if (ok) return p;
  }
  return -1;
}

const ir::Graph& RegionEmitter::source() const { return rw_.source_; }

absl::StatusOr<ir::ValueId> RegionEmitter::Map(ir::ValueId value) const {
  const ir::ValueId mapped = rw_.map_[static_cast<size_t>(value)];
  if (mapped == ir::kNoValue) {
    return absl::InternalError(absl::StrCat("the replacement of ", RegionLabel(source(), index_),
                                            " reads %", source().value(value).name,
                                            ", which the rewrite removed"));
  }
  return mapped;
}

absl::StatusOr<std::vector<ir::ValueId>> RegionEmitter::MapAll(
    const std::vector<ir::ValueId>& values) const {
  std::vector<ir::ValueId> mapped;
  for (ir::ValueId v : values) {
    TP_ASSIGN_OR_RETURN(ir::ValueId m, Map(v));
    mapped.push_back(m);
  }
  return mapped;
}

ir::ValueId RegionEmitter::NewWeight(int key) const {
  return rw_.weight_replacements_[static_cast<size_t>(key)].new_id;
}

absl::StatusOr<std::vector<ir::ValueId>> RegionEmitter::Emit(std::string kind,
                                                             std::vector<ir::ValueId> operands,
                                                             std::vector<ir::ResultSpec> results,
                                                             ir::Attributes attrs,
                                                             std::vector<std::string> fused_from) {
  const ir::Phase phase = source().regions()[static_cast<size_t>(index_)].phase;
  absl::StatusOr<std::vector<ir::ValueId>> ids =
      rw_.target_->AddRegion(std::move(kind), std::move(operands), std::move(results),
                             std::move(attrs), phase, std::move(fused_from));
  if (!ids.ok()) {
    return absl::InternalError(absl::StrCat("the replacement of ", RegionLabel(source(), index_),
                                            ": ", ids.status().message()));
  }
  return ids;
}

void RegionEmitter::Bind(ir::ValueId source, ir::ValueId value) {
  rw_.map_[static_cast<size_t>(source)] = value;
}

absl::Status RegionEmitter::EmitFused(std::string kind, const std::vector<ir::ValueId>& operands,
                                      const std::vector<ir::ValueId>& exported,
                                      const std::vector<ir::ResultAlias>& aliases,
                                      ir::Attributes attrs, std::vector<std::string> fused_from) {
  TP_ASSIGN_OR_RETURN(std::vector<ir::ValueId> new_operands, MapAll(operands));
  std::vector<ir::ResultSpec> results;
  for (size_t j = 0; j < exported.size(); ++j) {
    const ir::Value& r = source().value(exported[j]);
    results.push_back(ir::ResultSpec{r.name, r.type, aliases[j]});
  }
  TP_ASSIGN_OR_RETURN(std::vector<ir::ValueId> ids,
                      Emit(std::move(kind), std::move(new_operands), std::move(results),
                           std::move(attrs), std::move(fused_from)));
  for (size_t j = 0; j < exported.size(); ++j) Bind(exported[j], ids[j]);
  return absl::OkStatus();
}

GraphRewriter::GraphRewriter(const ir::Graph& source) : source_(source) {}

absl::StatusOr<int> GraphRewriter::ReplaceWeights(const std::vector<ir::ValueId>& parts,
                                                  std::string name, ir::TensorType type,
                                                  std::vector<std::string> checkpoint_tensors,
                                                  std::vector<ir::TensorSlice> checkpoint_slices) {
  if (parts.empty()) return absl::InvalidArgumentError("a weight replacement needs parts");
  const int key = static_cast<int>(weight_replacements_.size());
  for (ir::ValueId part : parts) {
    const ir::Value& v = source_.value(part);
    if (v.kind != ir::ValueKind::kWeight) {
      return absl::InvalidArgumentError(absl::StrCat("%", v.name, " is not a weight"));
    }
    if (replaced_weights_.count(part)) {
      return absl::InvalidArgumentError(absl::StrCat("weight %", v.name, " is replaced twice"));
    }
  }
  for (ir::ValueId part : parts) replaced_weights_[part] = key;
  weight_replacements_.push_back(WeightReplacement{parts, std::move(name), std::move(type),
                                                   std::move(checkpoint_tensors),
                                                   std::move(checkpoint_slices)});
  return key;
}

absl::Status GraphRewriter::Replace(int index, EmitFn emit) {
  if (actions_.count(index)) {
    return absl::InvalidArgumentError(
        absl::StrCat(RegionLabel(source_, index), " is rewritten twice"));
  }
  actions_[index] = Action{false, std::move(emit)};
  return absl::OkStatus();
}

absl::Status GraphRewriter::Drop(int index) {
  if (actions_.count(index)) {
    return absl::InvalidArgumentError(
        absl::StrCat(RegionLabel(source_, index), " is rewritten twice"));
  }
  actions_[index] = Action{true, nullptr};
  return absl::OkStatus();
}

std::string GraphRewriter::UniqueName(absl::string_view base) {
  std::string name(base);
  for (int n = 1; source_.FindValue(name) != ir::kNoValue || claimed_names_.count(name); ++n) {
    name = absl::StrCat(base, ".", n);
  }
  claimed_names_.insert(name);
  return name;
}

absl::Status GraphRewriter::CopyDeclarations() {
  for (ir::ValueId id = 0; id < source_.num_values(); ++id) {
    const ir::Value& v = source_.value(id);
    absl::StatusOr<ir::ValueId> copy;
    switch (v.kind) {
      case ir::ValueKind::kResult:
        continue;
      case ir::ValueKind::kInput:
        copy = target_->AddInput(v.name, v.type);
        break;
      case ir::ValueKind::kState:
        copy = target_->AddState(v.name, v.type);
        break;
      case ir::ValueKind::kWeight: {
        auto it = replaced_weights_.find(id);
        if (it == replaced_weights_.end()) {
          copy = target_->AddWeight(v.name, v.type, v.checkpoint_tensors, v.checkpoint_slices);
          break;
        }
        WeightReplacement& r = weight_replacements_[static_cast<size_t>(it->second)];
        if (r.parts.front() == id) {
          TP_ASSIGN_OR_RETURN(r.new_id, target_->AddWeight(r.name, r.type, r.checkpoint_tensors,
                                                           r.checkpoint_slices));
        }
        continue;
      }
    }
    if (!copy.ok()) return absl::InternalError(copy.status().message());
    map_[static_cast<size_t>(id)] = *copy;
  }
  return absl::OkStatus();
}

absl::Status GraphRewriter::CopyRegion(int index) {
  const ir::Region& r = source_.regions()[static_cast<size_t>(index)];
  std::vector<ir::ValueId> operands;
  for (ir::ValueId op : r.operands) {
    const ir::ValueId mapped = map_[static_cast<size_t>(op)];
    if (mapped == ir::kNoValue) {
      return absl::InternalError(absl::StrCat(RegionLabel(source_, index), " reads %",
                                              source_.value(op).name,
                                              ", which the rewrite removed"));
    }
    operands.push_back(mapped);
  }
  std::vector<ir::ResultSpec> results;
  for (size_t j = 0; j < r.results.size(); ++j) {
    const ir::Value& v = source_.value(r.results[j]);
    results.push_back(ir::ResultSpec{v.name, v.type, r.result_aliases[j]});
  }
  absl::StatusOr<std::vector<ir::ValueId>> ids = target_->AddRegion(
      r.kind, std::move(operands), std::move(results), r.attrs, r.phase, r.fused_from);
  if (!ids.ok()) {
    return absl::InternalError(
        absl::StrCat("copying ", RegionLabel(source_, index), ": ", ids.status().message()));
  }
  for (size_t j = 0; j < r.results.size(); ++j) map_[static_cast<size_t>(r.results[j])] = (*ids)[j];
  return absl::OkStatus();
}

absl::StatusOr<ir::Graph> GraphRewriter::Rebuild() {
  ir::Graph target(source_.name());
  target_ = &target;
  map_.assign(static_cast<size_t>(source_.num_values()), ir::kNoValue);
  absl::Status status = [&]() -> absl::Status {
    TP_RETURN_IF_ERROR(CopyDeclarations());
    for (size_t i = 0; i < source_.regions().size(); ++i) {
      const int index = static_cast<int>(i);
      auto it = actions_.find(index);
      if (it == actions_.end()) {
        TP_RETURN_IF_ERROR(CopyRegion(index));
      } else if (!it->second.drop) {
        RegionEmitter emitter(*this, index);
        TP_RETURN_IF_ERROR(it->second.emit(emitter));
      }
    }
    for (ir::ValueId out : source_.outputs()) {
      const ir::ValueId mapped = map_[static_cast<size_t>(out)];
      if (mapped == ir::kNoValue) {
        return absl::InternalError(
            absl::StrCat("graph output %", source_.value(out).name, " was removed by the rewrite"));
      }
      TP_RETURN_IF_ERROR(target.AddOutput(mapped));
    }
    return absl::OkStatus();
  }();
  target_ = nullptr;
  map_.clear();
  if (!status.ok()) return status;
  return target;
}

}  // namespace tileplan::planner
