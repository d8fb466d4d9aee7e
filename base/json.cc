#include "base/json.h"

#include <cstddef>
#include <cstdint>
#include <deque>
#include <istream>
#include <limits>
#include <streambuf>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"
#include "base/text.h"
#include "nlohmann/json.hpp"

namespace tileplan {
namespace {

absl::Status Error(size_t at, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("JSON: ", what, " at byte ", at));
}

// Lends the text to nlohmann's lexer in place and tells how much of it the lexer has taken, which
// is how SAX callbacks, which carry no position, place what they reject.
class TextBuffer : public std::streambuf {
 public:
  explicit TextBuffer(absl::string_view text) {
    // The get area is only read from.
    char* begin = const_cast<char*>(text.data());
    setg(begin, begin, begin + text.size());
  }

  size_t consumed() const { return static_cast<size_t>(gptr() - eback()); }
};

// Offset of the opening quote of the string token whose closing quote is text[close]. Inside a
// string token a quote is always escaped, i.e. follows an odd run of backslashes, while the opening
// quote follows something other than a backslash.
size_t StringTokenStart(absl::string_view text, size_t close) {
  size_t quote = close;
  while (true) {
    quote = text.rfind('"', quote - 1);
    size_t backslashes = 0;
    while (text[quote - 1 - backslashes] == '\\') ++backslashes;
    if (backslashes % 2 == 0) return quote;
  }
}

// Start of the UTF-8 sequence that nlohmann's lexer rejected at byte `at`: the bytes before the
// sequence were accepted, so when a lead byte within the three before `at` begins a sequence long
// enough to reach `at`, the sequence is that one; otherwise `at` is a bad lead byte itself.
size_t Utf8SequenceStart(absl::string_view text, size_t at) {
  for (size_t back = 1; back <= 3 && back <= at; ++back) {
    const unsigned char byte = static_cast<unsigned char>(text[at - back]);
    if (byte >= 0x80 && byte <= 0xBF) continue;  // continuation byte
    const size_t length = byte >= 0xF0 ? 4 : byte >= 0xE0 ? 3 : byte >= 0xC0 ? 2 : 1;
    return length > back ? at - back : at;
  }
  return at;
}

// Start of the literal (true, false or null) that broke off at byte `at`, or `at` itself when the
// bytes there start no token. The tail of a whole literal is never the start of one, so a literal
// that ends just before `at` is not taken for a broken one.
size_t BrokenLiteralStart(absl::string_view text, size_t at) {
  for (const absl::string_view literal : {"true", "false", "null"}) {
    for (size_t length = 1; length < literal.size() && length <= at; ++length) {
      if (text.substr(at - length, length) == literal.substr(0, length)) return at - length;
    }
  }
  return at;
}

// A syntax error (parse_error.101) as nlohmann words it: "... syntax error while parsing <context>
// - <problem>[; expected <token>]", where <problem> is "unexpected <token>" for a well-formed token
// out of place, or the lexer's "<message>; last read: '<bytes>'" for bytes that form no token.
// json_test pins the wording of every error, so a version of nlohmann that words them otherwise
// fails it.
struct SyntaxError {
  absl::string_view context;        // "value", "object key", "object separator", "array", "object"
  absl::string_view lexer_message;  // empty for a token out of place
  absl::string_view unexpected;     // the token out of place: "number literal", "']'", ...
  bool after_top_level = false;     // the parser expected the end of the text
};

SyntaxError SplitSyntaxError(absl::string_view what) {
  SyntaxError error;
  constexpr absl::string_view kIntro = "syntax error while parsing ";
  const size_t intro = what.find(kIntro);
  if (intro == absl::string_view::npos) return error;
  what.remove_prefix(intro + kIntro.size());
  const size_t dash = what.find(" - ");
  if (dash == absl::string_view::npos) return error;
  error.context = what.substr(0, dash);
  absl::string_view problem = what.substr(dash + 3);
  // The bytes read are quoted, so this suffix cannot come from the text.
  error.after_top_level = absl::ConsumeSuffix(&problem, "; expected end of input");
  constexpr absl::string_view kLastRead = "; last read: '";
  if (const size_t last_read = problem.find(kLastRead); last_read != absl::string_view::npos) {
    error.lexer_message = problem.substr(0, last_read);
  } else if (absl::ConsumePrefix(&problem, "unexpected ")) {
    error.unexpected = problem.substr(0, problem.find(';'));
  }
  return error;
}

// First byte of the token out of place named `token`; `end` is one past its last byte (the end of
// the text counts as a byte) and `last_token` the lexer's record of the bytes it read, which
// restarts at each number and string.
size_t UnexpectedTokenStart(absl::string_view token, size_t end, const std::string& last_token) {
  if (token == "number literal" || token == "string literal") return end - last_token.size();
  if (token == "true literal" || token == "null literal") return end - 4;
  if (token == "false literal") return end - 5;
  return end - 1;  // punctuation or the end of the text
}

}  // namespace

