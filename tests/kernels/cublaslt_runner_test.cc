// The host-side half of the cuBLASLt runner without a GPU: how a region becomes cuBLASLt's
// column-major problem (shapes, leading dims of strided views, alignments, epilogue
// operands, the swiglu workspace), the dtypes refused, the tile and stage names (every id of
// the header's enums, checked against their names in cublasLt.h), and a heuristic answer
// written as a raw-config tactic.
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/core/kernel_family.h"
#include "kernels/cublaslt/cublaslt_runner.h"
#include "kernels/families/registry.h"
#include "tests/kernels/kernels_testing.h"

namespace tileplan::kernels {
namespace {

using ::testing::HasSubstr;
using testing::MustBind;
using testing::MustParseVerified;
using testing::MustTarget;

// The problem of the graph's last region.
absl::StatusOr<GemmProblem> ProblemOf(const std::string& text) {
  const ir::Graph graph = MustParseVerified(text);
  const BoundGraph bound = MustBind(graph, {}, 1);
  return GemmProblemFor(BoundRegion(bound, static_cast<int>(graph.regions().size()) - 1));
}

TEST(GemmProblemTest, LinearWithBias) {
  absl::StatusOr<GemmProblem> p = ProblemOf(R"(graph @g {
  input %x: bf16[2,3,136]
  weight %w: bf16[200,136] = "w"
  weight %b: bf16[200] = "b"
  %y: bf16[2,3,200] = linear(%x, %w, %b)
  output %y
})");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->m, 6);
  EXPECT_EQ(p->n, 200);
  EXPECT_EQ(p->k, 136);
  EXPECT_EQ(p->x.ld, 136);
  EXPECT_EQ(p->w.ld, 136);
  EXPECT_EQ(p->d.ld, 200);
  EXPECT_EQ(p->x.alignment, 256);
  EXPECT_EQ(p->bias_operand, 2);
  EXPECT_EQ(p->bias_alignment, 256);
  EXPECT_FALSE(p->residual.has_value());
  EXPECT_FALSE(p->swiglu);
  EXPECT_EQ(p->output_dtype, ir::DType::kBF16);
}

TEST(GemmProblemTest, StridedViewOfXKeepsItsLeadingDimAndOffset) {
  absl::StatusOr<GemmProblem> p = ProblemOf(R"(graph @g {
  input %xx: f16[7,200]
  weight %w: f16[64,136] = "w"
  %a: f16[7,64] view(%xx), %x: f16[7,136] view(%xx) = split(%xx) {sizes = [64, 136]}
  %y: f16[7,64] = linear(%x, %w)
  output %y
})");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->m, 7);
  EXPECT_EQ(p->k, 136);
  EXPECT_EQ(p->x.ld, 200);
  EXPECT_EQ(p->x.alignment, 128);  // 64 f16 elements into the row
  EXPECT_EQ(p->bias_operand, -1);
  EXPECT_EQ(p->input_dtype, ir::DType::kF16);
}

TEST(GemmProblemTest, LinearResidualHasCAndTheBiasLast) {
  absl::StatusOr<GemmProblem> p = ProblemOf(R"(graph @g {
  input %x: bf16[5,64]
  weight %w: bf16[96,64] = "w"
  input %r: bf16[5,96]
  weight %b: bf16[96] = "b"
  %y: bf16[5,96] = linear_residual(%x, %w, %r, %b)
  output %y
})");
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(p->residual.has_value());
  EXPECT_EQ(p->residual->ld, 96);
  EXPECT_EQ(p->bias_operand, 3);
}

TEST(GemmProblemTest, LinearSwigluWritesTheWorkspace) {
  absl::StatusOr<GemmProblem> p = ProblemOf(R"(graph @g {
  input %x: bf16[3,64]
  weight %w: bf16[400,64] = "w"
  %y: bf16[3,200] = linear_swiglu(%x, %w)
  output %y
})");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->swiglu);
  EXPECT_EQ(p->n, 400);
  EXPECT_EQ(p->d.rows, 3);
  EXPECT_EQ(p->d.cols, 400);
  EXPECT_EQ(p->d.ld, 400);
  EXPECT_EQ(p->d.alignment, 16);
}

