#include "regions/text_lexer.h"

#include <charconv>
#include <cstdio>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "regions/printer.h"

namespace tileplan::ir {
namespace {

bool IsIdentStart(char c) { return absl::ascii_isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool IsIdentChar(char c) { return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool IsValueChar(char c) { return IsIdentChar(c) || c == '.'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string DescribeChar(char c) {
  const unsigned char u = static_cast<unsigned char>(c);
  if (u > 0x20 && u < 0x7f) return absl::StrCat("character '", std::string(1, c), "'");
  char buf[8];
  std::snprintf(buf, sizeof(buf), "0x%02x", u);
  return absl::StrCat("byte ", buf);
}

}  // namespace

std::string Token::Describe() const {
  switch (kind) {
    case TokenKind::kIdent:
      return absl::StrCat("identifier '", text, "'");
    case TokenKind::kValue:
      return absl::StrCat("value %", text);
    case TokenKind::kGraphName:
      return absl::StrCat("graph name @", text);
    case TokenKind::kInt:
      return absl::StrCat("integer ", int_value);
    case TokenKind::kFloat:
      return absl::StrCat("float ", PrintFloat(float_value));
    case TokenKind::kString:
      return absl::StrCat("string ", QuoteString(text));
    case TokenKind::kPunct:
      return absl::StrCat("'", text, "'");
    case TokenKind::kNewline:
      return "end of line";
    case TokenKind::kEnd:
      return "end of input";
  }
  return "?";
}

absl::Status Lexer::ErrorHere(absl::string_view message) const {
  return absl::InvalidArgumentError(absl::StrCat(line_, ":", Column(), ": ", message));
}

void Lexer::SkipBlanksAndComments() {
  while (!AtEnd()) {
    const char c = Peek();
    if (c == ' ' || c == '\t' || c == '\r') {
      ++pos_;
    } else if (c == '/' && Peek(1) == '/') {
      while (!AtEnd() && Peek() != '\n') ++pos_;
    } else {
      return;
    }
  }
}

absl::StatusOr<Token> Lexer::Next() {
  SkipBlanksAndComments();
  Token token;
  token.line = line_;
  token.column = Column();
  if (AtEnd()) return token;
  const char c = Peek();
  if (c == '\n') {
    token.kind = TokenKind::kNewline;
    ++pos_;
    ++line_;
    line_start_ = pos_;
    return token;
  }
  if (c == '%' || c == '@') {
    token.kind = c == '%' ? TokenKind::kValue : TokenKind::kGraphName;
    ++pos_;
    const size_t start = pos_;
    while (!AtEnd() && IsValueChar(Peek())) ++pos_;
    if (pos_ == start) {
      return ErrorHere(
          absl::StrCat("expected a name ([A-Za-z0-9_.]+) after '", std::string(1, c), "'"));
    }
    token.text = std::string(text_.substr(start, pos_ - start));
    return token;
  }
  if (IsIdentStart(c)) {
    token.kind = TokenKind::kIdent;
    const size_t start = pos_;
    while (!AtEnd() && IsIdentChar(Peek())) ++pos_;
    token.text = std::string(text_.substr(start, pos_ - start));
    return token;
  }
  if (IsDigit(c) || c == '-') {
    absl::Status s = LexNumber(token);
    if (!s.ok()) return s;
    return token;
  }
  if (c == '"') {
    absl::Status s = LexString(token);
    if (!s.ok()) return s;
    return token;
  }
  static constexpr absl::string_view kPunct = "{}()[],:=";
  if (kPunct.find(c) != absl::string_view::npos) {
    token.kind = TokenKind::kPunct;
    token.text = std::string(1, c);
    ++pos_;
    return token;
  }
  return ErrorHere(absl::StrCat("unexpected ", DescribeChar(c)));
}

absl::Status Lexer::LexNumber(Token& token) {
  const size_t start = pos_;
  if (Peek() == '-') {
    ++pos_;
    if (Peek() == 'i' && Peek(1) == 'n' && Peek(2) == 'f' && !IsIdentChar(Peek(3))) {
      pos_ += 3;
      token.kind = TokenKind::kFloat;
      token.float_value = -std::numeric_limits<double>::infinity();
      return absl::OkStatus();
    }
    if (!IsDigit(Peek())) return ErrorHere("expected a digit or 'inf' after '-'");
  }
  bool is_float = false;
  while (IsDigit(Peek())) ++pos_;
  if (Peek() == '.') {
    ++pos_;
    if (!IsDigit(Peek())) return ErrorHere("expected a digit after '.'");
    while (IsDigit(Peek())) ++pos_;
    is_float = true;
  }
  if (Peek() == 'e' || Peek() == 'E') {
    ++pos_;
    if (Peek() == '+' || Peek() == '-') ++pos_;
    if (!IsDigit(Peek())) return ErrorHere("expected a digit in the exponent");
    while (IsDigit(Peek())) ++pos_;
    is_float = true;
  }
  const char* first = text_.data() + start;
  const char* last = text_.data() + pos_;
  std::from_chars_result r;
  if (is_float) {
    token.kind = TokenKind::kFloat;
    r = std::from_chars(first, last, token.float_value);
  } else {
    token.kind = TokenKind::kInt;
    r = std::from_chars(first, last, token.int_value);
  }
  if (r.ec != std::errc() || r.ptr != last) {
    return absl::InvalidArgumentError(absl::StrCat(token.line, ":", token.column, ": number ",
                                                   std::string(first, last), " is out of ",
                                                   is_float ? "double" : "int64", " range"));
  }
  return absl::OkStatus();
}

absl::Status Lexer::LexString(Token& token) {
  token.kind = TokenKind::kString;
  ++pos_;  // opening quote
  while (true) {
    if (AtEnd() || Peek() == '\n') {
      return absl::InvalidArgumentError(absl::StrCat(token.line, ":", token.column,
                                                     ": string literal is not closed on its line"));
    }
    const char c = Peek();
    if (c == '"') {
      ++pos_;
      return absl::OkStatus();
    }
    if (c == '\\') {
      const char e = Peek(1);
      if (e == '"' || e == '\\') {
        token.text.push_back(e);
        pos_ += 2;
      } else if (e == 'n') {
        token.text.push_back('\n');
        pos_ += 2;
      } else if (e == 't') {
        token.text.push_back('\t');
        pos_ += 2;
      } else if (e == 'x' && HexDigit(Peek(2)) >= 0 && HexDigit(Peek(3)) >= 0) {
        token.text.push_back(static_cast<char>(HexDigit(Peek(2)) * 16 + HexDigit(Peek(3))));
        pos_ += 4;
      } else {
        return ErrorHere("invalid escape in string literal (use \\\" \\\\ \\n \\t or \\xHH)");
      }
      continue;
    }
    const unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      return ErrorHere(absl::StrCat("unescaped ", DescribeChar(c), " in string literal"));
    }
    token.text.push_back(c);
    ++pos_;
  }
}

}  // namespace tileplan::ir
