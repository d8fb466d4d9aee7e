// The tactic-cache interface the planner consults before its cost model (docs/plan.md,
// "Tactic selection"), and an in-memory implementation for tests and tools.
//
// A key names exactly what a measurement is valid for: the environment (for now the target's
// name, sm and SM count; the tuner's persistent store adds driver, CUDA runtime, NVRTC and
// cuBLASLt versions and a schema version), the canonical region signature, the shape bucket,
// the phase, and the kernel family with its version. A lookup with any field different is a
// miss, never an error.
#ifndef TILEPLAN_PLANNER_TACTIC_CACHE_H_
#define TILEPLAN_PLANNER_TACTIC_CACHE_H_

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>

#include "absl/strings/string_view.h"
#include "kernels/core/bound_graph.h"
#include "kernels/core/kernel_family.h"
#include "targets/target.pb.h"
#include "regions/ir.h"
#include "targets/target.pb.h"

namespace tileplan::planner {

// "h200/sm_90/132sm"
std::string EnvironmentFingerprint(const targets::TargetDescription& target);

// Canonical text of what a kernel computes for a region, independent of value names:
//   kind(operand, ...) -> (result, ...) {key = value, ...}
// with each operand and result as its dtype and bound shape ("bf16[1,1,2048]"), followed by
// "@strides[...]+offset" when it is not contiguous from its storage's start, and each result
// by " inplace(i)" / " view(i)" when it aliases operand i. Attributes are sorted by key and
// printed as in the IR text.
std::string RegionSignature(const kernels::BoundRegion& region);

struct TacticKey {
  std::string environment;       // EnvironmentFingerprint
  std::string region_signature;  // RegionSignature
  std::string shape_bucket;      // the phase's bindings, kernels::BindingsString
  ir::Phase phase = ir::Phase::kGeneral;
  std::string family;
  int32_t family_version = 0;

  // One line: "env | signature | bucket | phase | family vN".
  std::string ToString() const;

  friend bool operator<(const TacticKey& a, const TacticKey& b) {
    return std::tie(a.environment, a.region_signature, a.shape_bucket, a.phase, a.family,
                    a.family_version) < std::tie(b.environment, b.region_signature, b.shape_bucket,
                                                 b.phase, b.family, b.family_version);
  }
  friend bool operator==(const TacticKey& a, const TacticKey& b) { return !(a < b) && !(b < a); }
};

// The key of `family` for `region` planned in `phase`, measured in `environment`: the one
// function that builds keys, for the planner's lookups (tactic_selection.h) and the tuner's
// measurements (tuner/autotune.h) alike, so that the two cannot disagree. A rank of a
// tensor-parallel plan (`tensor_parallel` > 1 ranks) has its degree in the shape bucket
// (";tp=N"): its steps run beside the other ranks' collectives.
TacticKey TacticKeyFor(const kernels::BoundRegion& region, ir::Phase phase,
                       const kernels::KernelFamily& family, absl::string_view environment,
                       int64_t tensor_parallel = 1);

struct MeasuredTactic {
  kernels::Tactic tactic;
  double measured_us = 0;  // median time of the step as measured by the tuner
};

class TacticCache {
 public:
  virtual ~TacticCache() = default;
  // The measured tactic stored for exactly `key`, or nullopt. A store that cannot answer
  // reports a miss, never an error.
  virtual std::optional<MeasuredTactic> Lookup(const TacticKey& key) const = 0;
};

// Entries in a sorted map. Not synchronized: fill it before sharing it between threads.
class InMemoryTacticCache final : public TacticCache {
 public:
  // Adds or replaces the entry of `key`.
  void Insert(TacticKey key, MeasuredTactic tactic);
  std::optional<MeasuredTactic> Lookup(const TacticKey& key) const override;
  size_t size() const { return entries_.size(); }

 private:
  std::map<TacticKey, MeasuredTactic> entries_;
};

// Answers from `inner` (null: every lookup misses) and records every key looked up and
// whether it hit: what a plan asked of a tactic cache. Thread-safe.
class RecordingTacticCache final : public TacticCache {
 public:
  struct Record {
    int64_t lookups = 0;  // how often the key was looked up
    bool hit = false;
  };

  explicit RecordingTacticCache(const TacticCache* inner) : inner_(inner) {}
  std::optional<MeasuredTactic> Lookup(const TacticKey& key) const override;
  // Every key looked up so far, sorted, each once.
  std::map<TacticKey, Record> records() const;

 private:
  const TacticCache* const inner_;
  mutable std::mutex mu_;
  mutable std::map<TacticKey, Record> records_;  // guarded by mu_
};

}  // namespace tileplan::planner

#endif  // TILEPLAN_PLANNER_TACTIC_CACHE_H_
