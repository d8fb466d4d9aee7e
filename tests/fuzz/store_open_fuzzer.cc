// libFuzzer target: a tactic store file from arbitrary bytes, opened read-write. Whatever
// the file holds, opening and closing it must not crash, and a file the store refuses (its
// warning says it "will not be written") must keep every byte.
#include <cstddef>
#include <cstdint>
#include <string>

#include "base/files.h"
#include "tests/fuzz/fuzz_support.h"
#include "tuner/tactic_store.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::filesystem::path path = tileplan::fuzz::ScratchDir() / "store.db";
  for (const char* side : {"", "-wal", "-shm", "-journal"}) {
    std::filesystem::remove(path.string() + side);
  }
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  tileplan::fuzz::WriteBytes(path, bytes);
  bool unusable = false;
  {
    auto store = tileplan::tuner::TacticStore::Open(path.string());
    if (!store.ok()) return 0;
    for (const std::string& warning : (*store)->warnings()) {
      if (warning.find("will not be written") != std::string::npos) unusable = true;
    }
  }
  if (!unusable) return 0;
  const absl::StatusOr<std::string> after = tileplan::ReadRegularFile(path.string(), size);
  if (!after.ok() || *after != bytes) {
    tileplan::fuzz::Broken("a file the store refused was changed");
  }
  return 0;
}
