// The plan group of tools/common_flags.h.
#include "absl/flags/flag.h"
#include "base/status_macros.h"
#include "tools/common_flags.h"

ABSL_FLAG(tileplan::tools::PositiveList, decode, (tileplan::tools::PositiveList{{128, 512, 2048}}),
          "decode contexts C: the plan has one decode phase, estimated at the largest C (and "
          "tuned there); benchmark_transformer times a decode step at every C");
ABSL_FLAG(std::optional<tileplan::tools::PositiveInt>, max_context, std::nullopt,
          "KV-cache rows per sequence (Smax); unset: the largest --prefill or --decode length");
ABSL_FLAG(std::string, prefill_logits, "all",
          "all: the prefill phases compute every token's logits, as the PyTorch references' "
          "forward does; last: each sequence's last token's only, as generation needs (the "
          "planner's last_token_logits pass)");
ABSL_FLAG(bool, fuse_moe, true,
          "decode phases of at most 2 sequences fuse each MoE block into one moe step (fuse_moe, "
          "the moe_gemv family); --nofuse_moe keeps the primitive expert steps");
ABSL_FLAG(bool, fuse_norm_moe, true,
          "decode phases also fold each fused MoE block's RMSNorm into it (rms_norm_moe, one "
          "launch less a block); --nofuse_norm_moe keeps the norm its own step");
ABSL_FLAG(bool, fuse_rope_attention, true,
          "decode phases fuse the RoPE + KV-cache write into the attention that reads it "
          "(fuse_rope_kv_write_attention, the attention_decode_rope kernel; for latent "
          "attention fuse_mla_kv_write_attention); --nofuse_rope_attention leaves the "
          "attention free to take any of its families");
ABSL_FLAG(int64_t, rope_attention_max_batch,
          tileplan::planner::PlanOptions().decode_rope_attention_max_batch,
          "decode phases of a larger batch leave the RoPE + KV-cache write unfused from the "
          "attention (fuse_rope_kv_write_attention's batch limit), so the attention may take "
          "any of its families");
ABSL_FLAG(int64_t, norm_linear_max_rows,
          tileplan::planner::PlanOptions().decode_norm_linear_max_rows,
          "decode linears of at most this many rows (batch x new tokens) take the RMSNorm "
          "before them into their prologue (fuse_norm_linear's limit; only the gemv families "
          "implement the folded kinds)");
ABSL_FLAG(bool, mla_prefill, true,
          "prefill phases may run latent attention un-absorbed (the mla_prefill family: a K/V "
          "up-projection GEMM, then flash attention); --nomla_prefill keeps the absorbed "
          "kernels for prompts too");
ABSL_FLAG(std::vector<std::string>, exclude_families,
          tileplan::planner::PlanOptions().excluded_families,
          "kernel families no phase may choose and autotune_regions does not measure, "
          "comma-separated; empty (--exclude-families=) lets every family compete (wgmma_gemm, "
          "the prefill linears on Hopper's wgmma, is left out by default: slower than cuBLASLt "
          "so far, docs/PERF.md)");
ABSL_FLAG(std::string, target, "",
          "the target description: a bundled name or alias (h200, sm_90, ...) or a .textproto "
          "file; empty: this GPU's own, or h200 without a GPU");

ABSL_FLAG(std::string, calibration, "",
          "the cost model's calibration (docs/planner.md, \"Calibrated cost model\"): empty "
          "takes the one bundled for the target, if any; none plans with the uncalibrated "
          "model; else a calibration .textproto (calibrate_cost_model writes them)");

namespace tileplan::tools {

absl::StatusOr<planner::PlanOptions> PlanOptionsFromFlags() {
  const std::string logits = absl::GetFlag(FLAGS_prefill_logits);
  if (logits != "all" && logits != "last") {
    return absl::InvalidArgumentError(
        absl::StrCat("--prefill-logits takes all or last, not '", logits, "'"));
  }
  const std::optional<PositiveInt> max_context = absl::GetFlag(FLAGS_max_context);
  planner::PlanOptions options = BenchmarkPlanOptions(
      absl::GetFlag(FLAGS_prefill).values, absl::GetFlag(FLAGS_decode).values,
      absl::GetFlag(FLAGS_batch).value, logits == "last", max_context ? max_context->value : 0);
  options.decode_fuse_moe = absl::GetFlag(FLAGS_fuse_moe);
  options.decode_fuse_rope_attention = absl::GetFlag(FLAGS_fuse_rope_attention);
  options.decode_fuse_norm_moe = absl::GetFlag(FLAGS_fuse_norm_moe);
  options.decode_rope_attention_max_batch = absl::GetFlag(FLAGS_rope_attention_max_batch);
  options.decode_norm_linear_max_rows = absl::GetFlag(FLAGS_norm_linear_max_rows);
  options.prefill_mla_expanded = absl::GetFlag(FLAGS_mla_prefill);
  options.excluded_families = absl::GetFlag(FLAGS_exclude_families);
  TP_ASSIGN_OR_RETURN(const models::TensorParallel tp, TensorParallelFromFlags());
  options.tensor_parallel = tp.ranks;
  options.rank = tp.rank;
  const std::string calibration = absl::GetFlag(FLAGS_calibration);
  if (calibration == "none") {
    options.calibrate = false;
  } else if (!calibration.empty()) {
    // Loaded once per process; the plans of a tool's whole run point at it.
    static const auto* loaded =
        new absl::StatusOr<planner::CostCalibration>(planner::CostCalibration::Load(calibration));
    if (!loaded->ok()) {
      return absl::Status(loaded->status().code(),
                          absl::StrCat("--calibration: ", loaded->status().message()));
    }
    options.calibration = &**loaded;
  }
  return options;
}

}  // namespace tileplan::tools
