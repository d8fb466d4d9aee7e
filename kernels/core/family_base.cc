#include "kernels/core/family_base.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "regions/rope.h"

namespace tileplan::kernels::internal {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool IsPowerOfTwo(int64_t x) { return x > 0 && (x & (x - 1)) == 0; }

int64_t NextPowerOfTwo(int64_t x) {
  int64_t p = 1;
  while (p < x) p *= 2;
  return p;
}

int64_t Rows(const std::vector<int64_t>& shape) {
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < shape.size(); ++d) rows *= shape[d];
  return rows;
}

absl::Status Refuse(std::string reason) { return absl::FailedPreconditionError(std::move(reason)); }

int64_t RowSharedMemory(absl::string_view arch, const TargetDescription& target) {
  if (arch == ArchRowFor(target.sm())) return target.shared_memory_per_block_bytes();
  if (arch == "sm_80") return 163 * 1024;
  if (arch == "sm_90" || arch == "sm_100") return 227 * 1024;
  if (arch == "sm_120") return 99 * 1024;
  return 48 * 1024;
}

bool IsBlockSize(int64_t threads) { return threads >= 32 && threads <= 1024 && threads % 32 == 0; }

std::string OperandLabel(const BoundRegion& region, int operand) {
  return absl::StrCat("operand ", operand, " (%",
                      region.graph().value(region.operand_id(operand)).name, ")");
}

std::string ResultLabel(const BoundRegion& region, int result) {
  return absl::StrCat("result ", result, " (%", region.graph().value(region.result_id(result)).name,
                      ")");
}

absl::Status RequireInnerContiguous(const BoundRegion& region,
                                    std::initializer_list<int> operands) {
  for (int i : operands) {
    if (i >= region.num_operands()) continue;
    if (!region.operand(i).InnerContiguous()) {
      return Refuse(absl::StrCat(OperandLabel(region, i), " has strides [",
                                 absl::StrJoin(region.operand(i).strides, ","),
                                 "]: the kernel needs its last dim contiguous"));
    }
  }
  return absl::OkStatus();
}

bool IsMatrix(const Layout& layout) {
  if (!layout.InnerContiguous()) return false;
  const size_t rank = layout.shape.size();
  for (size_t d = 0; d + 2 < rank; ++d) {
    if (layout.shape[d] != 1 && layout.strides[d] != layout.shape[d + 1] * layout.strides[d + 1]) {
      return false;
    }
  }
  return true;
}

std::vector<int64_t> AlignmentExtents(const BoundRegion& region,
                                      std::initializer_list<int> operands) {
  std::vector<int64_t> out;
  for (int i : operands) {
    if (i >= region.num_operands()) continue;
    const Layout& l = region.operand(i);
    out.push_back(l.offset);
    for (size_t d = 0; d + 1 < l.strides.size(); ++d) out.push_back(l.strides[d]);
  }
  return out;
}

int64_t VectorWidth(ir::DType dtype, const std::vector<int64_t>& extents) {
  int64_t width = 16 / ir::DTypeSize(dtype);
  for (int64_t e : extents) {
    while (width > 1 && e % width != 0) width /= 2;
  }
  return width;
}

int64_t RopeVector(ir::DType dtype, int64_t head_dim, std::initializer_list<int64_t> layout,
                   bool interleaved) {
  const int64_t es = ir::DTypeSize(dtype);
  const int64_t lanes = std::max<int64_t>(1, head_dim / 64);
  int64_t width = std::min<int64_t>((interleaved ? 8 : 16) / es, lanes);
  for (int64_t e : {head_dim / 2}) {
    while (width > 1 && e % width != 0) width /= 2;
  }
  for (int64_t e : layout) {
    if (interleaved && e % 2 != 0) return 0;
    const int64_t unit = interleaved ? e / 2 : e;
    while (width > 1 && unit % width != 0) width /= 2;
  }
  return width;
}

absl::Status CheckRopeLayout(const BoundRegion& region, int operand) {
  absl::StatusOr<ir::RopeParams> rope = ir::RopeParamsFromAttributes(region.region().attrs);
  if (!rope.ok()) return Refuse(std::string(rope.status().message()));
  if (!rope->interleaved) return absl::OkStatus();
  for (int64_t e : AlignmentExtents(region, {operand})) {
    if (e % 2 != 0) {
      return Refuse(absl::StrCat(OperandLabel(region, operand),
                                 " has an odd stride or offset: interleaved RoPE reads its pairs "
                                 "as whole vectors"));
    }
  }
  return absl::OkStatus();
}

