// Test checkpoints built from values: random weights for a lowered graph, written through the
// byte-level builder of tests/models/safetensors_builder.h.
#ifndef TILEPLAN_TESTS_TESTING_RANDOM_WEIGHTS_H_
#define TILEPLAN_TESTS_TESTING_RANDOM_WEIGHTS_H_

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "models/safetensors.h"
#include "regions/ir.h"

namespace tileplan::testing {

// One tensor as values: F32 and BF16 take `values`, I32 takes `ints`.
struct WeightData {
  models::StDType dtype = models::StDType::kF32;
  std::vector<int64_t> shape;
  std::vector<float> values;
  std::vector<int32_t> ints;
};
using WeightMap = std::map<std::string, WeightData>;  // by tensor name

// Writes `weights` as one safetensors file (BF16 values are truncated). Another dtype, or
// data that does not match its shape, fails the current test.
void WriteWeights(const std::filesystem::path& path, const WeightMap& weights);

// Random data for every weight of `graph` under its checkpoint tensor name, in the weight's
// dtype and shape, drawn so that a lowered model mixes its layers: norm weights
// 1 + 0.15·N(0,1), biases 0.2·N(0,1), embeddings N(0,1), other matrices
// 1.5·N(0,1)/sqrt(fan_in). Deterministic for a seed. The graph must have no packed weights
// (a test failure otherwise): draw them for the primitive graph.
WeightMap RandomWeights(const ir::Graph& graph, uint32_t seed);

}  // namespace tileplan::testing

#endif  // TILEPLAN_TESTS_TESTING_RANDOM_WEIGHTS_H_
