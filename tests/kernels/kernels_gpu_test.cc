// The GPU conformance of every kernel family (tests/kernels/gpu_harness.h): each case group of
// conformance/ (AllCaseGroups) is one test, KernelsGpuTest.MatchesTheCpuReference/<group>,
// run on the device under every tactic of its cases, and KernelsGpuCasesTest checks every
// case on the CPU, GPU or not. Beside them, the device tests that are no table case: the
// error word of the template kernels, the device description and out-of-memory errors here;
// the cuBLASLt runner's own in cublaslt_gpu_test.cc. Without a usable GPU the device tests
// skip with the reason. Label: gpu.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "device/device.h"
#include "device/device_buffer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/core/kernel_family.h"
#include "kernels/core/template_launch.h"
#include "kernels/families/registry.h"
#include "kernels/step/step_launcher.h"
#include "regions/parser.h"
#include "regions/rope.h"
#include "targets/target.h"
#include "tests/kernels/conformance/cases.h"
#include "tests/kernels/gpu_harness.h"

namespace tileplan::kernels::testing {
namespace {

using device::Device;
using device::DeviceBuffer;

TEST(KernelsGpuCasesTest, EveryCasePreparesOnTheCpu) {
  const TargetDescription target = *targets::FindTarget("h200");
  for (const CaseGroup& group : AllCaseGroups()) {
    SCOPED_TRACE(group.name);
    for (const Case& c : group.cases) CheckCaseOnCpu(c, target);
  }
}

class KernelsGpuTest : public ::testing::TestWithParam<CaseGroup> {};

TEST_P(KernelsGpuTest, MatchesTheCpuReference) {
  TP_REQUIRE_GPU();
  for (const Case& c : GetParam().cases) {
    if (c.sm > 0 && c.sm != GpuEnvironment::device().sm()) {
      GTEST_SKIP() << c.family << " runs on sm_" << c.sm << " only; this GPU is sm_"
                   << GpuEnvironment::device().sm();
    }
    if (c.min_sm > 0 && GpuEnvironment::device().sm() < c.min_sm) {
      GTEST_SKIP() << "its tactics need sm_" << c.min_sm << " or later; this GPU is sm_"
                   << GpuEnvironment::device().sm();
    }
    const unsigned seed = std::random_device{}();
    SCOPED_TRACE(absl::StrCat("seed ", seed));
    PreparedCase p;
    PrepareCase(c, GpuEnvironment::Target(), seed, p);
    if (!p.ok) return;
    RunOnDevice(p, p.tactics);
    if (HasFatalFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(Families, KernelsGpuTest, ::testing::ValuesIn(AllCaseGroups()),
                         [](const ::testing::TestParamInfo<CaseGroup>& info) {
                           return info.param.name;
                         });

// Runs `region` under `tactic` once on `buffers`, through the launcher, after the copies into
// them have landed, and waits for it.
void RunOnce(const KernelFamily& family, const BoundRegion& region, const Tactic& tactic,
             const RegionBuffers& buffers) {
  const absl::Status copied = GpuEnvironment::device().Synchronize();
  ASSERT_TRUE(copied.ok()) << copied;
  absl::StatusOr<std::unique_ptr<PreparedStep>> step = PrepareStep(family, region, tactic);
  ASSERT_TRUE(step.ok()) << step.status();
  const absl::StatusOr<int> binding = (*step)->Bind(buffers);
  ASSERT_TRUE(binding.ok()) << binding.status();
  const absl::Status enqueued = (*step)->Enqueue(*binding, GpuEnvironment::stream());
  ASSERT_TRUE(enqueued.ok()) << enqueued;
  const absl::Status synced = Synchronize();
  ASSERT_TRUE(synced.ok()) << synced;
}

// ---- error reporting --------------------------------------------------------------------

TEST(KernelsGpuDeviceTest, BadTokenIdsAndPositionsRaiseTheErrorWord) {
  TP_REQUIRE_GPU();
  absl::StatusOr<ir::Graph> graph = ir::ParseGraph(R"(graph @g {
  input %ids: i32[1,4]
  weight %table: bf16[10,64] = "table"
  %out: bf16[1,4,64] = embedding(%ids, %table)
  output %out
})");
  ASSERT_TRUE(graph.ok()) << graph.status();
  absl::StatusOr<BoundGraph> bound = BoundGraph::Create(*graph, {}, 1);
  ASSERT_TRUE(bound.ok());
  const BoundRegion region(*bound, 0);
  const KernelFamily* family = GlobalKernelRegistry().Find("embedding_gather");
  const Tactic tactic{
      "embedding_gather", family->version(), {{"threads", 32}, {"tokens_per_cta", 1}, {"vec", 8}}};
  absl::StatusOr<DeviceBuffer> ids = DeviceBuffer::Allocate(GpuEnvironment::device(), 16);
  absl::StatusOr<DeviceBuffer> table =
      DeviceBuffer::Allocate(GpuEnvironment::device(), 10 * 64 * 2);
  absl::StatusOr<DeviceBuffer> out = DeviceBuffer::Allocate(GpuEnvironment::device(), 4 * 64 * 2);
  absl::StatusOr<DeviceBuffer> error = DeviceBuffer::Allocate(GpuEnvironment::device(), 4);
  ASSERT_TRUE(ids.ok() && table.ok() && out.ok() && error.ok());
  const int32_t host_ids[4] = {1, 10, 2, -3};
  ASSERT_TRUE(ids->CopyFromHost(host_ids, 16).ok());
  ASSERT_TRUE(table->Fill(0x3f).ok());
  ASSERT_TRUE(out->Fill(0xff).ok());
  ASSERT_TRUE(error->Fill(0).ok());
  RegionBuffers buffers;
  buffers.operands = {ids->data(), table->data()};
  buffers.results = {out->data()};
  buffers.error = error->as<int>();
  ASSERT_NO_FATAL_FAILURE(RunOnce(*family, region, tactic, buffers));
  int error_word = 0;
  ASSERT_TRUE(error->CopyToHost(&error_word, 4).ok());
  EXPECT_EQ(error_word, 4);  // the last bad token (index 3) + 1
  std::vector<uint16_t> rows(4 * 64);
  ASSERT_TRUE(out->CopyToHost(rows.data(), 4 * 64 * 2).ok());
  for (int t = 0; t < 4; ++t) {
    const uint16_t want = (t == 1 || t == 3) ? 0 : 0x3f3f;  // bad ids give zero rows
    EXPECT_EQ(rows[static_cast<size_t>(t) * 64], want) << "token " << t;
    EXPECT_EQ(rows[static_cast<size_t>(t) * 64 + 63], want) << "token " << t;
  }
}

// Both expert families follow the embedding's contract for expert ids outside [0, E): the
// selection's output row is zero and the error word rises to the flat token index + 1
// (selections 1 and 5 of 3 tokens with K = 2 are bad: tokens 0 and 2, so the word reads 3);
// the good selections are computed as usual.
TEST(KernelsGpuDeviceTest, BadExpertIdsRaiseTheErrorWord) {
  TP_REQUIRE_GPU();
  absl::StatusOr<ir::Graph> graph = ir::ParseGraph(R"(graph @g {
  input %x: bf16[1,3,64]
  input %ids: i32[1,3,2]
  weight %w: bf16[4,16,64] = "w"
  %y: bf16[1,3,2,16] = expert_linear(%x, %ids, %w)
  output %y
})");
  ASSERT_TRUE(graph.ok()) << graph.status();
  absl::StatusOr<BoundGraph> bound = BoundGraph::Create(*graph, {}, 1);
  ASSERT_TRUE(bound.ok());
  const BoundRegion region(*bound, 0);
  const std::vector<std::pair<std::string, Params>> tactics = {
      {"expert_gemv", {{"rows_per_cta", 8}, {"threads", 64}, {"vec", 8}}},
      {"expert_gemm",
       {{"stages", 2},
        {"tile_k", 32},
        {"tile_m", 16},
        {"tile_n", 32},
        {"warps_m", 1},
        {"warps_n", 1}}}};
  for (const auto& [name, params] : tactics) {
    SCOPED_TRACE(name);
    const KernelFamily* family = GlobalKernelRegistry().Find(name);
    ASSERT_NE(family, nullptr);
    const Tactic tactic{name, family->version(), params};
    const Device& device = GpuEnvironment::device();
    absl::StatusOr<DeviceBuffer> x = DeviceBuffer::Allocate(device, 3 * 64 * 2);
    absl::StatusOr<DeviceBuffer> ids = DeviceBuffer::Allocate(device, 6 * 4);
    absl::StatusOr<DeviceBuffer> w = DeviceBuffer::Allocate(device, 4 * 16 * 64 * 2);
    absl::StatusOr<DeviceBuffer> out = DeviceBuffer::Allocate(device, 6 * 16 * 2);
    absl::StatusOr<DeviceBuffer> workspace = DeviceBuffer::Allocate(
        device, std::max<int64_t>(16, family->WorkspaceBytes(tactic, region)));
    absl::StatusOr<DeviceBuffer> error = DeviceBuffer::Allocate(device, 4);
    ASSERT_TRUE(x.ok() && ids.ok() && w.ok() && out.ok() && workspace.ok() && error.ok());
    const int32_t host_ids[6] = {0, 4, 3, 1, 2, -1};
    ASSERT_TRUE(ids->CopyFromHost(host_ids, 24).ok());
    ASSERT_TRUE(x->Fill(0x3f).ok());  // bf16 0.746...
    ASSERT_TRUE(w->Fill(0x3f).ok());
    ASSERT_TRUE(out->Fill(0xff).ok());
    ASSERT_TRUE(error->Fill(0).ok());
    RegionBuffers buffers;
    buffers.operands = {x->data(), ids->data(), w->data()};
    buffers.results = {out->data()};
    buffers.workspace = workspace->data();
    buffers.error = error->as<int>();
    ASSERT_NO_FATAL_FAILURE(RunOnce(*family, region, tactic, buffers));
    int error_word = 0;
    ASSERT_TRUE(error->CopyToHost(&error_word, 4).ok());
    EXPECT_EQ(error_word, 3);
    std::vector<uint16_t> rows(6 * 16);
    ASSERT_TRUE(out->CopyToHost(rows.data(), 6 * 16 * 2).ok());
    for (int s = 0; s < 6; ++s) {
      for (int n = 0; n < 16; ++n) {
        const uint16_t v = rows[static_cast<size_t>(s) * 16 + n];
        if (s == 1 || s == 5) {
          EXPECT_EQ(v, 0) << "selection " << s << ", row " << n;
        } else {
          EXPECT_TRUE(v != 0 && (v & 0x7f80) != 0x7f80) << "selection " << s << ", row " << n;
        }
      }
    }
  }
}

// The fused RoPE + KV-write + attention kernel keeps rope_kv_write's contract for a position
// outside the cache: that token writes no cache row and raises the error word (token 1 of 2:
// the word reads 2), its output row is zero, and the other token is served as usual.
TEST(KernelsGpuDeviceTest, RopeKvWriteAttentionReportsPositionsOutsideTheCache) {
  TP_REQUIRE_GPU();
  constexpr int kCapacity = 16, kDim = 64, kQHeads = 2;
  absl::StatusOr<ir::Graph> graph = ir::ParseGraph(
      RopeAttentionGraph(false, 1, 2, kQHeads, 1, kCapacity, kDim, "bf16", 0, kQwenRope));
  ASSERT_TRUE(graph.ok()) << graph.status();
  absl::StatusOr<BoundGraph> bound = BoundGraph::Create(*graph, {}, kCapacity);
  ASSERT_TRUE(bound.ok()) << bound.status();
  const BoundRegion region(*bound, 0);
  const KernelFamily* family = GlobalKernelRegistry().Find("attention_decode");
  const Tactic tactic{
      "attention_decode",
      family->version(),
      {{"head_split", 1}, {"kv_chunk", 32}, {"splits", 1}, {"stages", 1}, {"warps", 2}}};
  const Device& device = GpuEnvironment::device();
  const int64_t cache_bytes = kCapacity * kDim * 2;
  absl::StatusOr<DeviceBuffer> qkv = DeviceBuffer::Allocate(device, 2 * 4 * kDim * 2);
  absl::StatusOr<DeviceBuffer> k_cache = DeviceBuffer::Allocate(device, cache_bytes);
  absl::StatusOr<DeviceBuffer> v_cache = DeviceBuffer::Allocate(device, cache_bytes);
  absl::StatusOr<DeviceBuffer> positions = DeviceBuffer::Allocate(device, 8);
  absl::StatusOr<DeviceBuffer> out = DeviceBuffer::Allocate(device, 2 * kQHeads * kDim * 2);
  absl::StatusOr<DeviceBuffer> inv_freq = DeviceBuffer::Allocate(device, kDim / 2 * 4);
  absl::StatusOr<DeviceBuffer> error = DeviceBuffer::Allocate(device, 4);
  ASSERT_TRUE(qkv.ok() && k_cache.ok() && v_cache.ok() && positions.ok() && out.ok() &&
              inv_freq.ok() && error.ok());
  const int32_t host_positions[2] = {5, kCapacity};
  ASSERT_TRUE(positions->CopyFromHost(host_positions, 8).ok());
  ASSERT_TRUE(qkv->Fill(0x40).ok());  // bf16 3.0
  ASSERT_TRUE(k_cache->Fill(0x3f).ok());
  ASSERT_TRUE(v_cache->Fill(0x3f).ok());
  ASSERT_TRUE(out->Fill(0xff).ok());
  ASSERT_TRUE(error->Fill(0).ok());
  absl::StatusOr<ir::RopeParams> rope = ir::RopeParamsFromAttributes(region.region().attrs);
  ASSERT_TRUE(rope.ok()) << rope.status();
  const std::vector<float> freqs = ir::RopeInvFreq(*rope, kDim);
  ASSERT_TRUE(inv_freq->CopyFromHost(freqs.data(), kDim / 2 * 4).ok());
  RegionBuffers buffers;
  buffers.operands = {qkv->data(), k_cache->data(), v_cache->data(), positions->data()};
  buffers.results = {out->data(), k_cache->data(), v_cache->data()};
  buffers.rope_inv_freq = inv_freq->as<float>();
  buffers.error = error->as<int>();
  ASSERT_NO_FATAL_FAILURE(RunOnce(*family, region, tactic, buffers));
  int error_word = 0;
  ASSERT_TRUE(error->CopyToHost(&error_word, 4).ok());
  EXPECT_EQ(error_word, 2);
  std::vector<uint16_t> k(kCapacity * kDim), v(kCapacity * kDim), o(2 * kQHeads * kDim);
  ASSERT_TRUE(k_cache->CopyToHost(k.data(), cache_bytes).ok());
  ASSERT_TRUE(v_cache->CopyToHost(v.data(), cache_bytes).ok());
  ASSERT_TRUE(out->CopyToHost(o.data(), static_cast<int64_t>(o.size()) * 2).ok());
  for (int row = 0; row < kCapacity; ++row) {
    const uint16_t k0 = k[static_cast<size_t>(row) * kDim];
    const uint16_t v0 = v[static_cast<size_t>(row) * kDim];
    if (row == 5) {
      EXPECT_NE(k0, 0x3f3f) << "the rotated k row of token 0";
      EXPECT_EQ(v0, 0x4040) << "the v row of token 0";
    } else {
      EXPECT_EQ(k0, 0x3f3f) << "row " << row;
      EXPECT_EQ(v0, 0x3f3f) << "row " << row;
    }
  }
  for (size_t e = 0; e < kQHeads * kDim; ++e) {
    EXPECT_NE(o[e] & 0x7f80, 0x7f80) << "token 0, element " << e << " is not finite";
    EXPECT_EQ(o[kQHeads * kDim + e], 0) << "token 1, element " << e;
  }
}

// mla_attention keeps the "Bad indices" contract (docs/kernels.md) for a position outside the
// cache, on CUDA cores and on tensor cores: that token sees no row, so its output row is zero,
// and it raises the error word (token 1 of 2: the word reads 2); the other token, in the same
// token tile (the same 16-row tile on tensor cores), is served as usual.
TEST(KernelsGpuDeviceTest, MlaAttentionReportsPositionsOutsideTheCache) {
  TP_REQUIRE_GPU();
  constexpr int kCapacity = 16, kHeads = 3, kNope = 16, kRope = 16, kLatent = 64, kV = 24;
  absl::StatusOr<ir::Graph> graph = ir::ParseGraph(absl::StrCat(
      "graph @g {\n  input %q_nope: bf16[1,2,", kHeads, ",", kNope, "]\n  input %q_rope: bf16[1,2,",
      kHeads, ",", kRope, "]\n  input %latent: bf16[1,1,", kCapacity, ",", kLatent,
      "]\n  input %rope: bf16[1,1,", kCapacity, ",", kRope, "]\n  weight %w: bf16[",
      kHeads * (kNope + kV), ",", kLatent,
      "] = \"w\"\n  input %positions: i32[1,2]\n  %o: bf16[1,2,", kHeads, ",", kV,
      "] = mla_attention(%q_nope, %q_rope, %latent, %rope, %w, %positions) {scale = 0.2}\n"
      "  output %o\n}\n"));
  ASSERT_TRUE(graph.ok()) << graph.status();
  absl::StatusOr<BoundGraph> bound = BoundGraph::Create(*graph, {}, kCapacity);
  ASSERT_TRUE(bound.ok()) << bound.status();
  const BoundRegion region(*bound, 0);
  const KernelFamily* family = GlobalKernelRegistry().Find("mla_attention");
  ASSERT_NE(family, nullptr);
  // Two new tokens: the CUDA-core kernel (the tensor cores serve decode steps, T = 1).
  for (const int mma : {0}) {
    SCOPED_TRACE(absl::StrCat("mma ", mma));
    const Tactic tactic{"mla_attention",
                        family->version(),
                        {{"combine_rows", 8},
                         {"heads_per_cta", mma ? 16 : 4},
                         {"kv_chunk", mma ? 32 : 8},
                         {"mma", mma},
                         {"splits", mma ? 1 : 2},  // a 32-row chunk covers the cache
                         {"threads", mma ? 128 : 64}}};
    ASSERT_TRUE(family->ValidateTactic(tactic, region, GpuEnvironment::Target()).ok());
    const Device& device = GpuEnvironment::device();
    std::vector<DeviceBuffer> operands;
    for (int i = 0; i < region.num_operands(); ++i) {
      absl::StatusOr<DeviceBuffer> b = DeviceBuffer::Allocate(device, region.operand_bytes(i));
      ASSERT_TRUE(b.ok()) << b.status();
      ASSERT_TRUE(b->Fill(0x3f).ok());  // bf16 0.746
      operands.push_back(*std::move(b));
    }
    const int32_t host_positions[2] = {5, kCapacity};
    ASSERT_TRUE(operands[5].CopyFromHost(host_positions, 8).ok());
    absl::StatusOr<DeviceBuffer> out = DeviceBuffer::Allocate(device, region.result_bytes(0));
    absl::StatusOr<DeviceBuffer> workspace =
        DeviceBuffer::Allocate(device, family->WorkspaceBytes(tactic, region));
    absl::StatusOr<DeviceBuffer> error = DeviceBuffer::Allocate(device, 4);
    ASSERT_TRUE(out.ok() && workspace.ok() && error.ok());
    ASSERT_TRUE(out->Fill(0xff).ok());
    ASSERT_TRUE(workspace->Fill(0xff).ok());
    ASSERT_TRUE(error->Fill(0).ok());
    RegionBuffers buffers;
    for (DeviceBuffer& b : operands) buffers.operands.push_back(b.data());
    buffers.results = {out->data()};
    buffers.workspace = workspace->data();
    buffers.error = error->as<int>();
    ASSERT_NO_FATAL_FAILURE(RunOnce(*family, region, tactic, buffers));
    int error_word = 0;
    ASSERT_TRUE(error->CopyToHost(&error_word, 4).ok());
    EXPECT_EQ(error_word, 2);
    std::vector<uint16_t> o(2 * kHeads * kV);
    ASSERT_TRUE(out->CopyToHost(o.data(), static_cast<int64_t>(o.size()) * 2).ok());
    for (size_t e = 0; e < kHeads * kV; ++e) {
      EXPECT_NE(o[e] & 0x7f80, 0x7f80) << "token 0, element " << e << " is not finite";
      EXPECT_NE(o[e], 0) << "token 0, element " << e;
      EXPECT_EQ(o[kHeads * kV + e], 0) << "token 1, element " << e;
    }
  }
}

// mla_kv_write_attention keeps both contracts for a position outside the cache: that token
// writes no cache row (its rows of the latent and rope caches keep their poison), raises the
// error word (the flat token 1 of 2: the word reads 2) and gets a zero output row, while the
// other token writes its rows (the normalized latent is the norm weight, 3.0, for a constant
// row; the rotated key differs from the poison) and is served. Two new tokens of one sequence
// on CUDA cores, and one token of each of two sequences on tensor cores.
TEST(KernelsGpuDeviceTest, MlaKvWriteAttentionReportsPositionsOutsideTheCache) {
  TP_REQUIRE_GPU();
  constexpr int kCapacity = 16, kHeads = 3, kNope = 16, kRope = 16, kLatent = 64, kV = 24;
  const KernelFamily* family = GlobalKernelRegistry().Find("mla_attention");
  ASSERT_NE(family, nullptr);
  for (const int mma : {0, 1}) {
    SCOPED_TRACE(absl::StrCat("mma ", mma));
    const int batch = mma ? 2 : 1, tokens = mma ? 1 : 2;
    const std::string bt = absl::StrCat(batch, ",", tokens);
    const std::string cache = absl::StrCat("[", batch, ",1,", kCapacity, ",");
    absl::StatusOr<ir::Graph> graph = ir::ParseGraph(absl::StrCat(
        "graph @g {\n  input %q_nope: bf16[", bt, ",", kHeads, ",", kNope,
        "]\n  input %q_pe: bf16[", bt, ",", kHeads, ",", kRope, "]\n  input %kv_a: bf16[", bt,
        ",", kLatent + kRope, "]\n  weight %norm: bf16[", kLatent,
        "] = \"norm\"\n  input %latent: bf16", cache, kLatent, "]\n  input %rope: bf16", cache,
        kRope, "]\n  weight %w: bf16[", kHeads * (kNope + kV), ",", kLatent,
        "] = \"w\"\n  input %positions: i32[", bt, "]\n  %o: bf16[", bt, ",", kHeads, ",", kV,
        "], %lc: bf16", cache, kLatent, "] inplace(%latent), %rc: bf16", cache, kRope,
        "] inplace(%rope) = mla_kv_write_attention(%q_nope, %q_pe, %kv_a, %norm, %latent, "
        "%rope, %w, %positions) {eps = 1e-06, rope_type = \"default\", scale = 0.2, theta = "
        "10000.0}\n  output %o\n  output %lc\n  output %rc\n}\n"));
    ASSERT_TRUE(graph.ok()) << graph.status();
    absl::StatusOr<BoundGraph> bound = BoundGraph::Create(*graph, {}, kCapacity);
    ASSERT_TRUE(bound.ok()) << bound.status();
    const BoundRegion region(*bound, 0);
    const Tactic tactic{"mla_attention",
                        family->version(),
                        {{"combine_rows", 8},
                         {"heads_per_cta", mma ? 16 : 4},
                         {"kv_chunk", mma ? 32 : 8},
                         {"mma", mma},
                         {"splits", mma ? 1 : 2},
                         {"threads", mma ? 128 : 64}}};
    ASSERT_TRUE(family->ValidateTactic(tactic, region, GpuEnvironment::Target()).ok());
    const Device& device = GpuEnvironment::device();
    std::vector<DeviceBuffer> operands;
    for (int i = 0; i < region.num_operands(); ++i) {
      absl::StatusOr<DeviceBuffer> b = DeviceBuffer::Allocate(device, region.operand_bytes(i));
      ASSERT_TRUE(b.ok()) << b.status();
      // The norm weight 3.0, everything else 0.746 (the caches' poison).
      ASSERT_TRUE(b->Fill(i == 3 ? 0x40 : 0x3f).ok());
      operands.push_back(*std::move(b));
    }
    const int32_t host_positions[2] = {5, kCapacity};
    ASSERT_TRUE(operands[7].CopyFromHost(host_positions, 8).ok());
    absl::StatusOr<DeviceBuffer> out = DeviceBuffer::Allocate(device, region.result_bytes(0));
    absl::StatusOr<DeviceBuffer> workspace =
        DeviceBuffer::Allocate(device, family->WorkspaceBytes(tactic, region));
    absl::StatusOr<DeviceBuffer> error = DeviceBuffer::Allocate(device, 4);
    absl::StatusOr<DeviceBuffer> inv_freq = DeviceBuffer::Allocate(device, kRope / 2 * 4);
    ASSERT_TRUE(out.ok() && workspace.ok() && error.ok() && inv_freq.ok());
    ASSERT_TRUE(out->Fill(0xff).ok());
    ASSERT_TRUE(workspace->Fill(0xff).ok());
    ASSERT_TRUE(error->Fill(0).ok());
    absl::StatusOr<ir::RopeParams> rope = ir::RopeParamsFromAttributes(region.region().attrs);
    ASSERT_TRUE(rope.ok()) << rope.status();
    const std::vector<float> freqs = ir::RopeInvFreq(*rope, kRope);
    ASSERT_TRUE(inv_freq->CopyFromHost(freqs.data(), kRope / 2 * 4).ok());
    RegionBuffers buffers;
    for (DeviceBuffer& b : operands) buffers.operands.push_back(b.data());
    buffers.results = {out->data(), operands[4].data(), operands[5].data()};
    buffers.workspace = workspace->data();
    buffers.rope_inv_freq = inv_freq->as<float>();
    buffers.error = error->as<int>();
    ASSERT_NO_FATAL_FAILURE(RunOnce(*family, region, tactic, buffers));
    int error_word = 0;
    ASSERT_TRUE(error->CopyToHost(&error_word, 4).ok());
    EXPECT_EQ(error_word, 2);
    // Token 0 (sequence 0) wrote row 5 of sequence 0's caches; nothing else changed.
    std::vector<uint16_t> latent(static_cast<size_t>(batch) * kCapacity * kLatent);
    std::vector<uint16_t> rope_rows(static_cast<size_t>(batch) * kCapacity * kRope);
    ASSERT_TRUE(operands[4].CopyToHost(latent.data(), operands[4].size()).ok());
    ASSERT_TRUE(operands[5].CopyToHost(rope_rows.data(), operands[5].size()).ok());
    for (int row = 0; row < batch * kCapacity; ++row) {
      const uint16_t l0 = latent[static_cast<size_t>(row) * kLatent];
      const uint16_t r0 = rope_rows[static_cast<size_t>(row) * kRope];
      if (row == 5) {
        EXPECT_EQ(l0, 0x4040) << "the normalized latent of token 0";
        EXPECT_NE(r0, 0x3f3f) << "the rotated key of token 0";
      } else {
        EXPECT_EQ(l0, 0x3f3f) << "latent row " << row;
        EXPECT_EQ(r0, 0x3f3f) << "rope row " << row;
      }
    }
    std::vector<uint16_t> o(2 * kHeads * kV);
    ASSERT_TRUE(out->CopyToHost(o.data(), static_cast<int64_t>(o.size()) * 2).ok());
    for (size_t e = 0; e < kHeads * kV; ++e) {
      EXPECT_NE(o[e] & 0x7f80, 0x7f80) << "token 0, element " << e << " is not finite";
      EXPECT_NE(o[e], 0) << "token 0, element " << e;
      EXPECT_EQ(o[kHeads * kV + e], 0) << "token 1, element " << e;
    }
  }
}

// mla_prefill keeps the same contract over a prompt: token 1 of 16 lies past the cache, so
// its row is zero and the error word reads 2, while the other tokens are served. The
// workspace starts as NaNs: cache rows past the largest valid position are never expanded,
// and no query may read them.
TEST(KernelsGpuDeviceTest, MlaPrefillReportsPositionsOutsideTheCache) {
  TP_REQUIRE_GPU();
  constexpr int kCapacity = 64, kTokens = 16, kHeads = 3, kNope = 32, kRope = 16, kLatent = 64,
                kV = 32;
  absl::StatusOr<ir::Graph> graph = ir::ParseGraph(absl::StrCat(
      "graph @g {\n  input %q_nope: bf16[1,", kTokens, ",", kHeads, ",", kNope,
      "]\n  input %q_rope: bf16[1,", kTokens, ",", kHeads, ",", kRope,
      "]\n  input %latent: bf16[1,1,", kCapacity, ",", kLatent, "]\n  input %rope: bf16[1,1,",
      kCapacity, ",", kRope, "]\n  weight %w: bf16[", kHeads * (kNope + kV), ",", kLatent,
      "] = \"w\"\n  input %positions: i32[1,", kTokens, "]\n  %o: bf16[1,", kTokens, ",", kHeads,
      ",", kV,
      "] = mla_attention(%q_nope, %q_rope, %latent, %rope, %w, %positions) {scale = 0.2}\n"
      "  output %o\n}\n"));
  ASSERT_TRUE(graph.ok()) << graph.status();
  absl::StatusOr<BoundGraph> bound = BoundGraph::Create(*graph, {}, kCapacity);
  ASSERT_TRUE(bound.ok()) << bound.status();
  const BoundRegion region(*bound, 0);
  const KernelFamily* family = GlobalKernelRegistry().Find("mla_prefill");
  ASSERT_NE(family, nullptr);
  const Tactic tactic{
      "mla_prefill",
      family->version(),
      {{"expand_tile_m", 64}, {"stages", 2}, {"tile_kv", 32}, {"tile_q", 16}, {"warps", 1}}};
  ASSERT_TRUE(family->ValidateTactic(tactic, region, GpuEnvironment::Target()).ok());
  const Device& device = GpuEnvironment::device();
  std::vector<DeviceBuffer> operands;
  for (int i = 0; i < region.num_operands(); ++i) {
    absl::StatusOr<DeviceBuffer> b = DeviceBuffer::Allocate(device, region.operand_bytes(i));
    ASSERT_TRUE(b.ok()) << b.status();
    ASSERT_TRUE(b->Fill(0x3f).ok());  // bf16 0.746
    operands.push_back(*std::move(b));
  }
  int32_t host_positions[kTokens];
  for (int t = 0; t < kTokens; ++t) host_positions[t] = t;
  host_positions[1] = kCapacity;
  ASSERT_TRUE(operands[5].CopyFromHost(host_positions, sizeof(host_positions)).ok());
  absl::StatusOr<DeviceBuffer> out = DeviceBuffer::Allocate(device, region.result_bytes(0));
  absl::StatusOr<DeviceBuffer> workspace =
      DeviceBuffer::Allocate(device, family->WorkspaceBytes(tactic, region));
  absl::StatusOr<DeviceBuffer> error = DeviceBuffer::Allocate(device, 4);
  ASSERT_TRUE(out.ok() && workspace.ok() && error.ok());
  ASSERT_TRUE(out->Fill(0xff).ok());
  ASSERT_TRUE(workspace->Fill(0xff).ok());
  ASSERT_TRUE(error->Fill(0).ok());
  RegionBuffers buffers;
  for (DeviceBuffer& b : operands) buffers.operands.push_back(b.data());
  buffers.results = {out->data()};
  buffers.workspace = workspace->data();
  buffers.error = error->as<int>();
  ASSERT_NO_FATAL_FAILURE(RunOnce(*family, region, tactic, buffers));
  int error_word = 0;
  ASSERT_TRUE(error->CopyToHost(&error_word, 4).ok());
  EXPECT_EQ(error_word, 2);
  std::vector<uint16_t> o(kTokens * kHeads * kV);
  ASSERT_TRUE(out->CopyToHost(o.data(), static_cast<int64_t>(o.size()) * 2).ok());
  for (int t = 0; t < kTokens; ++t) {
    for (int e = 0; e < kHeads * kV; ++e) {
      const uint16_t v = o[static_cast<size_t>(t * kHeads * kV + e)];
      if (t == 1) {
        EXPECT_EQ(v, 0) << "token 1, element " << e;
      } else {
        EXPECT_NE(v & 0x7f80, 0x7f80) << "token " << t << ", element " << e << " is not finite";
        EXPECT_NE(v, 0) << "token " << t << ", element " << e;
      }
    }
  }
}

TEST(KernelsGpuDeviceTest, DeviceIsDescribed) {
  TP_REQUIRE_GPU();
  const device::DeviceProperties& p = GpuEnvironment::device().properties();
  EXPECT_GE(p.sm, device::kMinSm);
  EXPECT_GT(p.sm_count, 0);
  EXPECT_GT(p.total_memory_bytes, 0);
  std::printf("%s: %d SMs, L2 %lld bytes, %lld bytes of shared memory per block, driver %d\n",
              GpuEnvironment::device().Label().c_str(), p.sm_count,
              static_cast<long long>(p.l2_bytes),
              static_cast<long long>(p.shared_memory_per_block_optin_bytes), p.driver_version);
}

TEST(KernelsGpuDeviceTest, OutOfMemoryNamesTheSizes) {
  TP_REQUIRE_GPU();
  absl::StatusOr<DeviceBuffer> huge =
      DeviceBuffer::Allocate(GpuEnvironment::device(), int64_t{1} << 50);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(huge.status().message()),
              ::testing::HasSubstr("cannot allocate 1125899906842624 bytes on device"));
  EXPECT_THAT(std::string(huge.status().message()), ::testing::HasSubstr("bytes free of"));
}

}  // namespace
}  // namespace tileplan::kernels::testing
