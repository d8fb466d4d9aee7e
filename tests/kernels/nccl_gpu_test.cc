// The NCCL launch half of the collective family (part of kernels_gpu_test): NCCL loads from
// the toolkit without a GPU; on one GPU a single-rank communicator runs an all_reduce and an
// all_gather of several rows through the step launcher, directly and captured into a CUDA
// Graph, against the CPU reference's meaning (one rank: the sum is x, the gather is x, the sum
// with a bias x + bias); and
// the launcher refuses what it does not run. Without a usable GPU the device tests skip with
// the reason. Label: gpu.
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "device/device_buffer.h"
#include "device/nccl.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/core/bound_graph.h"
#include "kernels/families/registry.h"
#include "kernels/step/step_launcher.h"
#include "regions/parser.h"
#include "tests/kernels/gpu_harness.h"

namespace tileplan::kernels::testing {
namespace {

using ::testing::HasSubstr;

TEST(NcclTest, LoadsTheToolkitsLibraryWithoutAGpu) {
  absl::StatusOr<const device::Nccl*> nccl = device::Nccl::Get();
  ASSERT_TRUE(nccl.ok()) << nccl.status();
  EXPECT_GE((*nccl)->version(), 21800);
  EXPECT_THAT((*nccl)->VersionString(), ::testing::StartsWith("2."));
  EXPECT_TRUE((*nccl)->Check(ncclSuccess, "x").ok());
  absl::Status bad = (*nccl)->Check(ncclInvalidArgument, "ncclAllReduce");
  EXPECT_EQ(bad.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(bad.message()), HasSubstr("ncclAllReduce failed: "));
}

TEST(NcclTest, CommunicatorsNeedDistinctDevices) {
  auto none = device::Communicator::CreateAll({});
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  auto twice = device::Communicator::CreateAll({0, 0});
  EXPECT_THAT(std::string(twice.status().message()), HasSubstr("listed twice"));
}

ir::Graph Collectives() {
  absl::StatusOr<ir::Graph> g = ir::ParseGraph(R"(graph @g {
  input %x: bf16[B,T,40]
  weight %bias: bf16[40] = "bias"
  %sum: bf16[B,T,40] = all_reduce(%x) {ranks = 1}
  %all: bf16[B,T,40] = all_gather(%x) {ranks = 1}
  %biased: bf16[B,T,40] = all_reduce(%x, %bias) {ranks = 1}
  %two: bf16[B,T,40] = all_reduce(%x) {ranks = 2}
  output %sum
  output %all
  output %biased
  output %two
})");
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? *std::move(g) : ir::Graph();
}

TEST(NcclTest, OneRankRunsAllReduceAndAllGatherDirectlyAndInAGraph) {
  TP_REQUIRE_GPU();
  const device::Device& device = GpuEnvironment::device();
  auto comms = device::Communicator::CreateAll({device.ordinal()});
  ASSERT_TRUE(comms.ok()) << comms.status();
  StepLauncher::Options options;
  options.communicator = comms->front().get();
  auto launcher = StepLauncher::Create(device, options);
  ASSERT_TRUE(launcher.ok()) << launcher.status();
  const ir::Graph graph = Collectives();
  auto bound = BoundGraph::Create(graph, {{"B", 2}, {"T", 3}}, 3);
  ASSERT_TRUE(bound.ok()) << bound.status();
  const KernelFamily& family = *GlobalKernelRegistry().Find("collective");
  const int64_t n = 2 * 3 * 40;
  std::vector<uint16_t> host(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) host[static_cast<size_t>(i)] = static_cast<uint16_t>(0x3f80 + i);
  auto x = device::DeviceBuffer::Allocate(device, n * 2);
  auto out = device::DeviceBuffer::Allocate(device, n * 2);
  auto workspace = device::DeviceBuffer::Allocate(device, n * 2);
  ASSERT_TRUE(x.ok() && out.ok() && workspace.ok());
  ASSERT_EQ(cudaMemcpy(x->data(), host.data(), n * 2, cudaMemcpyHostToDevice), cudaSuccess);
  // The bias of region 2, and what one rank's biased sum is: x + bias, rounded once.
  std::vector<uint16_t> bias_host(40);
  for (int j = 0; j < 40; ++j) bias_host[static_cast<size_t>(j)] = static_cast<uint16_t>(0x3e00 + 3 * j);
  auto to_float = [](uint16_t b) {
    const uint32_t bits = uint32_t{b} << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  };
  auto to_bf16 = [](float f) {  // round to nearest even
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
  };
  std::vector<uint16_t> biased(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    biased[static_cast<size_t>(i)] = to_bf16(to_float(host[static_cast<size_t>(i)]) +
                                             to_float(bias_host[static_cast<size_t>(i % 40)]));
  }
  auto bias = device::DeviceBuffer::Allocate(device, 40 * 2);
  ASSERT_TRUE(bias.ok());
  ASSERT_EQ(cudaMemcpy(bias->data(), bias_host.data(), 80, cudaMemcpyHostToDevice), cudaSuccess);
  for (int region : {0, 1, 2}) {
    SCOPED_TRACE(graph.regions()[region].kind);
    const BoundRegion r(*bound, region);
    auto tactic = family.DefaultTactic(r, GpuEnvironment::Target());
    ASSERT_TRUE(tactic.ok()) << tactic.status();
    auto step = (*launcher)->Prepare(family, r, *tactic, StepOptions{}, "collective");
    ASSERT_TRUE(step.ok()) << step.status();
    RegionBuffers buffers;
    buffers.operands = {x->data()};
    if (region == 2) buffers.operands.push_back(bias->data());
    buffers.results = {out->data()};
    buffers.workspace = workspace->data();
    absl::StatusOr<int> binding = (*step)->Bind(buffers);
    ASSERT_TRUE(binding.ok()) << binding.status();
    for (bool graph_capture : {false, true}) {
      ASSERT_TRUE(out->Fill(0).ok());
      cudaStream_t stream = GpuEnvironment::stream();
      if (graph_capture) {
        ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
      }
      absl::Status launched = (*step)->Enqueue(*binding, stream);
      ASSERT_TRUE(launched.ok()) << launched;
      if (graph_capture) {
        cudaGraph_t g = nullptr;
        ASSERT_EQ(cudaStreamEndCapture(stream, &g), cudaSuccess);
        cudaGraphExec_t exec = nullptr;
        ASSERT_EQ(cudaGraphInstantiate(&exec, g, 0), cudaSuccess);
        ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(g);
      }
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      std::vector<uint16_t> got(static_cast<size_t>(n));
      ASSERT_EQ(cudaMemcpy(got.data(), out->data(), n * 2, cudaMemcpyDeviceToHost), cudaSuccess);
      EXPECT_EQ(got, region == 2 ? biased : host) << (graph_capture ? "graph" : "direct");
    }
  }
  // A group of another size is refused, naming the region.
  for (int region : {3}) {
    const BoundRegion r(*bound, region);
    auto step = (*launcher)->Prepare(family, r, *family.DefaultTactic(r, GpuEnvironment::Target()),
                                     StepOptions{}, "collective");
    ASSERT_FALSE(step.ok());
    EXPECT_THAT(std::string(step.status().message()),
                HasSubstr("communicator has 1"));
  }
}

}  // namespace
}  // namespace tileplan::kernels::testing