TEST(GemmProblemTest, LmHeadWritesFloat) {
  absl::StatusOr<GemmProblem> p = ProblemOf(R"(graph @g {
  input %x: bf16[1,5,64]
  weight %w: bf16[1001,64] = "w"
  %y: f32[1,5,1001] = lm_head(%x, %w)
  output %y
})");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->input_dtype, ir::DType::kBF16);
  EXPECT_EQ(p->output_dtype, ir::DType::kF32);
  EXPECT_EQ(p->n, 1001);
  EXPECT_EQ(p->d.ld, 1001);
}

TEST(GemmProblemTest, MoeRouterWritesFloatLikeLmHead) {
  absl::StatusOr<GemmProblem> p = ProblemOf(R"(graph @g {
  input %x: bf16[2,7,64]
  weight %w: bf16[160,64] = "w"
  %y: f32[2,7,160] = moe_router(%x, %w)
  output %y
})");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->output_dtype, ir::DType::kF32);
  EXPECT_EQ(p->m, 14);
  EXPECT_EQ(p->n, 160);
  EXPECT_EQ(p->bias_operand, -1);
}

TEST(GemmProblemTest, RefusesF32NamingTheRegion) {
  absl::StatusOr<GemmProblem> p = ProblemOf(R"(graph @g {
  input %x: f32[4,64]
  weight %w: f32[32,64] = "w"
  %y: f32[4,32] = linear(%x, %w)
  output %y
})");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("'linear' (%y)"));
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("got x f32 and weight f32"));
}

TEST(GemmProblemTest, RefusesOtherKinds) {
  absl::StatusOr<GemmProblem> p = ProblemOf(R"(graph @g {
  input %a: bf16[4,64]
  input %b: bf16[4,64]
  %y: bf16[4,64] = add(%a, %b)
  output %y
})");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("not 'add'"));
}

TEST(CublasLtNamesTest, TilesAreCublasLtsNByM) {
  // tile_m covers x's rows, which are cuBLASLt's n.
  ASSERT_TRUE(CublasLtTileFor(64, 128).has_value());
  EXPECT_EQ(*CublasLtTileFor(64, 128), static_cast<uint32_t>(CUBLASLT_MATMUL_TILE_128x64));
  EXPECT_EQ(*CublasLtTileFor(256, 256), static_cast<uint32_t>(CUBLASLT_MATMUL_TILE_256x256));
  EXPECT_EQ(*CublasLtTileFor(128, 192), static_cast<uint32_t>(CUBLASLT_MATMUL_TILE_192x128));
  EXPECT_EQ(*CublasLtTileFor(32, 64), static_cast<uint32_t>(CUBLASLT_MATMUL_TILE_64x32));
  EXPECT_FALSE(CublasLtTileFor(7, 64).has_value());
  EXPECT_EQ(CublasLtTileName(CUBLASLT_MATMUL_TILE_128x256), "128x256");
  EXPECT_EQ(CublasLtTileName(CUBLASLT_MATMUL_TILE_192x128), "192x128");
  EXPECT_EQ(CublasLtTileName(CUBLASLT_MATMUL_TILE_64x96), "64x96");
  EXPECT_EQ(CublasLtTileName(CUBLASLT_MATMUL_TILE_8x8), "8x8");
  EXPECT_EQ(CublasLtTileName(CUBLASLT_MATMUL_TILE_512x1024), "512x1024");
  EXPECT_EQ(CublasLtTileName(CUBLASLT_MATMUL_TILE_UNDEFINED), "undefined");
  EXPECT_EQ(CublasLtTileName(CUBLASLT_MATMUL_TILE_END), "tile id 635");
  const std::optional<CublasLtTile> tile = CublasLtTileSize(CUBLASLT_MATMUL_TILE_192x128);
  ASSERT_TRUE(tile.has_value());
  EXPECT_EQ(tile->rows, 192);
  EXPECT_EQ(tile->cols, 128);
  EXPECT_FALSE(CublasLtTileSize(CUBLASLT_MATMUL_TILE_UNDEFINED).has_value());
  EXPECT_FALSE(CublasLtTileSize(-1).has_value());
}

