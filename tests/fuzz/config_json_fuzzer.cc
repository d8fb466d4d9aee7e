// libFuzzer target: config.json from arbitrary bytes, parsed strictly for every architecture.
#include <cstddef>
#include <cstdint>

#include "models/config.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)tileplan::models::ParseModelConfig(tileplan::fuzz::AsText(data, size));
  return 0;
}
