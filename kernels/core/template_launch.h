// The launch half of the CUDA-template kernel families, as data (docs/kernels.md, "CUDA
// templates"): which template instantiation a tactic selects for a region, and the launches
// (kernel, geometry, parameter struct) that run it on given device buffers.
//
// A template family implements TemplateLauncher beside its description, in its own folder
// (kernels/families/<family>/). Each kernel's parameters are declared once, in the family's
// <family>_params.h, which the host launcher and the .cuh both include: the host fills a
// struct of them and the launch passes its fields (kernels/core/kernel_params.h), so the host
// cannot drift from the kernel signature. Template arguments are the tactic's
// parameters under the family's tunable names plus what the region fixes (element types,
// head dim, epilogue, vector width). Nothing here touches a device: a launch is computed on
// any machine, so it is tested (and the descriptions checked against the templates) without
// a GPU; kernels/launch/ compiles, loads and launches.
#ifndef TILEPLAN_KERNELS_CORE_TEMPLATE_LAUNCH_H_
#define TILEPLAN_KERNELS_CORE_TEMPLATE_LAUNCH_H_

#include <array>
#include <compare>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "kernels/core/bound_graph.h"
#include "kernels/core/kernel_family.h"

namespace tileplan::kernels {

// A template file: its name (as #included, e.g. "gemv_split_k.cuh") and contents.
struct SourceFile {
  std::string name;
  std::string contents;
};

// Files embedded by cmake/EmbedFiles.cmake, as SourceFiles.
std::vector<SourceFile> ToSourceFiles(
    const std::vector<std::pair<std::string_view, std::string_view>>& embedded);

// The device code every template includes (kernels/core/primitives.cuh).
std::vector<SourceFile> CoreTemplateSources();

// One template file and the instantiations a tactic needs (name expressions), in launch
// order; the unit of NVRTC compilation and of the module caches.
struct KernelInstance {
  std::string source;  // e.g. "gemv_split_k.cuh"
  std::vector<std::string> name_expressions;
  // Template files included before `source`, whose templates the name expressions also
  // instantiate (the persistent kernel's tasks, kernels/launch/persistent.cuh).
  std::vector<std::string> includes;
  // Compiled for the target's architecture-specific variant (sm_90a: wgmma), which runs on
  // that exact architecture only.
  bool arch_specific = false;

  friend auto operator<=>(const KernelInstance&, const KernelInstance&) = default;
};

// The parameters of a kernel launch: a struct declared by TILEPLAN_PARAMS_STRUCT
// (kernels/core/kernel_params.h) from the kernel's parameter list, held as cudaLaunchKernel
// takes it (one pointer per kernel parameter, each to its field).
class KernelParams {
 public:
  KernelParams() = default;
  template <typename P>
  static KernelParams Of(const P& params) {
    static_assert(std::is_trivially_copyable_v<P> && std::is_standard_layout_v<P>,
                  "kernel parameters are a plain struct");
    KernelParams k;
    k.bytes_ = sizeof(P);
    k.storage_.resize((sizeof(P) + 7) / 8);
    std::memcpy(k.storage_.data(), &params, sizeof(P));
    const void* fields[P::kParams];
    const P* held = reinterpret_cast<const P*>(k.storage_.data());
    const int n = held->FieldAddresses(fields);
    for (int i = 0; i < n; ++i) {
      k.offsets_.push_back(static_cast<const char*>(fields[i]) -
                           reinterpret_cast<const char*>(held));
    }
    return k;
  }
  size_t size() const { return bytes_; }
  // The struct's bytes (size() of them).
  const void* data() const { return storage_.data(); }
  // REQUIRES: the struct was a P.
  template <typename P>
  P As() const {
    P p;
    std::memcpy(&p, storage_.data(), sizeof(P));
    return p;
  }
  // The bytes of parameter `i` (REQUIRES: i < the struct's parameter count), to write a
  // parameter the launch layer computes (a TMA tensor map).
  void* field(int i) {
    return reinterpret_cast<char*>(storage_.data()) + offsets_[static_cast<size_t>(i)];
  }
  int num_fields() const { return static_cast<int>(offsets_.size()); }
  // cudaLaunchKernel's argument array, one pointer per parameter; valid until this object
  // moves or is copied.
  void** pointers() {
    pointers_.clear();
    char* base = reinterpret_cast<char*>(storage_.data());
    for (ptrdiff_t offset : offsets_) pointers_.push_back(base + offset);
    return pointers_.data();
  }

