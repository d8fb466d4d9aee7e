#include "tuner/store_lookups.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "kernels/families/registry.h"

namespace tileplan::tuner {
namespace {

using Records = std::map<planner::TacticKey, planner::RecordingTacticCache::Record>;

// The fields in which the fingerprint `stored` differs from `ours`, as "driver=12090 (here
// driver=13000)"; both are Environment::Fingerprint() lines.
std::vector<std::string> FieldDifferences(const std::string& ours, const std::string& stored) {
  const std::vector<std::string> a = absl::StrSplit(ours, '|');
  const std::vector<std::string> b = absl::StrSplit(stored, '|');
  std::vector<std::string> out;
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    const std::string here = i < a.size() ? a[i] : "-";
    const std::string there = i < b.size() ? b[i] : "-";
    if (here != there) out.push_back(absl::StrCat(there, " (here ", here, ")"));
  }
  return out;
}

// Why none of `keys` (one environment) hit the store.
std::string WhyNoHits(const std::vector<planner::TacticKey>& keys, const TacticStore& store,
                      bool measured_environment) {
  const std::vector<planner::TacticKey> stored = store.keys();
  if (stored.empty()) {
    return store.warnings().empty()
               ? "the store holds no measured tactics (autotune_regions fills it)"
               : "the store cannot be used (the warning above says why)";
  }
  const std::string& environment = keys.front().environment;
  std::map<std::string, int> per_environment;
  for (const planner::TacticKey& key : stored) ++per_environment[key.environment];
  if (!per_environment.contains(environment)) {
    std::vector<std::string> held;
    for (const auto& [fingerprint, count] : per_environment) {
      held.push_back(absl::StrCat(count, " for ", fingerprint));
    }
    const std::string holds = absl::StrCat("the store holds ", absl::StrJoin(held, ", "));
    if (!measured_environment) {
      return absl::StrCat("no GPU: the lookups are for the target description's environment (",
                          environment, "), which no measurement matches; ", holds);
    }
    std::vector<std::string> closest;
    for (const auto& [fingerprint, count] : per_environment) {
      std::vector<std::string> differences = FieldDifferences(environment, fingerprint);
      if (closest.empty() || differences.size() < closest.size()) closest = std::move(differences);
    }
    return absl::StrCat("nothing is stored for this GPU's environment; ", holds,
                        "; the closest differs in ", absl::StrJoin(closest, ", "));
  }
  // The stored keys of this environment by (region, family).
  std::multimap<std::tuple<std::string, std::string>, const planner::TacticKey*> by_region;
  for (const planner::TacticKey& key : stored) {
    if (key.environment == environment) {
      by_region.emplace(std::make_tuple(key.region_signature, key.family), &key);
    }
  }
  int other_version = 0, other_bucket = 0, unmeasured = 0;
  std::string version_example, bucket_example;
  for (const planner::TacticKey& key : keys) {
    const auto [begin, end] = by_region.equal_range({key.region_signature, key.family});
    const planner::TacticKey* version = nullptr;
    const planner::TacticKey* bucket = nullptr;
    for (auto it = begin; it != end; ++it) {
      (it->second->family_version != key.family_version ? version : bucket) = it->second;
    }
    if (version != nullptr) {
      ++other_version;
      version_example = absl::StrFormat("%s v%d stored, v%d looked up", key.family,
                                        version->family_version, key.family_version);
    } else if (bucket != nullptr) {
      ++other_bucket;
      bucket_example =
          absl::StrCat(bucket->shape_bucket, " ", ir::PhaseName(bucket->phase), " stored, ",
                       key.shape_bucket, " ", ir::PhaseName(key.phase), " looked up");
    } else {
      ++unmeasured;
    }
  }
  std::vector<std::string> parts;
  if (other_version > 0) {
    parts.push_back(absl::StrCat(other_version, " keys' regions are stored for another version of ",
                                 "their family (", version_example, ")"));
  }
  if (other_bucket > 0) {
    parts.push_back(
        absl::StrCat(other_bucket, " for other shape buckets or phases (", bucket_example, ")"));
  }
  if (unmeasured > 0) parts.push_back(absl::StrCat(unmeasured, " regions were never measured"));
  return absl::StrCat(
      "the store holds ", per_environment[environment],
      " entries for this environment, none with these keys: ", absl::StrJoin(parts, "; "),
      " (autotune_regions with the same --model and plan flags measures them)");
}

}  // namespace

bool HasTacticsToMeasure(const kernels::KernelFamily& family) {
  return family.launch_kind() != kernels::LaunchKind::kNothing && !family.spans_devices();
}

std::vector<planner::TacticKey> MeasurableKeys(const Records& records) {
  const kernels::KernelRegistry& registry = kernels::GlobalKernelRegistry();
  std::vector<planner::TacticKey> out;
  for (const auto& [key, record] : records) {
    const kernels::KernelFamily* family = registry.Find(key.family);
    if (family != nullptr && HasTacticsToMeasure(*family)) out.push_back(key);
  }
  return out;
}

std::string DescribeLookups(const Records& records, const TacticStore& store,
                            bool measured_environment) {
  const std::vector<planner::TacticKey> keys = MeasurableKeys(records);
  int64_t lookups = 0, hits = 0;
  int keys_hit = 0;
  for (const planner::TacticKey& key : keys) {
    const planner::RecordingTacticCache::Record& record = records.at(key);
    lookups += record.lookups;
    if (record.hit) {
      hits += record.lookups;
      ++keys_hit;
    }
  }
  std::string out =
      absl::StrFormat("%d of %d lookups hit (%d of %d keys)", hits, lookups, keys_hit, keys.size());
  if (keys_hit > 0 || keys.empty()) return out;
  return absl::StrCat(out, ": ", WhyNoHits(keys, store, measured_environment));
}

}  // namespace tileplan::tuner
