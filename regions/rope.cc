#include "regions/rope.h"

#include <cmath>
#include <numbers>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace tileplan::ir {

bool HasRope(const Region& region) { return region.attrs.Has("theta"); }

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
  } else if (p.type != "default") {
    return absl::InvalidArgumentError(absl::StrCat("unknown rope_type '", p.type, "'"));
  }
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
  if (params.type == "llama3") {
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