 private:
  // 8-byte aligned, as every parameter needs but a TmaDescriptor, whose 64-byte alignment is the
  // kernel's: its bytes are only copied here, by memcpy and by the launch.
  std::vector<uint64_t> storage_;
  size_t bytes_ = 0;
  std::vector<ptrdiff_t> offsets_;  // of each field in the struct
  std::vector<void*> pointers_;
};

// A TMA tensor map (TmaDescriptor, kernels/core/kernel_params.h) that the launch layer encodes
// into a kernel parameter before the launch (the launch half computes no driver state): a
// 2-D tensor of 16-bit elements at `address`, `rows` rows of `inner` contiguous elements
// `row_stride_bytes` apart, copied in boxes of box_inner x box_rows elements with the
// 128-byte swizzle, zeros outside the tensor.
struct TensorMapSpec {
  int param = 0;  // the kernel parameter it fills
  const void* address = nullptr;
  bool f16 = false;  // else bf16
  int64_t inner = 0;
  int64_t rows = 0;
  int64_t row_stride_bytes = 0;
  int box_inner = 0;
  int box_rows = 0;
};

struct KernelLaunch {
  int kernel = 0;  // index into KernelInstance::name_expressions
  std::array<int64_t, 3> grid = {1, 1, 1};
  std::array<int64_t, 3> block = {1, 1, 1};
  int64_t dynamic_shared_memory_bytes = 0;
  std::array<int64_t, 3> cluster = {1, 1, 1};  // thread-block clusters; {1, 1, 1}: none
  KernelParams params;
  std::vector<TensorMapSpec> tensor_maps;  // encoded into `params` before each launch
};

// What a template family's launcher computes for one region under one tactic: the
// instance, and its launches in stream order (KernelFamily::Launches of them), of which
// `main_launch` is the one KernelFamily::Geometry describes (-1: the last, as when
// preparatory kernels precede the main one).
struct TemplateLaunch {
  KernelInstance instance;
  std::vector<KernelLaunch> launches;  // empty when no buffers were given
  int main_launch = -1;
};

// Device addresses bound to one region.
struct RegionBuffers {
  std::vector<void*> operands;  // element 0 of each operand's layout, in operand order
  std::vector<void*> results;   // element 0 of each result's layout (in-place: the operand's)
  // KernelFamily::WorkspaceBytes bytes, 16-byte aligned (null when that is 0): scratch
  // whose contents do not outlive the launch.
  void* workspace = nullptr;
  // KernelFamily::CounterBytes bytes (null when that is 0): completion counters of the
  // single-launch split reductions, zero before the first launch and left zero by every
  // launch, so storage no other step writes is zeroed once.
  void* counters = nullptr;
  // Regions with RoPE attributes (ir::HasRope): head_dim / 2 floats, ir::RopeInvFreq of the
  // region's attributes (the float32 frequencies of docs/ir.md).
  const float* rope_inv_freq = nullptr;
  // Optional int, zero before the launch: token ids (embedding) and cache positions
  // (kv writes) out of range raise it to at least (flat token index + 1) and are skipped.
  // Null: the kernel traps on them instead, so a bad index never passes silently.
  int* error = nullptr;
};

// The launch half of a template family (KernelFamily::templates()).
class TemplateLauncher {
 public:
  virtual ~TemplateLauncher() = default;
  // The family's template files (its .cuh and params headers), embedded in its library.
  virtual std::vector<SourceFile> Sources() const = 0;
  // The instance `tactic` selects for `region` and, with `buffers`, its launches on them,
  // in order. InvalidArgument naming the region when a parameter is missing, the region
  // has a dtype or shape the templates do not instantiate, or a buffer is missing or
  // misaligned for the tactic.
  virtual absl::StatusOr<TemplateLaunch> Launch(const BoundRegion& region, const Tactic& tactic,
                                                const RegionBuffers* buffers) const = 0;
};

// The instance of a template family's step. InvalidArgument naming the region for a family
// without templates (KernelFamily::templates() null) and for the launcher's refusals.
absl::StatusOr<KernelInstance> InstanceFor(const KernelFamily& family, const BoundRegion& region,
                                           const Tactic& tactic);

// The launches that run `region` under `tactic` of a template family on `buffers`, in order.
// Errors as InstanceFor's; Internal when the launches disagree with the family's description
// (their count with KernelFamily::Launches, the main launch with KernelFamily::Geometry), so
// a description cannot drift from its templates.
absl::StatusOr<std::vector<KernelLaunch>> PrepareLaunches(const KernelFamily& family,
                                                          const BoundRegion& region,
                                                          const Tactic& tactic,
                                                          const RegionBuffers& buffers);

// A region operand as rows of `cols` contiguous elements: row r at element
// (r / group) * group_stride + (r % group) * stride. One level (group == rows) is the usual
// strided matrix; two levels cover per-head rows of a view into a packed tensor.
struct Matrix {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t stride = 0;
  int64_t group = 1;
  int64_t group_stride = 0;
};

// What every template launcher needs: the region's geometry as the kernels address it, the
// buffer checks, and the launches under construction. Errors name the region.
class LaunchBuilder {
 public:
  // `buffers` may be null: the instance alone is built, and buffer checks pass.
  LaunchBuilder(const BoundRegion& region, const Tactic& tactic, const RegionBuffers* buffers)
      : r_(region), t_(tactic), buffers_(buffers) {}

