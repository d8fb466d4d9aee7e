#include "base/json.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/charconv.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace tileplan {
namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// Value of a hex digit, or -1.
int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void AppendUtf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// Length of the well-formed UTF-8 sequence (RFC 3629: no overlong forms, no surrogates, nothing
// above U+10FFFF) starting at text[pos], or 0 when it is not well formed.
size_t Utf8SequenceLength(absl::string_view text, size_t pos) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(pos);
  size_t length = 0;
  unsigned char second_min = 0x80, second_max = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) second_min = 0xA0;  // overlong
    if (lead == 0xED) second_max = 0x9F;  // UTF-16 surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) second_min = 0x90;  // overlong
    if (lead == 0xF4) second_max = 0x8F;  // above U+10FFFF
  } else {
    return 0;
  }
  if (text.size() - pos < length) return 0;
  if (byte(pos + 1) < second_min || byte(pos + 1) > second_max) return 0;
  for (size_t i = 2; i < length; ++i) {
    if (byte(pos + i) < 0x80 || byte(pos + i) > 0xBF) return 0;
  }
  return length;
}

// For a syntactically valid JSON number that does not fit in a double, whether it is too large
// (true) or too close to zero (false): the sign of the decimal exponent of its leading
// significant digit decides, since a range error only happens at the extremes.
bool DecimalMagnitudeIsLarge(absl::string_view token) {
  size_t i = token[0] == '-' ? 1 : 0;
  int64_t lead_exponent = 0;
  bool found = false;
  size_t int_begin = i;
  while (i < token.size() && IsDigit(token[i])) ++i;
  const size_t int_end = i;
  for (size_t k = int_begin; k < int_end && !found; ++k) {
    if (token[k] != '0') {
      lead_exponent = static_cast<int64_t>(int_end - k) - 1;
      found = true;
    }
  }
  if (i < token.size() && token[i] == '.') {
    ++i;
    for (int64_t j = 1; i < token.size() && IsDigit(token[i]); ++i, ++j) {
      if (!found && token[i] != '0') {
        lead_exponent = -j;
        found = true;
      }
    }
  }
  int64_t exponent = 0;
  if (i < token.size() && (token[i] == 'e' || token[i] == 'E')) {
    ++i;
    bool negative = false;
    if (token[i] == '+' || token[i] == '-') negative = token[i++] == '-';
    for (; i < token.size(); ++i) {
      if (exponent < (int64_t{1} << 40)) exponent = exponent * 10 + (token[i] - '0');
    }
    if (negative) exponent = -exponent;
  }
  return lead_exponent + exponent > 0;
}

}  // namespace

// Recursive-descent parser over one document. Positions are byte offsets into the text.
class JsonParser {
 public:
  explicit JsonParser(absl::string_view text) : text_(text) {}

  absl::StatusOr<Json> ParseDocument() {
    Json value;
    SkipWhitespace();
    TP_RETURN_IF_ERROR(ParseValue(value, 0));
    SkipWhitespace();
    if (pos_ != text_.size()) return Error(pos_, "unexpected data after the top-level value");
    return value;
  }

