#include "regions/ir.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tileplan::ir {

absl::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
    case DType::kI32: return "i32";
  }
  return "?";
}

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  if (name == "f32") return DType::kF32;
  if (name == "bf16") return DType::kBF16;
  if (name == "f16") return DType::kF16;
  if (name == "i32") return DType::kI32;
  return absl::InvalidArgumentError(absl::StrCat("unknown dtype '", name, "'"));
}

int64_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 4;
    case DType::kBF16: return 2;
    case DType::kF16: return 2;
    case DType::kI32: return 4;
  }
  return 0;
}

std::string Dim::ToString() const {
  return is_static() ? absl::StrCat(extent_) : symbol_;
}

std::string TensorType::ToString() const {
  return absl::StrCat(DTypeName(dtype), "[",
                      absl::StrJoin(dims, ",",
                                    [](std::string* out, const Dim& d) {
                                      out->append(d.ToString());
                                    }),
                      "]");
}

TensorType MakeType(DType dtype, std::vector<Dim> dims) {
  return TensorType{dtype, std::move(dims)};
}

absl::string_view PhaseName(Phase phase) {
  switch (phase) {
    case Phase::kGeneral: return "general";
    case Phase::kPrefill: return "prefill";
    case Phase::kDecode: return "decode";
  }
  return "?";
}

absl::StatusOr<Phase> ParsePhase(absl::string_view name) {
  if (name == "general") return Phase::kGeneral;
  if (name == "prefill") return Phase::kPrefill;
  if (name == "decode") return Phase::kDecode;
  return absl::InvalidArgumentError(absl::StrCat("unknown phase '", name, "'"));
}

namespace {

template <typename T>
absl::StatusOr<T> GetTyped(const std::map<std::string, AttrValue>& map, absl::string_view key,
                           absl::string_view type_name) {
  auto it = map.find(std::string(key));
  if (it == map.end()) {
    return absl::NotFoundError(absl::StrCat("missing attribute '", key, "'"));
  }
  if (const T* v = std::get_if<T>(&it->second)) return *v;
  return absl::InvalidArgumentError(
      absl::StrCat("attribute '", key, "' is not of type ", type_name));
}

}  // namespace

absl::StatusOr<int64_t> Attributes::GetInt(absl::string_view key) const {
  return GetTyped<int64_t>(map_, key, "int");
}
absl::StatusOr<double> Attributes::GetFloat(absl::string_view key) const {
  auto it = map_.find(std::string(key));
  if (it != map_.end()) {
    if (const int64_t* i = std::get_if<int64_t>(&it->second)) return static_cast<double>(*i);
  }
  return GetTyped<double>(map_, key, "float");
}
absl::StatusOr<bool> Attributes::GetBool(absl::string_view key) const {
  return GetTyped<bool>(map_, key, "bool");
}
absl::StatusOr<std::string> Attributes::GetString(absl::string_view key) const {
  return GetTyped<std::string>(map_, key, "string");
}
absl::StatusOr<std::vector<int64_t>> Attributes::GetInts(absl::string_view key) const {
  return GetTyped<std::vector<int64_t>>(map_, key, "int list");
}
absl::StatusOr<std::vector<double>> Attributes::GetFloats(absl::string_view key) const {
  return GetTyped<std::vector<double>>(map_, key, "float list");
}
absl::StatusOr<int64_t> Attributes::GetIntOr(absl::string_view key, int64_t def) const {
  return Has(key) ? GetInt(key) : def;
}
absl::StatusOr<double> Attributes::GetFloatOr(absl::string_view key, double def) const {
  return Has(key) ? GetFloat(key) : def;
}
absl::StatusOr<bool> Attributes::GetBoolOr(absl::string_view key, bool def) const {
  return Has(key) ? GetBool(key) : def;
}
absl::StatusOr<std::string> Attributes::GetStringOr(absl::string_view key,
                                                    std::string def) const {
  return Has(key) ? GetString(key) : absl::StatusOr<std::string>(std::move(def));
}

absl::StatusOr<ValueId> Graph::NewValue(std::string name, TensorType type, ValueKind kind) {
  if (name.empty()) return absl::InvalidArgumentError("value name is empty");
  if (by_name_.count(name)) {
    return absl::AlreadyExistsError(absl::StrCat("value '%", name, "' is defined twice"));
  }
  ValueId id = static_cast<ValueId>(values_.size());
  by_name_.emplace(name, id);
  Value v;
  v.name = std::move(name);
  v.type = std::move(type);
  v.kind = kind;
  values_.push_back(std::move(v));
  return id;
}

absl::StatusOr<ValueId> Graph::AddInput(std::string name, TensorType type) {
  auto id = NewValue(std::move(name), std::move(type), ValueKind::kInput);
  if (id.ok()) inputs_.push_back(*id);
  return id;
}

