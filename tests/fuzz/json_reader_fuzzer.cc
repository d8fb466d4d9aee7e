// libFuzzer target: ParseJsonEvents's two readers (simdjson's, and nlohmann's as the
// reference) must give arbitrary bytes the same events and the same status, with repeated keys
// refused or left to the handler, and read by simdjson's reader whole and in runs of a few
// bytes (the first byte of the input picks how few).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "tests/fuzz/fuzz_support.h"
#include "tests/testing/json_readers.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text = tileplan::fuzz::AsText(data, size);
  const size_t short_runs = size == 0 ? 1 : 1 + data[0] % 32;
  for (const bool unique_keys : {true, false}) {
    for (const size_t run_bytes : {tileplan::JsonEventOptions().run_bytes, short_runs}) {
      const std::string difference =
          tileplan::testing::CompareJsonReaders(text, unique_keys, run_bytes);
      if (!difference.empty()) {
        std::fprintf(stderr, "%s (runs of %zu bytes)\n", difference.c_str(), run_bytes);
        tileplan::fuzz::Broken("the JSON readers disagree");
      }
    }
  }
  return 0;
}
