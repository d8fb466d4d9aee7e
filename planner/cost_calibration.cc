#include "planner/cost_calibration.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/files.h"
#include "base/status_macros.h"
#include "base/text_proto.h"

namespace tileplan::planner {

// The bundled calibrations: (file name, contents), embedded by planner/CMakeLists.txt.
const std::vector<std::pair<std::string_view, std::string_view>>& EmbeddedCalibrations();

namespace {

// Samples further than this in log space (a factor 4 in bytes or flops) say nothing.
constexpr double kMaxDistance = 1.3862943611198906;  // ln 4
// The Gaussian weight's width in log space.
constexpr double kWidth = 0.5;
constexpr double kOverheadStepUs = 0.25;
constexpr double kMaxOverheadUs = 20.0;
// The least time a step is taken to spend on its work, so that an efficiency stays finite.
constexpr double kMinWorkUs = 0.05;

double LogWork(int64_t v) { return std::log(static_cast<double>(std::max<int64_t>(v, 0)) + 1.0); }

// The upper middle value of `values` (reordered).
double Median(std::vector<double>& values) {
  std::nth_element(values.begin(), values.begin() + values.size() / 2, values.end());
  return values[values.size() / 2];
}

struct Point {
  double log_bytes, log_flops;
};

// The log distance of a sample from `at`.
template <typename S>
double Distance(const S& sample, Point at) {
  const double db = sample.log_bytes - at.log_bytes, df = sample.log_flops - at.log_flops;
  return std::sqrt(db * db + df * df);
}

// The weighted log efficiency of `pool` at `at`, skipping samples for which `skip(i)`;
// nullopt when none lies within kMaxDistance.
template <typename Pool, typename Skip>
std::optional<double> WeightedLogEfficiency(const Pool& pool, Point at, Skip skip) {
  double sum_w = 0, sum = 0, nearest = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < pool.size(); ++i) {
    if (skip(i)) continue;
    const double d = Distance(pool[i], at);
    if (d > kMaxDistance) continue;
    nearest = std::min(nearest, d);
    const double w = std::exp(-(d / kWidth) * (d / kWidth));
    sum_w += w;
    sum += w * pool[i].log_efficiency;
  }
  if (!std::isfinite(nearest) || sum_w <= 0) return std::nullopt;
  return sum / sum_w;
}

// A calibration file of thousands of samples is a few MiB; anything far larger is refused
// before it is read.
constexpr uint64_t kMaxCalibrationFileBytes = 64ull << 20;

std::string RegionOf(const proto::CalibrationSample& s) {
  return absl::StrCat(s.region_signature(), "|", s.shape_bucket(), "|", s.phase());
}

}  // namespace

absl::StatusOr<std::map<std::string, int64_t>> ParseTacticParams(absl::string_view text) {
  std::map<std::string, int64_t> params;
  if (text == "-") return params;
  for (absl::string_view pair : absl::StrSplit(text, ',')) {
    std::pair<absl::string_view, absl::string_view> nv = absl::StrSplit(pair, '=');
    int64_t value = 0;
    if (nv.first.empty() || !absl::SimpleAtoi(nv.second, &value) ||
        !params.emplace(std::string(nv.first), value).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("tactic \"", text, "\": not distinct name=integer pairs"));
    }
  }
  return params;
}

absl::StatusOr<CostCalibration> CostCalibration::FromProto(proto::CostCalibration calibration,
                                                           absl::string_view source) {
  auto bad = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("cost calibration ", source, ": ", what));
  };
  if (calibration.schema() != kCostCalibrationSchema) {
    return bad(absl::StrCat("schema \"", calibration.schema(), "\" is not \"",
                            kCostCalibrationSchema, "\""));
  }
  if (calibration.schema_version() != kCostCalibrationSchemaVersion) {
    return bad(absl::StrCat("schema_version ", calibration.schema_version(), " is not ",
                            kCostCalibrationSchemaVersion));
  }
  if (calibration.target().empty()) return bad("target is empty");
  CostCalibration c;
  std::set<std::pair<std::string, int32_t>> seen;
  for (const proto::FamilyCalibration& f : calibration.families()) {
    const std::string name = absl::StrCat(f.family(), " v", f.family_version());
    if (f.family().empty() || f.family_version() < 1) {
      return bad(absl::StrCat("family \"", name, "\": needs a name and a version >= 1"));
    }
    if (!seen.emplace(f.family(), f.family_version()).second) {
      return bad(absl::StrCat("family ", name, " appears twice"));
    }
    if (!std::isfinite(f.overhead_us()) || f.overhead_us() < 0) {
      return bad(absl::StrCat("family ", name, ": overhead_us ", f.overhead_us(),
                              " is not a finite figure >= 0"));
    }
    std::vector<double> log_efficiencies;
    for (const proto::CalibrationSample& s : f.samples()) {
      if (s.kind().empty()) return bad(absl::StrCat("family ", name, ": a sample has no kind"));
      if (!(s.median_us() > 0) || !std::isfinite(s.median_us()) || !(s.efficiency() > 0) ||
          !std::isfinite(s.efficiency()) || s.bytes() < 0 || s.flops() < 0 || s.launches() < 0) {
        return bad(absl::StrCat("family ", name, ", sample of ", s.kind(), " (", s.tactic(),
                                "): median_us and efficiency must be positive and finite, "
                                "bytes, flops and launches >= 0"));
      }
      if (!(s.core_share() >= 0 && s.core_share() <= 1)) {
        return bad(absl::StrCat("family ", name, ", sample of ", s.kind(), " (", s.tactic(),
                                "): core_share ", s.core_share(), " is outside [0, 1]"));
      }
      absl::StatusOr<std::map<std::string, int64_t>> params = ParseTacticParams(s.tactic());
      if (!params.ok()) return bad(absl::StrCat("family ", name, ": ", params.status().message()));
      Group& g = c.groups_[GroupKey(f.family(), f.family_version(), s.kind())];
      g.samples.push_back({LogWork(s.bytes()), LogWork(s.flops()), std::log(s.efficiency()),
                           s.tactic(), s.default_tactic()});
      log_efficiencies.push_back(std::log(s.efficiency()));
      const bool known = std::any_of(g.tactics.begin(), g.tactics.end(),
                                     [&](const kernels::Tactic& t) { return t.params == *params; });
      if (!known) {
        g.tactics.push_back(kernels::Tactic{f.family(), f.family_version(), std::move(*params)});
      }
    }
    if (!log_efficiencies.empty()) {
      c.families_[{f.family(), f.family_version()}] = {f.overhead_us(), Median(log_efficiencies)};
    }
  }
  c.proto_ = std::move(calibration);
  return c;
}

