// The planner's pass pipelines, as plain functions over the pass registry.
//
// Both pipelines run, in this order: pack_qkv, pack_gate_up, fuse_swiglu,
// fuse_qk_norm_rope_kv_write, fuse_mla_kv_write, fuse_residual, dce, specialize_phase,
// fuse_norm_linear (docs/planner.md). The decode pipeline also runs, with
// PipelineOptions::fuse_moe, fuse_moe first (before the packing passes take a shared-expert
// MLP apart), fuse_rope_kv_write_attention right after fuse_qk_norm_rope_kv_write and
// fuse_mla_kv_write_attention right after fuse_mla_kv_write: their fused kinds serve decode
// steps only. They differ in how
// specialize_phase binds the symbols (prefill binds T to the token bucket, decode binds T to
// 1; B and Smax are bound when the options give them and stay symbolic otherwise) and in
// what the phase-dependent fuse_norm_linear finds after it: only decode graphs whose batch
// is bound and at most PassOptions::norm_linear_max_rows (4) have norms to fold. With
// PipelineOptions::last_token_logits the prefill pipeline ends with last_token_logits.
#ifndef TILEPLAN_PLANNER_PIPELINES_H_
#define TILEPLAN_PLANNER_PIPELINES_H_

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "planner/pass.h"

namespace tileplan::planner {

struct PipelineOptions {
  // The prefill token bucket (T); must be positive for BuildPrefillPipeline. Decode always
  // binds T = 1 and does not read it.
  int64_t tokens = 0;
  std::optional<int64_t> batch;           // the batch bucket (B)
  std::optional<int64_t> cache_capacity;  // the KV-cache capacity (Smax)
  // Prefill only: append last_token_logits, so the prefill's logits are [B, 1, V] (each
  // sequence's last token) instead of [B, T, V].
  bool last_token_logits = false;
  // Decode only: run fuse_moe first (the pass's own batch limit still applies); false leaves
  // every MoE block as its primitive steps.
  bool fuse_moe = true;
  // Decode only: run fuse_rope_kv_write_attention (the pass's own limits still apply) and
  // fuse_mla_kv_write_attention; false leaves every attention free to take any of its
  // families.
  bool fuse_rope_attention = true;
  // Decode only: fuse_rope_kv_write_attention leaves a graph whose bound batch exceeds this
  // alone (PassOptions::rope_attention_max_batch).
  int64_t rope_attention_max_batch = PassOptions().rope_attention_max_batch;
  // Decode only: fuse_norm_linear folds norms into linears of at most this many rows
  // (PassOptions::norm_linear_max_rows).
  int64_t norm_linear_max_rows = PassOptions().norm_linear_max_rows;
  // Decode only: fuse_norm_linear also folds each moe region's norm into it (rms_norm_moe;
  // PassOptions::norm_moe).
  bool fuse_norm_moe = PassOptions().norm_moe;
};

// InvalidArgument when `tokens`, `batch` or `cache_capacity` is not positive.
absl::StatusOr<PassPipeline> BuildPrefillPipeline(const PipelineOptions& options);
absl::StatusOr<PassPipeline> BuildDecodePipeline(const PipelineOptions& options);

}  // namespace tileplan::planner

#endif  // TILEPLAN_PLANNER_PIPELINES_H_
