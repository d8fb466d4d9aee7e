// A strict JSON (RFC 8259) reader for config.json, safetensors headers and index files, over
// nlohmann/json's SAX parser (the reference reader) and, for large texts, simdjson's.
//
// Strict means: one top-level value and nothing after it but white space (a NUL byte and a
// byte order mark are data, hence errors); no comments, no trailing commas, no NaN/Infinity,
// no leading zeros, no control characters in strings, valid \u escapes (surrogate pairs
// combined; lone surrogates rejected), valid UTF-8, duplicate object keys rejected, nesting
// depth limited. Integers written without a fraction or exponent that fit in int64 are kept
// exactly (is_int()); every number also has a double value, and one beyond the double range
// is an error. Errors carry the byte offset of the fault: the first byte of a token out of
// place, or the byte where a token goes wrong.
//
// Json::Parse builds the whole tree, about a hundred bytes per value. Readers of large inputs
// whose shape they know (a safetensors header, an index's weight map) take the same parse as
// events instead (ParseJsonEvents) and keep only what they need, so their memory follows what
// they keep, not the count of values in the text.
//
// ParseJsonEvents reads large texts (JsonEventOptions::reader) with simdjson first, in runs of
// about a MiB cut between the members of the top-level object or array, each run validated
// whole before its first event, so simdjson's buffers stay the size of a run. From the first
// run simdjson refuses (an error in it, or what simdjson reads otherwise than the reference: an
// integer beyond uint64, the sign of -0), or whose reading would take too much memory, the
// reference reader takes over: it reads the text again from its start, and the events
// simdjson's reader handed out already are not handed out again. simdjson accepts nothing the
// reference reader refuses, and gives the same events for what it accepts (json_test and
// tests/fuzz/json_reader_fuzzer.cc compare the two), so the events and the status are the same
// whichever reader gives them.
#ifndef TILEPLAN_BASE_JSON_H_
#define TILEPLAN_BASE_JSON_H_

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tileplan {

class JsonEvents;

class Json {
 public:
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  using Object = std::vector<std::pair<std::string, Json>>;  // document order
  using Array = std::vector<Json>;

  static constexpr int kMaxDepth = 64;

  static absl::StatusOr<Json> Parse(absl::string_view text);

  Json() = default;  // null

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::kNull; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_number() const { return type_ == Type::kNumber; }
  // A number literal with no fraction or exponent whose value fits in int64.
  bool is_int() const { return type_ == Type::kNumber && is_int_; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_array() const { return type_ == Type::kArray; }
  bool is_object() const { return type_ == Type::kObject; }

  // REQUIRES: the matching type (checked with CHECK-style assertion in debug builds).
  bool as_bool() const {
    assert(is_bool());
    return bool_;
  }
  int64_t as_int() const {
    assert(is_int());
    return int_;
  }
  double as_double() const {
    assert(is_number());
    return double_;
  }
  const std::string& as_string() const {
    assert(is_string());
    return string_;
  }
  const Array& as_array() const {
    assert(is_array());
    return array_;
  }
  const Object& as_object() const {
    assert(is_object());
    return object_;
  }

  // Object member by key, or nullptr (also nullptr when this is not an object).
  const Json* Find(absl::string_view key) const;

  // "null", "bool", "number", "string", "array", "object".
  static absl::string_view TypeName(Type type);

 private:
  friend class JsonTreeBuilder;
  Type type_ = Type::kNull;
  bool bool_ = false;
  bool is_int_ = false;
  int64_t int_ = 0;
  double double_ = 0;
  std::string string_;
  Array array_;
  Object object_;
};

// The values of one document as events, in document order (an object's members as Key then the
// value). A handler returns a non-OK status to stop the parse, and ParseJsonEvents returns that
// status unchanged; otherwise every event it receives belongs to a text that is valid so far
// (nesting within Json::kMaxDepth, and keys unique within their object unless the options
// leave that to the handler), and the parse may still fail after its last event (data after
// the value). Numbers carry Json::is_int's flag, the int64 value when it is set, and the double
// value always.
class JsonEvents {
 public:
  virtual ~JsonEvents() = default;
  virtual absl::Status Null() = 0;
  virtual absl::Status Bool(bool value) = 0;
  virtual absl::Status Number(bool is_int, int64_t as_int, double as_double) = 0;
  virtual absl::Status String(std::string&& value) = 0;
  virtual absl::Status StartObject() = 0;
  virtual absl::Status Key(std::string&& key) = 0;
  virtual absl::Status EndObject() = 0;
  virtual absl::Status StartArray() = 0;
  virtual absl::Status EndArray() = 0;
};

enum class JsonReader {
  kAuto,       // simdjson for texts of kJsonFastReaderMinBytes or more, the reference otherwise
  kFast,       // simdjson whenever it can (tests)
  kReference,  // nlohmann only (tests)
};
inline constexpr size_t kJsonFastReaderMinBytes = 64 * 1024;

struct JsonEventOptions {
  // Refuse a key repeated in its object, as Json::Parse does (remembering every key of each
  // open object). A handler that keeps the keys anyway (in a map) can check them itself and
  // spare the parse that memory and time: false leaves repeated keys to it.
  bool unique_keys = true;
  JsonReader reader = JsonReader::kAuto;
  // simdjson's reader takes the text in runs of about this many bytes, cut between the
  // members of its top-level value (tests make them small to cut often).
  size_t run_bytes = size_t{1} << 20;
  // Where not null, set to the reader that gave the status: kFast when simdjson's gave every
  // event, kReference when the reference gave some or all.
  JsonReader* reader_used = nullptr;
};

// Parses `text` as Json::Parse does (the same strictness and error wording), handing each value
// to `events` instead of building a tree.
absl::Status ParseJsonEvents(absl::string_view text, JsonEvents& events,
                             const JsonEventOptions& options = {});

}  // namespace tileplan

#endif  // TILEPLAN_BASE_JSON_H_
