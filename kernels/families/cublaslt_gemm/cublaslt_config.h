// cuBLASLt's algo configuration ids as plain numbers, for the description half of the
// cublaslt_gemm family (which links no CUDA: the planner runs on machines without it) and
// for the runner: every tile of cublasLtMatmulTile_t with its size, every stages id of
// cublasLtMatmulStages_t with its depth, and the values the inner shape and cluster shape
// enums have. The numbers are those of CUDA 13's cublasLt.h (cuBLAS 13.1);
// kernels/cublaslt_runner.cc checks the enum ends against the header when it compiles, and
// cublaslt_runner_test checks every entry against the header's enum names.
#ifndef TILEPLAN_KERNELS_FAMILIES_CUBLASLT_GEMM_CUBLASLT_CONFIG_H_
#define TILEPLAN_KERNELS_FAMILIES_CUBLASLT_GEMM_CUBLASLT_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace tileplan::kernels {

// The family's name, for its launch half (kernels/cublaslt/) to register under.
inline constexpr absl::string_view kCublasLtGemmFamily = "cublaslt_gemm";

// One past the largest id of each enum (its *_END).
inline constexpr int64_t kCublasLtTileEnd = 635;
inline constexpr int64_t kCublasLtStagesEnd = 39;
inline constexpr int64_t kCublasLtInnerShapeEnd = 5;
inline constexpr int64_t kCublasLtClusterShapeEnd = 52;

// A tile in cuBLASLt's terms, CUBLASLT_MATMUL_TILE_<rows>x<cols>: `rows` of cuBLASLt's m
// (the weight's rows N, a tactic's tile_n) by `cols` of its n (x's rows M, a tactic's tile_m).
struct CublasLtTile {
  int64_t rows = 0;
  int64_t cols = 0;
};

// The size of a cublasLtMatmulTile_t id; nullopt for CUBLASLT_MATMUL_TILE_UNDEFINED (0) and
// for numbers that are no tile id.
std::optional<CublasLtTile> CublasLtTileSize(int64_t tile_id);
// "192x128" (cuBLASLt's rows x cols), "undefined" for 0, "tile id N" for other numbers.
std::string CublasLtTileName(int64_t tile_id);
// The cublasLtMatmulTile_t of a tactic's tile_m (x rows) by tile_n (weight rows), i.e.
// CUBLASLT_MATMUL_TILE_<tile_n>x<tile_m>; nullopt when cuBLASLt has no such tile.
std::optional<uint32_t> CublasLtTileFor(int64_t tile_m, int64_t tile_n);

// Whether `id` is a value of cublasLtMatmulStages_t (UNDEFINED included).
bool IsCublasLtStagesId(int64_t id);
// "64x4" for a stages id (elements of K per stage x stages), "16xAUTO" for the depths the
// library chooses, "undefined" for 0, "stages id N" for other numbers.
std::string CublasLtStagesName(int64_t stages_id);
// The stage count a stages id carries: 0 for the AUTO ids, UNDEFINED and other numbers.
int CublasLtStagesCount(int64_t stages_id);
// Whether the id is one of the library-chosen depths (the xAUTO ids).
bool IsCublasLtAutoStagesId(int64_t stages_id);

// Whether `id` is a value of cublasLtMatmulInnerShape_t / cublasLtClusterShape_t (the
// UNDEFINED and AUTO values included).
bool IsCublasLtInnerShapeId(int64_t id);
bool IsCublasLtClusterShapeId(int64_t id);

}  // namespace tileplan::kernels

#endif  // TILEPLAN_KERNELS_FAMILIES_CUBLASLT_GEMM_CUBLASLT_CONFIG_H_
