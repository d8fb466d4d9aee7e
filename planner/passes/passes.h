// The built-in passes (docs/planner.md describes each pattern, its result and when it
// refuses). Each is created through the pass registry (planner/pass.h); this header is the
// list RegisterAllPasses registers, in pipeline order.
#ifndef TILEPLAN_PLANNER_PASSES_PASSES_H_
#define TILEPLAN_PLANNER_PASSES_PASSES_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "planner/pass.h"

namespace tileplan::planner {

struct PassInfo {
  const char* name;
  const char* summary;
  PassFactory factory;
};

// Every built-in pass, in the order the pipelines run them.
std::vector<PassInfo> BuiltinPasses();

// InvalidArgument unless the phase is decode (the fused kind serves decode steps only) or
// when moe_max_batch is negative.
absl::StatusOr<std::unique_ptr<Pass>> CreateFuseMoePass(const PassOptions& options);
std::unique_ptr<Pass> CreatePackQkvPass();
std::unique_ptr<Pass> CreatePackGateUpPass();
std::unique_ptr<Pass> CreateFuseSwigluPass();
std::unique_ptr<Pass> CreateFuseQkNormRopeKvWritePass();
std::unique_ptr<Pass> CreateFuseMlaKvWritePass();
// InvalidArgument unless the phase is decode: the fused kind serves decode steps only.
absl::StatusOr<std::unique_ptr<Pass>> CreateFuseRopeKvWriteAttentionPass(
    const PassOptions& options);
// InvalidArgument unless the phase is decode: the fused kind serves decode steps only.
absl::StatusOr<std::unique_ptr<Pass>> CreateFuseMlaKvWriteAttentionPass(const PassOptions& options);
std::unique_ptr<Pass> CreateFuseResidualPass();
std::unique_ptr<Pass> CreateDcePass();
std::unique_ptr<Pass> CreateLastTokenLogitsPass();
// InvalidArgument when the phase is not prefill or decode or an extent is not positive.
absl::StatusOr<std::unique_ptr<Pass>> CreateSpecializePhasePass(const PassOptions& options);
// InvalidArgument when norm_linear_max_rows is negative.
absl::StatusOr<std::unique_ptr<Pass>> CreateFuseNormLinearPass(const PassOptions& options);

}  // namespace tileplan::planner

#endif  // TILEPLAN_PLANNER_PASSES_PASSES_H_
