// Tokens of the IR text form (docs/ir.md, "Text format"); used by regions/parser.cc only.
#ifndef TILEPLAN_REGIONS_TEXT_LEXER_H_
#define TILEPLAN_REGIONS_TEXT_LEXER_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tileplan::ir {

enum class TokenKind {
  kIdent,      // [A-Za-z_][A-Za-z0-9_]*: keywords, dtypes, symbols, kinds, keys
  kValue,      // %name; text is the name without '%'
  kGraphName,  // @name; text is the name without '@'
  kInt,        // -?[0-9]+ that fits int64
  kFloat,      // -?[0-9]+ with '.'+digits and/or an exponent, or -inf
  kString,     // "..."; text holds the decoded bytes
  kPunct,      // one of { } ( ) [ ] , : =
  kNewline,
  kEnd,
};

struct Token {
  TokenKind kind = TokenKind::kEnd;
  std::string text;
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1;    // 1-based
  int column = 1;  // 1-based, in bytes

  bool Is(char punct) const {
    return kind == TokenKind::kPunct && text.size() == 1 && text[0] == punct;
  }
  bool IsIdent(absl::string_view word) const { return kind == TokenKind::kIdent && text == word; }
  // For messages: "'{'", "end of line", "identifier 'foo'", "value %x", ...
  std::string Describe() const;
};

// Splits text into tokens on demand. White space other than newlines, and `//` comments
// up to the end of their line, separate tokens and are otherwise skipped.
class Lexer {
 public:
  explicit Lexer(absl::string_view text) : text_(text) {}

  // The next token, or InvalidArgument "line:column: message" for malformed input. After
  // kEnd, keeps returning kEnd.
  absl::StatusOr<Token> Next();

 private:
  absl::Status ErrorHere(absl::string_view message) const;
  char Peek(size_t ahead = 0) const {
    return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0';
  }
  bool AtEnd(size_t ahead = 0) const { return pos_ + ahead >= text_.size(); }
  int Column() const { return static_cast<int>(pos_ - line_start_) + 1; }
  void SkipBlanksAndComments();
  absl::Status LexNumber(Token& token);
  absl::Status LexString(Token& token);

  absl::string_view text_;
  size_t pos_ = 0;
  size_t line_start_ = 0;
  int line_ = 1;
};

}  // namespace tileplan::ir

#endif  // TILEPLAN_REGIONS_TEXT_LEXER_H_
