#include "planner/passes/passes.h"

namespace tileplan::planner {
namespace {

// Adapts a factory that takes no options to PassFactory.
template <std::unique_ptr<Pass> (*Create)()>
absl::StatusOr<std::unique_ptr<Pass>> Plain(const PassOptions&) {
  return Create();
}

}  // namespace

std::vector<PassInfo> BuiltinPasses() {
  return {
      {"fuse_moe",
       "moe_router + moe_topk + the experts' SwiGLU + moe_combine [+ shared MLP] [+ add] -> moe "
       "(decode only)",
       CreateFuseMoePass},
      {"pack_qkv", "packs the q, k and v projections of an attention into one linear + split",
       Plain<CreatePackQkvPass>},
      {"pack_gate_up", "packs the gate and up projections of a SwiGLU into one linear + split",
       Plain<CreatePackGateUpPass>},
      {"fuse_swiglu", "split + silu + mul -> swiglu, or linear_swiglu over a packed linear",
       Plain<CreateFuseSwigluPass>},
      {"fuse_qk_norm_rope_kv_write",
       "split + reshapes [+ q/k rms_norm] + ropes + kv_writes -> (qk_norm_)rope_kv_write",
       Plain<CreateFuseQkNormRopeKvWritePass>},
      {"fuse_rope_kv_write_attention",
       "(qk_norm_)rope_kv_write + the attention of its q -> (qk_norm_)rope_kv_write_attention "
       "(decode only)",
       CreateFuseRopeKvWriteAttentionPass},
      {"fuse_mla_kv_write",
       "split + rms_norm + reshapes + rope + kv_writes of MLA's compressed kv -> mla_kv_write",
       Plain<CreateFuseMlaKvWritePass>},
      {"fuse_mla_kv_write_attention",
       "rope of q + mla_kv_write + the mla_attention reading both -> mla_kv_write_attention "
       "(decode only)",
       CreateFuseMlaKvWriteAttentionPass},
      {"fuse_residual", "add(linear, r) -> linear_residual; add feeding rms_norm -> add_rms_norm",
       Plain<CreateFuseResidualPass>},
      {"dce", "removes regions whose results are unused (state writes are live)",
       Plain<CreateDcePass>},
      {"specialize_phase", "binds T (and B, Smax) and sets every region's phase",
       CreateSpecializePhasePass},
      {"fuse_norm_linear",
       "decode rms_norm -> linear / linear_swiglu of few rows -> rms_norm_linear(_swiglu); "
       "-> moe -> rms_norm_moe",
       CreateFuseNormLinearPass},
      {"last_token_logits",
       "final norm + LM head for each sequence's last token only (prefill, T static)",
       Plain<CreateLastTokenLogitsPass>},
  };
}

}  // namespace tileplan::planner
