// Shared plumbing of the built-in kernel families (kernels/families/<family>/): the
// kind check of CanImplement, the table assembly of Candidates, the parameter-set check of
// ValidateTactic, and small integer helpers. Not part of the public kernels API.
#ifndef TILEPLAN_KERNELS_CORE_FAMILY_BASE_H_
#define TILEPLAN_KERNELS_CORE_FAMILY_BASE_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "kernels/core/kernel_family.h"
#include "kernels/core/template_launch.h"

namespace tileplan::kernels::internal {

int64_t CeilDiv(int64_t a, int64_t b);
bool IsPowerOfTwo(int64_t x);
// Smallest power of two >= x (x >= 1).
int64_t NextPowerOfTwo(int64_t x);
// Product of all extents but the last (the rows of a [..., N] tensor).
int64_t Rows(const std::vector<int64_t>& shape);
// FailedPrecondition(reason): how families refuse a region.
absl::Status Refuse(std::string reason);
// The opt-in shared memory per block an architecture row assumes: the target's own figure
// for the row the target selects, the architecture's usual limit for the others
// (163 KiB sm_80, 227 KiB sm_90 and sm_100, 99 KiB sm_120, 48 KiB default).
int64_t RowSharedMemory(absl::string_view arch, const TargetDescription& target);
// Admissible thread-block size: a multiple of 32 in [32, 1024].
bool IsBlockSize(int64_t threads);
// "operand 1 (%x)" / "result 0 (%y)".
std::string OperandLabel(const BoundRegion& region, int operand);
std::string ResultLabel(const BoundRegion& region, int result);
// Refuses unless each listed operand's last dim is contiguous (stride 1).
absl::Status RequireInnerContiguous(const BoundRegion& region, std::initializer_list<int> operands);
// Whether the leading dims of `layout` address rows at one uniform stride (so the tensor is
// one matrix [rows, last] with a leading dimension), and the last dim is contiguous.
bool IsMatrix(const Layout& layout);
// Element offsets and leading-dim strides of the listed operands: a vector access must
// divide all of them to stay aligned.
std::vector<int64_t> AlignmentExtents(const BoundRegion& region,
                                      std::initializer_list<int> operands);
// The widest vector access, in elements, of at most 16 bytes of `dtype` that divides every
// number in `extents` (1 at worst).
int64_t VectorWidth(ir::DType dtype, const std::vector<int64_t>& extents);
// The vector of rope_kv_write.cuh's rotation (also attention_decode_rope.cuh's): kVec pairs
// per lane and step, the widest that is at most 16 bytes (8 interleaved, whose lane reads
// 2 · kVec consecutive elements) and at most head_dim / 64 (so that all 32 lanes work), and
// divides head_dim / 2 and every stride and element offset in `layout` that addresses the
// heads (their halves interleaved). 0 when interleaved with an odd one: no pair vector is
// aligned.
int64_t RopeVector(ir::DType dtype, int64_t head_dim, std::initializer_list<int64_t> layout,
                   bool interleaved);
// For a region with RoPE attributes whose heads `operand` holds: refuses unparsable RoPE
// attributes, and interleaved RoPE on heads with an odd stride or offset (RopeVector 0).
absl::Status CheckRopeLayout(const BoundRegion& region, int operand);
// Sum over positions p in [first, last] of min(p + 1, window) (window 0: no limit): the
// (query, key) pairs of causal attention for new tokens at those positions.
int64_t CausalPairs(int64_t first, int64_t last, int64_t window);

// A family with a fixed name, version, kinds and parameter set.
class FamilyBase : public KernelFamily {
 public:
  FamilyBase(std::string name, int32_t version, std::vector<std::string> kinds,
             std::vector<std::string> params, std::vector<std::string> optional_params = {});

  absl::string_view name() const override { return name_; }
  int32_t version() const override { return version_; }
  std::vector<std::string> kinds() const override { return kinds_; }

  // Refuses kinds outside kinds(), then asks CheckRegion.
  absl::Status CanImplement(const BoundRegion& region,
                            const TargetDescription& target) const override;
  // Rows from RowTactic, tunables from Tunables; the selected row must validate.
  absl::StatusOr<CandidateTable> Candidates(const BoundRegion& region,
                                            const TargetDescription& target) const override;
  absl::StatusOr<Tactic> DefaultTactic(const BoundRegion& region,
                                       const TargetDescription& target) const override;
  // Family, version and parameter names, then CheckTactic.
  absl::Status ValidateTactic(const Tactic& tactic, const BoundRegion& region,
                              const TargetDescription& target) const override;

 protected:
  virtual absl::Status CheckRegion(const BoundRegion& region,
                                   const TargetDescription& target) const = 0;
  // The default tactic of architecture row `arch` for `region`; `shared_memory` is the
  // row's shared memory per block (RowSharedMemory).
  virtual Tactic RowTactic(absl::string_view arch, const BoundRegion& region,
                           const TargetDescription& target, int64_t shared_memory) const = 0;
  virtual std::vector<TunableParam> Tunables(const BoundRegion& region,
                                             const TargetDescription& target) const = 0;
  // Values of the (present, known) parameters; InvalidArgument naming the parameter.
  virtual absl::Status CheckTactic(const Tactic& tactic, const BoundRegion& region,
                                   const TargetDescription& target) const = 0;

  // A tactic of this family with the given parameters.
  Tactic MakeTactic(std::initializer_list<std::pair<const std::string, int64_t>> params) const;
  // InvalidArgument "<family> tactic: parameter '<name>' is <value>, expected <expected>".
  absl::Status BadParam(absl::string_view param, int64_t value, absl::string_view expected) const;

 private:
  std::string name_;
  int32_t version_;
  std::vector<std::string> kinds_;
  std::vector<std::string> params_;
  std::vector<std::string> optional_params_;
};

// A family of CUDA templates: its description and its launch half (TemplateLauncher) in one
// object, so both read the same parameters the same way.
class TemplateFamilyBase : public FamilyBase, public TemplateLauncher {
 public:
  using FamilyBase::FamilyBase;
  const TemplateLauncher* templates() const override { return this; }
};

}  // namespace tileplan::kernels::internal

#endif  // TILEPLAN_KERNELS_CORE_FAMILY_BASE_H_
