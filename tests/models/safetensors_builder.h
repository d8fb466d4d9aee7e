// Test helper: builds safetensors images byte by byte, so tests can write valid checkpoints and
// then corrupt exactly the bytes they mean to.
#ifndef TILEPLAN_TESTS_MODELS_SAFETENSORS_BUILDER_H_
#define TILEPLAN_TESTS_MODELS_SAFETENSORS_BUILDER_H_

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace tileplan::testing {

struct TestTensor {
  std::string name;
  std::string dtype;  // safetensors name: "F32", "BF16", ...
  std::vector<int64_t> shape;
  std::string bytes;  // raw little-endian data
};

// Raw bytes of float32 / bfloat16 (truncated) / float16 (round to nearest even) values.
std::string F32Bytes(const std::vector<float>& values);
std::string BF16Bytes(const std::vector<float>& values);
std::string F16Bits(const std::vector<uint16_t>& bits);

// A valid image: header with the tensors in the given order, data laid out contiguously in
// that order, header padded with spaces to a multiple of 8 bytes. Names, dtypes and metadata
// are written verbatim, so they must not need JSON escaping.
std::string BuildSafetensors(const std::vector<TestTensor>& tensors,
                             const std::map<std::string, std::string>& metadata = {});

// An image with the given header text (unvalidated) followed by `data`.
std::string ImageFromHeader(absl::string_view header, absl::string_view data);

// Writes `bytes` to `path`, creating parent directories. Aborts the test binary on failure.
void WriteFile(const std::filesystem::path& path, absl::string_view bytes);

// A fresh empty directory under the test temporary directory, unique per call.
std::filesystem::path MakeTempDir(absl::string_view name);

}  // namespace tileplan::testing

#endif  // TILEPLAN_TESTS_MODELS_SAFETENSORS_BUILDER_H_
