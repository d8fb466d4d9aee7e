#include "tests/testing/safetensors_writer.h"

#include <stdlib.h>

#include <bit>
#include <cmath>
#include <fstream>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tileplan::testing {

uint16_t FloatToBf16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if (std::isnan(value)) return static_cast<uint16_t>((bits >> 16) | 0x40);
  const uint32_t rounding = 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

uint16_t FloatToF16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  const uint32_t abs_bits = bits & 0x7fffffff;
  if (abs_bits > 0x7f800000) return sign | 0x7e00;   // NaN
  if (abs_bits >= 0x477ff000) return sign | 0x7c00;  // rounds to infinity
  if (abs_bits < 0x38800000) {
    // Below the smallest normal half (2^-14): a multiple of 2^-24, rounded to nearest even.
    const float scaled = std::bit_cast<float>(abs_bits) * 16777216.0f;
    return sign | static_cast<uint16_t>(std::nearbyint(scaled));
  }
  uint32_t half = ((((abs_bits >> 23) - 127 + 15) << 10) | ((abs_bits & 0x7fffff) >> 13));
  const uint32_t rest = abs_bits & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (half & 1))) ++half;  // carries into the exponent
  return sign | static_cast<uint16_t>(half);
}

namespace {

float Bf16ToFloat(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

float F16ToFloat(uint16_t h) {
  const float sign = (h & 0x8000) ? -1.0f : 1.0f;
  const int exponent = (h >> 10) & 0x1f;
  const int mantissa = h & 0x3ff;
  if (exponent == 0) return sign * std::ldexp(static_cast<float>(mantissa), -24);
  if (exponent == 31) return mantissa ? NAN : sign * INFINITY;
  return sign * std::ldexp(static_cast<float>(mantissa + 1024), exponent - 25);
}

template <typename T>
void AppendLittleEndian(std::string* out, T value) {
  for (size_t k = 0; k < sizeof(T); ++k) {
    out->push_back(static_cast<char>((static_cast<uint64_t>(value) >> (8 * k)) & 0xff));
  }
}

// Box-Muller over a seeded mt19937, so values do not depend on the standard library.
class Normal {
 public:
  explicit Normal(uint32_t seed) : rng_(seed) {}
  double Next() {
    const double u1 = (static_cast<double>(rng_()) + 1.0) / 4294967297.0;
    const double u2 = static_cast<double>(rng_()) / 4294967296.0;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
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

float RoundTo(models::StDType dtype, float value) {
  switch (dtype) {
    case models::StDType::kBF16:
      return Bf16ToFloat(FloatToBf16(value));
    case models::StDType::kF16:
      return F16ToFloat(FloatToF16(value));
    default:
      return value;
  }
}

std::string SafetensorsBytes(const TensorMap& tensors) {
  std::string data;
  std::vector<std::string> entries;
  for (const auto& [name, t] : tensors) {
    const size_t begin = data.size();
    if (t.dtype == models::StDType::kI32) {
      for (int32_t v : t.ints) AppendLittleEndian(&data, static_cast<uint32_t>(v));
    } else {
      for (float v : t.values) {
        if (t.dtype == models::StDType::kBF16) {
          AppendLittleEndian(&data, FloatToBf16(v));
        } else if (t.dtype == models::StDType::kF16) {
          AppendLittleEndian(&data, FloatToF16(v));
        } else {
          AppendLittleEndian(&data, std::bit_cast<uint32_t>(v));
        }
      }
    }
    entries.push_back(absl::StrCat("\"", name, "\":{\"dtype\":\"", models::StDTypeName(t.dtype),
                                   "\",\"shape\":[", absl::StrJoin(t.shape, ","),
                                   "],\"data_offsets\":[", begin, ",", data.size(), "]}"));
  }
  std::string header = absl::StrCat("{", absl::StrJoin(entries, ","), "}");
  while (header.size() % 8 != 0) header.push_back(' ');
  std::string out;
  AppendLittleEndian(&out, static_cast<uint64_t>(header.size()));
  return absl::StrCat(out, header, data);
}

absl::Status WriteSafetensors(const std::filesystem::path& path, const TensorMap& tensors) {
  const std::string bytes = SafetensorsBytes(tensors);
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  f.close();
  if (!f) return absl::InternalError(absl::StrCat("cannot write ", path.string()));
  return absl::OkStatus();
}

TensorMap RandomWeights(const ir::Graph& graph, uint32_t seed) {
  Normal normal(seed);
  TensorMap out;
  for (ir::ValueId id : graph.weights()) {
    const ir::Value& w = graph.value(id);
    if (out.count(w.checkpoint_tensor)) continue;
    TestTensor t;
    t.dtype = StDTypeOf(w.type.dtype);
    int64_t n = 1;
    for (const ir::Dim& d : w.type.dims) {
      t.shape.push_back(d.extent());
      n *= d.extent();
    }
    const std::string& name = w.checkpoint_tensor;
    double scale = 1.0, offset = 0.0;
    if (absl::EndsWith(name, "norm.weight")) {
      scale = 0.15;
      offset = 1.0;
    } else if (absl::EndsWith(name, ".bias")) {
      scale = 0.2;
    } else if (!absl::StrContains(name, "embed_tokens") && t.shape.size() == 2) {
      scale = 1.5 / std::sqrt(static_cast<double>(t.shape[1]));
    }
    for (int64_t k = 0; k < n; ++k) {
      t.values.push_back(static_cast<float>(offset + scale * normal.Next()));
    }
    out[name] = std::move(t);
  }
  return out;
}

TempDir::TempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "tileplan_test_XXXXXX").string();
  if (mkdtemp(pattern.data()) != nullptr) path_ = pattern;
}

TempDir::~TempDir() {
  if (!path_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
}

}  // namespace tileplan::testing
