// Kernel families: the description half (docs/kernels.md).
//
// A family implements one or more region kinds. It answers, with no GPU:
//   CanImplement  whether it can run a region on a target (OK, or FailedPrecondition with
//                 the reason, e.g. "head_dim 80 is not one of 64, 96, 128");
//   Candidates    the ByTarget table: a default tactic per architecture row (sm_80, sm_90,
//                 sm_100, sm_120, and "default" for every other architecture), the row the
//                 target selects, and the tunable parameter lists the tuner may explore;
//   Geometry      the launch geometry of a tactic (grid, block, dynamic shared memory);
//   Work          the DRAM bytes and flops of a region under a tactic, for the cost model;
//   Launches, WorkspaceBytes, CounterBytes, MayOverwriteOperand: what the plan and the memory
//                 planner need.
// and how its steps launch (launch_kind): a template family's launch half is computed here
// too, with no GPU (templates(), kernels/core/template_launch.h); compiling and launching
// (NVRTC, cuBLASLt) is kernels/launch/, kernels/cublaslt/ and kernels/step/.
//
// Families are registered explicitly (kernels/families/registry.h); no static initializers.
#ifndef TILEPLAN_KERNELS_CORE_KERNEL_FAMILY_H_
#define TILEPLAN_KERNELS_CORE_KERNEL_FAMILY_H_

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/core/bound_graph.h"
#include "kernels/core/tactic.pb.h"
#include "targets/target.pb.h"

namespace tileplan::kernels {

using targets::TargetDescription;

class TemplateLauncher;

// The persistent kernel's weight stream (kernels/launch/persistent.cuh): at most this many
// slots, each slot and the ring's start a multiple of this many bytes. The planner sizes the
// stream (planner/persistent_schedule.h) and the step launcher checks it with these.
inline constexpr int kMaxStreamSlots = 8;
inline constexpr int64_t kStreamAlignment = 128;

// A family's choice of parameters for one region: self-describing data.
struct Tactic {
  std::string family;
  int32_t family_version = 0;
  std::map<std::string, int64_t> params;  // sorted by name

  // NotFound naming the family and the parameter when absent.
  absl::StatusOr<int64_t> Param(absl::string_view name) const;
  // "split_k=2,threads=256" (sorted by name); "-" when there are no parameters.
  std::string ParamsString() const;

  friend bool operator==(const Tactic& a, const Tactic& b) {
    return a.family == b.family && a.family_version == b.family_version && a.params == b.params;
  }
};

proto::Tactic TacticToProto(const Tactic& tactic);
// InvalidArgument for an empty family or duplicate parameter names.
absl::StatusOr<Tactic> TacticFromProto(const proto::Tactic& message);

// One tunable parameter and the values the tuner may try, ascending.
struct TunableParam {
  std::string name;
  std::vector<int64_t> values;
};

// The architecture rows of every ByTarget table, in this order.
inline constexpr std::array<absl::string_view, 5> kArchRows = {"sm_80", "sm_90", "sm_100", "sm_120",
                                                               "default"};

// The row a compute capability selects: the row of the same major version with the largest
// minor version not above the target's (sm_89 -> sm_80, sm_103 -> sm_100, sm_121 -> sm_120),
// else "default" (sm_70, sm_75, sm_110, ...).
absl::string_view ArchRowFor(int sm);

struct ByTargetRow {
  std::string arch;  // one of kArchRows
  Tactic tactic;
};

struct CandidateTable {
  // One row per kArchRows entry, in that order. Parameters that depend on the machine's
  // size (split-K, split-KV, CTA counts) are derived with the given target's SM count in
  // every row; the other parameters are each architecture's own.
  std::vector<ByTargetRow> rows;
  std::string selected_row;  // ArchRowFor(target.sm())
  Tactic default_tactic;     // the selected row's tactic
  // Sorted by name. The tuner explores their product; a combination is a candidate when
  // ValidateTactic accepts it for the region and target.
  std::vector<TunableParam> tunables;
};

struct LaunchGeometry {
  std::array<int64_t, 3> grid = {0, 0, 0};   // all zero for a step that launches nothing
  std::array<int64_t, 3> block = {0, 0, 0};  // all zero when a library chooses it
  int64_t dynamic_shared_memory_bytes = 0;
  // Thread-block clusters of this many CTAs per dimension; {1, 1, 1}: none.
  std::array<int64_t, 3> cluster = {1, 1, 1};
  // True when a library (cuBLASLt) launches its own kernels: `grid` is then the tile grid
  // the tactic implies and `block` is zero.
  bool library_managed = false;