// Turns nlohmann's SAX events over one document into JsonEvents, and rejects what nlohmann
// accepts but this reader does not: a byte order mark, repeated keys and nesting deeper than
// Json::kMaxDepth. Errors are worded the same whichever layer finds them; a handler's error
// is passed on unchanged.
class JsonParser final : public nlohmann::json_sax<nlohmann::json> {
 public:
  static absl::Status ParseDocument(absl::string_view text, JsonEvents& events, bool unique_keys) {
    // nlohmann skips a UTF-8 byte order mark, which RFC 8259 lets a parser refuse; no JSON text
    // starts with its first byte.
    if (absl::StartsWith(text, "\xEF\xBB\xBF")) {
      return Error(0,
                   "the text starts with a UTF-8 byte order mark (EF BB BF), which JSON text "
                   "must not (RFC 8259); save the file without it");
    }
    if (!text.empty() && text.front() == '\xEF') {
      return Error(0, "unexpected character, expected a value");
    }
    JsonParser parser(text, events, unique_keys);
    std::istream stream(&parser.buffer_);
    if (!nlohmann::json::sax_parse(stream, &parser, nlohmann::json::input_format_t::json,
                                   /*strict=*/true, /*ignore_comments=*/false)) {
      return parser.error_;
    }
    // nlohmann's lexer takes a NUL byte outside a string for the end of the text. After a whole
    // value it stopped at the first NUL, since none can come earlier in a valid text.
    if (const size_t nul = text.find('\0'); nul != absl::string_view::npos) {
      return Error(nul, "unexpected data after the top-level value");
    }
    return absl::OkStatus();
  }

  bool null() override { return Pass(events_.Null()); }
  bool boolean(bool value) override { return Pass(events_.Bool(value)); }
  // nlohmann reports the integers written with a minus sign here, so 0 was written "-0".
  bool number_integer(number_integer_t value) override {
    return Pass(events_.Number(true, value, value == 0 ? -0.0 : static_cast<double>(value)));
  }
  bool number_unsigned(number_unsigned_t value) override {
    if (value <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Pass(events_.Number(true, static_cast<int64_t>(value), static_cast<double>(value)));
    }
    // Rounds as reading the decimal would.
    return Pass(events_.Number(false, 0, static_cast<double>(value)));
  }
  bool number_float(number_float_t value, const string_t& /*text*/) override {
    return Pass(events_.Number(false, 0, value));
  }
  bool string(string_t& value) override { return Pass(events_.String(std::move(value))); }
  // Only the binary formats (CBOR, MessagePack, ...) have binary values.
  bool binary(binary_t& /*value*/) override {
    error_ = Error(buffer_.consumed(), "binary value");
    return false;
  }
  bool start_object(std::size_t /*elements*/) override {
    return Open() && Pass(events_.StartObject());
  }
  bool start_array(std::size_t /*elements*/) override {
    return Open() && Pass(events_.StartArray());
  }
  bool end_object() override {
    open_.pop_back();
    return Pass(events_.EndObject());
  }
  bool end_array() override {
    open_.pop_back();
    return Pass(events_.EndArray());
  }

  // The lexer has just read the key's closing quote.
  bool key(string_t& key) override {
    if (!unique_keys_) return Pass(events_.Key(std::move(key)));
    const size_t close = buffer_.consumed() - 1;
    const size_t open = StringTokenStart(text_, close);
    // The key as the text spells it names the decoded key when it has no escape; an escaped
    // key is kept decoded.
    absl::string_view spelled = text_.substr(open + 1, close - open - 1);
    if (spelled.find('\\') != absl::string_view::npos) spelled = escaped_keys_.emplace_back(key);
    if (!open_.back().Insert(spelled)) {
      error_ = Error(open, absl::StrCat("duplicate object key ", QuoteUntrusted(key)));
      return false;
    }
    return Pass(events_.Key(std::move(key)));
  }

