// libFuzzer target: a safetensors image from arbitrary bytes (header length, JSON header,
// entries against the data section). Any input must end in a tensor table or an error.
#include <cstddef>
#include <cstdint>

#include "models/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = tileplan::models::SafetensorsFile::FromBuffer(
      reinterpret_cast<const std::byte*>(data), size, "fuzz.safetensors");
  if (file.ok()) {
    for (const auto& [name, view] : (*file)->tensors()) {
      // Every tensor lies inside the image.
      if (view.data < reinterpret_cast<const std::byte*>(data) ||
          view.data + view.nbytes > reinterpret_cast<const std::byte*>(data) + size) {
        __builtin_trap();
      }
    }
  }
  return 0;
}
