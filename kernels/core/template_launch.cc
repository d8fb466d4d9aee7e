#include "kernels/core/template_launch.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_join.h"
#include "base/status_macros.h"

namespace tileplan::kernels {

// The device code every template includes, embedded in tileplan_kernel_core.
const std::vector<std::pair<std::string_view, std::string_view>>& EmbeddedCoreTemplates();

namespace {

uint16_t FloatToHalfBits(float value, ir::DType dtype) {
  uint32_t u;
  std::memcpy(&u, &value, 4);
  if (dtype == ir::DType::kBF16) {
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<uint16_t>(u >> 16);
  }
  // IEEE binary16, round to nearest even.
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow to inf
  if (abs < 0x38800000u) {
    // Subnormal (or zero) in half: value * 2^24 rounded to an integer.
    float f;
    const uint32_t a = abs;
    std::memcpy(&f, &a, 4);
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(f * 16777216.0f)));
  }
  uint32_t h = ((abs >> 13) - (112u << 10));  // rebias exponent 127 -> 15
  const uint32_t rest = abs & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

float HalfBitsToFloat(uint16_t bits, ir::DType dtype) {
  uint32_t u;
  if (dtype == ir::DType::kBF16) {
    u = static_cast<uint32_t>(bits) << 16;
  } else {
    const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
    const uint32_t exponent = (bits >> 10) & 0x1fu;
    const uint32_t mantissa = bits & 0x3ffu;
    if (exponent == 0) {
      const float f = std::ldexp(static_cast<float>(mantissa), -24);
      std::memcpy(&u, &f, 4);
      u |= sign;
    } else if (exponent == 31) {
      u = sign | 0x7f800000u | (mantissa << 13);
    } else {
      u = sign | ((exponent + 112u) << 23) | (mantissa << 13);
    }
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

std::vector<SourceFile> ToSourceFiles(
    const std::vector<std::pair<std::string_view, std::string_view>>& embedded) {
  std::vector<SourceFile> out;
  for (const auto& [name, contents] : embedded) {
    out.push_back({std::string(name), std::string(contents)});
  }
  return out;
}

std::vector<SourceFile> CoreTemplateSources() { return ToSourceFiles(EmbeddedCoreTemplates()); }

absl::StatusOr<int64_t> LaunchBuilder::Param(absl::string_view name) const {
  absl::StatusOr<int64_t> value = t_.Param(name);
  if (!value.ok()) return Error(value.status().message());
  return value;
}

absl::StatusOr<std::string> LaunchBuilder::TypeName(ir::DType dtype, absl::string_view what) const {
  switch (dtype) {
    case ir::DType::kF32:
      return std::string("float");
    case ir::DType::kBF16:
      return std::string("tileplan::bf16");
    case ir::DType::kF16:
      return std::string("tileplan::f16");
    case ir::DType::kI32:
      break;
  }
  return Error(what, " has dtype ", ir::DTypeName(dtype), ", which no template takes");
}

absl::Status LaunchBuilder::RequireContiguous(const Layout& l, absl::string_view what) const {
  if (!l.IsContiguous()) return Error(what, " must be contiguous");
  return absl::OkStatus();
}

int64_t LaunchBuilder::WidestDividing(int64_t limit, std::initializer_list<int64_t> extents) {
  int64_t width = limit;
  for (int64_t e : extents) {
    while (width > 1 && e % width != 0) width /= 2;
  }
  return width;
}

void* LaunchBuilder::Operand(int i) const {
  return buffers_ != nullptr && i < static_cast<int>(buffers_->operands.size())
             ? buffers_->operands[static_cast<size_t>(i)]
             : nullptr;
}

void* LaunchBuilder::Result(int i) const {
  return buffers_ != nullptr && i < static_cast<int>(buffers_->results.size())
             ? buffers_->results[static_cast<size_t>(i)]
             : nullptr;
}

const float* LaunchBuilder::rope_inv_freq() const {
  return buffers_ != nullptr ? buffers_->rope_inv_freq : nullptr;
}

int* LaunchBuilder::error() const { return buffers_ != nullptr ? buffers_->error : nullptr; }

absl::Status LaunchBuilder::CheckPointer(const void* p, int64_t bytes,
                                         absl::string_view what) const {
  if (buffers_ == nullptr) return absl::OkStatus();
  if (p == nullptr) return Error("no device buffer for ", what);
  if (reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(bytes) != 0) {
    return Error(what, " at 0x", absl::Hex(reinterpret_cast<uintptr_t>(p)), " is not aligned to ",
                 bytes, " bytes");
  }
  return absl::OkStatus();
}

absl::Status LaunchBuilder::CheckOperands(int64_t bytes,
                                          std::initializer_list<int> operands) const {
  for (int i : operands) {
    TP_RETURN_IF_ERROR(CheckPointer(Operand(i), bytes, absl::StrCat("operand ", i)));
  }
  return absl::OkStatus();
}

absl::Status LaunchBuilder::CheckResults(int64_t bytes, std::initializer_list<int> results) const {
  for (int i : results) {
    TP_RETURN_IF_ERROR(CheckPointer(Result(i), bytes, absl::StrCat("result ", i)));
  }
  return absl::OkStatus();
}

absl::Status LaunchBuilder::RequireRopeTable() const {
  if (buffers_ != nullptr && buffers_->rope_inv_freq == nullptr) {
    return Error("no rope frequencies (RegionBuffers::rope_inv_freq)");
  }
  return absl::OkStatus();
}

absl::StatusOr<LaunchBuilder::SplitPointers> LaunchBuilder::SplitBuffers(
    int64_t splits, absl::string_view what) const {
  SplitPointers p;
  if (splits <= 1 || buffers_ == nullptr) return p;
  TP_RETURN_IF_ERROR(
      CheckPointer(buffers_->workspace, 16, absl::StrCat("the ", what, " workspace")));
  TP_RETURN_IF_ERROR(CheckPointer(buffers_->counters, 4, absl::StrCat("the ", what, " counters")));
  p.workspace = buffers_->workspace;
  p.counters = buffers_->counters;
  return p;
}

absl::StatusOr<void*> LaunchBuilder::Workspace(absl::string_view what) const {
  if (buffers_ == nullptr) return nullptr;
  TP_RETURN_IF_ERROR(
      CheckPointer(buffers_->workspace, 16, absl::StrCat("the ", what, " workspace")));
  return buffers_->workspace;
}

absl::StatusOr<Matrix> LaunchBuilder::AsMatrix(const Layout& l, absl::string_view what,
                                               bool two_levels) const {
  if (l.shape.empty()) return Error(what, " is a scalar, not rows of a matrix");
  if (!l.InnerContiguous()) return Error(what, " has a strided last dim");
  Matrix m;
  m.cols = l.shape.back();
  m.rows = m.cols == 0 ? 0 : l.NumElements() / m.cols;
  // Runs of leading dims at one stride, innermost first (dims of extent 1 skipped).
  std::vector<std::pair<int64_t, int64_t>> runs;  // (count, stride)
  for (size_t d = l.shape.size() - 1; d-- > 0;) {
    if (l.shape[d] == 1) continue;
    if (!runs.empty() && runs.back().first * runs.back().second == l.strides[d]) {
      runs.back().first *= l.shape[d];
    } else {
      runs.emplace_back(l.shape[d], l.strides[d]);
    }
  }
  if (runs.empty()) {
    m.stride = m.cols;
    m.group = std::max<int64_t>(1, m.rows);
  } else if (runs.size() == 1 || (two_levels && runs.size() == 2)) {
    m.stride = runs[0].second;
    m.group = runs.size() == 1 ? std::max<int64_t>(1, m.rows) : runs[0].first;
    m.group_stride = runs.size() == 1 ? 0 : runs[1].second;
  } else {
    return Error(what, " does not address its rows with ",
                 two_levels ? "two strides" : "one stride");
  }
  return m;
}

absl::StatusOr<int64_t> LaunchBuilder::TokenStride(int operand, int contiguous_from) const {
  const Layout& l = r_.operand(operand);
  if (l.shape.size() < 3) return Error("operand ", operand, " has rank < 3");
  int64_t inner = 1;
  for (size_t d = l.shape.size(); d-- > static_cast<size_t>(contiguous_from);) {
    if (l.shape[d] != 1 && l.strides[d] != inner) {
      return Error("operand ", operand, " must be contiguous from dim ", contiguous_from);
    }
    inner *= l.shape[d];
  }
  // Token bt = b * T + t sits at bt * stride.
  if (l.shape[1] == 1) return l.shape[0] == 1 ? inner : l.strides[0];
  const int64_t stride = l.strides[1];
  if (l.shape[0] != 1 && l.strides[0] != l.shape[1] * stride) {
    return Error("operand ", operand, " does not space its tokens evenly across the batch");
  }
  return stride;
}

absl::StatusOr<KernelInstance> InstanceFor(const KernelFamily& family, const BoundRegion& region,
                                           const Tactic& tactic) {
  const TemplateLauncher* launcher = family.templates();
  if (launcher == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(region.Label(), ": family '", family.name(), "' has no CUDA templates"));
  }
  TP_ASSIGN_OR_RETURN(TemplateLaunch launch, launcher->Launch(region, tactic, nullptr));
  return std::move(launch.instance);
}

absl::StatusOr<std::vector<KernelLaunch>> PrepareLaunches(const KernelFamily& family,
                                                          const BoundRegion& region,
                                                          const Tactic& tactic,
                                                          const RegionBuffers& buffers) {
  const TemplateLauncher* launcher = family.templates();
  if (launcher == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(region.Label(), ": family '", family.name(), "' has no CUDA templates"));
  }
  TP_ASSIGN_OR_RETURN(TemplateLaunch launch, launcher->Launch(region, tactic, &buffers));
  const int expected = family.Launches(tactic, region);
  const int main_launch = launch.main_launch < 0 ? expected - 1 : launch.main_launch;
  if (static_cast<int>(launch.launches.size()) != expected || main_launch < 0 ||
      main_launch >= expected) {
    return absl::InternalError(absl::StrCat(region.Label(), ": family ", family.name(),
                                            " describes ", expected,
                                            " launches, but its templates prepare ",
                                            launch.launches.size()));
  }
  const LaunchGeometry geometry = family.Geometry(tactic, region);
  const KernelLaunch& described = launch.launches[static_cast<size_t>(main_launch)];
  if (geometry.grid != described.grid || geometry.block != described.block ||
      geometry.dynamic_shared_memory_bytes != described.dynamic_shared_memory_bytes) {
    return absl::InternalError(absl::StrCat(
        region.Label(), ": family ", family.name(), " describes grid ",
        absl::StrJoin(geometry.grid, "x"), ", block ", absl::StrJoin(geometry.block, "x"), ", ",
        geometry.dynamic_shared_memory_bytes, " bytes shared memory, but its template ",
        launch.instance.name_expressions[static_cast<size_t>(described.kernel)],
        " launches with grid ", absl::StrJoin(described.grid, "x"), ", block ",
        absl::StrJoin(described.block, "x"), ", ", described.dynamic_shared_memory_bytes,
        " bytes"));
  }
  return std::move(launch.launches);
}

std::string EncodeFloats(ir::DType dtype, const std::vector<float>& values) {
  std::string bytes;
  if (dtype == ir::DType::kF32) {
    bytes.resize(values.size() * 4);
    if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
    return bytes;
  }
  bytes.resize(values.size() * 2);
  for (size_t i = 0; i < values.size(); ++i) {
    const uint16_t h = FloatToHalfBits(values[i], dtype);
    std::memcpy(bytes.data() + 2 * i, &h, 2);
  }
  return bytes;
}

std::vector<float> DecodeFloats(ir::DType dtype, absl::string_view bytes) {
  std::vector<float> values;
  if (dtype == ir::DType::kF32) {
    values.resize(bytes.size() / 4);
    if (!values.empty()) std::memcpy(values.data(), bytes.data(), values.size() * 4);
    return values;
  }
  values.resize(bytes.size() / 2);
  for (size_t i = 0; i < values.size(); ++i) {
    uint16_t h;
    std::memcpy(&h, bytes.data() + 2 * i, 2);
    values[i] = HalfBitsToFloat(h, dtype);
  }
  return values;
}

float RoundToDType(ir::DType dtype, float value) {
  if (dtype == ir::DType::kF32) return value;
  return HalfBitsToFloat(FloatToHalfBits(value, dtype), dtype);
}

}  // namespace tileplan::kernels
