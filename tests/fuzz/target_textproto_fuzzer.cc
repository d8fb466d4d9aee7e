// libFuzzer target: a target description (--target FILE.textproto) from arbitrary bytes.
#include <cstddef>
#include <cstdint>

#include "targets/target.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)tileplan::targets::ParseTarget(tileplan::fuzz::AsText(data, size), "fuzz.textproto");
  return 0;
}