  int64_t ctas() const { return grid[0] * grid[1] * grid[2]; }
};

// What a region costs under a tactic, before any hardware rate is applied.
struct WorkEstimate {
  // DRAM bytes read plus written: each operand and result once (the compulsory traffic);
  // workspace partials are assumed to stay in L2 and are not counted.
  int64_t bytes = 0;
  // Floating-point operations the kernel executes, including whole-tile padding (a GEMM
  // tile of 64 rows on a 1-row input executes 64 rows).
  int64_t flops = 0;
  bool tensor_core = false;  // flops run at the matrix rate (else at the CUDA-core rate)
  // The share of the target's achievable CUDA-core rate that these flops reach, where a
  // family knows its inner loop issues much more than its FMAs (conversions, operand loads
  // from L1, long accumulator chains at low occupancy). The cost model's ideal time divides
  // CUDA-core flops by it, calibrated or not, so that a calibration's efficiencies measured
  // on memory-bound sizes carry over to sizes where those flops bind.
  double core_share = 1.0;
  // Bytes the CTAs read in all where that is far more than `bytes`: data read again by other
  // CTAs, from L2 rather than DRAM (0: every byte once, as `bytes` counts it).
  int64_t cache_bytes = 0;
  // Collectives (tensor parallelism): bytes each GPU sends over the link between the GPUs,
  // and the steps of the algorithm that each pay the link's latency. Their time does not
  // overlap the DRAM traffic's or the flops' (the cost model adds it).
  int64_t link_bytes = 0;
  int link_steps = 0;
};

// How the steps of a family run.
enum class LaunchKind {
  kNothing,    // views: the step launches nothing (its results alias its operands)
  kTemplates,  // CUDA templates compiled by NVRTC: KernelFamily::templates() computes them
  kLibrary,    // a library's kernels (cuBLASLt): a library launcher registered under the
               // family's name launches them (kernels/step/step_launcher.h); its candidates
               // are the configurations the library offers, not the product of the tunables
};

class KernelFamily {
 public:
  virtual ~KernelFamily() = default;

  virtual absl::string_view name() const = 0;
  // Bumped whenever the family's kernel code or the meaning of a parameter changes.
  virtual int32_t version() const = 0;
  // The region kinds this family implements, sorted.
  virtual std::vector<std::string> kinds() const = 0;
  virtual LaunchKind launch_kind() const { return LaunchKind::kTemplates; }
  // The launch half of a template family: non-null exactly when launch_kind() is
  // kTemplates; it lives as long as the family.
  virtual const TemplateLauncher* templates() const { return nullptr; }
  // True when every kernel the family launches also has a persistent task
  // (`<kernel>_task`, kernels/core/kernel_params.h), so its steps may run inside the
  // persistent kernel (kernels/launch/persistent.cuh).
  virtual bool persistent_tasks() const { return false; }
  // True for a family whose cost estimate is not to be trusted on its own: a plan takes it only
  // where a tactic store holds a measurement of it (the tuner measures it as any other
  // family); the cost model and a calibration never choose it.
  virtual bool chosen_by_measurement_only() const { return false; }
  // True for a family whose steps run across the GPUs of a tensor-parallel group (the
  // collectives): one GPU cannot run or measure them alone.
  virtual bool spans_devices() const { return false; }
  // The canonical form of `tactic`: the same launches, written one way, so that tactics are
  // compared by what they run (the tuner's candidates, a calibration's samples, a store's
  // measurements); a family whose parameter means the same at some value as when absent
  // leaves it out there.
  virtual Tactic Canonical(const Tactic& tactic) const { return tactic; }
  // `tactic` changed only in what sets the block size, so that its launches have `threads`
  // threads per block; nullopt when the family has no such parameter. The result still has
  // to pass ValidateTactic.
  virtual std::optional<Tactic> WithBlockThreads(const Tactic& tactic, int64_t threads) const {
    return std::nullopt;
  }
  // `tactic` changed only so that its launches run without thread-block clusters (the
  // persistent kernel's tasks run one CTA at a time); nullopt when the family has no such
  // tactic. The result still has to pass ValidateTactic.
  virtual std::optional<Tactic> WithoutClusters(const Tactic& tactic) const {
    return std::nullopt;
  }
  // The persistent kernel's weight stream (kernels/launch/persistent.cuh): the bytes of
  // shared memory the tile of one CTA of `tactic` spans (its `_task`'s `stream`), the largest
  // over the grid; 0 for a family whose tasks stream nothing.
  virtual int64_t StreamTileBytes(const Tactic& tactic, const BoundRegion& region) const {
    return 0;
  }
  // `tactic` reshaped for a run whose blocks stream tiles of at most `slot_bytes` into
  // shared memory, `blocks` blocks in all: tiles that fit, as few tasks as keep every block
  // busy. nullopt when the family streams nothing or no tactic of its tiles fits. The result
  // still has to pass ValidateTactic.
  virtual std::optional<Tactic> ForStream(const Tactic& tactic, const BoundRegion& region,
                                          int64_t slot_bytes, int64_t blocks) const {
    return std::nullopt;
  }

