#include "regions/kinds.h"

#include <cstdio>
#include <cstdlib>
#include <set>
#include <utility>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "regions/syntax.h"

namespace tileplan::ir {

absl::string_view AttrTypeName(AttrType type) {
  switch (type) {
    case AttrType::kInt:
      return "int";
    case AttrType::kFloat:
      return "float";
    case AttrType::kBool:
      return "bool";
    case AttrType::kString:
      return "string";
    case AttrType::kInts:
      return "ints";
    case AttrType::kFloats:
      return "floats";
  }
  return "?";
}

AttrType AttrTypeOf(const AttrValue& value) {
  struct Visitor {
    AttrType operator()(int64_t) const { return AttrType::kInt; }
    AttrType operator()(double) const { return AttrType::kFloat; }
    AttrType operator()(bool) const { return AttrType::kBool; }
    AttrType operator()(const std::string&) const { return AttrType::kString; }
    AttrType operator()(const std::vector<int64_t>&) const { return AttrType::kInts; }
    AttrType operator()(const std::vector<double>&) const { return AttrType::kFloats; }
  };
  return std::visit(Visitor{}, value);
}

std::string KindArgs::OperandLabel(int index) const {
  if (index >= 0 && static_cast<size_t>(index) < operand_names.size()) {
    return absl::StrCat("operand ", index, " (", operand_names[index], ")");
  }
  return absl::StrCat("operand ", index);
}

absl::Status KindArgs::OperandError(int index, absl::string_view expected) const {
  std::string type = index >= 0 && static_cast<size_t>(index) < operands.size()
                         ? operands[index].ToString()
                         : std::string("?");
  return absl::InvalidArgumentError(
      absl::StrCat(OperandLabel(index), " has type ", type, ", expected ", expected));
}

const AttrSpec* KindSpec::FindAttr(absl::string_view key) const {
  for (const AttrSpec& a : attrs) {
    if (a.key == key) return &a;
  }
  return nullptr;
}

std::string KindSpec::OperandSignature() const {
  std::string out;
  for (int i = 0; i < max_operands(); ++i) {
    const bool optional = i >= min_operands();
    absl::StrAppend(&out, optional ? "[" : "", i > 0 ? ", " : "", operands[i]);
  }
  out.append(static_cast<size_t>(optional_operands), ']');
  return out;
}

absl::Status CheckAttributes(const KindSpec& spec, const Attributes& attrs) {
  for (const auto& [key, value] : attrs.map()) {
    const AttrSpec* a = spec.FindAttr(key);
    if (a == nullptr) {
      std::string known =
          spec.attrs.empty()
              ? std::string("takes no attributes")
              : absl::StrCat("takes ", absl::StrJoin(spec.attrs, ", ",
                                                     [](std::string* out, const AttrSpec& s) {
                                                       out->append(s.key);
                                                     }));
      return absl::InvalidArgumentError(
          absl::StrCat("unknown attribute '", key, "' (", spec.name, " ", known, ")"));
    }
    if (AttrTypeOf(value) != a->type) {
      return absl::InvalidArgumentError(absl::StrCat("attribute '", key, "' has type ",
                                                     AttrTypeName(AttrTypeOf(value)), ", expected ",
                                                     AttrTypeName(a->type)));
    }
  }
  for (const AttrSpec& a : spec.attrs) {
    if (a.required && !attrs.Has(a.key)) {
      return absl::InvalidArgumentError(
          absl::StrCat("missing required attribute '", a.key, "' (", AttrTypeName(a.type), ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<InferredResult>> InferResults(const KindSpec& spec,
                                                         const KindArgs& args) {
  const int n = static_cast<int>(args.operands.size());
  if (n < spec.min_operands() || n > spec.max_operands()) {
    std::string count = spec.min_operands() == spec.max_operands()
                            ? absl::StrCat(spec.max_operands())
                            : absl::StrCat(spec.min_operands(), " to ", spec.max_operands());
    return absl::InvalidArgumentError(
        absl::StrCat("expects ", count, " operands (", spec.OperandSignature(), "), got ", n));
  }
  TP_RETURN_IF_ERROR(CheckAttributes(spec, args.attrs));
  return spec.infer(args);
}

absl::Status KindRegistry::Register(KindSpec spec) {
  if (!IsIdentifier(spec.name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("kind name '", spec.name, "' is not an identifier"));
  }
  if (!spec.infer) {
    return absl::InvalidArgumentError(
        absl::StrCat("kind '", spec.name, "' has no inference function"));
  }
  if (spec.optional_operands < 0 || spec.optional_operands > spec.max_operands()) {
    return absl::InvalidArgumentError(absl::StrCat("kind '", spec.name, "' declares ",
                                                   spec.optional_operands, " optional operands of ",
                                                   spec.max_operands()));
  }
  std::set<std::string> keys;
  for (const AttrSpec& a : spec.attrs) {
    if (!IsIdentifier(a.key) || !keys.insert(a.key).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "kind '", spec.name, "' has an invalid or duplicate attribute key '", a.key, "'"));
    }
  }
  if (kinds_.count(spec.name)) {
    return absl::AlreadyExistsError(absl::StrCat("kind '", spec.name, "' is registered twice"));
  }
  std::string name = spec.name;
  kinds_.emplace(std::move(name), std::move(spec));
  return absl::OkStatus();
}

const KindSpec* KindRegistry::Find(absl::string_view name) const {
  auto it = kinds_.find(name);
  return it == kinds_.end() ? nullptr : &it->second;
}

std::vector<std::string> KindRegistry::Names() const {
  std::vector<std::string> names;
  names.reserve(kinds_.size());
  for (const auto& [name, spec] : kinds_) names.push_back(name);
  return names;
}

std::vector<std::string> KindRegistry::PrimitiveNames() const {
  std::vector<std::string> names;
  for (const auto& [name, spec] : kinds_) {
    if (!spec.fused) names.push_back(name);
  }
  return names;
}

absl::Status RegisterAllKinds(KindRegistry& registry) {
  TP_RETURN_IF_ERROR(RegisterPrimitiveKinds(registry));
  TP_RETURN_IF_ERROR(RegisterFusedKinds(registry));
  return absl::OkStatus();
}

const KindRegistry& GlobalKindRegistry() {
  static const KindRegistry* const registry = [] {
    auto* r = new KindRegistry;
    absl::Status status = RegisterAllKinds(*r);
    if (!status.ok()) {
      // The built-in kind table is code, not input: a failure here is a programming error
      // that the kinds test reports, so stop rather than run with a partial table.
      std::fprintf(stderr, "tileplan: built-in region kinds are inconsistent: %s\n",
                   status.ToString().c_str());
      std::abort();
    }
    return r;
  }();
  return *registry;
}

const KindSpec* FindKind(absl::string_view name) { return GlobalKindRegistry().Find(name); }

std::vector<std::string> KindNames() { return GlobalKindRegistry().Names(); }

std::vector<std::string> PrimitiveKindNames() { return GlobalKindRegistry().PrimitiveNames(); }

}  // namespace tileplan::ir
