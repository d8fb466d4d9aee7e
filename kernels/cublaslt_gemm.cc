// cublaslt_gemm: linear, linear_residual, linear_swiglu and lm_head through cuBLASLt, any M.
// D = x · wᵀ with the bias epilogue; linear_residual passes the residual as C with β = 1 (C
// and D may be one buffer); lm_head writes float D from 16-bit inputs. cuBLASLt has no SwiGLU
// epilogue, so linear_swiglu runs the GEMM into a workspace [M, 2F] and then the elementwise
// family's swiglu kernel: two launches.
//
// The tactic is a self-describing algo configuration: tile_m, tile_n, stages, split_k,
// reduction_scheme (cublasLtReductionScheme_t: 0 none, 1 in place, 2 compute type, 4 output
// type; non-zero exactly when split_k > 1) and swizzle; a measured tactic adds algo_id. The
// runtime (kernels/cublaslt_runner.h) runs a tactic with algo_id as that algo under this
// configuration (cublasLtMatmulAlgoCheck must accept it, else InvalidArgument naming the
// region and tactic); a tactic without one, like every default tactic, runs cuBLASLt's top
// heuristic answer for the exact problem within the runner's workspace, and its other
// parameters are then only the cost model's assumption. Never an index into the
// heuristic's answer.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/families.h"
#include "kernels/family_base.h"

namespace tileplan::kernels::internal {
namespace {

struct Row {
  absl::string_view arch;
  int64_t tile_m;
  int64_t tile_n;
  int64_t stages;
  std::vector<int64_t> stage_choices;
};
const Row kRows[] = {{"sm_80", 128, 128, 4, {3, 4, 5}},
                     {"sm_90", 128, 256, 4, {3, 4, 5, 6}},
                     {"sm_100", 256, 128, 4, {3, 4, 5, 6}},
                     {"sm_120", 128, 128, 3, {2, 3, 4}},
                     {"default", 128, 64, 2, {2, 3}}};

const Row& RowOf(absl::string_view arch) {
  for (const Row& row : kRows) {
    if (row.arch == arch) return row;
  }
  return kRows[4];
}

constexpr int64_t kTiles[] = {64, 128, 256};
constexpr int64_t kReductionSchemes[] = {0, 1, 2, 4};

struct GemmShape {
  int64_t m = 0, k = 0, n_w = 0, n_out = 0;
  bool swiglu = false;
};

GemmShape ShapeOf(const BoundRegion& r) {
  GemmShape s;
  s.m = Rows(r.operand(0).shape);
  s.k = r.operand(0).shape.back();
  s.n_w = r.operand(1).shape[0];
  s.n_out = r.result(0).shape.back();
  s.swiglu = r.kind() == "linear_swiglu";
  return s;
}

bool OneOf(int64_t v, std::initializer_list<int64_t> set) {
  return std::find(set.begin(), set.end(), v) != set.end();
}

class CublasLtGemmFamily final : public FamilyBase {
 public:
  CublasLtGemmFamily()
      : FamilyBase("cublaslt_gemm", 1, {"linear", "linear_residual", "linear_swiglu", "lm_head"},
                   {"reduction_scheme", "split_k", "stages", "swizzle", "tile_m", "tile_n"},
                   {"algo_id"}) {}

  LaunchGeometry Geometry(const Tactic& t, const BoundRegion& r) const override {
    const GemmShape s = ShapeOf(r);
    LaunchGeometry g;
    g.grid = {CeilDiv(s.n_w, t.params.at("tile_n")), CeilDiv(s.m, t.params.at("tile_m")),
              t.params.at("split_k")};
    g.library_managed = true;
    return g;
  }
  WorkEstimate Work(const Tactic& t, const BoundRegion& r) const override {
    const GemmShape s = ShapeOf(r);
    WorkEstimate w;
    for (int i = 0; i < r.num_operands(); ++i) w.bytes += r.operand_bytes(i);
    w.bytes += r.result_bytes(0);
    // Whole tiles execute: M and N round up to the tile.
    const int64_t tile_m = t.params.at("tile_m"), tile_n = t.params.at("tile_n");
    w.flops = 2 * CeilDiv(s.m, tile_m) * tile_m * CeilDiv(s.n_w, tile_n) * tile_n * s.k;
    w.tensor_core = r.operand_dtype(0) != ir::DType::kF32;
    return w;
  }
  int Launches(const Tactic&, const BoundRegion& r) const override {
    return r.kind() == "linear_swiglu" ? 2 : 1;
  }
  int64_t WorkspaceBytes(const Tactic& t, const BoundRegion& r) const override {
    const GemmShape s = ShapeOf(r);
    int64_t bytes = 0;
    if (s.swiglu) bytes += s.m * s.n_w * ir::DTypeSize(r.result_dtype(0));  // GEMM output
    const int64_t split = t.params.at("split_k");
    if (split > 1) bytes += split * s.m * s.n_w * 4;  // float partials
    return bytes;
  }
  bool MayOverwriteOperand(const BoundRegion& r, int result, int operand) const override {
    return r.kind() == "linear_residual" && operand == 2;  // C and D may be one buffer
  }