int64_t CausalPairs(int64_t first, int64_t last, int64_t window) {
  if (last < first) return 0;
  // Positions p with p + 1 <= window see p + 1 keys; the rest see `window` keys.
  auto triangle = [](int64_t a, int64_t b) {  // sum of (p + 1) for p in [a, b]
    return b < a ? 0 : ((b + 1) * (b + 2) - a * (a + 1)) / 2;
  };
  if (window <= 0) return triangle(first, last);
  const int64_t split = std::min(last, window - 1);  // last position still below the window
  return triangle(first, split) +
         std::max<int64_t>(0, last - std::max(first, split + 1) + 1) * window;
}

FamilyBase::FamilyBase(std::string name, int32_t version, std::vector<std::string> kinds,
                       std::vector<std::string> params, std::vector<std::string> optional_params)
    : name_(std::move(name)),
      version_(version),
      kinds_(std::move(kinds)),
      params_(std::move(params)),
      optional_params_(std::move(optional_params)) {
  std::sort(kinds_.begin(), kinds_.end());
  std::sort(params_.begin(), params_.end());
  std::sort(optional_params_.begin(), optional_params_.end());
}

absl::Status FamilyBase::CanImplement(const BoundRegion& region,
                                      const TargetDescription& target) const {
  if (!std::binary_search(kinds_.begin(), kinds_.end(), region.kind())) {
    return Refuse(
        absl::StrCat("kind '", region.kind(), "' is not one of ", absl::StrJoin(kinds_, ", ")));
  }
  return CheckRegion(region, target);
}

absl::StatusOr<CandidateTable> FamilyBase::Candidates(const BoundRegion& region,
                                                      const TargetDescription& target) const {
  TP_RETURN_IF_ERROR(CanImplement(region, target));
  CandidateTable table;
  table.selected_row = std::string(ArchRowFor(target.sm()));
  for (absl::string_view arch : kArchRows) {
    Tactic t = RowTactic(arch, region, target, RowSharedMemory(arch, target));
    if (arch == table.selected_row) table.default_tactic = t;
    table.rows.push_back(ByTargetRow{std::string(arch), std::move(t)});
  }
  if (absl::Status s = ValidateTactic(table.default_tactic, region, target); !s.ok()) {
    return absl::InternalError(absl::StrCat(name_, ": the ", table.selected_row,
                                            " default tactic for ", region.Label(),
                                            " is invalid: ", s.message()));
  }
  table.tunables = Tunables(region, target);
  std::sort(table.tunables.begin(), table.tunables.end(),
            [](const TunableParam& a, const TunableParam& b) { return a.name < b.name; });
  return table;
}

absl::StatusOr<Tactic> FamilyBase::DefaultTactic(const BoundRegion& region,
                                                 const TargetDescription& target) const {
  TP_RETURN_IF_ERROR(CanImplement(region, target));
  const absl::string_view arch = ArchRowFor(target.sm());
  return RowTactic(arch, region, target, RowSharedMemory(arch, target));
}

absl::Status FamilyBase::ValidateTactic(const Tactic& tactic, const BoundRegion& region,
                                        const TargetDescription& target) const {
  if (tactic.family != name_ || tactic.family_version != version_) {
    return absl::InvalidArgumentError(absl::StrCat("tactic of family ", tactic.family, " v",
                                                   tactic.family_version, " given to family ",
                                                   name_, " v", version_));
  }
  for (const std::string& p : params_) {
    if (!tactic.params.count(p)) {
      return absl::InvalidArgumentError(
          absl::StrCat(name_, " tactic: missing parameter '", p, "'"));
    }
  }
  for (const auto& [p, value] : tactic.params) {
    if (!std::binary_search(params_.begin(), params_.end(), p) &&
        !std::binary_search(optional_params_.begin(), optional_params_.end(), p)) {
      return absl::InvalidArgumentError(
          absl::StrCat(name_, " tactic: unknown parameter '", p, "'"));
    }
  }
  return CheckTactic(tactic, region, target);
}

Tactic FamilyBase::MakeTactic(
    std::initializer_list<std::pair<const std::string, int64_t>> params) const {
  Tactic t;
  t.family = name_;
  t.family_version = version_;
  t.params = std::map<std::string, int64_t>(params);
  return t;
}

absl::Status FamilyBase::BadParam(absl::string_view param, int64_t value,
                                  absl::string_view expected) const {
  return absl::InvalidArgumentError(
      absl::StrCat(name_, " tactic: parameter '", param, "' is ", value, ", expected ", expected));
}

}  // namespace tileplan::kernels::internal
