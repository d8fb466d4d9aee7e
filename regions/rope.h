// RoPE as region attributes define it (docs/ir.md): the parameters a region with rotary
// embedding carries (rope, the fused RoPE + KV-write kinds and their _attention forms) and
// the float32 frequency table every backend uses, so the CPU oracle, the GPU runtime and the
// tuner rotate by the same numbers.
#ifndef TILEPLAN_REGIONS_ROPE_H_
#define TILEPLAN_REGIONS_ROPE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "regions/ir.h"

namespace tileplan::ir {

// Whether the region rotates by RoPE (it carries the `theta` attribute).
bool HasRope(const Region& region);
// The result whose last dim is the rotated head dim of a region with RoPE: mla_kv_write's
// rope cache (result 1) and mla_kv_write_attention's (result 2), else result 0.
int RopeHeadResult(const Region& region);

// RoPE parameters, read from a region's attributes (docs/ir.md, `rope`). Fields that the
// type does not use keep their defaults.
struct RopeParams {
  double theta = 10000.0;
  std::string type = "default";                  // "default", "llama3" or "yarn"
  double factor = 1.0;                           // llama3, yarn
  double low_freq_factor = 1.0;                  // llama3
  double high_freq_factor = 4.0;                 // llama3
  int64_t original_max_position_embeddings = 0;  // llama3, yarn
  double beta_fast = 32.0;                       // yarn
  double beta_slow = 1.0;                        // yarn
  // yarn: cos and sin are multiplied by it (transformers' `attention_scaling`); 1 otherwise.
  double attention_factor = 1.0;
  bool truncate = true;  // yarn: round the correction range outwards to whole dims
  // Rotate the pairs (x[2i], x[2i+1]) instead of (x[i], x[i + D/2]); any type.
  bool interleaved = false;
};
// Reads and checks the attributes: `theta` always, `rope_type` (default "default"), the
// keys of that type (all required), and the optional `interleaved` (default false).
absl::StatusOr<RopeParams> RopeParamsFromAttributes(const ir::Attributes& attrs);

// inv_freq[i] for i < head_dim / 2, in float32 as transformers computes it:
// 1 / theta^(2i / head_dim); for llama3, frequencies whose wavelength 2π/inv_freq exceeds
// original_max / low_freq_factor are divided by `factor`, those below original_max /
// high_freq_factor are kept, and the band between is interpolated with
// s = (original_max / wavelength − low_freq_factor) / (high_freq_factor − low_freq_factor):
// (1 − s) · inv_freq / factor + s · inv_freq.
//
// For yarn, as transformers' `_compute_yarn_parameters` (5.x), in the same float32 steps:
// pos_freqs[i] = theta^(2i / D) (float32), extrapolation = 1 / pos_freqs, interpolation =
// 1 / (factor · pos_freqs). The correction range [low, high] comes from the inverse-dimension
// formula d(r) = D · ln(original_max / (2π r)) / (2 ln theta) (in double): low = d(beta_fast),
// high = d(beta_slow), floored and ceiled when `truncate`, then clamped to low >= 0 and
// high <= D − 1; if low == high, high += 0.001. With ramp[i] = clamp((i − low) / (high −
// low), 0, 1) (float32) and e = 1 − ramp[i], inv_freq[i] = interpolation · (1 − e) +
// extrapolation · e: dims below the range keep theta's frequency, dims above it are divided
// by `factor`, and the range between is blended linearly (the pair index i is compared with
// a range in dims, as transformers does). Agrees with torch to about 2e-7 relative (its
// vectorised pow is off by an ulp here and there). attention_factor does not change inv_freq;
// the rope kernels scale cos and sin by it.
std::vector<float> RopeInvFreq(const RopeParams& params, int64_t head_dim);

}  // namespace tileplan::ir

#endif  // TILEPLAN_REGIONS_ROPE_H_
