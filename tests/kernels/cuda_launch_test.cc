// The launch half of the template families without a GPU: every candidate tactic of the
// typical regions (the full product of the tunables) prepares launches whose geometry
// agrees with the family's description, and the host element encodings round-trip.
#include "kernels/core/template_launch.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/families/gemv/gemv_params.h"
#include "kernels/families/registry.h"
#include "tests/kernels/candidate_instances.h"
#include "tests/kernels/kernels_testing.h"

namespace tileplan::kernels {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// Distinct, 1 MiB-aligned fake device addresses (never dereferenced).
void* FakeAddress(int i) { return reinterpret_cast<void*>(static_cast<uintptr_t>(i + 1) << 20); }

RegionBuffers FakeBuffers(const BoundRegion& region) {
  RegionBuffers buffers;
  for (int i = 0; i < region.num_operands(); ++i) buffers.operands.push_back(FakeAddress(i));
  for (int i = 0; i < region.num_results(); ++i) buffers.results.push_back(FakeAddress(16 + i));
  buffers.workspace = FakeAddress(32);
  buffers.counters = FakeAddress(34);
  buffers.rope_inv_freq = static_cast<const float*>(FakeAddress(33));
  return buffers;
}

TEST(CudaLaunchTest, EveryCandidatePreparesTheDescribedLaunch) {
  const testing::CandidateSet set = testing::TypicalCandidates(testing::Coverage::kFullProduct);
  ASSERT_GT(set.candidates.size(), 1000u);
  std::set<std::string> families;
  for (const testing::Candidate& c : set.candidates) {
    const BoundRegion region(set.bound_graphs[static_cast<size_t>(c.bound_graph)], c.region);
    absl::StatusOr<std::vector<KernelLaunch>> launches =
        PrepareLaunches(*c.family, region, c.tactic, FakeBuffers(region));
    ASSERT_TRUE(launches.ok()) << launches.status() << " (tactic " << c.tactic.ParamsString()
                               << " on " << c.target << ")";
    ASSERT_EQ(launches->size(), static_cast<size_t>(c.family->Launches(c.tactic, region)));
    EXPECT_GT((*launches)[0].params.size(), 16u);
    absl::StatusOr<KernelInstance> instance = InstanceFor(*c.family, region, c.tactic);
    ASSERT_TRUE(instance.ok()) << instance.status();
    EXPECT_THAT(instance->name_expressions[0], StartsWith("tileplan::"));
    families.insert(c.tactic.family);
  }
  std::vector<std::string> template_families;
  for (const KernelFamily* f : GlobalKernelRegistry().families()) {
    if (f->templates() != nullptr) template_families.push_back(std::string(f->name()));
  }
  EXPECT_EQ(std::vector<std::string>(families.begin(), families.end()), template_families);
}

TEST(CudaLaunchTest, InstancesNameTheTemplateArguments) {
  const ir::Graph graph = testing::TestGraph("typical_regions.tpir");
  const BoundGraph bound = testing::MustBind(graph, {{"B", 4}, {"Smax", 4096}, {"T", 1}}, 512);
  const BoundRegion swiglu(bound, testing::RegionNamed(graph, "fact"));
  const KernelFamily& family = *GlobalKernelRegistry().Find("gemv");
  Tactic gemv{"gemv", 1, {{"rows_per_cta", 4}, {"split_k", 2}, {"threads", 256}, {"vec", 8}}};
  absl::StatusOr<KernelInstance> instance = InstanceFor(family, swiglu, gemv);
  ASSERT_TRUE(instance.ok()) << instance.status();
  EXPECT_EQ(instance->source, "gemv_split_k.cuh");
  EXPECT_THAT(instance->name_expressions,
              ::testing::ElementsAre("tileplan::gemv_split_k<tileplan::bf16, tileplan::bf16, "
                                     "tileplan::bf16, 4, 256, 4, 2, 8, tileplan::kGemvSwiglu, "
                                     "void>"));
  // With the norm prologue the last argument is the norm weight's type.
  const BoundRegion normed(bound, testing::RegionNamed(graph, "nact"));
  instance = InstanceFor(family, normed, gemv);
  ASSERT_TRUE(instance.ok()) << instance.status();
  EXPECT_THAT(instance->name_expressions,
              ::testing::ElementsAre("tileplan::gemv_split_k<tileplan::bf16, tileplan::bf16, "
                                     "tileplan::bf16, 4, 256, 4, 2, 8, tileplan::kGemvSwiglu, "
                                     "tileplan::bf16>"));
}

TEST(CudaLaunchTest, RefusesOtherFamiliesAndMissingParameters) {
  const ir::Graph graph = testing::TestGraph("typical_regions.tpir");
  const BoundGraph bound = testing::MustBind(graph, {{"B", 1}, {"Smax", 64}, {"T", 1}}, 8);
  const BoundRegion linear(bound, testing::RegionNamed(graph, "qkv"));
  const KernelRegistry& registry = GlobalKernelRegistry();
  absl::StatusOr<KernelInstance> instance =
      InstanceFor(*registry.Find("cublaslt_gemm"), linear, Tactic{"cublaslt_gemm", 1, {}});
  EXPECT_THAT(std::string(instance.status().message()),
              HasSubstr("family 'cublaslt_gemm' has no CUDA templates"));
  instance = InstanceFor(*registry.Find("gemv"), linear, Tactic{"gemv", 1, {{"threads", 128}}});
  EXPECT_EQ(instance.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(instance.status().message()), HasSubstr("(%qkv)"));
  EXPECT_THAT(std::string(instance.status().message()), HasSubstr("rows_per_cta"));
}

TEST(CudaLaunchTest, MisalignedOrMissingBuffersAreRefused) {
  const ir::Graph graph = testing::TestGraph("typical_regions.tpir");
  const BoundGraph bound = testing::MustBind(graph, {{"B", 1}, {"Smax", 64}, {"T", 1}}, 8);
  const BoundRegion linear(bound, testing::RegionNamed(graph, "qkv"));
  const KernelFamily* gemv = GlobalKernelRegistry().Find("gemv");
  ASSERT_NE(gemv, nullptr);
  Tactic tactic{"gemv", 1, {{"rows_per_cta", 4}, {"split_k", 1}, {"threads", 128}, {"vec", 8}}};
  RegionBuffers buffers = FakeBuffers(linear);
  buffers.operands[1] = static_cast<char*>(buffers.operands[1]) + 2;
  absl::StatusOr<std::vector<KernelLaunch>> launches =
      PrepareLaunches(*gemv, linear, tactic, buffers);
  EXPECT_THAT(std::string(launches.status().message()),
              HasSubstr("operand 1 at 0x200002 is not aligned to 16 bytes"));
  buffers = FakeBuffers(linear);
  buffers.results.clear();
  launches = PrepareLaunches(*gemv, linear, tactic, buffers);
  EXPECT_THAT(std::string(launches.status().message()), HasSubstr("no device buffer for result 0"));
  // A split launch needs its workspace and (4-byte aligned) counters; an unsplit one neither.
  tactic.params["split_k"] = 2;
  buffers = FakeBuffers(linear);
  buffers.workspace = nullptr;
  launches = PrepareLaunches(*gemv, linear, tactic, buffers);
  EXPECT_THAT(std::string(launches.status().message()),
              HasSubstr("no device buffer for the split-K workspace"));
  buffers = FakeBuffers(linear);
  buffers.counters = static_cast<char*>(buffers.counters) + 2;
  launches = PrepareLaunches(*gemv, linear, tactic, buffers);
  EXPECT_THAT(std::string(launches.status().message()),
              HasSubstr("the split-K counters at 0x2300002 is not aligned to 4 bytes"));
  tactic.params["split_k"] = 1;
  buffers.workspace = nullptr;
  EXPECT_TRUE(PrepareLaunches(*gemv, linear, tactic, buffers).ok());
}

#define TEST_KERNEL_PARAMS(FIRST, NEXT)        \
  FIRST(const void*, const T* __restrict__, x) \
  NEXT(long long, long long, stride) NEXT(float, float, scale) NEXT(int, int, n)
TILEPLAN_PARAMS_STRUCT(TestParams, TEST_KERNEL_PARAMS)

// One pointer per kernel parameter, each to its field of the held struct.
TEST(CudaLaunchTest, KernelParamsPointAtEachField) {
  int x = 0;
  KernelParams params = KernelParams::Of(TestParams{&x, -3, 1.5f, 7});
  EXPECT_EQ(params.size(), sizeof(TestParams));
  EXPECT_EQ(TestParams::kParams, 4);
  void** p = params.pointers();
  EXPECT_EQ(*static_cast<const void* const*>(p[0]), &x);
  EXPECT_EQ(*static_cast<const long long*>(p[1]), -3);
  EXPECT_EQ(*static_cast<const float*>(p[2]), 1.5f);
  EXPECT_EQ(*static_cast<const int*>(p[3]), 7);
  // The kernel's signature as TILEPLAN_KERNEL_PARAMETERS spells it.
#define T float
  auto kernel = [](TILEPLAN_KERNEL_PARAMETERS(TEST_KERNEL_PARAMS)) { return n + stride; };
#undef T
  EXPECT_EQ(kernel(nullptr, 2, 0.5f, 3), 5);
}

// The launch fills the parameter struct the template declares: the gemv struct of a linear
// carries the region's buffers and sizes.
TEST(CudaLaunchTest, LaunchesFillTheFamilysParameterStruct) {
  const ir::Graph graph = testing::TestGraph("typical_regions.tpir");
  const BoundGraph bound = testing::MustBind(graph, {{"B", 1}, {"Smax", 64}, {"T", 1}}, 8);
  const BoundRegion linear(bound, testing::RegionNamed(graph, "qkv"));
  const KernelFamily* gemv = GlobalKernelRegistry().Find("gemv");
  Tactic tactic{"gemv", 3, {{"rows_per_cta", 4}, {"split_k", 1}, {"threads", 128}, {"vec", 8}}};
  const RegionBuffers buffers = FakeBuffers(linear);
  absl::StatusOr<std::vector<KernelLaunch>> launches =
      PrepareLaunches(*gemv, linear, tactic, buffers);
  ASSERT_TRUE(launches.ok()) << launches.status();
  const GemvParams p = (*launches)[0].params.As<GemvParams>();
  EXPECT_EQ(p.x, buffers.operands[0]);
  EXPECT_EQ(p.w, buffers.operands[1]);
  EXPECT_EQ(p.out, buffers.results[0]);
  EXPECT_EQ(p.workspace, nullptr);  // unsplit
  EXPECT_EQ(p.rows, linear.operand(0).shape[0] * linear.operand(0).shape[1]);
  EXPECT_EQ(p.depth, linear.operand(0).shape.back());
  EXPECT_EQ(p.cols, linear.result(0).shape.back());
}

TEST(HostElementsTest, Bf16RoundsToNearestEven) {
  // 1 + 2^-8 is halfway between bf16 neighbours 1 and 1 + 2^-7: ties go to even (1).
  EXPECT_EQ(RoundToDType(ir::DType::kBF16, 1.0f + std::ldexp(1.0f, -8)), 1.0f);
  EXPECT_EQ(RoundToDType(ir::DType::kBF16, 1.0f + 3 * std::ldexp(1.0f, -8)),
            1.0f + std::ldexp(1.0f, -6));
  EXPECT_TRUE(std::isnan(RoundToDType(ir::DType::kBF16, std::nanf(""))));
  EXPECT_EQ(RoundToDType(ir::DType::kBF16, -0.0f), -0.0f);
}

TEST(HostElementsTest, F16RoundsAndHandlesRangeEdges) {
  EXPECT_EQ(RoundToDType(ir::DType::kF16, 1.0f + std::ldexp(1.0f, -11)), 1.0f);  // tie to even
  EXPECT_EQ(RoundToDType(ir::DType::kF16, 65504.0f), 65504.0f);
  EXPECT_TRUE(std::isinf(RoundToDType(ir::DType::kF16, 70000.0f)));
  EXPECT_EQ(RoundToDType(ir::DType::kF16, std::ldexp(1.0f, -24)), std::ldexp(1.0f, -24));
  EXPECT_EQ(RoundToDType(ir::DType::kF16, std::ldexp(3.0f, -20)), std::ldexp(3.0f, -20));
  EXPECT_EQ(RoundToDType(ir::DType::kF16, std::ldexp(1.0f, -26)), 0.0f);
}

TEST(HostElementsTest, EncodeDecodeRoundTrips) {
  const std::vector<float> values = {0.0f, -1.5f, 3.140625f, 1e-3f, -65504.0f};
  for (ir::DType dtype : {ir::DType::kF32, ir::DType::kBF16, ir::DType::kF16}) {
    const std::string bytes = EncodeFloats(dtype, values);
    EXPECT_EQ(bytes.size(), values.size() * ir::DTypeSize(dtype));
    const std::vector<float> back = DecodeFloats(dtype, bytes);
    ASSERT_EQ(back.size(), values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      EXPECT_EQ(back[i], RoundToDType(dtype, values[i])) << ir::DTypeName(dtype) << " " << i;
    }
  }
  // bf16 bits are the upper half of the float.
  EXPECT_EQ(EncodeFloats(ir::DType::kBF16, {1.0f}), std::string("\x80\x3f", 2));
}

}  // namespace
}  // namespace tileplan::kernels