// The enums' names in the header this was built with, by value: "CUBLASLT_<prefix><name> =
// <value>" for every name matching `name`.
std::map<int64_t, std::string> HeaderEnum(const std::string& prefix, const std::string& name) {
  std::ifstream in(CUBLASLT_HEADER);
  EXPECT_TRUE(in.good()) << "cannot read " << CUBLASLT_HEADER;
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::regex entry("CUBLASLT_" + prefix + "(" + name + ") = ([0-9]+),");
  std::map<int64_t, std::string> out;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), entry);
       it != std::sregex_iterator(); ++it) {
    out[std::stoll((*it)[2].str())] = (*it)[1].str();
  }
  return out;
}

TEST(CublasLtNamesTest, EveryTileOfTheHeaderIsNamedWithItsSize) {
  const std::map<int64_t, std::string> tiles = HeaderEnum("MATMUL_TILE_", "[0-9]+x[0-9]+");
  ASSERT_EQ(static_cast<int64_t>(tiles.size()), kCublasLtTileEnd - 1);  // all but UNDEFINED
  for (int64_t id = 1; id < kCublasLtTileEnd; ++id) {
    ASSERT_TRUE(tiles.contains(id)) << "the header has no tile id " << id;
    EXPECT_EQ(CublasLtTileName(id), tiles.at(id)) << "tile id " << id;
    const std::optional<CublasLtTile> size = CublasLtTileSize(id);
    ASSERT_TRUE(size.has_value()) << id;
    EXPECT_EQ(absl::StrCat(size->rows, "x", size->cols), tiles.at(id));
    // The tactic's tile_m is cuBLASLt's n (the cols), tile_n its m (the rows); the first
    // id of that size is this one.
    EXPECT_EQ(CublasLtTileFor(size->cols, size->rows), static_cast<uint32_t>(id));
  }
}

TEST(CublasLtNamesTest, EveryStagesInnerAndClusterIdOfTheHeaderIsKnown) {
  const std::map<int64_t, std::string> stages = HeaderEnum("MATMUL_STAGES_", "[0-9]+x[0-9A-Z]+");
  for (int64_t id = 0; id < kCublasLtStagesEnd + 2; ++id) {
    EXPECT_EQ(IsCublasLtStagesId(id), id == 0 || stages.contains(id)) << "stages id " << id;
    if (stages.contains(id)) {
      EXPECT_EQ(CublasLtStagesName(id), stages.at(id));
      const bool is_auto = stages.at(id).ends_with("AUTO");
      EXPECT_EQ(IsCublasLtAutoStagesId(id), is_auto) << stages.at(id);
      if (!is_auto) {
        EXPECT_EQ(absl::StrCat(stages.at(id).substr(0, stages.at(id).find('x') + 1),
                               CublasLtStagesCount(id)),
                  stages.at(id));
      }
    }
  }
  const std::map<int64_t, std::string> inner = HeaderEnum("MATMUL_INNER_SHAPE_", "[A-Z0-9]+");
  const std::map<int64_t, std::string> cluster = HeaderEnum("CLUSTER_SHAPE_", "[A-Z0-9x]+");
  ASSERT_FALSE(inner.empty());
  ASSERT_FALSE(cluster.empty());
  for (int64_t id = -1; id < 64; ++id) {
    EXPECT_EQ(IsCublasLtInnerShapeId(id), inner.contains(id)) << "inner shape id " << id;
    EXPECT_EQ(IsCublasLtClusterShapeId(id), cluster.contains(id)) << "cluster shape id " << id;
  }
}

