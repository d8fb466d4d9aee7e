// Measures the candidate tactics of one kernel family for one region on the GPU
// (docs/tuner.md, "Measuring").
//
// A region is run on its own buffers: every storage root its operands and results use,
// filled with random values (token ids inside the vocabulary, positions as the phase has
// them), in as many copies as it takes to cover twice the L2 cache, so that every timed run
// reads its operands from DRAM as in a real step ("cold L2"). The family's default tactic runs
// first and its results are the reference: every other candidate runs on the same inputs,
// its results poisoned beforehand, and must agree within the result dtype's tolerance (bf16
// and f16 2e-2, f32 1e-3 of the reference's largest magnitude; integers exactly). Then each
// valid candidate is timed: warm-up runs, then `repeats` runs cycling through the copies,
// between CUDA events, the median; decode regions are timed as replays of a captured CUDA
// Graph, as decode steps run.
//
// Failures are results, not errors: a candidate that does not compile, cannot launch, needs
// too much shared memory or computes a wrong result is recorded with the reason. A fault
// that poisons the CUDA context (an illegal address, a trap) is reported as an error: the
// caller (autotune_regions) runs regions in a worker process and restarts it without that
// candidate. TuneOptions::inject_fault makes such a fault on purpose, for testing that path.
#ifndef TILEPLAN_TUNER_REGION_TUNER_H_
#define TILEPLAN_TUNER_REGION_TUNER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/core/bound_graph.h"
#include "kernels/core/kernel_family.h"
#include "kernels/step/step_launcher.h"
#include "tuner/tactic_store.h"

namespace tileplan::tuner {

// The candidates of `family` for `region` on `target`, deduplicated, in order: the default
// tactic, then the configurations a library offers for the exact problem
// (`library_configs`, in their order; for cublaslt_gemm the heuristic's answers as raw
// configs, CublasLtRunner::Candidates), then for the template families the other ByTarget
// rows' tactics and the product of the tunable lists (last parameter fastest) less the
// combinations the family finds not worth measuring (KernelFamily::WorthMeasuring); each
// accepted by ValidateTactic; at most `max_count`. cublaslt_gemm offers no rows or products (its
// tunables describe the cost model's tiles, not configurations cuBLASLt is known to run).
std::vector<kernels::Tactic> EnumerateCandidates(
    const kernels::KernelFamily& family, const kernels::BoundRegion& region,
    const targets::TargetDescription& target, int max_count,
    const std::vector<kernels::Tactic>& library_configs = {});

// Expert ids as a router of random weights picks them, for timing the regions that read
// them: `selections` ids, K = `top_k` consecutive ones per token, each token's K distinct
// (when K <= E) and uniform over [0, E), so each expert gets about selections / E rows.
// Deterministic for a seed.
std::vector<int32_t> RandomRouting(int64_t selections, int64_t top_k, int64_t experts,
                                   uint32_t seed);

// Sets m.winner and m.winner_us to the fastest kOk candidate (the first of equal ones), and
// m.default_us to the first candidate's median when `first_is_default` and it is kOk (the
// cost model's pick, which EnumerateCandidates puts first).
void ChooseWinner(RegionMeasurement& m, bool first_is_default);

struct TuneOptions {
  int warmup = 3;
  int repeats = 20;
  // Rotate copies of the region's buffers over at least this many bytes (twice the L2).
  int64_t rotate_bytes = 0;
  // Time replays of a captured CUDA Graph of `repeats` runs (decode) instead of runs
  // launched one by one.
  bool graph_replay = false;
  // A testing aid: when candidate `inject_fault` (an index into Tune's `candidates`) is
  // reached, a kernel that executes __trap() runs on the tuning stream first, so the CUDA
  // context dies as under a candidate that faults and Tune returns that fault. -1: none.
  int inject_fault = -1;
};

// autotune_regions --inject-fault=REGION:CANDIDATE (a testing aid): the first region to
// tune whose progress label or key contains `region` gets a fault injected before its
// candidate number `candidate` (TuneOptions::inject_fault).
struct FaultInjection {
  std::string region;
  int candidate = 0;
};
// Parses "REGION:CANDIDATE": REGION a non-empty text (it may hold ':'; the index follows the
// last one), CANDIDATE an index >= 0. InvalidArgument saying what is expected otherwise.
absl::StatusOr<FaultInjection> ParseFaultInjection(absl::string_view text);

class RegionTuner {
 public:
  // Everything must outlive the tuner.
  RegionTuner(kernels::StepLauncher& launcher, const targets::TargetDescription& target)
      : launcher_(&launcher), target_(&target) {}

  // EnumerateCandidates with the library configurations of this device: for cublaslt_gemm,
  // the heuristic's answers for the region (asked for max_count of them). The list is the
  // same on every call for one region, device and library, so an index names a candidate
  // across processes. An error when the library cannot list them (the caller may fall back
  // to EnumerateCandidates without them).
  absl::StatusOr<std::vector<kernels::Tactic>> Candidates(const kernels::KernelFamily& family,
                                                          const kernels::BoundRegion& region,
                                                          int max_count);

  // Compiles every template instance of `candidates` for the device on all host cores (into
  // the disk cache; Tune then loads them). Compile failures are not errors here: Tune
  // records them per candidate.
  void Precompile(const kernels::KernelFamily& family, const kernels::BoundRegion& region,
                  const std::vector<kernels::Tactic>& candidates);

  // Measures `candidates` (the first is the reference; normally the default tactic).
  // `before_each(i)` is called before candidate i runs (progress, fault attribution).
  // An error only for a poisoned CUDA context (Internal "... the GPU faulted (<CUDA error>)",
  // "injected fault: ..." when options.inject_fault made it) or a region that cannot be set
  // up.
  absl::StatusOr<std::vector<CandidateMeasurement>> Tune(
      const kernels::BoundRegion& region, const kernels::KernelFamily& family,
      const std::vector<kernels::Tactic>& candidates, const TuneOptions& options,
      const std::function<void(int)>& before_each = nullptr);

 private:
  kernels::StepLauncher* launcher_;
  const targets::TargetDescription* target_;
};

}  // namespace tileplan::tuner

#endif  // TILEPLAN_TUNER_REGION_TUNER_H_
