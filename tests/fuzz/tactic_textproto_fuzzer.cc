// libFuzzer target: a tactic store export (autotune_regions --import FILE) from arbitrary
// bytes, read and then imported into a store; a store that refuses it must keep its bytes.
#include <cstddef>
#include <cstdint>
#include <string>

#include "tests/fuzz/fuzz_support.h"
#include "tuner/tactic_store.h"
#include "tuner/tactic_store_text.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::filesystem::path input = tileplan::fuzz::ScratchDir() / "import.textproto";
  tileplan::fuzz::WriteBytes(input, tileplan::fuzz::AsText(data, size));
  if (!tileplan::tuner::ReadTacticStoreText(input.string()).ok()) return 0;
  const std::filesystem::path store_path = tileplan::fuzz::ScratchDir() / "import.db";
  std::filesystem::remove(store_path);
  auto store = tileplan::tuner::TacticStore::Open(store_path.string());
  if (!store.ok()) return 0;
  (void)(*store)->Import(input.string());
  return 0;
}
