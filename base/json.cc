#include "base/json.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <istream>
#include <limits>
#include <optional>
#include <streambuf>
#include <string>
#include <string_view>
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
#include "simdjson.h"

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

namespace {

// An upper bound on what simdjson's reading of `text` takes: its structural index (4 bytes a
// token), its tape (8 bytes a value, 16 a number) and its string buffer (the text's strings,
// each with 5 bytes more). Every value but the first and every key follows one of , : [ {, and
// each closing bracket pairs with an opening one, so three tokens and one value of 16 bytes
// with 5 more a separator bound them.
size_t FastReaderBytes(absl::string_view text) {
  size_t separators = 0;
  for (const char c : text) separators += (c == ',') + (c == ':') + (c == '[') + (c == '{');
  return (separators + 1) * (3 * 4 + 16 + 5) + text.size();
}

// What simdjson may take for one run of the text; a run that needs more is left to the
// reference reader, which holds only the open containers.
constexpr size_t kFastReaderBudget = size_t{256} << 20;

// Whether the text holds the integer -0 (or what could be one, inside a string), whose sign
// simdjson's tape drops and Json keeps in its double value.
bool MayHoldNegativeZero(absl::string_view text) {
  for (size_t at = text.find("-0"); at != absl::string_view::npos; at = text.find("-0", at + 2)) {
    if (at + 2 == text.size()) return true;
    const char next = text[at + 2];
    if (!absl::ascii_isdigit(next) && next != '.' && next != 'e' && next != 'E') return true;
  }
  return false;
}

// Whether some object within `element` repeats a key (keys compared decoded).
bool RepeatsAKey(simdjson::dom::element element) {
  if (element.type() == simdjson::dom::element_type::ARRAY) {
    for (const simdjson::dom::element item : simdjson::dom::array(element)) {
      if (RepeatsAKey(item)) return true;
    }
  } else if (element.type() == simdjson::dom::element_type::OBJECT) {
    absl::flat_hash_set<std::string_view> keys;
    for (const simdjson::dom::key_value_pair field : simdjson::dom::object(element)) {
      if (!keys.insert(field.key).second || RepeatsAKey(field.value)) return true;
    }
  }
  return false;
}

// Finds where the members (or elements) of a text's top-level container may be cut: at the
// commas between them. It knows only strings and brackets, so in an invalid text a cut may fall
// anywhere; the runs between cuts are each validated by simdjson, which is what makes them
// right (ParseWithSimdjson).
class TopLevelCuts {
 public:
  explicit TopLevelCuts(absl::string_view text) : text_(text) {}

  // The first comma at depth 1 at or after `at`, scanning on from where the last call stopped;
  // the text's size when there is none.
  size_t Next(size_t at) {
    const size_t size = text_.size();
    for (; scan_ < size; ++scan_) {
      const char c = text_[scan_];
      if (c == '"') {
        scan_ = ClosingQuote(scan_);
      } else if (c == '{' || c == '[') {
        ++depth_;
      } else if (c == '}' || c == ']') {
        --depth_;
      } else if (c == ',' && depth_ == 1 && scan_ >= at) {
        return scan_++;
      }
    }
    return size;
  }

 private:
  // The unescaped quote that closes the string opened at `open` (the last byte when none
  // does). A backslash run before a quote is counted once, so the scan stays linear.
  size_t ClosingQuote(size_t open) const {
    for (size_t at = open + 1;; ++at) {
      at = text_.find('"', at);
      if (at == absl::string_view::npos) return text_.size() - 1;
      size_t backslashes = 0;
      while (text_[at - 1 - backslashes] == '\\') ++backslashes;
      if (backslashes % 2 == 0) return at;
    }
  }

  absl::string_view text_;
  size_t scan_ = 0;
  int depth_ = 0;
};

// Hands the values of what simdjson has read and validated to `events`, in document order,
// counting them.
class TapeWalker {
 public:
  explicit TapeWalker(JsonEvents& events) : events_(events) {}

  size_t delivered() const { return delivered_; }

