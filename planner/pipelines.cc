#include "planner/pipelines.h"

#include <utility>

#include "absl/strings/string_view.h"

#include "base/status_macros.h"

namespace tileplan::planner {
namespace {

// Both pipelines, in run order (see pipelines.h).
constexpr const char* kPipelinePasses[] = {
    "pack_qkv",          "pack_gate_up",  "fuse_swiglu", "fuse_qk_norm_rope_kv_write",
    "fuse_mla_kv_write", "fuse_residual", "dce",         "specialize_phase",
    "fuse_norm_linear",
};

// Passes only the decode pipeline runs, each right after the pass named first.
constexpr std::pair<const char*, const char*> kDecodeOnlyPasses[] = {
    {"fuse_qk_norm_rope_kv_write", "fuse_rope_kv_write_attention"},
};

absl::StatusOr<PassPipeline> BuildPipeline(const PipelineOptions& options, ir::Phase phase,
                                           int64_t tokens) {
  PassOptions pass_options;
  pass_options.phase = phase;
  pass_options.tokens = tokens;
  pass_options.batch = options.batch;
  pass_options.cache_capacity = options.cache_capacity;
  PassPipeline pipeline;
  for (const char* name : kPipelinePasses) {
    TP_RETURN_IF_ERROR(pipeline.Add(name, pass_options));
    if (phase != ir::Phase::kDecode) continue;
    for (const auto& [after, decode_pass] : kDecodeOnlyPasses) {
      if (absl::string_view(after) == name) {
        TP_RETURN_IF_ERROR(pipeline.Add(decode_pass, pass_options));
      }
    }
  }
  if (phase == ir::Phase::kPrefill && options.last_token_logits) {
    TP_RETURN_IF_ERROR(pipeline.Add("last_token_logits", pass_options));
  }
  return pipeline;
}

}  // namespace

absl::StatusOr<PassPipeline> BuildPrefillPipeline(const PipelineOptions& options) {
  return BuildPipeline(options, ir::Phase::kPrefill, options.tokens);
}

absl::StatusOr<PassPipeline> BuildDecodePipeline(const PipelineOptions& options) {
  return BuildPipeline(options, ir::Phase::kDecode, 1);
}

}  // namespace tileplan::planner
