#include "tests/testing/random_weights.h"

#include <cmath>
#include <cstring>
#include <numbers>
#include <random>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/models/safetensors_builder.h"

namespace tileplan::testing {
namespace {

// Box-Muller over a seeded mt19937, so values do not depend on the standard library.
class Normal {
 public:
  explicit Normal(uint32_t seed) : rng_(seed) {}
  double Next() {
    const double u1 = (static_cast<double>(rng_()) + 1.0) / 4294967297.0;
    const double u2 = static_cast<double>(rng_()) / 4294967296.0;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }

 private:
  std::mt19937 rng_;
};

models::StDType StDTypeOf(ir::DType dtype) {
  switch (dtype) {
    case ir::DType::kBF16:
      return models::StDType::kBF16;
    case ir::DType::kF16:
      return models::StDType::kF16;
    case ir::DType::kI32:
      return models::StDType::kI32;
    case ir::DType::kF32:
      break;
  }
  return models::StDType::kF32;
}

}  // namespace

void WriteWeights(const std::filesystem::path& path, const WeightMap& weights) {
  std::vector<TestTensor> tensors;
  for (const auto& [name, w] : weights) {
    int64_t n = 1;
    for (int64_t d : w.shape) n *= d;
    TestTensor t{name, std::string(models::StDTypeName(w.dtype)), w.shape, ""};
    const bool is_int = w.dtype == models::StDType::kI32;
    if (static_cast<int64_t>(is_int ? w.ints.size() : w.values.size()) != n) {
      ADD_FAILURE() << "test tensor '" << name << "' has data that does not match its shape";
    }
    if (is_int) {
      t.bytes.resize(w.ints.size() * sizeof(int32_t));
      std::memcpy(t.bytes.data(), w.ints.data(), t.bytes.size());
    } else if (w.dtype == models::StDType::kBF16) {
      t.bytes = BF16Bytes(w.values);
    } else if (w.dtype == models::StDType::kF32) {
      t.bytes = F32Bytes(w.values);
    } else {
      ADD_FAILURE() << "test tensor '" << name << "' has unsupported dtype "
                    << models::StDTypeName(w.dtype);
    }
    tensors.push_back(std::move(t));
  }
  WriteFile(path, BuildSafetensors(tensors));
}

WeightMap RandomWeights(const ir::Graph& graph, uint32_t seed) {
  Normal normal(seed);
  WeightMap out;
  for (ir::ValueId id : graph.weights()) {
    const ir::Value& w = graph.value(id);
    WeightData t;
    t.dtype = StDTypeOf(w.type.dtype);
    int64_t n = 1;
    for (const ir::Dim& d : w.type.dims) {
      t.shape.push_back(d.extent());
      n *= d.extent();
    }
    // A stacked weight (experts, docs/ir.md "Packed weights") is drawn as one tensor per
    // slice of dim 0; any other packed weight belongs to a planned graph.
    const bool stacked = w.checkpoint_tensors.size() > 1 &&
                         static_cast<int64_t>(w.checkpoint_tensors.size()) == t.shape[0] &&
                         t.shape.size() >= 3;
    if (w.checkpoint_tensors.size() != 1 && !stacked) {
      ADD_FAILURE() << "weight %" << w.name << " is packed; draw random weights for the "
                    << "primitive graph, whose weights are not";
      continue;
    }
    const std::string& name = w.checkpoint_tensors[0];
    double scale = 1.0, offset = 0.0;
    if (absl::EndsWith(name, "norm.weight")) {
      scale = 0.15;
      offset = 1.0;
    } else if (absl::EndsWith(name, ".bias")) {
      scale = 0.2;
    } else if (!absl::StrContains(name, "embed_tokens") && t.shape.size() >= 2) {
      scale = 1.5 / std::sqrt(static_cast<double>(t.shape.back()));
    }
    for (int64_t k = 0; k < n; ++k) {
      t.values.push_back(static_cast<float>(offset + scale * normal.Next()));
    }
    if (stacked) {
      const size_t slice = static_cast<size_t>(n / t.shape[0]);
      for (size_t e = 0; e < w.checkpoint_tensors.size(); ++e) {
        WeightData part;
        part.dtype = t.dtype;
        part.shape.assign(t.shape.begin() + 1, t.shape.end());
        part.values.assign(t.values.begin() + static_cast<std::ptrdiff_t>(e * slice),
                           t.values.begin() + static_cast<std::ptrdiff_t>((e + 1) * slice));
        out[w.checkpoint_tensors[e]] = std::move(part);
      }
      continue;
    }
    out[name] = std::move(t);
  }
  return out;
}

}  // namespace tileplan::testing
