#include "regions/serialization.h"

#include <set>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "regions/syntax.h"

namespace tileplan::ir {
namespace {

absl::Status FieldError(absl::string_view path, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", message));
}

absl::StatusOr<proto::DType> DTypeToProto(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return proto::DTYPE_F32;
    case DType::kBF16:
      return proto::DTYPE_BF16;
    case DType::kF16:
      return proto::DTYPE_F16;
    case DType::kI32:
      return proto::DTYPE_I32;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("dtype enumerator ", static_cast<int>(dtype), " is not a dtype"));
}

absl::StatusOr<proto::TensorType> TypeToProto(const TensorType& type) {
  proto::TensorType out;
  TP_ASSIGN_OR_RETURN(proto::DType dtype, DTypeToProto(type.dtype));
  out.set_dtype(dtype);
  for (const Dim& d : type.dims) {
    proto::Dim* pd = out.add_dims();
    if (d.is_static()) {
      pd->set_extent(d.extent());
    } else {
      pd->set_symbol(d.symbol());
    }
  }
  return out;
}

void AttrToProto(const AttrValue& value, proto::AttrValue* out) {
  struct Visitor {
    proto::AttrValue* out;
    void operator()(int64_t v) const { out->set_int_value(v); }
    void operator()(double v) const { out->set_float_value(v); }
    void operator()(bool v) const { out->set_bool_value(v); }
    void operator()(const std::string& v) const { out->set_string_value(v); }
    void operator()(const std::vector<int64_t>& v) const {
      out->mutable_ints()->mutable_values()->Add(v.begin(), v.end());
    }
    void operator()(const std::vector<double>& v) const {
      out->mutable_floats()->mutable_values()->Add(v.begin(), v.end());
    }
  };
  std::visit(Visitor{out}, value);
}

absl::StatusOr<TensorType> TypeFromProto(const proto::TensorType& in, absl::string_view path) {
  TensorType type;
  switch (in.dtype()) {
    case proto::DTYPE_F32:
      type.dtype = DType::kF32;
      break;
    case proto::DTYPE_BF16:
      type.dtype = DType::kBF16;
      break;
    case proto::DTYPE_F16:
      type.dtype = DType::kF16;
      break;
    case proto::DTYPE_I32:
      type.dtype = DType::kI32;
      break;
    default:
      return FieldError(
          path, absl::StrCat("dtype ", static_cast<int>(in.dtype()), " is unspecified or unknown"));
  }
  for (int i = 0; i < in.dims_size(); ++i) {
    const proto::Dim& d = in.dims(i);
    const std::string dim_path = absl::StrCat(path, ".dims[", i, "]");
    switch (d.dim_case()) {
      case proto::Dim::kExtent:
        if (d.extent() < 0) return FieldError(dim_path, "extent is negative");
        type.dims.push_back(Dim::Static(d.extent()));
        break;
      case proto::Dim::kSymbol:
        if (!IsIdentifier(d.symbol())) {
          return FieldError(dim_path,
                            absl::StrCat("symbol '", d.symbol(), "' is not an identifier"));
        }
        type.dims.push_back(Dim::Symbol(d.symbol()));
        break;
      default:
        return FieldError(dim_path, "neither extent nor symbol is set");
    }
  }
  return type;
}

absl::Status AttrFromProto(const proto::AttrValue& in, absl::string_view path, AttrValue* out) {
  switch (in.value_case()) {
    case proto::AttrValue::kIntValue:
      *out = in.int_value();
      break;
    case proto::AttrValue::kFloatValue:
      *out = in.float_value();
      break;
    case proto::AttrValue::kBoolValue:
      *out = in.bool_value();
      break;
    case proto::AttrValue::kStringValue:
      *out = in.string_value();
      break;
    case proto::AttrValue::kInts:
      *out = std::vector<int64_t>(in.ints().values().begin(), in.ints().values().end());
      break;
    case proto::AttrValue::kFloats:
      *out = std::vector<double>(in.floats().values().begin(), in.floats().values().end());
      break;
    default:
      return FieldError(path, "no value is set");
  }
  return absl::OkStatus();
}

absl::Status CheckName(absl::string_view name, absl::string_view path) {
  if (!IsValueName(name)) {
    return FieldError(path, absl::StrCat("name '", name, "' is not of the form [A-Za-z0-9_.]+"));
  }
  return absl::OkStatus();
}

absl::Status DeclarationFromProto(const proto::Declaration& in, absl::string_view path,
                                  Graph& graph) {
  TP_RETURN_IF_ERROR(CheckName(in.name(), absl::StrCat(path, ".name")));
  TP_ASSIGN_OR_RETURN(TensorType type, TypeFromProto(in.type(), absl::StrCat(path, ".type")));
  if (in.kind() != proto::Declaration::KIND_WEIGHT &&
      (in.checkpoint_tensors_size() > 0 || in.checkpoint_slices_size() > 0)) {
    return FieldError(path, "checkpoint_tensors is set on a declaration that is not a weight");
  }
  std::vector<TensorSlice> slices;
  for (int k = 0; k < in.checkpoint_slices_size(); ++k) {
    const proto::TensorSlice& s = in.checkpoint_slices(k);
    if (s.whole()) {
      if (s.dim() != 0 || s.start() != 0 || s.size() != 0) {
        return FieldError(absl::StrCat(path, ".checkpoint_slices[", k, "]"),
                          "a whole slice sets no dim, start or size");
      }
      slices.push_back(TensorSlice::Whole());
    } else {
      if (s.dim() < 0) {
        return FieldError(absl::StrCat(path, ".checkpoint_slices[", k, "]"),
                          absl::StrCat("dim ", s.dim(), " is negative"));
      }
      slices.push_back(TensorSlice::Of(s.dim(), s.start(), s.size()));
    }
  }
  absl::StatusOr<ValueId> added;
  switch (in.kind()) {
    case proto::Declaration::KIND_INPUT:
      added = graph.AddInput(in.name(), std::move(type));
      break;
    case proto::Declaration::KIND_WEIGHT:
      added = graph.AddWeight(
          in.name(), std::move(type),
          std::vector<std::string>(in.checkpoint_tensors().begin(), in.checkpoint_tensors().end()),
          std::move(slices));
      break;
    case proto::Declaration::KIND_STATE:
      added = graph.AddState(in.name(), std::move(type));
      break;
    default:
      return FieldError(
          path, absl::StrCat("kind ", static_cast<int>(in.kind()), " is unspecified or unknown"));
  }
  if (!added.ok()) return FieldError(path, added.status().message());
  return absl::OkStatus();
}

absl::Status RegionFromProto(const proto::Region& in, absl::string_view path, Graph& graph) {
  if (!IsIdentifier(in.kind())) {
    return FieldError(absl::StrCat(path, ".kind"),
                      absl::StrCat("'", in.kind(), "' is not an identifier"));
  }
  std::vector<ValueId> operands;
  for (int k = 0; k < in.operands_size(); ++k) {
    const int32_t id = in.operands(k);
    if (id < 0 || id >= graph.num_values()) {
      return FieldError(absl::StrCat(path, ".operands[", k, "]"),
                        absl::StrCat("value id ", id, " is not defined before this region"));
    }
    operands.push_back(id);
  }
  std::vector<ResultSpec> results;
  for (int j = 0; j < in.results_size(); ++j) {
    const proto::Result& r = in.results(j);
    const std::string result_path = absl::StrCat(path, ".results[", j, "]");
    ResultSpec spec;
    TP_RETURN_IF_ERROR(CheckName(r.name(), absl::StrCat(result_path, ".name")));
    spec.name = r.name();
    TP_ASSIGN_OR_RETURN(spec.type, TypeFromProto(r.type(), absl::StrCat(result_path, ".type")));
    const std::string alias_path = absl::StrCat(result_path, ".alias");
    switch (r.alias().kind()) {
      case proto::Alias::KIND_NONE:
        if (r.alias().operand() != 0) {
          return FieldError(alias_path, "operand is set without an alias kind");
        }
        break;
      case proto::Alias::KIND_INPLACE:
        spec.alias.kind = AliasKind::kInPlace;
        break;
      case proto::Alias::KIND_VIEW:
        spec.alias.kind = AliasKind::kView;
        break;
      default:
        return FieldError(alias_path,
                          absl::StrCat("kind ", static_cast<int>(r.alias().kind()), " is unknown"));
    }
    if (spec.alias.kind != AliasKind::kNone) {
      if (r.alias().operand() < 0 || r.alias().operand() >= in.operands_size()) {
        return FieldError(
            alias_path, absl::StrCat("operand ", r.alias().operand(), " is not an operand index"));
      }
      spec.alias.operand = r.alias().operand();
    }
    results.push_back(std::move(spec));
  }
  Attributes attrs;
  for (int a = 0; a < in.attributes_size(); ++a) {
    const proto::Attribute& attr = in.attributes(a);
    const std::string attr_path = absl::StrCat(path, ".attributes[", a, "]");
    if (!IsIdentifier(attr.key())) {
      return FieldError(attr_path, absl::StrCat("key '", attr.key(), "' is not an identifier"));
    }
    if (attrs.Has(attr.key())) {
      return FieldError(attr_path, absl::StrCat("key '", attr.key(), "' is given twice"));
    }
    AttrValue value;
    TP_RETURN_IF_ERROR(AttrFromProto(attr.value(), attr_path, &value));
    attrs.Set(attr.key(), std::move(value));
  }
  Phase phase;
  switch (in.phase()) {
    case proto::PHASE_GENERAL:
      phase = Phase::kGeneral;
      break;
    case proto::PHASE_PREFILL:
      phase = Phase::kPrefill;
      break;
    case proto::PHASE_DECODE:
      phase = Phase::kDecode;
      break;
    default:
      return FieldError(absl::StrCat(path, ".phase"),
                        absl::StrCat(static_cast<int>(in.phase()), " is not a phase"));
  }
  std::vector<std::string> fused_from;
  for (int k = 0; k < in.fused_from_size(); ++k) {
    if (!IsIdentifier(in.fused_from(k))) {
      return FieldError(absl::StrCat(path, ".fused_from[", k, "]"),
                        absl::StrCat("'", in.fused_from(k), "' is not an identifier"));
    }
    fused_from.push_back(in.fused_from(k));
  }
  absl::StatusOr<std::vector<ValueId>> added =
      graph.AddRegion(in.kind(), std::move(operands), std::move(results), std::move(attrs), phase,
                      std::move(fused_from));
  if (!added.ok()) return FieldError(path, added.status().message());
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<proto::Graph> GraphToProto(const Graph& graph) {
  proto::Graph out;
  out.set_name(graph.name());
  // Proto ids: declarations in value-id order, then region results in order.
  std::vector<int32_t> proto_id(static_cast<size_t>(graph.num_values()), -1);
  int32_t next = 0;
  for (ValueId id = 0; id < graph.num_values(); ++id) {
    const Value& v = graph.value(id);
    proto::Declaration::Kind kind;
    switch (v.kind) {
      case ValueKind::kInput:
        kind = proto::Declaration::KIND_INPUT;
        break;
      case ValueKind::kWeight:
        kind = proto::Declaration::KIND_WEIGHT;
        break;
      case ValueKind::kState:
        kind = proto::Declaration::KIND_STATE;
        break;
      default:
        continue;
    }
    proto::Declaration* d = out.add_declarations();
    d->set_kind(kind);
    d->set_name(v.name);
    for (const std::string& tensor : v.checkpoint_tensors) d->add_checkpoint_tensors(tensor);
    for (const TensorSlice& slice : v.checkpoint_slices) {
      proto::TensorSlice* s = d->add_checkpoint_slices();
      if (slice.whole()) {
        s->set_whole(true);
      } else {
        s->set_dim(slice.dim);
        s->set_start(slice.start);
        s->set_size(slice.size);
      }
    }
    TP_ASSIGN_OR_RETURN(*d->mutable_type(), TypeToProto(v.type));
    proto_id[id] = next++;
  }
  for (size_t i = 0; i < graph.regions().size(); ++i) {
    const Region& r = graph.regions()[i];
    if (r.result_aliases.size() != r.results.size()) {
      return absl::InvalidArgumentError(absl::StrCat("region #", i, " has ", r.results.size(),
                                                     " results but ", r.result_aliases.size(),
                                                     " alias entries"));
    }
    for (ValueId id : r.results) {
      if (id < 0 || id >= graph.num_values() || proto_id[id] != -1) {
        return absl::InvalidArgumentError(
            absl::StrCat("region #", i, " lists value id ", id, " as a result"));
      }
      proto_id[id] = next++;
    }
  }
  auto map_id = [&](ValueId id, absl::string_view what) -> absl::StatusOr<int32_t> {
    if (id < 0 || id >= graph.num_values() || proto_id[id] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " refers to value id ", id, ", which is not defined"));
    }
    return proto_id[id];
  };
  for (size_t i = 0; i < graph.regions().size(); ++i) {
    const Region& r = graph.regions()[i];
    proto::Region* pr = out.add_regions();
    pr->set_kind(r.kind);
    for (ValueId op : r.operands) {
      TP_ASSIGN_OR_RETURN(int32_t id, map_id(op, absl::StrCat("region #", i, " operand")));
      pr->add_operands(id);
    }
    for (size_t j = 0; j < r.results.size(); ++j) {
      const Value& v = graph.value(r.results[j]);
      proto::Result* res = pr->add_results();
      res->set_name(v.name);
      TP_ASSIGN_OR_RETURN(*res->mutable_type(), TypeToProto(v.type));
      const ResultAlias& alias = r.result_aliases[j];
      if (alias.kind != AliasKind::kNone) {
        res->mutable_alias()->set_kind(alias.kind == AliasKind::kInPlace
                                           ? proto::Alias::KIND_INPLACE
                                           : proto::Alias::KIND_VIEW);
        res->mutable_alias()->set_operand(alias.operand);
      }
    }
    for (const auto& [key, value] : r.attrs.map()) {
      proto::Attribute* attr = pr->add_attributes();
      attr->set_key(key);
      AttrToProto(value, attr->mutable_value());
    }
    switch (r.phase) {
      case Phase::kGeneral:
        pr->set_phase(proto::PHASE_GENERAL);
        break;
      case Phase::kPrefill:
        pr->set_phase(proto::PHASE_PREFILL);
        break;
      case Phase::kDecode:
        pr->set_phase(proto::PHASE_DECODE);
        break;
    }
    for (const std::string& kind : r.fused_from) pr->add_fused_from(kind);
  }
  for (ValueId id : graph.outputs()) {
    TP_ASSIGN_OR_RETURN(int32_t pid, map_id(id, "an output"));
    out.add_outputs(pid);
  }
  return out;
}

absl::StatusOr<Graph> GraphFromProto(const proto::Graph& message) {
  TP_RETURN_IF_ERROR(CheckName(message.name(), "name"));
  Graph graph(message.name());
  for (int i = 0; i < message.declarations_size(); ++i) {
    TP_RETURN_IF_ERROR(DeclarationFromProto(message.declarations(i),
                                            absl::StrCat("declarations[", i, "]"), graph));
  }
  for (int i = 0; i < message.regions_size(); ++i) {
    TP_RETURN_IF_ERROR(
        RegionFromProto(message.regions(i), absl::StrCat("regions[", i, "]"), graph));
  }
  for (int k = 0; k < message.outputs_size(); ++k) {
    const int32_t id = message.outputs(k);
    if (id < 0 || id >= graph.num_values()) {
      return FieldError(absl::StrCat("outputs[", k, "]"),
                        absl::StrCat("value id ", id, " does not exist"));
    }
    TP_RETURN_IF_ERROR(graph.AddOutput(id));
  }
  return graph;
}

}  // namespace tileplan::ir
