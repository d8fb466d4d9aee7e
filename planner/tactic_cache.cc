#include "planner/tactic_cache.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "regions/printer.h"

namespace tileplan::planner {
namespace {

std::string TypeText(const kernels::BoundGraph& g, ir::ValueId id) {
  const kernels::Layout& l = g.layout(id);
  std::string out = absl::StrCat(ir::DTypeName(g.dtype(id)), "[", absl::StrJoin(l.shape, ","), "]");
  if (!l.IsContiguous() || l.offset != 0) {
    absl::StrAppend(&out, "@strides[", absl::StrJoin(l.strides, ","), "]+", l.offset);
  }
  return out;
}

}  // namespace

std::string EnvironmentFingerprint(const targets::TargetDescription& target) {
  return absl::StrCat(target.name(), "/sm_", target.sm(), "/", target.sm_count(), "sm");
}

std::string RegionSignature(const kernels::BoundRegion& region) {
  const kernels::BoundGraph& g = region.bound_graph();
  const ir::Region& r = region.region();
  std::string out = absl::StrCat(r.kind, "(");
  for (size_t i = 0; i < r.operands.size(); ++i) {
    absl::StrAppend(&out, i ? ", " : "", TypeText(g, r.operands[i]));
  }
  out += ") -> (";
  for (size_t i = 0; i < r.results.size(); ++i) {
    absl::StrAppend(&out, i ? ", " : "", TypeText(g, r.results[i]));
    const ir::ResultAlias& a = r.result_aliases[i];
    if (a.kind == ir::AliasKind::kInPlace) absl::StrAppend(&out, " inplace(", a.operand, ")");
    if (a.kind == ir::AliasKind::kView) absl::StrAppend(&out, " view(", a.operand, ")");
  }
  out += ") {";
  bool first = true;
  for (const auto& [key, value] : r.attrs.map()) {
    absl::StrAppend(&out, first ? "" : ", ", key, " = ", ir::PrintAttrValue(value));
    first = false;
  }
  out += "}";
  return out;
}

std::string TacticKey::ToString() const {
  return absl::StrCat(environment, " | ", region_signature, " | ", shape_bucket, " | ",
                      ir::PhaseName(phase), " | ", family, " v", family_version);
}

TacticKey TacticKeyFor(const kernels::BoundRegion& region, ir::Phase phase,
                       const kernels::KernelFamily& family, absl::string_view environment,
                       int64_t tensor_parallel) {
  TacticKey key;
  key.environment = std::string(environment);
  key.region_signature = RegionSignature(region);
  key.shape_bucket = kernels::BindingsString(region.bound_graph().bindings());
  if (tensor_parallel > 1) absl::StrAppend(&key.shape_bucket, ";tp=", tensor_parallel);
  key.phase = phase;
  key.family = std::string(family.name());
  key.family_version = family.version();
  return key;
}

void InMemoryTacticCache::Insert(TacticKey key, MeasuredTactic tactic) {
  entries_[std::move(key)] = std::move(tactic);
}

std::optional<MeasuredTactic> InMemoryTacticCache::Lookup(const TacticKey& key) const {
  auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

std::optional<MeasuredTactic> RecordingTacticCache::Lookup(const TacticKey& key) const {
  std::optional<MeasuredTactic> hit = inner_ != nullptr ? inner_->Lookup(key) : std::nullopt;
  std::lock_guard<std::mutex> lock(mu_);
  Record& record = records_[key];
  ++record.lookups;
  record.hit = hit.has_value();
  return hit;
}

std::map<TacticKey, RecordingTacticCache::Record> RecordingTacticCache::records() const {
  std::lock_guard<std::mutex> lock(mu_);
  return records_;
}

}  // namespace tileplan::planner
