// What a plan's tactic-cache lookups found in a tactic store (docs/tuner.md, "Planning with
// the store"): how many hit and, when none did, the most specific reason the store shows.
#ifndef TILEPLAN_TUNER_STORE_LOOKUPS_H_
#define TILEPLAN_TUNER_STORE_LOOKUPS_H_

#include <map>
#include <string>
#include <vector>

#include "kernels/core/kernel_family.h"
#include "planner/tactic_cache.h"
#include "tuner/tactic_store.h"

namespace tileplan::tuner {

// Whether a tuning run measures `family`: every family but the views, which launch nothing
// and have one tactic, and the collectives, which run across the GPUs of a tensor-parallel
// group (KernelFamily::spans_devices) and have one configuration. The planner looks them up
// too; nothing ever answers for them.
bool HasTacticsToMeasure(const kernels::KernelFamily& family);

// The keys of `records` whose family (in the global kernel registry) has tactics to
// measure, sorted: what a plan looked up that a tuning run can answer.
std::vector<planner::TacticKey> MeasurableKeys(
    const std::map<planner::TacticKey, planner::RecordingTacticCache::Record>& records);

// One line for a plan made with `store`: "N of M lookups hit (K of L keys)", counting the
// lookups of MeasurableKeys, and when none hit, why:
//  - the store is unusable (TacticStore::warnings() says why), or holds nothing;
//  - no stored entry is for the lookups' environment: without a GPU (`measured_environment`
//    false) the environment is the target description's, which no measurement matches;
//    with one, the stored environment closest to this GPU's and the fields it differs in;
//  - entries for this environment exist, but for another family version, for other shape
//    buckets or phases of the same regions, or for other regions (how many keys each).
std::string DescribeLookups(
    const std::map<planner::TacticKey, planner::RecordingTacticCache::Record>& records,
    const TacticStore& store, bool measured_environment);

}  // namespace tileplan::tuner

#endif  // TILEPLAN_TUNER_STORE_LOOKUPS_H_
