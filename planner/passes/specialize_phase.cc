// specialize_phase: makes a graph the prefill or the decode variant (docs/planner.md).
//
// Binds the symbols throughout the value types: T (new tokens per step) to the prefill token
// bucket or to 1 for decode; B to the batch bucket and Smax to the KV-cache capacity when
// given; every other symbol stays. Sets every region's phase. A region already specialized
// for the other phase is an error.
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "planner/passes/passes.h"
#include "planner/rewriter.h"

namespace tileplan::planner {
namespace {

class SpecializePhasePass : public Pass {
 public:
  SpecializePhasePass(ir::Phase phase, std::map<std::string, int64_t> bindings)
      : phase_(phase), bindings_(std::move(bindings)) {}

  absl::string_view name() const override { return "specialize_phase"; }

  absl::StatusOr<bool> Run(ir::Graph& graph) override {
    for (size_t i = 0; i < graph.regions().size(); ++i) {
      const ir::Phase phase = graph.regions()[i].phase;
      if (phase != ir::Phase::kGeneral && phase != phase_) {
        return absl::FailedPreconditionError(absl::StrCat(
            RegionLabel(graph, static_cast<int>(i)), " is already specialized for ",
            ir::PhaseName(phase), ", cannot specialize it for ", ir::PhaseName(phase_)));
      }
    }
    bool changed = false;
    for (ir::ValueId id = 0; id < graph.num_values(); ++id) {
      for (ir::Dim& dim : graph.mutable_value(id).type.dims) {
        if (dim.is_static()) continue;
        auto it = bindings_.find(dim.symbol());
        if (it == bindings_.end()) continue;
        dim = ir::Dim::Static(it->second);
        changed = true;
      }
    }
    for (ir::Region& region : graph.mutable_regions()) {
      changed = changed || region.phase != phase_;
      region.phase = phase_;
    }
    return changed;
  }

 private:
  ir::Phase phase_;
  std::map<std::string, int64_t> bindings_;  // symbol -> extent
};

absl::Status CheckPositive(absl::string_view what, int64_t value) {
  if (value <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, " must be positive, got ", value));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Pass>> CreateSpecializePhasePass(const PassOptions& options) {
  if (options.phase != ir::Phase::kPrefill && options.phase != ir::Phase::kDecode) {
    return absl::InvalidArgumentError(
        absl::StrCat("the phase must be prefill or decode, got ", ir::PhaseName(options.phase)));
  }
  absl::Status s = CheckPositive("the token count (T)", options.tokens);
  if (s.ok() && options.phase == ir::Phase::kDecode && options.tokens != 1) {
    s = absl::InvalidArgumentError(
        absl::StrCat("decode binds T = 1, got a token count of ", options.tokens));
  }
  if (s.ok() && options.batch) s = CheckPositive("the batch (B)", *options.batch);
  if (s.ok() && options.cache_capacity) {
    s = CheckPositive("the cache capacity (Smax)", *options.cache_capacity);
  }
  if (!s.ok()) return s;
  std::map<std::string, int64_t> bindings = {{"T", options.tokens}};
  if (options.batch) bindings["B"] = *options.batch;
  if (options.cache_capacity) bindings["Smax"] = *options.cache_capacity;
  return std::make_unique<SpecializePhasePass>(options.phase, std::move(bindings));
}

}  // namespace tileplan::planner