  absl::Status Walk(simdjson::dom::element element) {
    switch (element.type()) {
      case simdjson::dom::element_type::OBJECT:
        TP_RETURN_IF_ERROR(StartObject());
        TP_RETURN_IF_ERROR(WalkContents(element));
        return EndObject();
      case simdjson::dom::element_type::ARRAY:
        TP_RETURN_IF_ERROR(StartArray());
        TP_RETURN_IF_ERROR(WalkContents(element));
        return EndArray();
      default:
        break;
    }
    ++delivered_;  // a scalar
    switch (element.type()) {
      case simdjson::dom::element_type::STRING:
        return events_.String(std::string(element.get_string().value_unsafe()));
      case simdjson::dom::element_type::INT64: {
        // A zero here was written "0": MayHoldNegativeZero keeps "-0" from this reader.
        const int64_t value = element.get_int64().value_unsafe();
        return events_.Number(true, value, static_cast<double>(value));
      }
      case simdjson::dom::element_type::UINT64:  // beyond int64: rounds as the decimal would
        return events_.Number(false, 0, static_cast<double>(element.get_uint64().value_unsafe()));
      case simdjson::dom::element_type::DOUBLE:
        return events_.Number(false, 0, element.get_double().value_unsafe());
      case simdjson::dom::element_type::BOOL:
        return events_.Bool(element.get_bool().value_unsafe());
      case simdjson::dom::element_type::NULL_VALUE:
        return events_.Null();
      default:
        return absl::InternalError("JSON: a value of unknown type");
    }
  }

  // The members of an object (each key, then its value) or the elements of an array, without
  // the container's own start and end.
  absl::Status WalkContents(simdjson::dom::element container) {
    if (container.type() == simdjson::dom::element_type::OBJECT) {
      for (const simdjson::dom::key_value_pair field : simdjson::dom::object(container)) {
        TP_RETURN_IF_ERROR(Key(field.key));
        TP_RETURN_IF_ERROR(Walk(field.value));
      }
    } else {
      for (const simdjson::dom::element item : simdjson::dom::array(container)) {
        TP_RETURN_IF_ERROR(Walk(item));
      }
    }
    return absl::OkStatus();
  }

  absl::Status StartObject() {
    ++delivered_;
    return events_.StartObject();
  }
  absl::Status EndObject() {
    ++delivered_;
    return events_.EndObject();
  }
  absl::Status StartArray() {
    ++delivered_;
    return events_.StartArray();
  }
  absl::Status EndArray() {
    ++delivered_;
    return events_.EndArray();
  }
  absl::Status Key(std::string_view key) {
    ++delivered_;
    return events_.Key(std::string(key));
  }

 private:
  JsonEvents& events_;
  size_t delivered_ = 0;
};

// Passes events on to `events` after dropping the first `skip`: the reference reader, reading
// a text again from its start, hands on only what simdjson's had not.
class SkippingEvents final : public JsonEvents {
 public:
  SkippingEvents(JsonEvents& events, size_t skip) : events_(events), skip_(skip) {}

  absl::Status Null() override { return Skip() ? absl::OkStatus() : events_.Null(); }
  absl::Status Bool(bool value) override { return Skip() ? absl::OkStatus() : events_.Bool(value); }
  absl::Status Number(bool is_int, int64_t as_int, double as_double) override {
    return Skip() ? absl::OkStatus() : events_.Number(is_int, as_int, as_double);
  }
  absl::Status String(std::string&& value) override {
    return Skip() ? absl::OkStatus() : events_.String(std::move(value));
  }
  absl::Status StartObject() override { return Skip() ? absl::OkStatus() : events_.StartObject(); }
  absl::Status Key(std::string&& key) override {
    return Skip() ? absl::OkStatus() : events_.Key(std::move(key));
  }
  absl::Status EndObject() override { return Skip() ? absl::OkStatus() : events_.EndObject(); }
  absl::Status StartArray() override { return Skip() ? absl::OkStatus() : events_.StartArray(); }
  absl::Status EndArray() override { return Skip() ? absl::OkStatus() : events_.EndArray(); }

 private:
  bool Skip() {
    if (skip_ == 0) return false;
    --skip_;
    return true;
  }

