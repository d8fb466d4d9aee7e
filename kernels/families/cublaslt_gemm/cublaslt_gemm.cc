// cublaslt_gemm: linear, linear_residual, linear_swiglu, lm_head and moe_router through
// cuBLASLt, any M. D = x · wᵀ with the bias epilogue; linear_residual passes the residual as C
// with β = 1 (C and D may be one buffer); lm_head and moe_router (the MoE router's logits)
// write float D from 16-bit inputs. cuBLASLt has no SwiGLU
// epilogue, so linear_swiglu runs the GEMM into a workspace [M, 2F] and then the elementwise
// family's swiglu kernel: two launches.
//
// The tactic is a self-describing algo configuration, never an index into the heuristic's
// answer. Every tactic has tile_m, tile_n, stages, split_k, reduction_scheme
// (cublasLtReductionScheme_t: 0 none, 1 in place, 2 compute type, 4 output type) and swizzle.
// Three forms (kernels/cublaslt_runner.h runs them):
//   default      none of the optional parameters: cuBLASLt's top heuristic answer for the
//                exact problem runs, and the parameters are only the cost model's
//                assumption (tile_m and tile_n 64, 128 or 256, stages 1 to 8, split_k 1, 2,
//                4, 8 or 16, a reduction scheme exactly when split);
//   algo_id      that algo under the tactic's tile, stages, split-K, scheme and swizzle, with
//                the same rules;
//   raw config   algo_id with tile_id, stages_id, inner_shape_id, cluster_shape_id and
//                custom_option: cuBLASLt's configuration fields as the library reports them
//                (a heuristic answer read back), set exactly. tile_id is any
//                cublasLtMatmulTile_t (kernels/cublaslt_config.h) and tile_m / tile_n are
//                its real size (its cols / rows: cuBLASLt's m is the weight's N), or, for an
//                algo without tile ids (tile_id 0), a nominal 64, 128 or 256; stages is the
//                stage count of stages_id (0 for its xAUTO ids and UNDEFINED); split_k is
//                any count up to K, with a reduction scheme when split.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "kernels/core/family_base.h"
#include "kernels/families/cublaslt_gemm/cublaslt_config.h"

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
// The fields of a raw configuration besides algo_id (which it needs too), sorted.
constexpr const char* kRawConfigParams[] = {"cluster_shape_id", "custom_option", "inner_shape_id",
                                            "stages_id", "tile_id"};

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
      : FamilyBase(std::string(kCublasLtGemmFamily), 2,
                   {"linear", "linear_residual", "linear_swiglu", "lm_head", "moe_router"},
                   {"reduction_scheme", "split_k", "stages", "swizzle", "tile_m", "tile_n"},
                   {"algo_id", "cluster_shape_id", "custom_option", "inner_shape_id", "stages_id",
                    "tile_id"}) {}

  // Launched by cuBLASLt (kernels/cublaslt/cublaslt_runner.h).
  LaunchKind launch_kind() const override { return LaunchKind::kLibrary; }
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
    w.bytes = r.io_bytes();
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
    const bool raw = t.params.contains("tile_id");
    for (const char* p : kRawConfigParams) {
      if (t.params.contains(p) == raw) continue;
      return absl::InvalidArgumentError(
          raw ? absl::StrCat(name(), " tactic: a raw configuration (tile_id) needs '", p, "'")
              : absl::StrCat(name(), " tactic: parameter '", p,
                             "' belongs to a raw configuration, which has tile_id"));
    }
    if (auto it = t.params.find("algo_id");
        it != t.params.end() && (it->second < 0 || it->second > INT32_MAX)) {
      return BadParam("algo_id", it->second, "a cuBLASLt algo id >= 0");
    }
    if (raw) {
      if (!t.params.contains("algo_id")) {
        return absl::InvalidArgumentError(
            absl::StrCat(name(), " tactic: a raw configuration (tile_id) needs 'algo_id'"));
      }
      TP_RETURN_IF_ERROR(CheckRawConfig(t, s));
    } else {
      TP_RETURN_IF_ERROR(CheckAssumedConfig(t, s));
    }
    const int64_t swizzle = t.params.at("swizzle");
    if (swizzle != 0 && swizzle != 1) return BadParam("swizzle", swizzle, "0 or 1");
    return absl::OkStatus();
  }

 private:
  // The default and algo_id forms: the configurations the cost model assumes.
  absl::Status CheckAssumedConfig(const Tactic& t, const GemmShape& s) const {
    for (const char* p : {"tile_m", "tile_n"}) {
      const int64_t v = t.params.at(p);
      if (std::find(std::begin(kTiles), std::end(kTiles), v) == std::end(kTiles)) {
        return BadParam(p, v, "64, 128 or 256");
      }
    }
    const int64_t stages = t.params.at("stages");
    if (stages < 1 || stages > 8) return BadParam("stages", stages, "in [1, 8]");
    const int64_t split = t.params.at("split_k");
    // Any K takes split_k 1; a split must leave each slice at least 16 of K.
    if (!OneOf(split, {1, 2, 4, 8, 16}) || (split > 1 && s.k / split < 16)) {
      return BadParam("split_k", split,
                      absl::StrCat("1, or 2, 4, 8 or 16 leaving >= 16 of K = ", s.k,
                                   " per slice"));
    }
    const int64_t scheme = t.params.at("reduction_scheme");
    if (!IsReductionScheme(scheme) || (scheme == 0) != (split == 1)) {
      return BadParam(
          "reduction_scheme", scheme,
          "0 when split_k is 1, else 1 (in place), 2 (compute type) or 4 (output type)");
    }
    return absl::OkStatus();
  }

  // A raw configuration: valid enum values, and tile_m, tile_n and stages what they say.
  absl::Status CheckRawConfig(const Tactic& t, const GemmShape& s) const {
    const int64_t tile_id = t.params.at("tile_id");
    const int64_t tile_m = t.params.at("tile_m"), tile_n = t.params.at("tile_n");
    if (tile_id == 0) {
      for (const char* p : {"tile_m", "tile_n"}) {
        const int64_t v = t.params.at(p);
        if (std::find(std::begin(kTiles), std::end(kTiles), v) == std::end(kTiles)) {
          return BadParam(p, v, "64, 128 or 256 (nominal: tile_id 0 names no tile)");
        }
      }
    } else {
      const std::optional<CublasLtTile> tile = CublasLtTileSize(tile_id);
      if (!tile.has_value()) {
        return BadParam("tile_id", tile_id,
                        absl::StrCat("a cublasLtMatmulTile_t in [0, ", kCublasLtTileEnd, ")"));
      }
      const std::string name = CublasLtTileName(tile_id);
      if (tile_m != tile->cols) {
        return BadParam("tile_m", tile_m,
                        absl::StrCat(tile->cols, ", the x rows of tile ", name, " (tile_id ",
                                     tile_id, ", cuBLASLt's weight rows x x rows)"));
      }
      if (tile_n != tile->rows) {
        return BadParam("tile_n", tile_n,
                        absl::StrCat(tile->rows, ", the weight rows of tile ", name, " (tile_id ",
                                     tile_id, ", cuBLASLt's weight rows x x rows)"));
      }
    }
    const int64_t stages_id = t.params.at("stages_id");
    if (!IsCublasLtStagesId(stages_id)) {
      return BadParam("stages_id", stages_id, "a cublasLtMatmulStages_t value");
    }
    const int64_t stages = t.params.at("stages");
    if (stages != CublasLtStagesCount(stages_id)) {
      return BadParam(
          "stages", stages,
          absl::StrCat(CublasLtStagesCount(stages_id), ", the stage count of stages_id ", stages_id,
                       " (", CublasLtStagesName(stages_id), ")"));
    }
    const int64_t inner = t.params.at("inner_shape_id");
    if (!IsCublasLtInnerShapeId(inner)) {
      return BadParam("inner_shape_id", inner, "a cublasLtMatmulInnerShape_t value");
    }
    const int64_t cluster = t.params.at("cluster_shape_id");
    if (!IsCublasLtClusterShapeId(cluster)) {
      return BadParam("cluster_shape_id", cluster, "a cublasLtClusterShape_t value");
    }
    const int64_t custom = t.params.at("custom_option");
    if (custom < 0 || custom > UINT32_MAX) {
      return BadParam("custom_option", custom, "in [0, 2^32)");
    }
    const int64_t split = t.params.at("split_k");
    if (split < 1 || split > std::max<int64_t>(1, s.k)) {
      return BadParam("split_k", split, absl::StrCat("in [1, K = ", s.k, "]"));
    }
    const int64_t scheme = t.params.at("reduction_scheme");
    if (!IsReductionScheme(scheme) || (split > 1 && scheme == 0)) {
      return BadParam("reduction_scheme", scheme,
                      "0, 1 (in place), 2 (compute type) or 4 (output type), not 0 when split");
    }
    return absl::OkStatus();
  }

  static bool IsReductionScheme(int64_t scheme) {
    return std::find(std::begin(kReductionSchemes), std::end(kReductionSchemes), scheme) !=
           std::end(kReductionSchemes);
  }
};

}  // namespace

std::unique_ptr<KernelFamily> MakeCublasLtGemmFamily() {
  return std::make_unique<CublasLtGemmFamily>();
}

}  // namespace tileplan::kernels::internal