  // OK, or FailedPrecondition whose message is the reason (without the family's name).
  virtual absl::Status CanImplement(const BoundRegion& region,
                                    const TargetDescription& target) const = 0;
  // REQUIRES: CanImplement(region, target) is OK; otherwise its error is returned.
  virtual absl::StatusOr<CandidateTable> Candidates(const BoundRegion& region,
                                                    const TargetDescription& target) const = 0;
  // Candidates(region, target)->default_tactic, without building the other rows.
  virtual absl::StatusOr<Tactic> DefaultTactic(const BoundRegion& region,
                                               const TargetDescription& target) const = 0;
  // OK when `tactic` belongs to this family and version, carries exactly the family's
  // parameters with admissible values for `region`, and fits `target` (shared memory);
  // InvalidArgument naming the parameter otherwise.
  virtual absl::Status ValidateTactic(const Tactic& tactic, const BoundRegion& region,
                                      const TargetDescription& target) const = 0;
  // Whether the tuner should measure `tactic`, a combination of the tunables that
  // ValidateTactic accepts: false where it cannot pay off on this target (splitting work
  // across more CTAs when the grid already fills the GPU), which keeps the search short. The
  // default tactic and the ByTarget rows are measured regardless, and a tactic given
  // explicitly is never refused for this.
  virtual bool WorthMeasuring(const Tactic& tactic, const BoundRegion& region,
                              const TargetDescription& target) const {
    return true;
  }
  // REQUIRES: ValidateTactic(tactic, region, target) is OK. The main launch's geometry: with
  // several launches, the one the template launcher marks (LaunchBuilder::MarkMainLaunch), by
  // default the last.
  virtual LaunchGeometry Geometry(const Tactic& tactic, const BoundRegion& region) const = 0;
  virtual WorkEstimate Work(const Tactic& tactic, const BoundRegion& region) const = 0;
  // Kernels launched for the region (0 for views).
  virtual int Launches(const Tactic& tactic, const BoundRegion& region) const { return 1; }
  // Scratch device memory the step needs for its duration (split-K partials); its contents
  // do not outlive the step.
  virtual int64_t WorkspaceBytes(const Tactic& tactic, const BoundRegion& region) const {
    return 0;
  }
  // Completion counters (4 bytes each): zero when the step starts, and returned to zero by
  // the kernel (the last CTA to finish resets them), so they are zeroed once when the arena
  // is allocated and then never share bytes with anything else.
  virtual int64_t CounterBytes(const Tactic& tactic, const BoundRegion& region) const { return 0; }
  // Whether result `result` may be written into the storage of operand `operand` when that
  // operand is dead after this region: true only when the kernel reads each element of the
  // operand before writing the result element at the same position, and no other CTA reads
  // it afterwards.
  virtual bool MayOverwriteOperand(const BoundRegion& region, int result, int operand) const {
    return false;
  }
};

class KernelRegistry {
 public:
  // AlreadyExists for a second family of the same name; InvalidArgument for a family with
  // no kinds, a version below 1, or templates() that disagree with launch_kind().
  absl::Status Register(std::unique_ptr<KernelFamily> family);
  const KernelFamily* Find(absl::string_view name) const;  // nullptr when unknown
  // Families implementing `kind`, sorted by name (empty when none).
  std::vector<const KernelFamily*> FamiliesFor(absl::string_view kind) const;
  std::vector<const KernelFamily*> families() const;  // sorted by name

 private:
  std::map<std::string, std::unique_ptr<KernelFamily>, std::less<>> families_;
  std::map<std::string, std::vector<const KernelFamily*>, std::less<>> by_kind_;
};

}  // namespace tileplan::kernels

#endif  // TILEPLAN_KERNELS_CORE_KERNEL_FAMILY_H_
