#include "regions/parser.h"

#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "regions/kinds.h"
#include "regions/text_lexer.h"

namespace tileplan::ir {
namespace {

struct Location {
  int line = 0;
  int column = 0;
};

// One result of the region line being parsed, kept until the operands are known.
struct PendingResult {
  Token name;
  TensorType type;
  AliasKind alias = AliasKind::kNone;
  Token alias_target;
};

class Parser {
 public:
  explicit Parser(absl::string_view text) : lexer_(text) {}

  absl::StatusOr<Graph> Parse();

 private:
  absl::Status Advance();
  absl::Status SkipNewlines();
  absl::Status ErrorAt(const Token& token, absl::string_view message) const;
  absl::Status Unexpected(absl::string_view expected) const;
  absl::Status ExpectPunct(char punct, absl::string_view expected);
  absl::Status ExpectEndOfLine();
  absl::Status CheckNewName(const Token& name) const;
  absl::StatusOr<ValueId> Resolve(const Token& name) const;
  void Define(const Token& name) { defined_at_[name.text] = {name.line, name.column}; }

  absl::StatusOr<TensorType> ParseType();
  absl::Status ParseDeclaration();
  // A weight's binding after '=': a part, or concat(part, part, ...), where a part is
  // "name" or slice("name", dim, start, size).
  absl::Status ParseCheckpointTensors(std::vector<std::string>& tensors,
                                      std::vector<TensorSlice>& slices);
  absl::StatusOr<int64_t> ParseIntArgument(absl::string_view what);
  // The kinds of "fused(linear, add)", from the 'fused' keyword on.
  absl::StatusOr<std::vector<std::string>> ParseFusedFrom();
  absl::Status ParseOutput();
  absl::Status ParseRegion();
  absl::StatusOr<PendingResult> ParseResult();
  absl::StatusOr<Attributes> ParseAttributes();
  absl::StatusOr<AttrValue> ParseLiteral();
  absl::StatusOr<AttrValue> ParseList(std::optional<AttrType> declared);