absl::StatusOr<ValueId> Graph::AddWeight(std::string name, TensorType type,
                                         absl::string_view checkpoint_tensor) {
  return AddWeight(std::move(name), std::move(type),
                   std::vector<std::string>{std::string(checkpoint_tensor)});
}

absl::StatusOr<ValueId> Graph::AddWeight(std::string name, TensorType type,
                                         std::vector<std::string> checkpoint_tensors) {
  return AddWeight(std::move(name), std::move(type), std::move(checkpoint_tensors), {});
}

bool Value::sliced() const {
  for (const TensorSlice& s : checkpoint_slices) {
    if (!s.whole()) return true;
  }
  return false;
}

absl::StatusOr<ValueId> Graph::AddWeight(std::string name, TensorType type,
                                         std::vector<std::string> checkpoint_tensors,
                                         std::vector<TensorSlice> slices) {
  if (!slices.empty() && slices.size() != checkpoint_tensors.size()) {
    return absl::InvalidArgumentError(absl::StrCat("weight '%", name, "' has ", slices.size(),
                                                   " slices for ", checkpoint_tensors.size(),
                                                   " checkpoint tensors"));
  }
  bool any_slice = false;
  for (size_t k = 0; k < slices.size(); ++k) {
    const TensorSlice& s = slices[k];
    if (s.whole()) {
      if (s.dim != -1 || s.start != 0 || s.size != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("weight '%", name, "': part ", k, " has a malformed whole slice"));
      }
      continue;
    }
    any_slice = true;
    if (s.start < 0 || s.size <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("weight '%", name, "': part ", k,
                                                     " slices dim ", s.dim, " from ", s.start,
                                                     " for ", s.size,
                                                     " elements; needs start >= 0, size > 0"));
    }
  }
  if (!any_slice) slices.clear();
  if (checkpoint_tensors.empty() || checkpoint_tensors[0].empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("weight '%", name, "' names no checkpoint tensor"));
  }
  for (size_t k = 1; k < checkpoint_tensors.size(); ++k) {
    if (checkpoint_tensors[k].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("weight '%", name, "' names an empty checkpoint tensor (part ", k, ")"));
    }
  }
  auto id = NewValue(std::move(name), std::move(type), ValueKind::kWeight);
  if (id.ok()) {
    values_[*id].checkpoint_tensors = std::move(checkpoint_tensors);
    values_[*id].checkpoint_slices = std::move(slices);
    weights_.push_back(*id);
  }
  return id;
}

absl::StatusOr<ValueId> Graph::AddState(std::string name, TensorType type) {
  auto id = NewValue(std::move(name), std::move(type), ValueKind::kState);
  if (id.ok()) states_.push_back(*id);
  return id;
}

absl::StatusOr<std::vector<ValueId>> Graph::AddRegion(std::string kind,
                                                      std::vector<ValueId> operands,
                                                      std::vector<ResultSpec> results,
                                                      Attributes attrs, Phase phase,
                                                      std::vector<std::string> fused_from) {
  if (kind.empty()) return absl::InvalidArgumentError("region kind is empty");
  for (ValueId op : operands) {
    if (op < 0 || op >= num_values()) {
      return absl::InvalidArgumentError(
          absl::StrCat("region '", kind, "' has an operand that does not exist"));
    }
  }
  for (const ResultSpec& r : results) {
    if (r.alias.kind != AliasKind::kNone &&
        (r.alias.operand < 0 || r.alias.operand >= static_cast<int>(operands.size()))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "result '%", r.name, "' of region '", kind, "' aliases a missing operand"));
    }
    if (r.name.empty() || by_name_.count(r.name)) {
      return absl::AlreadyExistsError(
          absl::StrCat("result '%", r.name, "' of region '", kind, "' is empty or defined twice"));
    }
  }
  Region region;
  region.kind = std::move(kind);
  region.operands = std::move(operands);
  region.attrs = std::move(attrs);
  region.phase = phase;
  region.fused_from = std::move(fused_from);
  const int32_t index = static_cast<int32_t>(regions_.size());
  for (size_t i = 0; i < results.size(); ++i) {
    auto id = NewValue(std::move(results[i].name), std::move(results[i].type),
                       ValueKind::kResult);
    if (!id.ok()) return id.status();
    values_[*id].producer = index;
    values_[*id].result_index = static_cast<int32_t>(i);
    region.results.push_back(*id);
    region.result_aliases.push_back(results[i].alias);
  }
  regions_.push_back(std::move(region));
  return regions_.back().results;
}

absl::Status Graph::AddOutput(ValueId value) {
  if (value < 0 || value >= num_values()) {
    return absl::InvalidArgumentError("graph output does not exist");
  }
  outputs_.push_back(value);
  return absl::OkStatus();
}

ValueId Graph::FindValue(absl::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? kNoValue : it->second;
}

}  // namespace tileplan::ir