  JsonEvents& events_;
  size_t skip_;
};

// Reads a text whose top-level value is an object or an array with simdjson, in runs of about
// `run_bytes` cut between its members (TopLevelCuts), so that simdjson's buffers, sized by the
// first run, are reused instead of growing with the text: each run, closed with the brackets
// it lacks ("{" run "}"), is validated whole before its first event, and must hold at least
// one member unless it is the whole text. Together the runs are the text, so when every run is
// valid the text is, and the events are the text's. Returns the handler's status once it has had
// every event (or stopped them), or nullopt when a run is refused, or reading it would break a
// promise of ParseJsonEvents (memory, repeated keys, the sign of -0); `delivered` then counts
// the events handed out, all of runs before the one refused.
std::optional<absl::Status> ParseWithSimdjson(absl::string_view text, JsonEvents& events,
                                              bool unique_keys, size_t run_bytes,
                                              size_t& delivered) {
  delivered = 0;
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first == absl::string_view::npos || (text[first] != '{' && text[first] != '[')) {
    return std::nullopt;
  }
  const bool object = text[first] == '{';
  const char open = object ? '{' : '[';
  const char close = object ? '}' : ']';
  TopLevelCuts cuts(text);
  TapeWalker walker(events);
  simdjson::dom::parser parser;
  std::string buffer;  // a run with its brackets, and simdjson's padding after it
  absl::flat_hash_set<std::string> keys;  // the top-level object's, when they must be unique
  if (parser.allocate(std::min(run_bytes, text.size()) + 2, Json::kMaxDepth) != simdjson::SUCCESS) {
    return std::nullopt;
  }
  for (size_t start = 0;;) {
    const size_t end = cuts.Next(start + run_bytes);
    const bool is_first = start == 0, is_last = end == text.size();
    const absl::string_view run = text.substr(start, end - start);
    // A run holds fewer separators than bytes, so only one of many bytes can reach the budget.
    if ((run.size() > kFastReaderBudget / 34 && FastReaderBytes(run) > kFastReaderBudget) ||
        MayHoldNegativeZero(run)) {
      return std::nullopt;
    }
    buffer.clear();
    if (!is_first) buffer += open;
    buffer.append(run.data(), run.size());
    if (!is_last) buffer += close;
    const size_t size = buffer.size();
    buffer.append(simdjson::SIMDJSON_PADDING, ' ');
    simdjson::dom::element root;
    if (parser.parse(buffer.data(), size, /*realloc_if_needed=*/false).get(root) !=
        simdjson::SUCCESS) {
      return std::nullopt;
    }
    // An empty run between two cuts is a stray comma, not an empty object.
    const size_t members =
        object ? simdjson::dom::object(root).size() : simdjson::dom::array(root).size();
    if (members == 0 && !(is_first && is_last)) return std::nullopt;
    if (unique_keys) {
      if (RepeatsAKey(root)) return std::nullopt;
      if (object) {
        for (const simdjson::dom::key_value_pair field : simdjson::dom::object(root)) {
          if (!keys.emplace(field.key).second) return std::nullopt;
        }
      }
    }
    if (is_first) TP_RETURN_IF_ERROR(object ? walker.StartObject() : walker.StartArray());
    TP_RETURN_IF_ERROR(walker.WalkContents(root));
    if (is_last) TP_RETURN_IF_ERROR(object ? walker.EndObject() : walker.EndArray());
    delivered = walker.delivered();
    if (is_last) return absl::OkStatus();
    start = end + 1;
  }
}

}  // namespace

absl::Status ParseJsonEvents(absl::string_view text, JsonEvents& events,
                             const JsonEventOptions& options) {
  const bool fast = options.reader == JsonReader::kFast ||
                    (options.reader == JsonReader::kAuto && text.size() >= kJsonFastReaderMinBytes);
  size_t delivered = 0;
  if (fast) {
    if (std::optional<absl::Status> status =
            ParseWithSimdjson(text, events, options.unique_keys, options.run_bytes, delivered)) {
      if (options.reader_used != nullptr) *options.reader_used = JsonReader::kFast;
      return *std::move(status);
    }
  }
  // The reference reads the text from its start; the events simdjson's reader handed out
  // before the run it left are the reference's first ones, and are not handed out again.
  if (options.reader_used != nullptr) *options.reader_used = JsonReader::kReference;
  SkippingEvents rest(events, delivered);
  return JsonParser::ParseDocument(text, rest, options.unique_keys);
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