 protected:
  absl::Status CheckRegion(const BoundRegion& r, const TargetDescription&) const override {
    for (int i : {0, 2}) {
      if (i == 2 && r.kind() != "linear_residual") continue;
      if (!IsMatrix(r.operand(i))) {
        return Refuse(absl::StrCat(OperandLabel(r, i), " with strides [",
                                   absl::StrJoin(r.operand(i).strides, ","),
                                   "] is not one matrix with a leading dimension"));
      }
    }
    return absl::OkStatus();
  }
  Tactic RowTactic(absl::string_view arch, const BoundRegion& r, const TargetDescription& target,
                   int64_t) const override {
    const Row& row = RowOf(arch);
    const GemmShape s = ShapeOf(r);
    int64_t tile_m = s.m <= 64 ? 64 : row.tile_m;
    int64_t tile_n = s.n_w <= 64 ? 64 : row.tile_n;
    // While the tile grid leaves SMs idle: narrower tiles (down to 64), then split K as long
    // as each slice keeps >= 512 of K.
    auto tiles = [&] { return CeilDiv(s.m, tile_m) * CeilDiv(s.n_w, tile_n); };
    while (tiles() < target.sm_count() && tile_n > 64) tile_n /= 2;
    while (tiles() < target.sm_count() && tile_m > 64) tile_m /= 2;
    int64_t split = 1;
    while (split < 8 && tiles() * split < target.sm_count() && s.k / (2 * split) >= 512) {
      split *= 2;
    }
    return MakeTactic({{"reduction_scheme", split > 1 ? 2 : 0},
                       {"split_k", split},
                       {"stages", row.stages},
                       {"swizzle", 0},
                       {"tile_m", tile_m},
                       {"tile_n", tile_n}});
  }
  std::vector<TunableParam> Tunables(const BoundRegion&,
                                     const TargetDescription& target) const override {
    return {{"reduction_scheme", {0, 1, 2, 4}},
            {"split_k", {1, 2, 4, 8}},
            {"stages", RowOf(ArchRowFor(target.sm())).stage_choices},
            {"swizzle", {0, 1}},
            {"tile_m", {64, 128, 256}},
            {"tile_n", {64, 128, 256}}};
  }
  absl::Status CheckTactic(const Tactic& t, const BoundRegion& r,
                           const TargetDescription&) const override {
    const GemmShape s = ShapeOf(r);
    for (const char* p : {"tile_m", "tile_n"}) {
      const int64_t v = t.params.at(p);
      if (std::find(std::begin(kTiles), std::end(kTiles), v) == std::end(kTiles)) {
        return BadParam(p, v, "64, 128 or 256");
      }
    }
    const int64_t stages = t.params.at("stages");
    if (stages < 1 || stages > 8) return BadParam("stages", stages, "in [1, 8]");
    const int64_t split = t.params.at("split_k");
    if (!OneOf(split, {1, 2, 4, 8, 16}) || s.k / split < 16) {
      return BadParam("split_k", split, "1, 2, 4, 8 or 16 leaving >= 16 of K per slice");
    }
    const int64_t scheme = t.params.at("reduction_scheme");
    if (std::find(std::begin(kReductionSchemes), std::end(kReductionSchemes), scheme) ==
            std::end(kReductionSchemes) ||
        (scheme == 0) != (split == 1)) {
      return BadParam(
          "reduction_scheme", scheme,
          "0 when split_k is 1, else 1 (in place), 2 (compute type) or 4 (output type)");
    }
    const int64_t swizzle = t.params.at("swizzle");
    if (swizzle != 0 && swizzle != 1) return BadParam("swizzle", swizzle, "0 or 1");
    if (auto it = t.params.find("algo_id"); it != t.params.end() && it->second < 0) {
      return BadParam("algo_id", it->second, "a cuBLASLt algo id >= 0");
    }
    return absl::OkStatus();
  }
};

}  // namespace

std::unique_ptr<KernelFamily> MakeCublasLtGemmFamily() {
  return std::make_unique<CublasLtGemmFamily>();
}

}  // namespace tileplan::kernels::internal
