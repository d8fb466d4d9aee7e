// The host-side half of the cuBLASLt runner without a GPU: how a region becomes cuBLASLt's
// column-major problem (shapes, leading dims of strided views, alignments, epilogue
// operands, the swiglu workspace), the dtypes refused, and the tile and stage names.
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cublaslt_runner.h"
#include "tests/kernels/kernels_testing.h"

namespace tileplan::kernels {
namespace {

using ::testing::HasSubstr;
using testing::MustBind;
using testing::MustParseVerified;

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
  EXPECT_FALSE(CublasLtTileFor(32, 64).has_value());
  EXPECT_EQ(CublasLtTileName(CUBLASLT_MATMUL_TILE_128x256), "128x256");
  EXPECT_EQ(CublasLtTileName(CUBLASLT_MATMUL_TILE_UNDEFINED), "undefined");
  EXPECT_EQ(CublasLtTileName(CUBLASLT_MATMUL_TILE_8x8), "tile id 1");
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
