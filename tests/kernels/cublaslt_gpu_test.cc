// The cuBLASLt runner's device tests that are no table case (part of kernels_gpu_test; the
// cases of cublaslt_gemm are conformance/cublaslt_gemm_cases.cc): the heuristic's own
// configuration written as a raw config (algo_id and every configuration field) and every
// candidate configuration the heuristic offers for several shapes, each run against the CPU
// reference through the harness; a rejected algo_id and a rejected raw config; a misaligned
// buffer; a step captured into a CUDA graph and replayed. CublasLtCasesTest checks on the CPU
// that every case is a GEMM problem. Without a usable GPU the device tests skip with the
// reason. Label: gpu.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/core/kernel_family.h"
#include "kernels/core/template_launch.h"
#include "kernels/cublaslt/cublaslt_runner.h"
#include "kernels/families/cublaslt_gemm/cublaslt_config.h"
#include "kernels/families/registry.h"
#include "kernels/step/step_launcher.h"
#include "targets/target.h"
#include "tests/kernels/conformance/cases.h"
#include "tests/kernels/gpu_harness.h"

namespace tileplan::kernels::testing {
namespace {

using ::testing::HasSubstr;

const KernelFamily& Family() { return *GlobalKernelRegistry().Find("cublaslt_gemm"); }
CublasLtRunner& Runner() { return GpuEnvironment::launcher().cublaslt(); }

// The one case of cublaslt_gemm's group `name` (CublasLtGemmCaseGroups).
Case CaseNamed(const std::string& name) {
  for (const CaseGroup& group : CublasLtGemmCaseGroups()) {
    if (group.name == name && group.cases.size() == 1) return group.cases.front();
  }
  ADD_FAILURE() << "no group " << name << " of one case";
  return Case();
}

TEST(CublasLtCasesTest, EveryCaseIsAGemmProblem) {
  const TargetDescription target = *targets::FindTarget("h200");
  for (const CaseGroup& group : CublasLtGemmCaseGroups()) {
    SCOPED_TRACE(group.name);
    for (const Case& c : group.cases) {
      PreparedCase p;
      PrepareCase(c, target, 1, p);
      ASSERT_TRUE(p.ok);
      absl::StatusOr<GemmProblem> problem = GemmProblemFor(BoundRegion(*p.bound, p.region));
      EXPECT_TRUE(problem.ok()) << problem.status();
    }
  }
}

// Expects `algo` to be exactly the raw config `tactic` names.
void ExpectRunsConfig(const ResolvedAlgo& algo, const Tactic& tactic) {
  EXPECT_FALSE(algo.from_heuristic);
  EXPECT_EQ(algo.algo_id, tactic.params.at("algo_id"));
  EXPECT_EQ(algo.tile_id, tactic.params.at("tile_id"));
  EXPECT_EQ(algo.stages_id, tactic.params.at("stages_id"));
  EXPECT_EQ(algo.split_k, tactic.params.at("split_k"));
  EXPECT_EQ(algo.reduction_scheme, tactic.params.at("reduction_scheme"));
  EXPECT_EQ(algo.swizzle, tactic.params.at("swizzle"));
  EXPECT_EQ(algo.custom_option, tactic.params.at("custom_option"));
  EXPECT_EQ(algo.inner_shape_id, tactic.params.at("inner_shape_id"));
  EXPECT_EQ(algo.cluster_shape_id, tactic.params.at("cluster_shape_id"));
}

// The heuristic's own configuration, written as a raw config (its algo_id and every
// configuration field read back), runs exactly that algo, whatever its tile and stages.
TEST(CublasLtGpuDeviceTest, ExplicitAlgoIdRunsThatAlgo) {
  TP_REQUIRE_GPU();
  PreparedCase p;
  PrepareCase(CaseNamed("CublasLtLinearBiasM300"), GpuEnvironment::Target(), 7, p);
  ASSERT_TRUE(p.ok);
  const BoundRegion region(*p.bound, p.region);
  absl::StatusOr<std::unique_ptr<PreparedGemm>> heuristic =
      Runner().Prepare(region, p.default_tactic());
  ASSERT_TRUE(heuristic.ok()) << heuristic.status();
  const ResolvedAlgo h = (*heuristic)->algo();
  EXPECT_TRUE(h.from_heuristic);
  const Tactic tactic = ConfigTactic(h, p.default_tactic());
  const absl::Status valid = Family().ValidateTactic(tactic, region, GpuEnvironment::Target());
  ASSERT_TRUE(valid.ok()) << valid << "\nheuristic: " << (*heuristic)->Describe();
  absl::StatusOr<std::unique_ptr<PreparedGemm>> explicit_algo = Runner().Prepare(region, tactic);
  ASSERT_TRUE(explicit_algo.ok()) << explicit_algo.status()
                                  << "\nheuristic: " << (*heuristic)->Describe();
  ExpectRunsConfig((*explicit_algo)->algo(), tactic);
  // Describe reads back the configuration of the heuristic's pick (the workspace each
  // reports aside).
  auto config = [](const PreparedGemm& gemm) {
    std::string text = gemm.Describe();
    text = text.substr(0, text.find(", workspace "));
    const size_t from = text.find(" (heuristic)");
    if (from != std::string::npos) text.replace(from, 12, " (tactic)");
    return text;
  };
  EXPECT_EQ(config(**explicit_algo), config(**heuristic));
  EXPECT_THAT((*explicit_algo)->Describe(),
              HasSubstr(absl::StrCat("cuBLASLt algo ", h.algo_id, " (tactic), tile ",
                                     CublasLtTileName(h.tile_id))));
  RunOnDevice(p, {tactic});
}

// Every configuration the heuristic offers, as a raw config: valid for the family, run as
// itself, and as right as the CPU reference.
TEST(CublasLtGpuDeviceTest, EveryHeuristicCandidateMatchesTheCpuReference) {
  TP_REQUIRE_GPU();
  for (const char* name : {"CublasLtLinearBiasM300", "CublasLtLinearM1", "CublasLtLinearM7",
                           "CublasLtLinearF16", "CublasLtLinearResidualInPlace",
                           "CublasLtLinearSwigluWithBias", "CublasLtLmHeadFloatLogits"}) {
    SCOPED_TRACE(name);
    PreparedCase p;
    PrepareCase(CaseNamed(name), GpuEnvironment::Target(), 11, p);
    ASSERT_TRUE(p.ok);
    const BoundRegion region(*p.bound, p.region);
    absl::StatusOr<std::vector<Tactic>> candidates =
        Runner().Candidates(region, p.default_tactic());
    ASSERT_TRUE(candidates.ok()) << candidates.status();
    ASSERT_FALSE(candidates->empty());
    std::printf("%s: %zu heuristic candidates\n", name, candidates->size());
    // The heuristic's top pick first.
    absl::StatusOr<std::unique_ptr<PreparedGemm>> heuristic =
        Runner().Prepare(region, p.default_tactic());
    ASSERT_TRUE(heuristic.ok()) << heuristic.status();
    EXPECT_EQ(candidates->front(), ConfigTactic((*heuristic)->algo(), p.default_tactic()));
    std::set<std::string> seen;
    for (const Tactic& tactic : *candidates) {
      SCOPED_TRACE(tactic.ParamsString());
      EXPECT_TRUE(seen.insert(tactic.ParamsString()).second) << "a duplicate";
      const absl::Status valid = Family().ValidateTactic(tactic, region, GpuEnvironment::Target());
      EXPECT_TRUE(valid.ok()) << valid;
      absl::StatusOr<std::unique_ptr<PreparedGemm>> gemm = Runner().Prepare(region, tactic);
      ASSERT_TRUE(gemm.ok()) << gemm.status();
      ExpectRunsConfig((*gemm)->algo(), tactic);
      RunOnDevice(p, {tactic});
    }
    // A limit of one is the top pick alone.
    absl::StatusOr<std::vector<Tactic>> one = Runner().Candidates(region, p.default_tactic(), 1);
    ASSERT_TRUE(one.ok()) << one.status();
    ASSERT_EQ(one->size(), 1u);
    EXPECT_EQ(one->front(), candidates->front());
  }
}

// A raw config cuBLASLt does not take is FailedPrecondition naming the config, never the
// heuristic's algo instead.
TEST(CublasLtGpuDeviceTest, RejectedRawConfigNamesTheConfig) {
  TP_REQUIRE_GPU();
  PreparedCase p;
  PrepareCase(CaseNamed("CublasLtLinearM7"), GpuEnvironment::Target(), 1, p);
  ASSERT_TRUE(p.ok);
  const BoundRegion region(*p.bound, p.region);
  absl::StatusOr<std::unique_ptr<PreparedGemm>> heuristic =
      Runner().Prepare(region, p.default_tactic());
  ASSERT_TRUE(heuristic.ok()) << heuristic.status();
  Tactic tactic = ConfigTactic((*heuristic)->algo(), p.default_tactic());
  tactic.params["algo_id"] = 1000000;
  absl::StatusOr<std::unique_ptr<PreparedGemm>> gemm = Runner().Prepare(region, tactic);
  ASSERT_FALSE(gemm.ok());
  EXPECT_EQ(gemm.status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string message(gemm.status().message());
  EXPECT_THAT(message, HasSubstr("'linear' (%y)"));
  EXPECT_THAT(message, HasSubstr(absl::StrCat("cuBLASLt rejects config ", tactic.ParamsString(),
                                              " for m=200 n=7 k=136")));
}

TEST(CublasLtGpuDeviceTest, RejectedAlgoIdNamesTheRegionAndTactic) {
  TP_REQUIRE_GPU();
  PreparedCase p;
  PrepareCase(CaseNamed("CublasLtLinearM7"), GpuEnvironment::Target(), 1, p);
  ASSERT_TRUE(p.ok);
  Tactic tactic = p.default_tactic();
  tactic.params["algo_id"] = 1000000;
  absl::StatusOr<std::unique_ptr<PreparedGemm>> gemm =
      Runner().Prepare(BoundRegion(*p.bound, p.region), tactic);
  ASSERT_FALSE(gemm.ok());
  EXPECT_EQ(gemm.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(gemm.status().message());
  EXPECT_THAT(message, HasSubstr("'linear' (%y)"));
  EXPECT_THAT(message, HasSubstr("cuBLASLt rejects tactic algo_id=1000000,"));
}

TEST(CublasLtGpuDeviceTest, MisalignedBufferIsRefused) {
  TP_REQUIRE_GPU();
  PreparedCase p;
  PrepareCase(CaseNamed("CublasLtLinearM7"), GpuEnvironment::Target(), 1, p);
  ASSERT_TRUE(p.ok);
  DeviceCase d(p);
  ASSERT_NO_FATAL_FAILURE(d.Setup(p.default_tactic()));
  RegionBuffers misaligned = d.buffers();
  misaligned.operands[0] = static_cast<char*>(misaligned.operands[0]) + 2;
  const absl::StatusOr<int> binding = d.step().Bind(misaligned);
  ASSERT_TRUE(binding.ok()) << binding.status();  // a library step checks when it launches
  const absl::Status launched = d.step().Enqueue(*binding, GpuEnvironment::stream());
  EXPECT_EQ(launched.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(launched.message()), HasSubstr("x (operand 0)"));
}

// A step's Enqueue only enqueues on its stream, so it captures into a CUDA graph: the GEMM and
// the swiglu kernel of linear_swiglu, replayed twice on fresh inputs. (The first, eager
// launch loads cuBLASLt's kernels, as a runtime warms up before it captures.)
TEST(CublasLtGpuDeviceTest, LaunchCapturesIntoACudaGraph) {
  TP_REQUIRE_GPU();
  PreparedCase p;
  PrepareCase(CaseNamed("CublasLtLinearSwigluWithBias"), GpuEnvironment::Target(), 3, p);
  ASSERT_TRUE(p.ok);
  DeviceCase d(p);
  ASSERT_NO_FATAL_FAILURE(d.Setup(p.default_tactic()));
  ASSERT_EQ(d.Enqueue(), absl::OkStatus());
  ASSERT_EQ(Synchronize(), absl::OkStatus());
  ASSERT_NO_FATAL_FAILURE(d.Check());

  ASSERT_NO_FATAL_FAILURE(d.Reset());
  cudaStream_t stream = GpuEnvironment::stream();
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  const absl::Status captured = d.Enqueue();
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  ASSERT_TRUE(captured.ok()) << captured;
  ASSERT_EQ(ended, cudaSuccess) << cudaGetErrorString(ended);
  size_t nodes = 0;
  ASSERT_EQ(cudaGraphGetNodes(graph, nullptr, &nodes), cudaSuccess);
  EXPECT_GE(nodes, 2u);  // at least the GEMM and the swiglu kernel
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(Synchronize(), absl::OkStatus());
  EXPECT_TRUE(d.OutputPoisoned()) << "Enqueue ran work while the stream was capturing";
  for (int replay = 0; replay < 2; ++replay) {
    SCOPED_TRACE(absl::StrCat("replay ", replay));
    ASSERT_NO_FATAL_FAILURE(d.Reset());
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(Synchronize(), absl::OkStatus());
    ASSERT_NO_FATAL_FAILURE(d.Check());
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

}  // namespace
}  // namespace tileplan::kernels::testing
