// Test helpers that write safetensors files and random checkpoints for lowered graphs.
//
// The writer emits the format models/safetensors.h reads: an 8-byte little-endian header
// length, a JSON header (tensors sorted by name, data offsets consecutive) padded with
// spaces to a multiple of 8 bytes, then the raw little-endian data.
#ifndef TILEPLAN_TESTS_TESTING_SAFETENSORS_WRITER_H_
#define TILEPLAN_TESTS_TESTING_SAFETENSORS_WRITER_H_

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "models/safetensors.h"
#include "regions/ir.h"

namespace tileplan::testing {

// One tensor to write. Float dtypes (F32, BF16, F16) take `values` (rounded to nearest
// even when narrowed); I32 takes `ints`.
struct TestTensor {
  models::StDType dtype = models::StDType::kF32;
  std::vector<int64_t> shape;
  std::vector<float> values;
  std::vector<int32_t> ints;
};
using TensorMap = std::map<std::string, TestTensor>;

uint16_t FloatToBf16(float value);
uint16_t FloatToF16(float value);
// The value a float takes after a round trip through `dtype` (F32, BF16 or F16).
float RoundTo(models::StDType dtype, float value);

// The bytes of a safetensors file holding `tensors`.
std::string SafetensorsBytes(const TensorMap& tensors);
absl::Status WriteSafetensors(const std::filesystem::path& path, const TensorMap& tensors);

// Random weights for every weight of `graph`, in the weight's dtype and shape, initialised
// so that a lowered model mixes its layers: norm weights 1 + 0.15·N(0,1), biases
// 0.2·N(0,1), embeddings N(0,1), other matrices 1.5·N(0,1)/sqrt(fan_in). Deterministic
// for a seed.
TensorMap RandomWeights(const ir::Graph& graph, uint32_t seed);

// A fresh empty directory under the system temp dir, removed with its contents on
// destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace tileplan::testing

#endif  // TILEPLAN_TESTS_TESTING_SAFETENSORS_WRITER_H_