absl::StatusOr<CostCalibration> CostCalibration::Parse(absl::string_view text,
                                                       absl::string_view source) {
  proto::CostCalibration message;
  TP_RETURN_IF_ERROR(ParseTextProto(text, absl::StrCat("cost calibration ", source), &message));
  return FromProto(std::move(message), source);
}

absl::StatusOr<CostCalibration> CostCalibration::Load(absl::string_view path) {
  TP_ASSIGN_OR_RETURN(std::string text,
                      ReadRegularFile(std::string(path), kMaxCalibrationFileBytes));
  return Parse(text, path);
}

const CostCalibration* CostCalibration::Bundled(absl::string_view target) {
  static const auto* bundled = [] {
    auto* m = new std::map<std::string, CostCalibration, std::less<>>();
    for (const auto& [file, text] : EmbeddedCalibrations()) {
      absl::StatusOr<CostCalibration> c = Parse(absl::string_view(text.data(), text.size()),
                                                absl::string_view(file.data(), file.size()));
      // The bundled files are checked by the planner tests; a bad one is a build defect.
      if (!c.ok()) std::abort();
      const std::string name = c->proto().target();
      m->emplace(name, std::move(*c));
    }
    return m;
  }();
  auto it = bundled->find(target);
  return it == bundled->end() ? nullptr : &it->second;
}

int64_t CostCalibration::num_samples() const {
  int64_t n = 0;
  for (const proto::FamilyCalibration& f : proto_.families()) n += f.samples_size();
  return n;
}

const CostCalibration::Group* CostCalibration::Find(const kernels::KernelFamily& family,
                                                    absl::string_view kind) const {
  auto it = groups_.find(
      std::make_tuple(std::string(family.name()), family.version(), std::string(kind)));
  return it == groups_.end() ? nullptr : &it->second;
}

std::optional<double> CostCalibration::Predict(const kernels::KernelFamily& family,
                                               const kernels::Tactic& tactic, bool is_default,
                                               const kernels::BoundRegion& region,
                                               const targets::TargetDescription& target,
                                               LaunchMode mode) const {
  const bool library = family.launch_kind() == kernels::LaunchKind::kLibrary;
  if (library && !is_default) return std::nullopt;
  auto figures = families_.find(std::make_pair(std::string(family.name()), family.version()));
  if (figures == families_.end()) return std::nullopt;
  const kernels::WorkEstimate work = family.Work(tactic, region);
  std::optional<double> log_eff;
  if (const Group* g = Find(family, region.kind()); g != nullptr) {
    const std::string params = family.Canonical(tactic).ParamsString();
    log_eff = WeightedLogEfficiency(g->samples, Point{LogWork(work.bytes), LogWork(work.flops)},
                                    [&](size_t i) {
                                      const Sample& s = g->samples[i];
                                      if (is_default && s.is_default) return false;
                                      return library || s.tactic != params;
                                    });
  }
  if (!log_eff && is_default) {
    // No sample of this kind near this size (a fused kind never measured, or work beyond the
    // samples): the family's default tactics' samples of every kind at similar work, else
    // the efficiency of the nearest one. The family's median, which small decode-sized
    // samples dominate, priced an add_rms_norm over 512 MiB at 15 times its bytes' time.
    std::vector<Sample> pool;
    for (const auto& [key, group] : groups_) {
      if (std::get<0>(key) != family.name() || std::get<1>(key) != family.version()) continue;
      for (const Sample& sample : group.samples) {
        if (sample.is_default) pool.push_back(sample);
      }
    }
    const Point at{LogWork(work.bytes), LogWork(work.flops)};
    log_eff = WeightedLogEfficiency(pool, at, [](size_t) { return false; });
    if (!log_eff) {
      double nearest = std::numeric_limits<double>::infinity();
      for (const Sample& sample : pool) {
        if (const double d = Distance(sample, at); d < nearest) {
          nearest = d;
          log_eff = sample.log_efficiency;
        }
      }
    }
  }
  if (!log_eff && is_default) log_eff = figures->second.median_log_efficiency;
  if (!log_eff) return std::nullopt;
  return family.Launches(tactic, region) * LaunchMicros(target, mode) +
         figures->second.overhead_us + IdealMicros(work, target) / std::exp(*log_eff);
}