  template <typename... Args>
  absl::Status Error(const Args&... args) const {
    return absl::InvalidArgumentError(absl::StrCat(r_.Label(), ": ", args...));
  }
  // The tactic's parameter, or an error naming the region and the parameter.
  absl::StatusOr<int64_t> Param(absl::string_view name) const;
  // The template type name of a float dtype ("float", "tileplan::bf16", "tileplan::f16").
  absl::StatusOr<std::string> TypeName(ir::DType dtype, absl::string_view what) const;
  absl::StatusOr<Matrix> AsMatrix(const Layout& l, absl::string_view what,
                                  bool two_levels = false) const;
  // Token stride of a [B, T, ...] operand whose tokens are evenly spaced and whose trailing
  // dims (from `contiguous_from`) are contiguous.
  absl::StatusOr<int64_t> TokenStride(int operand, int contiguous_from) const;
  absl::Status RequireContiguous(const Layout& l, absl::string_view what) const;
  // The largest power of two <= `limit` dividing every extent.
  static int64_t WidestDividing(int64_t limit, std::initializer_list<int64_t> extents);

  // Buffer addresses (null without buffers).
  void* Operand(int i) const;
  void* Result(int i) const;
  const float* rope_inv_freq() const;
  int* error() const;
  // Buffers must be present and aligned to `bytes`.
  absl::Status CheckOperands(int64_t bytes, std::initializer_list<int> operands) const;
  absl::Status CheckResults(int64_t bytes, std::initializer_list<int> results) const;
  // The RoPE table must be present.
  absl::Status RequireRopeTable() const;
  // The workspace and counters of a launch split `splits` ways: both null when it is not
  // split (or no buffers are given), else checked to be present and aligned to 16 and 4
  // bytes; `what` names the split in errors ("split-K").
  struct SplitPointers {
    void* workspace = nullptr;
    void* counters = nullptr;
  };
  absl::StatusOr<SplitPointers> SplitBuffers(int64_t splits, absl::string_view what) const;
  // The workspace of a launch that always needs one: null without buffers, else checked to be
  // present and aligned to 16 bytes; `what` names it in errors.
  absl::StatusOr<void*> Workspace(absl::string_view what) const;

  // Adds a launch of `name_expression` from template file `source` (one per instance).
  template <typename P>
  void Launch(absl::string_view source, std::string name_expression, std::array<int64_t, 3> grid,
              std::array<int64_t, 3> block, int64_t shared, const P& params) {
    result_.instance.source = std::string(source);
    KernelLaunch launch;
    launch.kernel = static_cast<int>(result_.instance.name_expressions.size());
    launch.grid = grid;
    launch.block = block;
    launch.dynamic_shared_memory_bytes = shared;
    launch.params = KernelParams::Of(params);
    result_.instance.name_expressions.push_back(std::move(name_expression));
    if (buffers_ != nullptr) result_.launches.push_back(std::move(launch));
  }
  // Adds a tensor map to the launch added last (nothing without buffers).
  void AddTensorMap(const TensorMapSpec& spec) {
    if (buffers_ != nullptr) result_.launches.back().tensor_maps.push_back(spec);
  }
  // The launch added last runs in thread-block clusters of `dims` (nothing without buffers).
  void SetCluster(std::array<int64_t, 3> dims) {
    if (buffers_ != nullptr) result_.launches.back().cluster = dims;
  }
  // The instance needs the architecture-specific variant of its target (KernelInstance).
  void RequireArchSpecific() { result_.instance.arch_specific = true; }
  // Marks the launch added last as the main one (KernelFamily::Geometry's); by default the
  // last launch of the step is.
  void MarkMainLaunch() {
    result_.main_launch = static_cast<int>(result_.instance.name_expressions.size()) - 1;
  }
  TemplateLaunch Finish() && { return std::move(result_); }

 private:
  absl::Status CheckPointer(const void* p, int64_t bytes, absl::string_view what) const;

  const BoundRegion& r_;
  const Tactic& t_;
  const RegionBuffers* buffers_;
  TemplateLaunch result_;
};

// Host encoding of floating-point elements as the device stores them (little-endian; bf16
// and f16 round to nearest even, NaN kept); i32 is not a floating-point dtype.
std::string EncodeFloats(ir::DType dtype, const std::vector<float>& values);
std::vector<float> DecodeFloats(ir::DType dtype, absl::string_view bytes);
// `value` rounded to `dtype` and widened back (identity for f32).
float RoundToDType(ir::DType dtype, float value);

}  // namespace tileplan::kernels

#endif  // TILEPLAN_KERNELS_CORE_TEMPLATE_LAUNCH_H_
