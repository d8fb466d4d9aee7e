#include "regions/printer.h"

#include <charconv>
#include <cmath>
#include <string>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tileplan::ir {
namespace {

std::string ValueRef(const Graph& graph, ValueId id) {
  if (id < 0 || id >= graph.num_values()) return absl::StrCat("%<no value ", id, ">");
  return absl::StrCat("%", graph.value(id).name);
}

std::string AliasText(const Graph& graph, const Region& region, const ResultAlias& alias) {
  if (alias.kind == AliasKind::kNone) return "";
  const char* word = alias.kind == AliasKind::kInPlace ? " inplace(" : " view(";
  const bool in_range =
      alias.operand >= 0 && static_cast<size_t>(alias.operand) < region.operands.size();
  return absl::StrCat(word,
                      in_range ? ValueRef(graph, region.operands[alias.operand])
                               : absl::StrCat("%<no operand ", alias.operand, ">"),
                      ")");
}

struct AttrPrinter {
  std::string operator()(int64_t v) const { return absl::StrCat(v); }
  std::string operator()(double v) const { return PrintFloat(v); }
  std::string operator()(bool v) const { return v ? "true" : "false"; }
  std::string operator()(const std::string& v) const { return QuoteString(v); }
  std::string operator()(const std::vector<int64_t>& v) const {
    return v.empty() ? "ints[]" : absl::StrCat("[", absl::StrJoin(v, ", "), "]");
  }
  std::string operator()(const std::vector<double>& v) const {
    if (v.empty()) return "floats[]";
    return absl::StrCat(
        "[", absl::StrJoin(v, ", ", [](std::string* out, double d) { out->append(PrintFloat(d)); }),
        "]");
  }
};

// "name" for a plain weight, slice("name", dim, start, size) for a part of one,
// concat(part, ...) for a packed one (and for the malformed empty list, which the parser
// rejects).
std::string PrintCheckpointTensors(const Value& v) {
  std::vector<std::string> parts;
  for (size_t k = 0; k < v.checkpoint_tensors.size(); ++k) {
    const TensorSlice s = v.slice(k);
    parts.push_back(s.whole() ? QuoteString(v.checkpoint_tensors[k])
                              : absl::StrCat("slice(", QuoteString(v.checkpoint_tensors[k]), ", ",
                                             s.dim, ", ", s.start, ", ", s.size, ")"));
  }
  if (parts.size() == 1) return parts[0];
  return absl::StrCat("concat(", absl::StrJoin(parts, ", "), ")");
}

}  // namespace

std::string PrintFloat(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value);
  std::string out(buf, ec == std::errc() ? end : buf);
  if (out.find_first_of(".e") == std::string::npos) out.append(".0");
  return out;
}

std::string QuoteString(absl::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "\"";
  for (char c : s) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (c == '\n') {
      out.append("\\n");
    } else if (c == '\t') {
      out.append("\\t");
    } else if (u >= 0x20 && u < 0x7f) {
      out.push_back(c);
    } else {
      out.append({'\\', 'x', kHex[u >> 4], kHex[u & 15]});
    }
  }
  out.push_back('"');
  return out;
}

std::string PrintAttrValue(const AttrValue& value) { return std::visit(AttrPrinter{}, value); }

std::string PrintRegion(const Graph& graph, const Region& region) {
  std::string out;
  for (size_t i = 0; i < region.results.size(); ++i) {
    const ValueId id = region.results[i];
    absl::StrAppend(&out, i > 0 ? ", " : "", ValueRef(graph, id));
    if (id >= 0 && id < graph.num_values()) {
      absl::StrAppend(&out, ": ", graph.value(id).type.ToString());
    }
    if (i < region.result_aliases.size()) {
      out.append(AliasText(graph, region, region.result_aliases[i]));
    }
  }
  absl::StrAppend(
      &out, " = ", region.kind, "(",
      absl::StrJoin(region.operands, ", ",
                    [&graph](std::string* o, ValueId id) { o->append(ValueRef(graph, id)); }),
      ")");
  if (!region.attrs.empty()) {
    absl::StrAppend(&out, " {",
                    absl::StrJoin(region.attrs.map(), ", ",
                                  [](std::string* o, const auto& kv) {
                                    absl::StrAppend(o, kv.first, " = ", PrintAttrValue(kv.second));
                                  }),
                    "}");
  }
  if (region.phase != Phase::kGeneral)
    absl::StrAppend(&out, " phase(", PhaseName(region.phase), ")");
  if (!region.fused_from.empty()) {
    absl::StrAppend(&out, " fused(", absl::StrJoin(region.fused_from, ", "), ")");
  }
  return out;
}

std::string PrintGraph(const Graph& graph) {
  std::string out = absl::StrCat("graph @", graph.name(), " {\n");
  for (const Value& v : graph.values()) {
    const std::string decl = absl::StrCat(" %", v.name, ": ", v.type.ToString());
    switch (v.kind) {
      case ValueKind::kInput:
        absl::StrAppend(&out, "  input", decl, "\n");
        break;
      case ValueKind::kWeight:
        absl::StrAppend(&out, "  weight", decl, " = ", PrintCheckpointTensors(v), "\n");
        break;
      case ValueKind::kState:
        absl::StrAppend(&out, "  state", decl, "\n");
        break;
      case ValueKind::kResult:
        break;
    }
  }
  for (const Region& region : graph.regions()) {
    absl::StrAppend(&out, "  ", PrintRegion(graph, region), "\n");
  }
  for (ValueId id : graph.outputs()) absl::StrAppend(&out, "  output ", ValueRef(graph, id), "\n");
  out.append("}\n");
  return out;
}

}  // namespace tileplan::ir