const std::vector<kernels::Tactic>& CostCalibration::SampledTactics(
    const kernels::KernelFamily& family, absl::string_view kind) const {
  static const std::vector<kernels::Tactic> kNone;
  const Group* g = Find(family, kind);
  if (g == nullptr || family.launch_kind() == kernels::LaunchKind::kLibrary) return kNone;
  return g->tactics;
}

absl::Status FitCostCalibration(const targets::TargetDescription& target,
                                proto::CostCalibration& calibration) {
  const double node = LaunchMicros(target, LaunchMode::kGraph);  // as plans charge a launch
  for (proto::FamilyCalibration& f : *calibration.mutable_families()) {
    std::sort(f.mutable_samples()->begin(), f.mutable_samples()->end(),
              [](const proto::CalibrationSample& a, const proto::CalibrationSample& b) {
                return std::tie(a.kind(), a.source(), a.region_signature(), a.shape_bucket(),
                                a.phase(),
                                a.tactic()) < std::tie(b.kind(), b.source(), b.region_signature(),
                                                       b.shape_bucket(), b.phase(), b.tactic());
              });
    const int n = f.samples_size();
    struct Fit {
      double log_bytes, log_flops, log_efficiency, ideal, beyond;  // beyond: median - nodes
      std::string region;
    };
    std::vector<Fit> fits;
    double max_overhead = kMaxOverheadUs;
    for (const proto::CalibrationSample& s : f.samples()) {
      if (!(s.median_us() > 0)) {
        return absl::InvalidArgumentError(absl::StrCat("calibration sample of ", f.family(), " (",
                                                       s.kind(), ", ", s.tactic(),
                                                       ") has no positive median_us"));
      }
      kernels::WorkEstimate work;
      work.bytes = s.bytes();
      work.flops = s.flops();
      work.tensor_core = s.tensor_core();
      if (s.core_share() > 0) work.core_share = s.core_share();
      const double beyond = std::max(s.median_us() - s.launches() * node, 2 * kMinWorkUs);
      fits.push_back({LogWork(s.bytes()), LogWork(s.flops()), 0, IdealMicros(work, target), beyond,
                      RegionOf(s)});
      max_overhead = std::min(max_overhead, beyond - kMinWorkUs);
    }
    // The pool a sample is predicted from: the same kind and tactic, or (for a default) the
    // other defaults of its kind, in other regions.
    auto same_pool = [&](int i, int j) {
      const proto::CalibrationSample &a = f.samples(i), &b = f.samples(j);
      if (a.kind() != b.kind() || fits[i].region == fits[j].region) return false;
      return a.tactic() == b.tactic() || (a.default_tactic() && b.default_tactic());
    };
    double best_overhead = 0, best_error = std::numeric_limits<double>::infinity();
    for (double o = 0; o <= max_overhead + 1e-9; o += kOverheadStepUs) {
      for (Fit& x : fits) x.log_efficiency = std::log(x.ideal / std::max(x.beyond - o, kMinWorkUs));
      std::vector<double> errors;
      for (int i = 0; i < n; ++i) {
        std::optional<double> e =
            WeightedLogEfficiency(fits, Point{fits[i].log_bytes, fits[i].log_flops},
                                  [&](size_t j) { return !same_pool(i, static_cast<int>(j)); });
        if (!e) continue;
        const double predicted = o + fits[i].ideal / std::exp(*e);
        errors.push_back(std::abs(std::log(predicted / fits[i].beyond)));
      }
      if (errors.empty()) break;  // nothing predicts anything: keep overhead 0
      const double median = Median(errors);
      if (median < best_error - 1e-12) {
        best_error = median;
        best_overhead = o;
      }
    }
    f.set_overhead_us(best_overhead);
    f.set_fit_log_error(std::isfinite(best_error) ? best_error : 0);
    for (int i = 0; i < n; ++i) {
      f.mutable_samples(i)->set_efficiency(fits[i].ideal /
                                           std::max(fits[i].beyond - best_overhead, kMinWorkUs));
    }
  }
  std::sort(calibration.mutable_families()->begin(), calibration.mutable_families()->end(),
            [](const proto::FamilyCalibration& a, const proto::FamilyCalibration& b) {
              return std::make_pair(a.family(), a.family_version()) <
                     std::make_pair(b.family(), b.family_version());
            });
  return absl::OkStatus();
}

}  // namespace tileplan::planner