 private:
  absl::Status Error(size_t at, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("JSON: ", what, " at byte ", at));
  }

  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek() const { return text_[pos_]; }

  void SkipWhitespace() {
    while (!AtEnd() && (Peek() == ' ' || Peek() == '\t' || Peek() == '\n' || Peek() == '\r')) {
      ++pos_;
    }
  }

  // `depth` counts the arrays and objects that enclose the value.
  absl::Status ParseValue(Json& out, int depth) {
    if (AtEnd()) return Error(pos_, "unexpected end of input, expected a value");
    switch (Peek()) {
      case '{':
        return ParseObject(out, depth + 1);
      case '[':
        return ParseArray(out, depth + 1);
      case '"':
        out.type_ = Json::Type::kString;
        return ParseString(out.string_);
      case 't':
        TP_RETURN_IF_ERROR(ParseWord("true"));
        out.type_ = Json::Type::kBool;
        out.bool_ = true;
        return absl::OkStatus();
      case 'f':
        TP_RETURN_IF_ERROR(ParseWord("false"));
        out.type_ = Json::Type::kBool;
        out.bool_ = false;
        return absl::OkStatus();
      case 'n':
        TP_RETURN_IF_ERROR(ParseWord("null"));
        out.type_ = Json::Type::kNull;
        return absl::OkStatus();
      default:
        if (Peek() == '-' || IsDigit(Peek())) return ParseNumber(out);
        return Error(pos_, "unexpected character, expected a value");
    }
  }

  absl::Status ParseWord(absl::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return Error(pos_, "invalid literal");
    pos_ += word.size();
    return absl::OkStatus();
  }

  absl::Status ParseNumber(Json& out) {
    const size_t start = pos_;
    if (Peek() == '-') ++pos_;
    if (AtEnd() || !IsDigit(Peek())) return Error(pos_, "invalid number: expected a digit");
    if (Peek() == '0') {
      ++pos_;
      if (!AtEnd() && IsDigit(Peek())) return Error(start, "invalid number: leading zero");
    } else {
      while (!AtEnd() && IsDigit(Peek())) ++pos_;
    }
    bool integral = true;
    if (!AtEnd() && Peek() == '.') {
      integral = false;
      ++pos_;
      if (AtEnd() || !IsDigit(Peek())) return Error(pos_, "invalid number: expected a digit");
      while (!AtEnd() && IsDigit(Peek())) ++pos_;
    }
    if (!AtEnd() && (Peek() == 'e' || Peek() == 'E')) {
      integral = false;
      ++pos_;
      if (!AtEnd() && (Peek() == '+' || Peek() == '-')) ++pos_;
      if (AtEnd() || !IsDigit(Peek())) return Error(pos_, "invalid number: expected a digit");
      while (!AtEnd() && IsDigit(Peek())) ++pos_;
    }
    const absl::string_view token = text_.substr(start, pos_ - start);

    double value = 0;
    const absl::from_chars_result result =
        absl::from_chars(token.data(), token.data() + token.size(), value);
    if (result.ec == std::errc::invalid_argument || result.ptr != token.data() + token.size()) {
      return Error(start, "invalid number");
    }
    if (result.ec == std::errc::result_out_of_range) {
      if (DecimalMagnitudeIsLarge(token)) return Error(start, "number out of the double range");
      value = token[0] == '-' ? -0.0 : 0.0;
    }
    out.type_ = Json::Type::kNumber;
    out.double_ = value;
    out.is_int_ = integral && ParseInt64(token, out.int_);
    return absl::OkStatus();
  }

  // Parses an integer literal (optional '-', digits) exactly; false when outside int64.
  static bool ParseInt64(absl::string_view token, int64_t& out) {
    const bool negative = token[0] == '-';
    const uint64_t limit = negative ? uint64_t{1} << 63 : (uint64_t{1} << 63) - 1;
    uint64_t magnitude = 0;
    for (size_t i = negative ? 1 : 0; i < token.size(); ++i) {
      const uint64_t digit = static_cast<uint64_t>(token[i] - '0');
      if (magnitude > (limit - digit) / 10) return false;
      magnitude = magnitude * 10 + digit;
    }
    out = negative ? static_cast<int64_t>(0 - magnitude) : static_cast<int64_t>(magnitude);
    return true;
  }

  absl::Status ParseHex4(uint32_t& out) {
    if (text_.size() - pos_ < 4) return Error(pos_, "truncated \\u escape");
    out = 0;
    for (int i = 0; i < 4; ++i) {
      const int v = HexValue(text_[pos_ + i]);
      if (v < 0) return Error(pos_ + i, "invalid hex digit in \\u escape");
      out = out * 16 + static_cast<uint32_t>(v);
    }
    pos_ += 4;
    return absl::OkStatus();
  }

  absl::Status ParseString(std::string& out) {
    ++pos_;  // opening quote
    out.clear();
    while (true) {
      if (AtEnd()) return Error(pos_, "unterminated string");
      const unsigned char c = static_cast<unsigned char>(Peek());
      if (c == '"') {
        ++pos_;
        return absl::OkStatus();
      }
      if (c < 0x20) return Error(pos_, "control character in string");
      if (c == '\\') {
        TP_RETURN_IF_ERROR(ParseEscape(out));
        continue;
      }
      if (c < 0x80) {
        out.push_back(static_cast<char>(c));
        ++pos_;
        continue;
      }
      const size_t length = Utf8SequenceLength(text_, pos_);
      if (length == 0) return Error(pos_, "invalid UTF-8 in string");
      out.append(text_.data() + pos_, length);
      pos_ += length;
    }
  }

  absl::Status ParseEscape(std::string& out) {
    const size_t escape_start = pos_;
    ++pos_;  // backslash
    if (AtEnd()) return Error(pos_, "unterminated string");
    const char kind = Peek();
    ++pos_;
    switch (kind) {
      case '"':
        out.push_back('"');
        return absl::OkStatus();
      case '\\':
        out.push_back('\\');
        return absl::OkStatus();
      case '/':
        out.push_back('/');
        return absl::OkStatus();
      case 'b':
        out.push_back('\b');
        return absl::OkStatus();
      case 'f':
        out.push_back('\f');
        return absl::OkStatus();
      case 'n':
        out.push_back('\n');
        return absl::OkStatus();
      case 'r':
        out.push_back('\r');
        return absl::OkStatus();
      case 't':
        out.push_back('\t');
        return absl::OkStatus();
      case 'u':
        break;
      default:
        return Error(escape_start, "invalid escape");
    }
    uint32_t unit = 0;
    TP_RETURN_IF_ERROR(ParseHex4(unit));
    if (unit >= 0xDC00 && unit <= 0xDFFF) return Error(escape_start, "lone low surrogate");
    if (unit >= 0xD800 && unit <= 0xDBFF) {
      if (text_.substr(pos_, 2) != "\\u") return Error(escape_start, "lone high surrogate");
      pos_ += 2;
      uint32_t low = 0;
      TP_RETURN_IF_ERROR(ParseHex4(low));
      if (low < 0xDC00 || low > 0xDFFF) return Error(escape_start, "lone high surrogate");
      unit = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
    }
    AppendUtf8(unit, out);
    return absl::OkStatus();
  }

  absl::Status ParseArray(Json& out, int depth) {
    if (depth > Json::kMaxDepth) return Error(pos_, "nesting deeper than the limit");
    ++pos_;  // '['
    out.type_ = Json::Type::kArray;
    SkipWhitespace();
    if (!AtEnd() && Peek() == ']') {
      ++pos_;
      return absl::OkStatus();
    }
    while (true) {
      SkipWhitespace();
      Json element;
      TP_RETURN_IF_ERROR(ParseValue(element, depth));
      out.array_.push_back(std::move(element));
      SkipWhitespace();
      if (AtEnd()) return Error(pos_, "unterminated array");
      if (Peek() == ']') {
        ++pos_;
        return absl::OkStatus();
      }
      if (Peek() != ',') return Error(pos_, "expected ',' or ']' in array");
      ++pos_;
    }
  }

  absl::Status ParseObject(Json& out, int depth) {
    if (depth > Json::kMaxDepth) return Error(pos_, "nesting deeper than the limit");
    ++pos_;  // '{'
    out.type_ = Json::Type::kObject;
    SkipWhitespace();
    if (!AtEnd() && Peek() == '}') {
      ++pos_;
      return absl::OkStatus();
    }
    std::vector<size_t> key_offsets;
    while (true) {
      SkipWhitespace();
      if (AtEnd() || Peek() != '"') return Error(pos_, "expected a string key in object");
      key_offsets.push_back(pos_);
      std::string key;
      TP_RETURN_IF_ERROR(ParseString(key));
      SkipWhitespace();
      if (AtEnd() || Peek() != ':') return Error(pos_, "expected ':' after object key");
      ++pos_;
      SkipWhitespace();
      Json value;
      TP_RETURN_IF_ERROR(ParseValue(value, depth));
      out.object_.emplace_back(std::move(key), std::move(value));
      SkipWhitespace();
      if (AtEnd()) return Error(pos_, "unterminated object");
      if (Peek() == '}') {
        ++pos_;
        break;
      }
      if (Peek() != ',') return Error(pos_, "expected ',' or '}' in object");
      ++pos_;
    }
    return CheckDuplicateKeys(out.object_, key_offsets);
  }

  // Reports the first key, in document order, that repeats an earlier key of the same object.
  absl::Status CheckDuplicateKeys(const Json::Object& members,
                                  const std::vector<size_t>& key_offsets) const {
    std::vector<size_t> order(members.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return members[a].first != members[b].first ? members[a].first < members[b].first : a < b;
    });
    size_t first_repeat = members.size();
    for (size_t i = 1; i < order.size(); ++i) {
      if (members[order[i]].first == members[order[i - 1]].first) {
        first_repeat = std::min(first_repeat, order[i]);
      }
    }
    if (first_repeat == members.size()) return absl::OkStatus();
    return Error(key_offsets[first_repeat],
                 absl::StrCat("duplicate object key \"",
                              absl::CHexEscape(members[first_repeat].first), "\""));
  }

  absl::string_view text_;
  size_t pos_ = 0;
};

absl::StatusOr<Json> Json::Parse(absl::string_view text) {
  return JsonParser(text).ParseDocument();
}

const Json* Json::Find(absl::string_view key) const {
  if (type_ != Type::kObject) return nullptr;
  for (const auto& [name, value] : object_) {
    if (name == key) return &value;
  }
  return nullptr;
}

absl::string_view Json::TypeName(Type type) {
  switch (type) {
    case Type::kNull:
      return "null";
    case Type::kBool:
      return "bool";
    case Type::kNumber:
      return "number";
    case Type::kString:
      return "string";
    case Type::kArray:
      return "array";
    case Type::kObject:
      return "object";
  }
  return "?";
}

}  // namespace tileplan