  // `position` counts the bytes read up to the one that gave the error away (the end of the text
  // counting as one byte); `last_token` holds the bytes of the token at fault, or more.
  bool parse_error(std::size_t position, const std::string& last_token,
                   const nlohmann::detail::exception& exception) override {
    error_ = Describe(position, last_token, exception);
    return false;
  }

 private:
  JsonParser(absl::string_view text, JsonEvents& events, bool unique_keys)
      : text_(text), buffer_(text), events_(events), unique_keys_(unique_keys) {}

  // The keys of an open object (none for an open array), as views of the text or of
  // escaped_keys_: the first few in a short list, the rest in a hash set, so a small object
  // allocates nothing and the keys are never copied.
  class Keys {
   public:
    // False when `key` was there already.
    bool Insert(absl::string_view key) {
      if (many_.empty()) {
        for (absl::string_view seen : few_) {
          if (seen == key) return false;
        }
        if (few_.size() < few_.capacity()) {
          few_.push_back(key);
          return true;
        }
        many_.insert(few_.begin(), few_.end());
      }
      return many_.insert(key).second;
    }

   private:
    absl::InlinedVector<absl::string_view, 8> few_;
    absl::flat_hash_set<absl::string_view> many_;
  };

  // Keeps the handler's verdict: false stops nlohmann's parse, and error_ is returned.
  bool Pass(absl::Status status) {
    if (status.ok()) return true;
    error_ = std::move(status);
    return false;
  }

  bool Open() {
    if (open_.size() == Json::kMaxDepth) {
      // The lexer has just read the bracket.
      error_ = Error(buffer_.consumed() - 1, "nesting deeper than the limit");
      return false;
    }
    open_.emplace_back();  // an array's stays empty
    return true;
  }

  // This reader's wording of nlohmann's error, at the byte at fault: a token out of place and a
  // literal that broke off at their first byte, other bytes that form no token where they go wrong.
  absl::Status Describe(size_t position, const std::string& last_token,
                        const nlohmann::detail::exception& exception) const {
    constexpr int kNumberOverflow = 406;  // out_of_range.406, raised once the number is read
    if (exception.id == kNumberOverflow) {
      return Error(position - last_token.size(), "number out of the double range");
    }
    const size_t at = position - 1;
    const SyntaxError syntax = SplitSyntaxError(exception.what());
    absl::string_view lexer = syntax.lexer_message;
    if (absl::ConsumePrefix(&lexer, "invalid string: ")) return DescribeStringError(lexer, at);
    if (absl::StartsWith(lexer, "invalid number")) {
      return Error(at, "invalid number: expected a digit");
    }

    // Left: a token out of place, or bytes that form no token (lexer: "invalid literal").
    const size_t start = lexer.empty()
                             ? UnexpectedTokenStart(syntax.unexpected, position, last_token)
                             : BrokenLiteralStart(text_, at);
    // A number that starts with 0 ends there, so a digit after the 0 starts a number of its own.
    if (syntax.unexpected == "number literal" && start > 0 && text_[start - 1] == '0' &&
        absl::ascii_isdigit(text_[start])) {
      const size_t zero = start - 1;
      return Error(zero > 0 && text_[zero - 1] == '-' ? zero - 1 : zero,
                   "invalid number: leading zero");
    }
    const bool text_ended = lexer.empty() && at == text_.size();
    if (syntax.after_top_level) return Error(start, "unexpected data after the top-level value");
    if (syntax.context == "object key") return Error(start, "expected a string key in object");
    if (syntax.context == "object separator") return Error(start, "expected ':' after object key");
    if (syntax.context == "array") {
      return Error(start, text_ended ? "unterminated array" : "expected ',' or ']' in array");
    }
    if (syntax.context == "object") {
      return Error(start, text_ended ? "unterminated object" : "expected ',' or '}' in object");
    }
    // A value was expected.
    if (!lexer.empty() && start != at) return Error(start, "invalid literal");
    if (text_ended) return Error(start, "unexpected end of input, expected a value");
    return Error(start, "unexpected character, expected a value");
  }

