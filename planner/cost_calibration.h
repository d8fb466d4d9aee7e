// The cost model calibrated by measurement (docs/planner.md, "Calibrated cost model").
//
// The uncalibrated model (cost_model.h) prices a step from its bytes, flops and grid at the
// target's rates, and knows nothing of how well a kernel family reaches them. A calibration
// holds measured steps of the target (the tuner's candidates: region, tactic, median time)
// and per family one fitted figure, the step's fixed overhead. Each sample then carries an
// efficiency: its ideal time (bytes at the achievable bandwidth, or flops at the achievable
// rate) over the time it took beyond its graph nodes and the overhead.
//
// A tactic of a family is predicted on a new region from the samples of the same family,
// version, region kind and tactic parameters whose bytes and flops are within a factor 4 of
// the region's (a Gaussian-weighted geometric mean of their efficiencies by log distance);
// a family's default tactic also draws on the samples that were the default for their
// region. A default tactic with no sample within that distance draws on the family's
// default samples of every kind within it, else takes the nearest one's efficiency (the
// median efficiency of all the family's samples when it has no default sample), so that
// families compare on calibrated figures; a family
// without samples keeps the uncalibrated estimate, and other tactics are not predicted.
// Library families (cuBLASLt) are predicted for their default tactic only: a measured
// library configuration need not exist for another shape.
#ifndef TILEPLAN_PLANNER_COST_CALIBRATION_H_
#define TILEPLAN_PLANNER_COST_CALIBRATION_H_

#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/core/bound_graph.h"
#include "kernels/core/kernel_family.h"
#include "planner/cost_calibration.pb.h"
#include "planner/cost_model.h"
#include "targets/target.pb.h"

namespace tileplan::planner {

inline constexpr int32_t kCostCalibrationSchemaVersion = 1;
inline constexpr absl::string_view kCostCalibrationSchema = "tileplan.cost_calibration";

// "split_k=1,threads=128" (Tactic::ParamsString) back into parameters; "-" is none.
// InvalidArgument naming the text when it is not name=value pairs.
absl::StatusOr<std::map<std::string, int64_t>> ParseTacticParams(absl::string_view text);

class CostCalibration {
 public:
  // Checks the schema, that every family is named once per version with a finite overhead,
  // and every sample's fields (kind, positive time and efficiency, parameters that parse);
  // InvalidArgument naming `source`, the family and the field otherwise.
  static absl::StatusOr<CostCalibration> FromProto(proto::CostCalibration calibration,
                                                   absl::string_view source);
  // The text format (planner/cost_calibration.proto); errors carry line:column.
  static absl::StatusOr<CostCalibration> Parse(absl::string_view text, absl::string_view source);
  static absl::StatusOr<CostCalibration> Load(absl::string_view path);
  // The calibration bundled for the target named `target` (targets/<name>.calibration.textproto),
  // parsed once; nullptr when none is bundled.
  static const CostCalibration* Bundled(absl::string_view target);

  const proto::CostCalibration& proto() const { return proto_; }
  int64_t num_samples() const;

  // The predicted step time of `tactic` (of `family`) on `region`, or nullopt when no sample
  // is close enough (see the file comment). `is_default`: the tactic is the family's default
  // for the region.
  std::optional<double> Predict(const kernels::KernelFamily& family, const kernels::Tactic& tactic,
                                bool is_default, const kernels::BoundRegion& region,
                                const targets::TargetDescription& target, LaunchMode mode) const;
  // The distinct tactics sampled for (family at its version, region kind), other than
  // library configurations: the candidates a calibrated plan considers beside the default.
  const std::vector<kernels::Tactic>& SampledTactics(const kernels::KernelFamily& family,
                                                     absl::string_view kind) const;

 private:
  struct Sample {
    double log_bytes = 0, log_flops = 0, log_efficiency = 0;
    std::string tactic;  // ParamsString
    bool is_default = false;
  };
  struct Group {  // one (family, version, kind)
    std::vector<Sample> samples;
    std::vector<kernels::Tactic> tactics;
  };
  using GroupKey = std::tuple<std::string, int32_t, std::string>;
  struct FamilyFigures {  // one (family, version), over all its samples
    double overhead_us = 0;
    double median_log_efficiency = 0;
  };

  CostCalibration() = default;
  const Group* Find(const kernels::KernelFamily& family, absl::string_view kind) const;

  proto::CostCalibration proto_;
  std::map<GroupKey, Group, std::less<>> groups_;
  std::map<std::pair<std::string, int32_t>, FamilyFigures, std::less<>> families_;
};

// Fits `calibration` in place for `target`: per family, the overhead (searched in 0.25 us
// steps below every sample's time beyond its graph nodes) that minimises the median
// absolute log error of predicting each sample from the other regions' samples, then every
// sample's efficiency and the family's fit_log_error. Sorts families and samples.
// InvalidArgument when a sample has no positive time.
absl::Status FitCostCalibration(const targets::TargetDescription& target,
                                proto::CostCalibration& calibration);

}  // namespace tileplan::planner

#endif  // TILEPLAN_PLANNER_COST_CALIBRATION_H_
