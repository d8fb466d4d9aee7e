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

// RoPE parameters, read from a region's attributes.
struct RopeParams {
  double theta = 10000.0;
  std::string type = "default";  // "default" or "llama3"
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 0;
};
absl::StatusOr<RopeParams> RopeParamsFromAttributes(const ir::Attributes& attrs);

// inv_freq[i] for i < head_dim / 2, in float32 as transformers computes it:
// 1 / theta^(2i / head_dim); for llama3, frequencies whose wavelength 2π/inv_freq exceeds
// original_max / low_freq_factor are divided by `factor`, those below original_max /
// high_freq_factor are kept, and the band between is interpolated with
// s = (original_max / wavelength − low_freq_factor) / (high_freq_factor − low_freq_factor):
// (1 − s) · inv_freq / factor + s · inv_freq.
std::vector<float> RopeInvFreq(const RopeParams& params, int64_t head_dim);

}  // namespace tileplan::ir

#endif  // TILEPLAN_REGIONS_ROPE_H_