  // `lexer` is nlohmann's message after "invalid string: "; the lexer gave up at byte `at`.
  absl::Status DescribeStringError(absl::string_view lexer, size_t at) const {
    if (absl::StartsWith(lexer, "control character")) {
      return Error(at, "control character in string");
    }
    if (absl::StartsWith(lexer, "missing closing quote")) return Error(at, "unterminated string");
    if (absl::StartsWith(lexer, "forbidden character after backslash")) {
      return at == text_.size() ? Error(at, "unterminated string")
                                : Error(at - 1, "invalid escape");
    }
    if (absl::StartsWith(lexer, "'\\u' must be followed by 4 hex digits")) {
      return Error(at,
                   at == text_.size() ? "truncated \\u escape" : "invalid hex digit in \\u escape");
    }
    if (absl::StartsWith(lexer, "surrogate U+D800..U+DBFF")) {
      return Error(at, "lone high surrogate");
    }
    if (absl::StartsWith(lexer, "surrogate U+DC00..U+DFFF")) {
      return Error(at, "lone low surrogate");
    }
    if (absl::StartsWith(lexer, "ill-formed UTF-8")) {
      return Error(Utf8SequenceStart(text_, at), "invalid UTF-8 in string");
    }
    return Error(at, absl::StrCat("invalid string: ", lexer));
  }

  absl::string_view text_;
  TextBuffer buffer_;
  JsonEvents& events_;
  bool unique_keys_;
  // The keys of each open object, and none for each open array; outermost first.
  std::vector<Keys> open_;
  std::deque<std::string> escaped_keys_;  // the decoded keys that the text spells escaped
  absl::Status error_;
};

// Builds the tree of Json::Parse from the events.
class JsonTreeBuilder final : public JsonEvents {
 public:
  Json TakeRoot() { return std::move(root_); }

  absl::Status Null() override {
    Add(Json::Type::kNull);
    return absl::OkStatus();
  }
  absl::Status Bool(bool value) override {
    Add(Json::Type::kBool).bool_ = value;
    return absl::OkStatus();
  }
  absl::Status Number(bool is_int, int64_t as_int, double as_double) override {
    Json& json = Add(Json::Type::kNumber);
    json.is_int_ = is_int;
    json.int_ = is_int ? as_int : 0;
    json.double_ = as_double;
    return absl::OkStatus();
  }
  absl::Status String(std::string&& value) override {
    Add(Json::Type::kString).string_ = std::move(value);
    return absl::OkStatus();
  }
  // An open array or object is the last element of the one around it, which grows no further
  // until this one closes, so the pointers in open_ stay valid.
  absl::Status StartObject() override {
    open_.push_back(&Add(Json::Type::kObject));
    return absl::OkStatus();
  }
  absl::Status StartArray() override {
    open_.push_back(&Add(Json::Type::kArray));
    return absl::OkStatus();
  }
  absl::Status Key(std::string&& key) override {
    key_ = std::move(key);
    return absl::OkStatus();
  }
  absl::Status EndObject() override {
    open_.pop_back();
    return absl::OkStatus();
  }
  absl::Status EndArray() override {
    open_.pop_back();
    return absl::OkStatus();
  }

 private:
  // The next value: the document, the next element of the open array or the value of the open
  // object's last key.
  Json& Add(Json::Type type) {
    Json* json = &root_;
    if (!open_.empty()) {
      Json& parent = *open_.back();
      json = parent.type_ == Json::Type::kArray
                 ? &parent.array_.emplace_back()
                 : &parent.object_.emplace_back(std::move(key_), Json()).second;
    }
    json->type_ = type;
    return *json;
  }

  Json root_;
  std::vector<Json*> open_;  // outermost first
  std::string key_;          // of the value to come, in an object
};

absl::Status ParseJsonEvents(absl::string_view text, JsonEvents& events,
                             const JsonEventOptions& options) {
  return JsonParser::ParseDocument(text, events, options.unique_keys);
}

absl::StatusOr<Json> Json::Parse(absl::string_view text) {
  JsonTreeBuilder builder;
  TP_RETURN_IF_ERROR(JsonParser::ParseDocument(text, builder, /*unique_keys=*/true));
  return builder.TakeRoot();
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