  Lexer lexer_;
  Token tok_;
  Graph graph_;
  std::map<std::string, Location, std::less<>> defined_at_;
};

absl::Status Parser::Advance() {
  TP_ASSIGN_OR_RETURN(tok_, lexer_.Next());
  return absl::OkStatus();
}

absl::Status Parser::SkipNewlines() {
  while (tok_.kind == TokenKind::kNewline) TP_RETURN_IF_ERROR(Advance());
  return absl::OkStatus();
}

absl::Status Parser::ErrorAt(const Token& token, absl::string_view message) const {
  return absl::InvalidArgumentError(absl::StrCat(token.line, ":", token.column, ": ", message));
}

absl::Status Parser::Unexpected(absl::string_view expected) const {
  return ErrorAt(tok_, absl::StrCat("expected ", expected, ", found ", tok_.Describe()));
}

absl::Status Parser::ExpectPunct(char punct, absl::string_view expected) {
  if (!tok_.Is(punct)) return Unexpected(expected);
  return Advance();
}

absl::Status Parser::ExpectEndOfLine() {
  if (tok_.kind != TokenKind::kNewline) return Unexpected("end of line");
  return Advance();
}

absl::Status Parser::CheckNewName(const Token& name) const {
  auto it = defined_at_.find(name.text);
  if (it == defined_at_.end()) return absl::OkStatus();
  return ErrorAt(name, absl::StrCat("value %", name.text, " is already defined at ",
                                    it->second.line, ":", it->second.column));
}

absl::StatusOr<ValueId> Parser::Resolve(const Token& name) const {
  const ValueId id = graph_.FindValue(name.text);
  if (id == kNoValue) return ErrorAt(name, absl::StrCat("undefined value %", name.text));
  return id;
}

absl::StatusOr<Graph> Parser::Parse() {
  TP_RETURN_IF_ERROR(Advance());
  TP_RETURN_IF_ERROR(SkipNewlines());
  if (!tok_.IsIdent("graph")) return Unexpected("'graph'");
  TP_RETURN_IF_ERROR(Advance());
  if (tok_.kind != TokenKind::kGraphName) return Unexpected("a graph name (@name)");
  graph_.set_name(tok_.text);
  TP_RETURN_IF_ERROR(Advance());
  TP_RETURN_IF_ERROR(ExpectPunct('{', "'{'"));
  TP_RETURN_IF_ERROR(ExpectEndOfLine());
  while (true) {
    TP_RETURN_IF_ERROR(SkipNewlines());
    if (tok_.Is('}')) break;
    if (tok_.IsIdent("input") || tok_.IsIdent("weight") || tok_.IsIdent("state")) {
      TP_RETURN_IF_ERROR(ParseDeclaration());
    } else if (tok_.IsIdent("output")) {
      TP_RETURN_IF_ERROR(ParseOutput());
    } else if (tok_.kind == TokenKind::kValue) {
      TP_RETURN_IF_ERROR(ParseRegion());
    } else {
      return Unexpected(
          "'input', 'weight', 'state', a region (%name: type = kind(...)), 'output' or '}'");
    }
  }
  TP_RETURN_IF_ERROR(Advance());
  TP_RETURN_IF_ERROR(SkipNewlines());
  if (tok_.kind != TokenKind::kEnd) return Unexpected("end of input after the closing '}'");
  return std::move(graph_);
}

absl::StatusOr<TensorType> Parser::ParseType() {
  if (tok_.kind != TokenKind::kIdent) return Unexpected("a tensor type (dtype[dims])");
  absl::StatusOr<DType> dtype = ParseDType(tok_.text);
  if (!dtype.ok()) {
    return ErrorAt(
        tok_, absl::StrCat("unknown dtype '", tok_.text, "' (expected f32, bf16, f16 or i32)"));
  }
  TensorType type;
  type.dtype = *dtype;
  TP_RETURN_IF_ERROR(Advance());
  TP_RETURN_IF_ERROR(ExpectPunct('[', "'[' after the dtype"));
  if (tok_.Is(']')) {
    TP_RETURN_IF_ERROR(Advance());
    return type;
  }
  while (true) {
    if (tok_.kind == TokenKind::kInt) {
      if (tok_.int_value < 0) return ErrorAt(tok_, "a dim extent must be >= 0");
      type.dims.push_back(Dim::Static(tok_.int_value));
    } else if (tok_.kind == TokenKind::kIdent) {
      type.dims.push_back(Dim::Symbol(tok_.text));
    } else {
      return Unexpected("a dim (an extent or a symbol)");
    }
    TP_RETURN_IF_ERROR(Advance());
    if (!tok_.Is(',')) break;
    TP_RETURN_IF_ERROR(Advance());
  }
  TP_RETURN_IF_ERROR(ExpectPunct(']', "',' or ']'"));
  return type;
}

absl::Status Parser::ParseDeclaration() {
  const std::string keyword = tok_.text;
  TP_RETURN_IF_ERROR(Advance());
  if (tok_.kind != TokenKind::kValue) return Unexpected("a value name (%name)");
  const Token name = tok_;
  TP_RETURN_IF_ERROR(CheckNewName(name));
  TP_RETURN_IF_ERROR(Advance());
  TP_RETURN_IF_ERROR(ExpectPunct(':', "':'"));
  TP_ASSIGN_OR_RETURN(TensorType type, ParseType());
  absl::StatusOr<ValueId> added;
  if (keyword == "weight") {
    TP_RETURN_IF_ERROR(ExpectPunct('=', "'=' and the checkpoint tensor name"));
    std::vector<std::string> tensors;
    std::vector<TensorSlice> slices;
    TP_RETURN_IF_ERROR(ParseCheckpointTensors(tensors, slices));
    TP_RETURN_IF_ERROR(ExpectEndOfLine());
    added = graph_.AddWeight(name.text, std::move(type), std::move(tensors), std::move(slices));
  } else {
    TP_RETURN_IF_ERROR(ExpectEndOfLine());
    added = keyword == "input" ? graph_.AddInput(name.text, std::move(type))
                               : graph_.AddState(name.text, std::move(type));
  }
  if (!added.ok()) return ErrorAt(name, added.status().message());
  Define(name);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> Parser::ParseIntArgument(absl::string_view what) {
  TP_RETURN_IF_ERROR(ExpectPunct(',', absl::StrCat("',' and the slice's ", what)));
  if (tok_.kind != TokenKind::kInt)
    return Unexpected(absl::StrCat("the slice's ", what, " (an int)"));
  const int64_t value = tok_.int_value;
  TP_RETURN_IF_ERROR(Advance());
  return value;
}

absl::Status Parser::ParseCheckpointTensors(std::vector<std::string>& tensors,
                                            std::vector<TensorSlice>& slices) {
  const bool packed = tok_.IsIdent("concat");
  if (packed) {
    TP_RETURN_IF_ERROR(Advance());
    TP_RETURN_IF_ERROR(ExpectPunct('(', "'(' and the checkpoint tensor names"));
  }
  while (true) {
    const bool sliced = tok_.IsIdent("slice");
    if (sliced) {
      TP_RETURN_IF_ERROR(Advance());
      TP_RETURN_IF_ERROR(ExpectPunct('(', "'(' and the sliced checkpoint tensor's name"));
    }
    if (tok_.kind != TokenKind::kString) {
      return Unexpected(packed || sliced
                            ? "a checkpoint tensor name (a string)"
                            : "the checkpoint tensor name (a string, slice(...) or concat(...))");
    }
    if (tok_.text.empty()) return ErrorAt(tok_, "the checkpoint tensor name is empty");
    tensors.push_back(tok_.text);
    TP_RETURN_IF_ERROR(Advance());
    TensorSlice slice;
    if (sliced) {
      const Token at = tok_;
      TP_ASSIGN_OR_RETURN(const int64_t dim, ParseIntArgument("dim"));
      TP_ASSIGN_OR_RETURN(slice.start, ParseIntArgument("start"));
      TP_ASSIGN_OR_RETURN(slice.size, ParseIntArgument("size"));
      if (dim < 0 || dim > 64 || slice.start < 0 || slice.size <= 0) {
        return ErrorAt(
            at, absl::StrCat("slice(\"", tensors.back(), "\", ", dim, ", ", slice.start, ", ",
                             slice.size, ") needs 0 <= dim, 0 <= start and 0 < size"));
      }
      slice.dim = static_cast<int32_t>(dim);
      TP_RETURN_IF_ERROR(ExpectPunct(')', "')' after the slice's size"));
    }
    slices.push_back(slice);
    if (!packed || !tok_.Is(',')) break;
    TP_RETURN_IF_ERROR(Advance());
  }
  if (packed) TP_RETURN_IF_ERROR(ExpectPunct(')', "',' or ')'"));
  return absl::OkStatus();
}

absl::Status Parser::ParseOutput() {
  TP_RETURN_IF_ERROR(Advance());
  if (tok_.kind != TokenKind::kValue) return Unexpected("the output value (%name)");
  TP_ASSIGN_OR_RETURN(ValueId id, Resolve(tok_));
  TP_RETURN_IF_ERROR(Advance());
  TP_RETURN_IF_ERROR(ExpectEndOfLine());
  return graph_.AddOutput(id);
}

absl::StatusOr<PendingResult> Parser::ParseResult() {
  PendingResult result;
  if (tok_.kind != TokenKind::kValue) return Unexpected("a result name (%name)");
  result.name = tok_;
  TP_RETURN_IF_ERROR(CheckNewName(result.name));
  TP_RETURN_IF_ERROR(Advance());
  TP_RETURN_IF_ERROR(ExpectPunct(':', "':' and the result type"));
  TP_ASSIGN_OR_RETURN(result.type, ParseType());
  if (tok_.IsIdent("inplace") || tok_.IsIdent("view")) {
    result.alias = tok_.text == "inplace" ? AliasKind::kInPlace : AliasKind::kView;
    TP_RETURN_IF_ERROR(Advance());
    TP_RETURN_IF_ERROR(ExpectPunct('(', "'('"));
    if (tok_.kind != TokenKind::kValue) return Unexpected("the aliased operand (%name)");
    result.alias_target = tok_;
    TP_RETURN_IF_ERROR(Advance());
    TP_RETURN_IF_ERROR(ExpectPunct(')', "')'"));
  }
  return result;
}

absl::Status Parser::ParseRegion() {
  std::vector<PendingResult> pending;
  std::set<std::string> names;
  while (true) {
    TP_ASSIGN_OR_RETURN(PendingResult result, ParseResult());
    if (!names.insert(result.name.text).second) {
      return ErrorAt(result.name, absl::StrCat("value %", result.name.text, " is a result twice"));
    }
    const bool aliased = result.alias != AliasKind::kNone;
    pending.push_back(std::move(result));
    if (tok_.Is(',')) {
      TP_RETURN_IF_ERROR(Advance());
      continue;
    }
    if (!tok_.Is('=')) {
      return Unexpected(aliased ? "',' or '='" : "'inplace(...)', 'view(...)', ',' or '='");
    }
    TP_RETURN_IF_ERROR(Advance());
    break;
  }
  if (tok_.kind != TokenKind::kIdent) return Unexpected("a region kind");
  std::string kind = tok_.text;
  TP_RETURN_IF_ERROR(Advance());
  TP_RETURN_IF_ERROR(ExpectPunct('(', "'(' and the operands"));
  std::vector<ValueId> operands;
  if (!tok_.Is(')')) {
    while (true) {
      if (tok_.kind != TokenKind::kValue) return Unexpected("an operand (%name)");
      TP_ASSIGN_OR_RETURN(ValueId id, Resolve(tok_));
      operands.push_back(id);
      TP_RETURN_IF_ERROR(Advance());
      if (!tok_.Is(',')) break;
      TP_RETURN_IF_ERROR(Advance());
    }
  }
  TP_RETURN_IF_ERROR(ExpectPunct(')', "',' or ')'"));
  Attributes attrs;
  if (tok_.Is('{')) {
    TP_ASSIGN_OR_RETURN(attrs, ParseAttributes());
  }
  Phase phase = Phase::kGeneral;
  if (tok_.IsIdent("phase")) {
    TP_RETURN_IF_ERROR(Advance());
    TP_RETURN_IF_ERROR(ExpectPunct('(', "'('"));
    absl::StatusOr<Phase> parsed = ParsePhase(tok_.text);
    if (tok_.kind != TokenKind::kIdent || !parsed.ok()) {
      return Unexpected("a phase (general, prefill or decode)");
    }
    phase = *parsed;
    TP_RETURN_IF_ERROR(Advance());
    TP_RETURN_IF_ERROR(ExpectPunct(')', "')'"));
  }
  std::vector<std::string> fused_from;
  if (tok_.IsIdent("fused")) {
    TP_ASSIGN_OR_RETURN(fused_from, ParseFusedFrom());
  }
  if (tok_.kind != TokenKind::kNewline) {
    // What may still follow, in grammar order.
    std::string expected = "end of line";
    if (fused_from.empty()) {
      expected = absl::StrCat("'fused(...)' or ", expected);
      if (phase == Phase::kGeneral) expected = absl::StrCat("'phase(...)', ", expected);
      if (phase == Phase::kGeneral && attrs.empty()) {
        expected = absl::StrCat("'{' (attributes), ", expected);
      }
    }
    return Unexpected(expected);
  }
  TP_RETURN_IF_ERROR(Advance());

  std::vector<ResultSpec> specs;
  for (const PendingResult& r : pending) {
    ResultSpec spec{r.name.text, r.type, ResultAlias{r.alias, -1}};
    if (r.alias != AliasKind::kNone) {
      TP_ASSIGN_OR_RETURN(ValueId target, Resolve(r.alias_target));
      for (size_t i = 0; i < operands.size() && spec.alias.operand < 0; ++i) {
        if (operands[i] == target) spec.alias.operand = static_cast<int32_t>(i);
      }
      if (spec.alias.operand < 0) {
        return ErrorAt(r.alias_target, absl::StrCat("aliased value %", r.alias_target.text,
                                                    " is not an operand of this region"));
      }
    }
    specs.push_back(std::move(spec));
  }
  absl::StatusOr<std::vector<ValueId>> added =
      graph_.AddRegion(std::move(kind), std::move(operands), std::move(specs), std::move(attrs),
                       phase, std::move(fused_from));
  if (!added.ok()) return ErrorAt(pending.front().name, added.status().message());
  for (const PendingResult& r : pending) Define(r.name);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> Parser::ParseFusedFrom() {
  TP_RETURN_IF_ERROR(Advance());  // 'fused'
  TP_RETURN_IF_ERROR(ExpectPunct('(', "'(' and the fused kinds"));
  std::vector<std::string> kinds;
  while (true) {
    if (tok_.kind != TokenKind::kIdent) return Unexpected("a region kind");
    kinds.push_back(tok_.text);
    TP_RETURN_IF_ERROR(Advance());
    if (!tok_.Is(',')) break;
    TP_RETURN_IF_ERROR(Advance());
  }
  TP_RETURN_IF_ERROR(ExpectPunct(')', "',' or ')'"));
  return kinds;
}

absl::StatusOr<Attributes> Parser::ParseAttributes() {
  Attributes attrs;
  TP_RETURN_IF_ERROR(Advance());  // '{'
  if (tok_.Is('}')) {
    TP_RETURN_IF_ERROR(Advance());
    return attrs;
  }
  while (true) {
    if (tok_.kind != TokenKind::kIdent) return Unexpected("an attribute name");
    const Token key = tok_;
    if (attrs.Has(key.text)) {
      return ErrorAt(key, absl::StrCat("attribute '", key.text, "' is given twice"));
    }
    TP_RETURN_IF_ERROR(Advance());
    TP_RETURN_IF_ERROR(ExpectPunct('=', "'='"));
    TP_ASSIGN_OR_RETURN(AttrValue value, ParseLiteral());
    attrs.Set(key.text, std::move(value));
    if (!tok_.Is(',')) break;
    TP_RETURN_IF_ERROR(Advance());
  }
  TP_RETURN_IF_ERROR(ExpectPunct('}', "',' or '}'"));
  return attrs;
}

absl::StatusOr<AttrValue> Parser::ParseLiteral() {
  AttrValue value;
  switch (tok_.kind) {
    case TokenKind::kInt:
      value = tok_.int_value;
      break;
    case TokenKind::kFloat:
      value = tok_.float_value;
      break;
    case TokenKind::kString:
      value = tok_.text;
      break;
    case TokenKind::kPunct:
      if (tok_.Is('[')) return ParseList(std::nullopt);
      return Unexpected("an attribute value");
    case TokenKind::kIdent:
      if (tok_.text == "true" || tok_.text == "false") {
        value = tok_.text == "true";
      } else if (tok_.text == "inf") {
        value = std::numeric_limits<double>::infinity();
      } else if (tok_.text == "nan") {
        value = std::numeric_limits<double>::quiet_NaN();
      } else if (tok_.text == "ints" || tok_.text == "floats") {
        const AttrType type = tok_.text == "ints" ? AttrType::kInts : AttrType::kFloats;
        TP_RETURN_IF_ERROR(Advance());
        if (!tok_.Is('[')) return Unexpected("'[' after the list type");
        return ParseList(type);
      } else {
        return Unexpected("an attribute value");
      }
      break;
    default:
      return Unexpected("an attribute value");
  }
  TP_RETURN_IF_ERROR(Advance());
  return value;
}

absl::StatusOr<AttrValue> Parser::ParseList(std::optional<AttrType> declared) {
  const Token open = tok_;
  TP_RETURN_IF_ERROR(Advance());  // '['
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::optional<AttrType> type = declared;
  if (!tok_.Is(']')) {
    while (true) {
      AttrType element;
      if (tok_.kind == TokenKind::kInt) {
        element = AttrType::kInts;
        ints.push_back(tok_.int_value);
      } else if (tok_.kind == TokenKind::kFloat || tok_.IsIdent("inf") || tok_.IsIdent("nan")) {
        element = AttrType::kFloats;
        floats.push_back(tok_.kind == TokenKind::kFloat ? tok_.float_value
                         : tok_.text == "inf"           ? std::numeric_limits<double>::infinity()
                                                        : std::numeric_limits<double>::quiet_NaN());
      } else {
        return Unexpected("a list element (an int or a float)");
      }
      if (type.has_value() && *type != element) {
        return ErrorAt(tok_, *type == AttrType::kInts
                                 ? "a float in a list of ints"
                                 : "an int in a list of floats (write 1.0, not 1)");
      }
      type = element;
      TP_RETURN_IF_ERROR(Advance());
      if (!tok_.Is(',')) break;
      TP_RETURN_IF_ERROR(Advance());
    }
  }
  TP_RETURN_IF_ERROR(ExpectPunct(']', "',' or ']'"));
  if (!type.has_value()) {
    return ErrorAt(open, "an empty list needs its element type: write ints[] or floats[]");
  }
  if (*type == AttrType::kInts) return AttrValue(std::move(ints));
  return AttrValue(std::move(floats));
}

}  // namespace

absl::StatusOr<Graph> ParseGraph(absl::string_view text) { return Parser(text).Parse(); }

}  // namespace tileplan::ir
