// What the libFuzzer targets of tests/fuzz share: the input as text, a scratch directory of
// the process for inputs that must be files, and the check that turns a broken property into
// a crash the fuzzer reports. Files are read back with base/files.h's ReadRegularFile.
#ifndef TILEPLAN_TESTS_FUZZ_FUZZ_SUPPORT_H_
#define TILEPLAN_TESTS_FUZZ_FUZZ_SUPPORT_H_

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/string_view.h"

namespace tileplan::fuzz {

inline absl::string_view AsText(const uint8_t* data, size_t size) {
  return absl::string_view(reinterpret_cast<const char*>(data), size);
}

// A directory of this process under the system's temporary directory, made on first use.
inline const std::filesystem::path& ScratchDir() {
  static const std::filesystem::path dir = [] {
    std::filesystem::path d =
        std::filesystem::temp_directory_path() / ("tileplan_fuzz." + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

inline void WriteBytes(const std::filesystem::path& path, absl::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A property the input broke: reported as a crash, with the reason.
[[noreturn]] inline void Broken(const char* what) {
  std::fprintf(stderr, "fuzz property broken: %s\n", what);
  std::abort();
}

}  // namespace tileplan::fuzz

#endif  // TILEPLAN_TESTS_FUZZ_FUZZ_SUPPORT_H_