// A heuristic answer on an H200 (a tile and a stage depth a default tactic cannot name),
// written as a raw config: the tile's real size, the stage count, and a tactic the family
// accepts.
TEST(ConfigTacticTest, HeuristicAnswerBecomesAValidRawConfig) {
  const ir::Graph graph = MustParseVerified(R"(graph @g {
  input %x: bf16[300,1024]
  weight %w: bf16[4096,1024] = "w"
  %y: bf16[300,4096] = linear(%x, %w)
  output %y
})");
  const BoundGraph bound = MustBind(graph, {}, 1);
  const BoundRegion region(bound, 0);
  const KernelFamily& family = *GlobalKernelRegistry().Find("cublaslt_gemm");
  const targets::TargetDescription h200 = MustTarget("h200");
  absl::StatusOr<Tactic> base = family.DefaultTactic(region, h200);
  ASSERT_TRUE(base.ok()) << base.status();
  ResolvedAlgo algo;
  algo.algo_id = 66;
  algo.tile_id = CUBLASLT_MATMUL_TILE_192x128;
  algo.stages_id = CUBLASLT_MATMUL_STAGES_64xAUTO;
  algo.split_k = 1;
  algo.custom_option = 3;
  algo.inner_shape_id = CUBLASLT_MATMUL_INNER_SHAPE_UNDEFINED;
  algo.cluster_shape_id = CUBLASLT_CLUSTER_SHAPE_2x1x1;
  const Tactic t = ConfigTactic(algo, *base);
  EXPECT_EQ(t.ParamsString(),
            "algo_id=66,cluster_shape_id=3,custom_option=3,inner_shape_id=0,reduction_scheme=0,"
            "split_k=1,stages=0,stages_id=35,swizzle=0,tile_id=31,tile_m=128,tile_n=192");
  EXPECT_EQ(t.family_version, family.version());
  const absl::Status valid = family.ValidateTactic(t, region, h200);
  EXPECT_TRUE(valid.ok()) << valid;

  // An algo without tile ids keeps the base's nominal tile; a split answer its scheme.
  algo.tile_id = CUBLASLT_MATMUL_TILE_UNDEFINED;
  algo.stages_id = CUBLASLT_MATMUL_STAGES_32x5;
  algo.split_k = 3;
  algo.reduction_scheme = CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE;
  const Tactic untiled = ConfigTactic(algo, *base);
  EXPECT_EQ(untiled.params.at("tile_m"), base->params.at("tile_m"));
  EXPECT_EQ(untiled.params.at("tile_n"), base->params.at("tile_n"));
  EXPECT_EQ(untiled.params.at("stages"), 5);
  const absl::Status untiled_valid = family.ValidateTactic(untiled, region, h200);
  EXPECT_TRUE(untiled_valid.ok()) << untiled_valid;
}

TEST(CublasLtNamesTest, Stages) {
  EXPECT_EQ(CublasLtStagesName(CUBLASLT_MATMUL_STAGES_16x1), "16x1");
  EXPECT_EQ(CublasLtStagesName(CUBLASLT_MATMUL_STAGES_64x4), "64x4");
  EXPECT_EQ(CublasLtStagesName(CUBLASLT_MATMUL_STAGES_128x6), "128x6");
  EXPECT_EQ(CublasLtStagesName(CUBLASLT_MATMUL_STAGES_8x3), "8x3");
  EXPECT_EQ(CublasLtStagesName(CUBLASLT_MATMUL_STAGES_32xAUTO), "32xAUTO");
  EXPECT_EQ(CublasLtStagesName(CUBLASLT_MATMUL_STAGES_UNDEFINED), "undefined");
  EXPECT_EQ(CublasLtStagesCount(CUBLASLT_MATMUL_STAGES_32x5), 5);
  EXPECT_EQ(CublasLtStagesCount(CUBLASLT_MATMUL_STAGES_16x10), 10);
  EXPECT_EQ(CublasLtStagesCount(CUBLASLT_MATMUL_STAGES_64xAUTO), 0);
}

}  // namespace
}  // namespace tileplan::kernels
