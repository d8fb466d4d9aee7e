#include "planner/pipelines.h"

#include "absl/strings/string_view.h"
#include "base/status_macros.h"

namespace tileplan::planner {
namespace {

// The pipelines' passes, in run order (see pipelines.h); the decode-only ones form kinds whose
// kernels serve decode steps only.
struct PipelinePass {
  const char* name;
  bool decode_only;
};
constexpr PipelinePass kPipelinePasses[] = {
    {"fuse_moe", true},
    {"pack_qkv", false},
    {"pack_gate_up", false},
    {"fuse_swiglu", false},
    {"fuse_qk_norm_rope_kv_write", false},
    {"fuse_rope_kv_write_attention", true},
    {"fuse_mla_kv_write", false},
    {"fuse_mla_kv_write_attention", true},
    {"fuse_residual", false},
    {"dce", false},
    {"specialize_phase", false},
    {"fuse_norm_linear", false},
};

absl::StatusOr<PassPipeline> BuildPipeline(const PipelineOptions& options, ir::Phase phase,
                                           int64_t tokens) {
  PassOptions pass_options;
  pass_options.phase = phase;
  pass_options.tokens = tokens;
  pass_options.batch = options.batch;
  pass_options.cache_capacity = options.cache_capacity;
  pass_options.norm_moe = options.fuse_norm_moe;
  pass_options.rope_attention_max_batch = options.rope_attention_max_batch;
  pass_options.norm_linear_max_rows = options.norm_linear_max_rows;
  PassPipeline pipeline;
  for (const PipelinePass& pass : kPipelinePasses) {
    if (pass.decode_only && phase != ir::Phase::kDecode) continue;
    if (absl::string_view(pass.name) == "fuse_moe" && !options.fuse_moe) continue;
    if ((absl::string_view(pass.name) == "fuse_rope_kv_write_attention" ||
         absl::string_view(pass.name) == "fuse_mla_kv_write_attention") &&
        !options.fuse_rope_attention) {
      continue;
    }
    TP_RETURN_IF_ERROR(pipeline.Add(pass.name, pass_options));
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
