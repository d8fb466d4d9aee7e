#include "tests/kernels/candidate_instances.h"

#include <set>
#include <string>
#include <tuple>
#include <utility>

#include "gtest/gtest.h"
#include "kernels/families/registry.h"
#include "tests/kernels/kernels_testing.h"

namespace tileplan::kernels::testing {
namespace {

// Regions whose tactics Coverage::kEachValue varies separately within a family: the
// norm-prologue GEMVs instantiate code the family's other kinds do not.
bool NormPrologue(const std::string& kind) {
  return kind == "rms_norm_linear" || kind == "rms_norm_linear_swiglu";
}

}  // namespace

// The target whose default tactics Coverage::kEachValue varies: the sm_90 machine.
constexpr char kVariedTarget[] = "h200";

std::vector<std::string> RowTargets() { return {"a100", "h200", "b200", "rtx-pro-6000"}; }

CandidateSet TypicalCandidates(Coverage coverage) {
  CandidateSet set;
  set.graph = std::make_unique<ir::Graph>(TestGraph("typical_regions.tpir"));
  const std::vector<std::pair<ShapeBindings, int64_t>> buckets = {
      {{{"B", 1}, {"Smax", 4096}, {"T", 1}}, 512},
      {{{"B", 16}, {"Smax", 4096}, {"T", 1}}, 512},
      {{{"B", 1}, {"Smax", 4096}, {"T", 128}}, 128}};
  for (const auto& [bindings, context] : buckets) {
    set.bound_graphs.push_back(MustBind(*set.graph, bindings, context));
  }
  const KernelRegistry& registry = GlobalKernelRegistry();
  // (family, bound graph, norm prologue) already varied
  std::set<std::tuple<std::string, int, bool>> varied;
  for (int g = 0; g < static_cast<int>(set.bound_graphs.size()); ++g) {
    const BoundGraph& bound = set.bound_graphs[static_cast<size_t>(g)];
    for (int i = 0; i < static_cast<int>(set.graph->regions().size()); ++i) {
      const BoundRegion region(bound, i);
      for (const KernelFamily* family : registry.FamiliesFor(region.kind())) {
        if (family->templates() == nullptr) continue;
        for (const std::string& target_name : RowTargets()) {
          const TargetDescription target = MustTarget(target_name);
          if (!family->CanImplement(region, target).ok()) continue;
          absl::StatusOr<CandidateTable> table = family->Candidates(region, target);
          EXPECT_TRUE(table.ok()) << region.Label() << ": " << table.status();
          if (!table.ok()) continue;
          std::vector<Tactic> tactics;
          for (const ByTargetRow& row : table->rows) tactics.push_back(row.tactic);
          if (coverage == Coverage::kFullProduct) {
            TunableProduct(std::string(family->name()), family->version(), table->tunables,
                           tactics);
          } else if (target_name == kVariedTarget &&
                     varied.insert({std::string(family->name()), g, NormPrologue(region.kind())})
                         .second) {
            for (const TunableParam& tunable : table->tunables) {
              for (int64_t value : tunable.values) {
                Tactic varied = table->default_tactic;
                varied.params[tunable.name] = value;
                tactics.push_back(std::move(varied));
              }
            }
          }
          for (Tactic& tactic : tactics) {
            if (!family->ValidateTactic(tactic, region, target).ok()) continue;
            set.candidates.push_back({g, i, family, std::move(tactic), target_name});
          }
        }
      }
    }
  }
  return set;
}

}  // namespace tileplan::kernels::testing
