// libFuzzer target: model.safetensors.index.json from arbitrary bytes, in a checkpoint
// directory whose one shard (x.safetensors) holds tensor "a.weight".
#include <cstddef>
#include <cstdint>
#include <string>

#include "models/safetensors.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

const std::filesystem::path& CheckpointDir() {
  static const std::filesystem::path dir = [] {
    const std::filesystem::path d = tileplan::fuzz::ScratchDir() / "checkpoint";
    std::filesystem::create_directories(d);
    const std::string header = R"({"a.weight":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
    std::string image(8, '\0');
    for (int i = 0; i < 8; ++i) image[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
    image += header + std::string(4, '\0');
    tileplan::fuzz::WriteBytes(d / "x.safetensors", image);
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::filesystem::path& dir = CheckpointDir();
  tileplan::fuzz::WriteBytes(dir / "model.safetensors.index.json",
                             tileplan::fuzz::AsText(data, size));
  auto checkpoint = tileplan::models::Checkpoint::Open(dir);
  if (checkpoint.ok() && (*checkpoint)->Find("a.weight") == nullptr) __builtin_trap();
  return 0;
}
