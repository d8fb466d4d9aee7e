#include "regions/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace tileplan::ir {

bool HasRope(const Region& region) { return region.attrs.Has("theta"); }

int RopeHeadResult(const Region& region) {
  if (region.kind == "mla_kv_write") return 1;
  if (region.kind == "mla_kv_write_attention") return 2;
  return 0;
}

absl::StatusOr<RopeParams> RopeParamsFromAttributes(const ir::Attributes& attrs) {
  RopeParams p;
  TP_ASSIGN_OR_RETURN(p.theta, attrs.GetFloat("theta"));
  TP_ASSIGN_OR_RETURN(p.type, attrs.GetStringOr("rope_type", "default"));
  if (!(p.theta > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("rope theta must be positive, got ", p.theta));
  }
  if (p.type == "llama3") {
    TP_ASSIGN_OR_RETURN(p.factor, attrs.GetFloat("factor"));
    TP_ASSIGN_OR_RETURN(p.low_freq_factor, attrs.GetFloat("low_freq_factor"));
    TP_ASSIGN_OR_RETURN(p.high_freq_factor, attrs.GetFloat("high_freq_factor"));
    TP_ASSIGN_OR_RETURN(p.original_max_position_embeddings,
                        attrs.GetInt("original_max_position_embeddings"));
    if (!(p.factor > 0) || !(p.low_freq_factor > 0) || !(p.high_freq_factor > p.low_freq_factor) ||
        p.original_max_position_embeddings <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("llama3 rope needs factor > 0, 0 < low_freq_factor < high_freq_factor and "
                       "original_max_position_embeddings > 0; got factor ",
                       p.factor, ", low_freq_factor ", p.low_freq_factor, ", high_freq_factor ",
                       p.high_freq_factor, ", original_max_position_embeddings ",
                       p.original_max_position_embeddings));
    }
  } else if (p.type == "yarn") {
    TP_ASSIGN_OR_RETURN(p.factor, attrs.GetFloat("factor"));
    TP_ASSIGN_OR_RETURN(p.original_max_position_embeddings,
                        attrs.GetInt("original_max_position_embeddings"));
    TP_ASSIGN_OR_RETURN(p.beta_fast, attrs.GetFloat("beta_fast"));
    TP_ASSIGN_OR_RETURN(p.beta_slow, attrs.GetFloat("beta_slow"));
    TP_ASSIGN_OR_RETURN(p.attention_factor, attrs.GetFloat("attention_factor"));
    TP_ASSIGN_OR_RETURN(p.truncate, attrs.GetBool("truncate"));
    if (!(p.factor >= 1) || !(p.beta_fast > 0) || !(p.beta_slow > 0) || !(p.attention_factor > 0) ||
        !std::isfinite(p.factor) || !std::isfinite(p.beta_fast) || !std::isfinite(p.beta_slow) ||
        !std::isfinite(p.attention_factor) || p.original_max_position_embeddings <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("yarn rope needs finite factor >= 1, beta_fast > 0, beta_slow > 0, "
                       "attention_factor > 0 and original_max_position_embeddings > 0; got factor ",
                       p.factor, ", beta_fast ", p.beta_fast, ", beta_slow ", p.beta_slow,
                       ", attention_factor ", p.attention_factor,
                       ", original_max_position_embeddings ", p.original_max_position_embeddings));
    }
  } else if (p.type != "default") {
    return absl::InvalidArgumentError(absl::StrCat("unknown rope_type '", p.type, "'"));
  }
  TP_ASSIGN_OR_RETURN(p.interleaved, attrs.GetBoolOr("interleaved", false));
  return p;
}

std::vector<float> RopeInvFreq(const RopeParams& params, int64_t head_dim) {
  const int64_t half = head_dim / 2;
  std::vector<float> inv_freq(static_cast<size_t>(half));
  const float theta = static_cast<float>(params.theta);
  for (int64_t i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    inv_freq[i] = 1.0f / std::pow(theta, exponent);
  }
  if (params.type == "yarn") {
    // transformers' _compute_yarn_parameters, step by step; float32 where it uses tensors
    // (pos_freqs, the ramp and the blend), double where it uses Python floats (the range).
    const double dim = static_cast<double>(head_dim);
    const double base = params.theta;
    const double original = static_cast<double>(params.original_max_position_embeddings);
    auto correction_dim = [&](double rotations) {
      return (dim * std::log(original / (rotations * 2 * std::numbers::pi))) / (2 * std::log(base));
    };
    double low = correction_dim(params.beta_fast);
    double high = correction_dim(params.beta_slow);
    if (params.truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, dim - 1);
    if (low == high) high += 0.001;  // transformers: "Prevent singularity"
    const float low_f = static_cast<float>(low);
    const float range_f = static_cast<float>(high - low);
    const float factor = static_cast<float>(params.factor);
    for (int64_t i = 0; i < half; ++i) {
      const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
      const float pos_freq = std::pow(theta, exponent);
      const float extrapolation = 1.0f / pos_freq;
      const float interpolation = 1.0f / (factor * pos_freq);
      const float ramp = std::clamp((static_cast<float>(i) - low_f) / range_f, 0.0f, 1.0f);
      const float extrapolation_factor = 1.0f - ramp;
      const float a = interpolation * (1.0f - extrapolation_factor);
      const float b = extrapolation * extrapolation_factor;
      inv_freq[i] = a + b;
    }
  } else if (params.type == "llama3") {
    const double original = static_cast<double>(params.original_max_position_embeddings);
    const double low_freq_wavelen = original / params.low_freq_factor;
    const double high_freq_wavelen = original / params.high_freq_factor;
    for (float& f : inv_freq) {
      const double wavelen = 2 * std::numbers::pi / f;
      if (wavelen > low_freq_wavelen) {
        f = static_cast<float>(f / params.factor);
      } else if (wavelen >= high_freq_wavelen) {
        const double s = (original / wavelen - params.low_freq_factor) /
                         (params.high_freq_factor - params.low_freq_factor);
        f = static_cast<float>((1 - s) * f / params.factor + s * f);
      }
    }
  }
  return inv_freq;
}

}  // namespace tileplan::ir
