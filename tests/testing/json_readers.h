// Reads a text with both of ParseJsonEvents's readers (simdjson's and the reference) and says
// where they differ: json_test runs it over edge cases and mutated documents, json_fuzzer over
// arbitrary bytes. Header-only, so the fuzzer needs no test library.
#ifndef TILEPLAN_TESTS_TESTING_JSON_READERS_H_
#define TILEPLAN_TESTS_TESTING_JSON_READERS_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "base/json.h"

namespace tileplan::testing {

// The events as text, numbers with every bit of the double ("%a", so -0 and 0 differ).
class RecordedJsonEvents final : public JsonEvents {
 public:
  std::vector<std::string> log;

  absl::Status Null() override { return Log("null"); }
  absl::Status Bool(bool value) override { return Log(value ? "true" : "false"); }
  absl::Status Number(bool is_int, int64_t as_int, double as_double) override {
    char bits[64];
    std::snprintf(bits, sizeof(bits), "%a", as_double);
    return Log(is_int ? absl::StrCat("int ", as_int, " ", bits) : absl::StrCat("double ", bits));
  }
  absl::Status String(std::string&& value) override { return Log("string " + value); }
  absl::Status StartObject() override { return Log("{"); }
  absl::Status Key(std::string&& key) override { return Log("key " + key); }
  absl::Status EndObject() override { return Log("}"); }
  absl::Status StartArray() override { return Log("["); }
  absl::Status EndArray() override { return Log("]"); }

 private:
  absl::Status Log(std::string event) {
    log.push_back(std::move(event));
    return absl::OkStatus();
  }
};

// Empty when both readers give `text` the same events and the same status; otherwise what
// differs. simdjson's reader takes the text in runs of about `run_bytes`.
inline std::string CompareJsonReaders(absl::string_view text, bool unique_keys,
                                      size_t run_bytes = JsonEventOptions().run_bytes) {
  RecordedJsonEvents fast, reference;
  const absl::Status fast_status = ParseJsonEvents(
      text, fast,
      {.unique_keys = unique_keys, .reader = JsonReader::kFast, .run_bytes = run_bytes});
  const absl::Status reference_status = ParseJsonEvents(
      text, reference, {.unique_keys = unique_keys, .reader = JsonReader::kReference});
  if (fast_status != reference_status) {
    return absl::StrCat("statuses differ: fast ", fast_status.ToString(), ", reference ",
                        reference_status.ToString());
  }
  if (fast.log.size() != reference.log.size()) {
    return absl::StrCat("fast reader gave ", fast.log.size(), " events, reference ",
                        reference.log.size());
  }
  for (size_t i = 0; i < fast.log.size(); ++i) {
    if (fast.log[i] != reference.log[i]) {
      return absl::StrCat("event ", i, ": fast \"", fast.log[i], "\", reference \"",
                          reference.log[i], "\"");
    }
  }
  return "";
}

}  // namespace tileplan::testing

#endif  // TILEPLAN_TESTS_TESTING_JSON_READERS_H_
