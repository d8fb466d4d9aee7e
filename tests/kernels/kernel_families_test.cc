#include <algorithm>
#include <array>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "base/align.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/core/kernel_family.h"
#include "kernels/core/template_launch.h"
#include "kernels/families/registry.h"
#include "regions/kinds.h"
#include "targets/target.h"
#include "tests/kernels/kernels_testing.h"

namespace tileplan::kernels {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::MustBind;
using testing::MustParseVerified;
using testing::MustTarget;
using testing::RegionNamed;
using testing::TestGraph;

const ShapeBindings kDecode = {{"B", 1}, {"Smax", 4096}, {"T", 1}};
const ShapeBindings kPrefill = {{"B", 1}, {"Smax", 4096}, {"T", 128}};

std::vector<std::string> FamilyNames(const std::vector<const KernelFamily*>& families) {
  std::vector<std::string> names;
  for (const KernelFamily* f : families) names.emplace_back(f->name());
  return names;
}

// One attention region over a KV cache: q [B,T,heads,head_dim], k and v
// [B,kv_heads,Smax,head_dim], all of `dtype`, no window.
ir::Graph AttentionGraph(absl::string_view dtype, int heads, int kv_heads, int head_dim,
                         double scale) {
  const std::string q = absl::StrCat(dtype, "[B,T,", heads, ",", head_dim, "]");
  const std::string kv = absl::StrCat(dtype, "[B,", kv_heads, ",Smax,", head_dim, "]");
  return MustParseVerified(absl::StrCat(
      "graph @g {\n  input %q: ", q, "\n  input %positions: i32[B,T]\n  state %k: ", kv,
      "\n  state %v: ", kv, "\n  %a: ", q, " = attention(%q, %k, %v, %positions) {scale = ", scale,
      ", sliding_window = 0}\n  output %a\n}"));
}

// Kinds the planner forms for decode phases only (docs/planner.md): fuse_norm_linear's GEMV
// prologues for a few rows, the RoPE + KV-write attention and the fused MoE block; their
// families serve a few new tokens per sequence, so the prefill binding of the typical graph
// has none.
bool IsDecodeOnlyKind(absl::string_view kind) {
  return kind == "rms_norm_linear" || kind == "rms_norm_linear_swiglu" ||
         kind == "rope_kv_write_attention" || kind == "qk_norm_rope_kv_write_attention" ||
         kind == "moe" || kind == "rms_norm_moe";
}

TEST(KernelFamiliesTest, EveryRegionKindHasAFamilyForItsTypicalInstance) {
  const ir::Graph graph = TestGraph("typical_regions.tpir");
  const KernelRegistry& registry = GlobalKernelRegistry();
  for (const ShapeBindings& bindings : {kDecode, kPrefill}) {
    const BoundGraph g = MustBind(graph, bindings, bindings.at("T"));
    for (const std::string& kind : ir::KindNames()) {
      if (bindings.at("T") > 1 && IsDecodeOnlyKind(kind)) continue;
      SCOPED_TRACE(kind + " with " + BindingsString(bindings));
      int instances = 0;
      for (int i = 0; i < static_cast<int>(graph.regions().size()); ++i) {
        if (graph.regions()[static_cast<size_t>(i)].kind != kind) continue;
        ++instances;
        const BoundRegion region(g, i);
        for (const std::string& target_name : targets::BundledTargetNames()) {
          const TargetDescription target = MustTarget(target_name);
          std::vector<std::string> reasons;
          bool implemented = false;
          for (const KernelFamily* family : registry.FamiliesFor(kind)) {
            absl::Status can = family->CanImplement(region, target);
            if (!can.ok()) {
              reasons.push_back(std::string(family->name()) + ": " + std::string(can.message()));
              continue;
            }
            implemented = true;
            absl::StatusOr<CandidateTable> table = family->Candidates(region, target);
            ASSERT_TRUE(table.ok()) << table.status();
            EXPECT_TRUE(family->ValidateTactic(table->default_tactic, region, target).ok());
            absl::StatusOr<Tactic> default_tactic = family->DefaultTactic(region, target);
            ASSERT_TRUE(default_tactic.ok()) << default_tactic.status();
            EXPECT_EQ(*default_tactic, table->default_tactic);
            const LaunchGeometry geometry = family->Geometry(table->default_tactic, region);
            const int launches = family->Launches(table->default_tactic, region);
            EXPECT_EQ(launches == 0, geometry.ctas() == 0) << family->name();
            EXPECT_LE(geometry.dynamic_shared_memory_bytes, target.shared_memory_per_block_bytes());
            EXPECT_LE(geometry.block[0] * geometry.block[1] * geometry.block[2], 1024);
          }
          EXPECT_TRUE(implemented)
              << region.Label() << " on " << target_name << ": " << absl::StrJoin(reasons, "; ");
        }
      }
      EXPECT_GT(instances, 0) << "typical_regions.tpir has no region of kind " << kind;
    }
  }
}

TEST(KernelFamiliesTest, EveryFamilyIsWellFormed) {
  const KernelRegistry& registry = GlobalKernelRegistry();
  EXPECT_THAT(
      FamilyNames(registry.families()),
      ElementsAre("argmax", "attention_decode", "attention_prefill", "collective", "cublaslt_gemm",
                  "elementwise", "embedding_gather", "expert_gemm", "expert_gemv", "gemv",
                  "gemv_mma", "mla_attention", "mla_prefill", "moe_gemv", "moe_routing", "rms_norm",
                  "rope_kv_write", "view", "wgmma_gemm"));
  for (const KernelFamily* f : registry.families()) {
    EXPECT_GE(f->version(), 1) << f->name();
    std::vector<std::string> kinds = f->kinds();
    EXPECT_FALSE(kinds.empty()) << f->name();
    EXPECT_TRUE(std::is_sorted(kinds.begin(), kinds.end())) << f->name();
  }
  const std::vector<std::string> kinds = ir::KindNames();
  for (const KernelFamily* f : registry.families()) {
    for (const std::string& kind : f->kinds()) {
      EXPECT_TRUE(std::binary_search(kinds.begin(), kinds.end(), kind))
          << f->name() << " implements unknown kind " << kind;
    }
  }
  EXPECT_THAT(FamilyNames(registry.FamiliesFor("linear")),
              ElementsAre("cublaslt_gemm", "gemv", "gemv_mma", "wgmma_gemm"));
  EXPECT_THAT(FamilyNames(registry.FamiliesFor("attention")),
              ElementsAre("attention_decode", "attention_prefill"));
  EXPECT_THAT(FamilyNames(registry.FamiliesFor("mla_attention")),
              ElementsAre("mla_attention", "mla_prefill"));
  EXPECT_THAT(FamilyNames(registry.FamiliesFor("rope_kv_write")), ElementsAre("rope_kv_write"));
  EXPECT_THAT(FamilyNames(registry.FamiliesFor("qk_norm_rope_kv_write_attention")),
              ElementsAre("attention_decode"));
  EXPECT_THAT(FamilyNames(registry.FamiliesFor("rope_kv_write_attention")),
              ElementsAre("attention_decode"));
  EXPECT_THAT(FamilyNames(registry.FamiliesFor("swiglu")), ElementsAre("elementwise"));
  EXPECT_THAT(FamilyNames(registry.FamiliesFor("add_rms_norm")), ElementsAre("rms_norm"));
  EXPECT_THAT(FamilyNames(registry.FamiliesFor("linear_swiglu")),
              ElementsAre("cublaslt_gemm", "gemv", "gemv_mma", "wgmma_gemm"));
  // cuBLASLt has no norm prologue.
  EXPECT_THAT(FamilyNames(registry.FamiliesFor("rms_norm_linear")),
              ElementsAre("gemv", "gemv_mma"));
  EXPECT_THAT(FamilyNames(registry.FamiliesFor("rms_norm_linear_swiglu")),
              ElementsAre("gemv", "gemv_mma"));
  EXPECT_THAT(FamilyNames(registry.FamiliesFor("moe")), ElementsAre("moe_gemv"));
  EXPECT_THAT(FamilyNames(registry.FamiliesFor("rms_norm_moe")), ElementsAre("moe_gemv"));
  EXPECT_THAT(FamilyNames(registry.FamiliesFor("all_reduce")), ElementsAre("collective"));
  EXPECT_THAT(FamilyNames(registry.FamiliesFor("sharded_argmax")), ElementsAre("collective"));
  EXPECT_TRUE(registry.FamiliesFor("no_such_kind").empty());
}

TEST(KernelFamiliesTest, RegisteringAFamilyTwiceFails) {
  KernelRegistry registry;
  const FamilyFactory make = BuiltInFamilyFactories().front();
  ASSERT_TRUE(registry.Register(make()).ok());
  absl::Status again = registry.Register(make());
  EXPECT_EQ(again.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(again.message(),
              HasSubstr(absl::StrCat("'", registry.families().front()->name(), "'")));
}

TEST(KernelFamiliesTest, RefusalsStateTheReason) {
  const TargetDescription h200 = MustTarget("h200");
  const KernelRegistry& registry = GlobalKernelRegistry();
  const ir::Graph graph = TestGraph("typical_regions.tpir");
  const BoundGraph prefill = MustBind(graph, kPrefill, 128);
  const BoundGraph decode = MustBind(graph, kDecode, 100);

  const BoundRegion attn_prefill(prefill, RegionNamed(graph, "attn"));
  absl::Status s = registry.Find("attention_decode")->CanImplement(attn_prefill, h200);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("T = 128 new tokens exceed 16"));
  EXPECT_TRUE(registry.Find("attention_prefill")->CanImplement(attn_prefill, h200).ok());

  const BoundRegion qkv_prefill(prefill, RegionNamed(graph, "qkv"));
  s = registry.Find("gemv")->CanImplement(qkv_prefill, h200);
  EXPECT_THAT(s.message(), HasSubstr("M = 128 rows of operand 0 (%n) exceed 16"));
  EXPECT_TRUE(registry.Find("gemv")
                  ->CanImplement(BoundRegion(decode, RegionNamed(graph, "qkv")), h200)
                  .ok());

  s = registry.Find("gemv")->CanImplement(BoundRegion(decode, RegionNamed(graph, "attn")), h200);
  EXPECT_THAT(s.message(), HasSubstr("kind 'attention' is not one of linear, linear_residual"));

  s = registry.Find("moe_gemv")
          ->CanImplement(BoundRegion(prefill, RegionNamed(graph, "fmoe")), h200);
  EXPECT_THAT(s.message(), HasSubstr("M = 128 tokens exceed 16"));

  // head_dim 80 is not instantiated by the flash kernel; split-KV decode takes it.
  const ir::Graph small = AttentionGraph("bf16", 4, 2, 80, 0.17);
  const BoundGraph small_prefill = MustBind(small, kPrefill, 128);
  s = registry.Find("attention_prefill")->CanImplement(BoundRegion(small_prefill, 0), h200);
  EXPECT_THAT(
      s.message(),
      HasSubstr("head_dim 80 is not one of the instantiated head dims 16, 32, 64, 96, 128"));
  const BoundGraph small_decode = MustBind(small, kDecode, 10);
  EXPECT_TRUE(
      registry.Find("attention_decode")->CanImplement(BoundRegion(small_decode, 0), h200).ok());

  const ir::Graph f32 = AttentionGraph("f32", 2, 1, 64, 0.125);
  const BoundGraph f32_prefill = MustBind(f32, kPrefill, 128);
  s = registry.Find("attention_prefill")->CanImplement(BoundRegion(f32_prefill, 0), h200);
  EXPECT_THAT(s.message(), HasSubstr("dtype f32 has no tensor-core path"));

  // Split-KV decode gives a key's 16-byte vectors to the lanes of one warp: f32 at head_dim
  // 256 would take 64 of them, bf16 at 256 takes 32.
  for (const auto& [dtype, ok] : {std::pair{"f32", false}, std::pair{"bf16", true}}) {
    const ir::Graph wide = AttentionGraph(dtype, 2, 1, 256, 0.0625);
    s = registry.Find("attention_decode")
            ->CanImplement(BoundRegion(MustBind(wide, kDecode, 10), 0), h200);
    if (ok) {
      EXPECT_TRUE(s.ok()) << s;
    } else {
      EXPECT_THAT(s.message(), HasSubstr("head_dim 256 in f32 takes 64 lanes of 16-byte vectors "
                                         "per key, more than a warp's 32"));
    }
  }
}

// moe_gemv's description on the typical fused MoE block (E = 8, top 2, I = 64, H = N = 128,
// a shared MLP of 128, bf16): three launches whose main one is the gate/up GEMV, and bytes
// that count the weights of the experts a step can select, not all E.
TEST(KernelFamiliesTest, MoeGemvCountsTheSelectableExpertsOnly) {
  const TargetDescription h200 = MustTarget("h200");
  const KernelFamily* moe = GlobalKernelRegistry().Find("moe_gemv");
  ASSERT_NE(moe, nullptr);
  const ir::Graph graph = TestGraph("typical_regions.tpir");
  // x, the residual and the result (2 bytes each per element), the router (8 x 128), the
  // selectable experts' gate, up and down (64 x (2 x 128 + 128) each) and the shared MLP's
  // (128 x (2 x 128 + 128)).
  for (const auto& [batch, bytes, experts] :
       std::vector<std::tuple<int64_t, int64_t, int64_t>>{{1, 199424, 2}, {16, 505856, 8}}) {
    SCOPED_TRACE(absl::StrCat("B = ", batch));
    const BoundGraph bound = MustBind(graph, {{"B", batch}, {"Smax", 4096}, {"T", 1}}, 100);
    const BoundRegion region(bound, RegionNamed(graph, "fmoe"));
    absl::StatusOr<Tactic> tactic = moe->DefaultTactic(region, h200);
    ASSERT_TRUE(tactic.ok()) << tactic.status();
    // The sm_90 row's block size: 256 threads for a step of one token, else 128.
    EXPECT_EQ(tactic->params.at("threads"), batch == 1 ? 256 : 128);
    EXPECT_EQ(moe->Work(*tactic, region).bytes, bytes);
    EXPECT_FALSE(moe->Work(*tactic, region).tensor_core);
    EXPECT_EQ(moe->Launches(*tactic, region), 3);
    // The gate/up grid: the shared MLP's row tiles, then a row tile set per selectable slot.
    const int64_t gate_rows = tactic->params.at("gate_rows");
    EXPECT_EQ(moe->Geometry(*tactic, region).grid[0],
              (128 + gate_rows - 1) / gate_rows + experts * ((64 + gate_rows - 1) / gate_rows));
    EXPECT_GT(moe->WorkspaceBytes(*tactic, region), 0);
    // The result may take the residual's storage (operand 7), no other operand's.
    for (int operand = 0; operand < region.num_operands(); ++operand) {
      EXPECT_EQ(moe->MayOverwriteOperand(region, 0, operand), operand == 7) << operand;
    }
  }
}

// moe_gemv's `select`: a step of one token selects its top-k in the gate/up CTAs by default
// and may be tuned either way; a step of several tokens, whose selections share experts, has
// only the router's last CTA to build its table, and a tactic saying otherwise is refused.
TEST(KernelFamiliesTest, MoeGemvSelectsInTheGateUpCtasForOneTokenOnly) {
  const TargetDescription h200 = MustTarget("h200");
  const KernelFamily* moe = GlobalKernelRegistry().Find("moe_gemv");
  ASSERT_NE(moe, nullptr);
  const ir::Graph graph = TestGraph("typical_regions.tpir");
  for (const int64_t batch : {1, 2, 16}) {
    SCOPED_TRACE(absl::StrCat("B = ", batch));
    const BoundGraph bound = MustBind(graph, {{"B", batch}, {"Smax", 4096}, {"T", 1}}, 100);
    const BoundRegion region(bound, RegionNamed(graph, "fmoe"));
    absl::StatusOr<Tactic> tactic = moe->DefaultTactic(region, h200);
    ASSERT_TRUE(tactic.ok()) << tactic.status();
    EXPECT_EQ(tactic->params.at("select"), batch == 1 ? 1 : 0);
    for (const int64_t select : {0, 1, 2}) {
      Tactic t = *tactic;
      t.params["select"] = select;
      const absl::Status valid = moe->ValidateTactic(t, region, h200);
      EXPECT_EQ(valid.ok(), select == 0 || (select == 1 && batch == 1)) << select << ": " << valid;
      if (!valid.ok()) EXPECT_THAT(std::string(valid.message()), HasSubstr("select"));
    }
  }
}

TEST(KernelFamiliesTest, ArchitectureRows) {
  EXPECT_EQ(ArchRowFor(80), "sm_80");
  EXPECT_EQ(ArchRowFor(86), "sm_80");
  EXPECT_EQ(ArchRowFor(89), "sm_80");
  EXPECT_EQ(ArchRowFor(90), "sm_90");
  EXPECT_EQ(ArchRowFor(100), "sm_100");
  EXPECT_EQ(ArchRowFor(103), "sm_100");
  EXPECT_EQ(ArchRowFor(120), "sm_120");
  EXPECT_EQ(ArchRowFor(121), "sm_120");
  EXPECT_EQ(ArchRowFor(75), "default");
  EXPECT_EQ(ArchRowFor(110), "default");
}

TEST(KernelFamiliesTest, CandidateTablesHaveEveryRowAndSelectTheTargets) {
  const ir::Graph graph = TestGraph("typical_regions.tpir");
  const BoundGraph decode = MustBind(graph, kDecode, 100);
  const BoundRegion qkv(decode, RegionNamed(graph, "qkv"));
  const KernelFamily& gemv = *GlobalKernelRegistry().Find("gemv");
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"a100", "sm_80"}, {"l40s", "sm_80"},  {"h100", "sm_90"},
      {"h200", "sm_90"}, {"b200", "sm_100"}, {"rtx-pro-6000", "sm_120"}};
  for (const auto& [target_name, row] : expected) {
    const TargetDescription target = MustTarget(target_name);
    absl::StatusOr<CandidateTable> table = gemv.Candidates(qkv, target);
    ASSERT_TRUE(table.ok()) << table.status();
    std::vector<std::string> arches;
    for (const ByTargetRow& r : table->rows) arches.push_back(r.arch);
    EXPECT_THAT(arches, ElementsAre("sm_80", "sm_90", "sm_100", "sm_120", "default"));
    EXPECT_EQ(table->selected_row, row) << target_name;
    for (const ByTargetRow& r : table->rows) {
      if (r.arch == row) {
        EXPECT_EQ(r.tactic, table->default_tactic);
      }
    }
    std::vector<std::string> tunables;
    for (const TunableParam& p : table->tunables) tunables.push_back(p.name);
    EXPECT_THAT(tunables, ElementsAre("rows_per_cta", "split_k", "threads", "vec"));
  }
  // The sm_90 row of gemv for this region (M = 1, K = 128, N = 256) on an H200.
  absl::StatusOr<CandidateTable> table = gemv.Candidates(qkv, MustTarget("h200"));
  ASSERT_TRUE(table.ok());
  // K = 128 holds 16 vectors: the block shrinks to 64 threads; 256 features fill 132 SMs
  // only at one feature per CTA.
  EXPECT_EQ(table->default_tactic.ParamsString(), "rows_per_cta=1,split_k=1,threads=64,vec=8");
  EXPECT_EQ(table->rows[0].tactic.ParamsString(), "rows_per_cta=1,split_k=1,threads=64,vec=8");
  const LaunchGeometry geometry = gemv.Geometry(table->default_tactic, qkv);
  EXPECT_THAT(geometry.grid, ElementsAre(256, 1, 1));
  EXPECT_THAT(geometry.block, ElementsAre(64, 1, 1));
  EXPECT_EQ(geometry.dynamic_shared_memory_bytes, 2 * 1 * 1 * 4);
  const WorkEstimate work = gemv.Work(table->default_tactic, qkv);
  EXPECT_EQ(work.bytes, 128 * 2 + 256 * 128 * 2 + 256 * 2);
  EXPECT_EQ(work.flops, 2 * 1 * 256 * 128);
  EXPECT_FALSE(work.tensor_core);
}

TEST(KernelFamiliesTest, GemvSplitsKWhenTheGridLeavesSmsIdle) {
  const ir::Graph graph = MustParseVerified(R"(graph @g {
  input %x: bf16[B,T,16384]
  weight %w: bf16[128,16384] = "w"
  %y: bf16[B,T,128] = linear(%x, %w)
  output %y
})");
  const BoundGraph decode = MustBind(graph, kDecode, 1);
  const BoundRegion y(decode, 0);
  const KernelFamily& gemv = *GlobalKernelRegistry().Find("gemv");
  absl::StatusOr<CandidateTable> table = gemv.Candidates(y, MustTarget("h200"));
  ASSERT_TRUE(table.ok());
  // 128 one-feature CTAs on 132 SMs: split K in two (each slice keeps >= 256 threads × 8
  // of K).
  EXPECT_EQ(*table->default_tactic.Param("rows_per_cta"), 1);
  EXPECT_EQ(*table->default_tactic.Param("split_k"), 2);
  EXPECT_EQ(gemv.WorkspaceBytes(table->default_tactic, y), 2 * 1 * 128 * 4);
  EXPECT_EQ(gemv.CounterBytes(table->default_tactic, y), 128 * 4);
  EXPECT_EQ(gemv.Launches(table->default_tactic, y), 1);
}

// sm_90's one-row default: a CTA streams about 8 KiB of weight (features of K × 2 bytes, two
// weight rows each with SwiGLU) with 256 threads (128 with SwiGLU, fewer where K has fewer
// vectors), while the grid keeps a CTA per SM; the measured shapes of docs/PERF.md, "One-row
// decode linears: a default within 2% of the fastest".
TEST(KernelFamiliesTest, GemvSm90DefaultStreamsAboutEightKibPerCta) {
  const ir::Graph graph = MustParseVerified(R"(graph @g {
  input %x: bf16[B,T,2048]
  input %x1k: bf16[B,T,1024]
  input %x4k: bf16[B,T,4096]
  weight %norm: bf16[2048] = "norm"
  weight %norm1k: bf16[1024] = "norm1k"
  weight %qkv: bf16[5120,2048] = "qkv"
  weight %qkv1k: bf16[4096,1024] = "qkv1k"
  weight %o: bf16[2048,4096] = "o"
  weight %gate_up: bf16[16384,2048] = "gate_up"
  weight %router: bf16[128,2048] = "router"
  weight %head: bf16[151936,2048] = "head"
  weight %head1k: bf16[151936,1024] = "head1k"
  %a: bf16[B,T,5120] = rms_norm_linear(%x, %norm, %qkv) {eps = 1e-06} fused(rms_norm, linear)
  %b: bf16[B,T,4096] = rms_norm_linear(%x1k, %norm1k, %qkv1k) {eps = 1e-06} fused(rms_norm, linear)
  %c: bf16[B,T,2048] = linear(%x4k, %o)
  %d: bf16[B,T,8192] = rms_norm_linear_swiglu(%x, %norm, %gate_up) {eps = 1e-06} fused(rms_norm, linear, split, silu, mul)
  %e: bf16[B,T,128] = linear(%x, %router)
  %f: bf16[B,T,151936] = linear(%x, %head)
  %g: bf16[B,T,151936] = linear(%x1k, %head1k)
  output %a
  output %b
  output %c
  output %d
  output %e
  output %f
  output %g
})");
  const BoundGraph decode = MustBind(graph, kDecode, 1);
  const KernelFamily& gemv = *GlobalKernelRegistry().Find("gemv");
  const char* expected[] = {
      "rows_per_cta=2,split_k=1,threads=256,vec=8",  // 4 KiB rows: 2 a CTA
      "rows_per_cta=4,split_k=1,threads=128,vec=8",  // K = 1024: 128 vectors, 4 rows
      "rows_per_cta=1,split_k=1,threads=256,vec=8",  // 8 KiB rows
      "rows_per_cta=1,split_k=1,threads=128,vec=8",  // SwiGLU: 2 rows of 4 KiB a feature
      "rows_per_cta=1,split_k=1,threads=256,vec=8",  // 128 features: 64 CTAs -> 128
      "rows_per_cta=2,split_k=1,threads=256,vec=8",  // an LM head keeps 8 KiB too
      "rows_per_cta=4,split_k=1,threads=128,vec=8",
  };
  for (int i = 0; i < 7; ++i) {
    absl::StatusOr<Tactic> t = gemv.DefaultTactic(BoundRegion(decode, i), MustTarget("h100"));
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->ParamsString(), expected[i]) << "region " << i;
  }
  // The A100's row keeps its fixed 4 features of 128 threads.
  absl::StatusOr<Tactic> a100 = gemv.DefaultTactic(BoundRegion(decode, 0), MustTarget("a100"));
  ASSERT_TRUE(a100.ok()) << a100.status();
  EXPECT_EQ(a100->ParamsString(), "rows_per_cta=4,split_k=1,threads=128,vec=8");
}

// The norm prologue keeps the tunables and default of the plain linear; it adds a sum of
// squares per warp and row to the shared memory, the norm weight to the bytes, and, split,
// the reads of x at the other slices.
TEST(KernelFamiliesTest, GemvNormPrologue) {
  const ir::Graph graph = MustParseVerified(R"(graph @g {
  input %x: bf16[B,T,16384]
  weight %norm: bf16[16384] = "norm"
  weight %w: bf16[128,16384] = "w"
  weight %w2: bf16[256,16384] = "w2"
  %y: bf16[B,T,128] = linear(%x, %w)
  %ny: bf16[B,T,128] = rms_norm_linear(%x, %norm, %w) {eps = 1e-06} fused(rms_norm, linear)
  %na: bf16[B,T,128] = rms_norm_linear_swiglu(%x, %norm, %w2) {eps = 1e-06} fused(rms_norm, linear, split, silu, mul)
  output %y
  output %ny
  output %na
})");
  const TargetDescription h200 = MustTarget("h200");
  const KernelFamily& gemv = *GlobalKernelRegistry().Find("gemv");
  EXPECT_EQ(gemv.version(), 3);
  const BoundGraph decode = MustBind(graph, {{"B", 2}, {"T", 1}}, 1);
  const BoundRegion y(decode, 0), ny(decode, 1), na(decode, 2);
  absl::StatusOr<CandidateTable> plain = gemv.Candidates(y, h200);
  absl::StatusOr<CandidateTable> normed = gemv.Candidates(ny, h200);
  ASSERT_TRUE(plain.ok() && normed.ok());
  EXPECT_EQ(normed->default_tactic, plain->default_tactic);
  ASSERT_EQ(normed->tunables.size(), plain->tunables.size());
  for (size_t i = 0; i < plain->tunables.size(); ++i) {
    EXPECT_EQ(normed->tunables[i].values, plain->tunables[i].values) << plain->tunables[i].name;
  }
  const Tactic split{
      "gemv", 3, {{"rows_per_cta", 4}, {"split_k", 4}, {"threads", 128}, {"vec", 8}}};
  ASSERT_TRUE(gemv.ValidateTactic(split, ny, h200).ok());
  // 4 warps × (4 features + 1 sum of squares) × 2 rows; swiglu: (4 × 2 + 1).
  EXPECT_EQ(gemv.Geometry(split, ny).dynamic_shared_memory_bytes, 4 * (4 + 1) * 2 * 4);
  EXPECT_EQ(gemv.Geometry(split, na).dynamic_shared_memory_bytes, 4 * (8 + 1) * 2 * 4);
  EXPECT_EQ(gemv.Geometry(split, y).dynamic_shared_memory_bytes, 4 * 4 * 2 * 4);
  // Bytes: the norm weight, and each of the 32 feature tiles reads x at 3 other slices.
  const int64_t x_bytes = 2 * 16384 * 2;
  EXPECT_EQ(gemv.Work(split, ny).bytes,
            gemv.Work(split, y).bytes + 16384 * 2 + 32 * x_bytes * 3 / 4);
  EXPECT_EQ(gemv.Work(split, ny).flops, gemv.Work(split, y).flops);
  Tactic unsplit = split;
  unsplit.params["split_k"] = 1;
  EXPECT_EQ(gemv.Work(unsplit, ny).bytes, gemv.Work(unsplit, y).bytes + 16384 * 2);
  // Every CTA reads the whole x: the result may not overwrite it.
  EXPECT_FALSE(gemv.MayOverwriteOperand(ny, 0, 0));
  // Prefill-sized rows have no family: cuBLASLt has no norm prologue, gemv no such rows.
  const BoundGraph prefill = MustBind(graph, {{"B", 1}, {"T", 128}}, 128);
  EXPECT_THAT(gemv.CanImplement(BoundRegion(prefill, 1), h200).message(),
              HasSubstr("M = 128 rows of operand 0 (%x) exceed 16"));
  EXPECT_THAT(GlobalKernelRegistry().Find("cublaslt_gemm")->CanImplement(ny, h200).message(),
              HasSubstr("kind 'rms_norm_linear' is not one of"));
}

// gemv_mma: 2 to 16 rows of bf16/f16 on sm_80 and later; the default CTA is 64 features of 8
// warps 4 stages deep, split-K without the norm prologue (which refuses a split), narrower CTAs
// with it, and the ring shrinks to the target's shared memory.
TEST(KernelFamiliesTest, GemvMmaServesTwoToSixteenRowsOnTensorCores) {
  const ir::Graph graph = MustParseVerified(R"(graph @g {
  input %x: bf16[B,T,3584]
  input %xf: f32[B,T,3584]
  weight %norm: bf16[3584] = "norm"
  weight %w: bf16[3584,3584] = "w"
  weight %wf: f32[3584,3584] = "wf"
  weight %wq: bf16[4608,3584] = "wq"
  weight %wgu: bf16[37888,3584] = "wgu"
  %y: bf16[B,T,3584] = linear(%x, %w)
  %q: bf16[B,T,4608] = rms_norm_linear(%x, %norm, %wq) {eps = 1e-06} fused(rms_norm, linear)
  %gu: bf16[B,T,18944] = rms_norm_linear_swiglu(%x, %norm, %wgu) {eps = 1e-06} fused(rms_norm, linear, split, silu, mul)
  %yf: f32[B,T,3584] = linear(%xf, %wf)
  output %y
  output %q
  output %gu
  output %yf
})");
  const KernelFamily& mma = *GlobalKernelRegistry().Find("gemv_mma");
  const TargetDescription h200 = MustTarget("h200");
  const BoundGraph b16 = MustBind(graph, {{"B", 16}, {"T", 1}}, 1);
  const BoundRegion y(b16, 0), q(b16, 1), gu(b16, 2), yf(b16, 3);
  absl::StatusOr<Tactic> plain = mma.DefaultTactic(y, h200);
  ASSERT_TRUE(plain.ok()) << plain.status();
  // 56 CTAs of 64 features: K split toward the 132 SMs while each slice keeps 4 stages of 256.
  EXPECT_EQ(plain->params.at("rows_per_cta"), 64);
  EXPECT_EQ(plain->params.at("split_k"), 2);
  EXPECT_EQ(plain->params.at("stage_k"), 256);
  EXPECT_EQ(plain->params.at("stages"), 4);
  EXPECT_EQ(plain->params.at("threads"), 256);
  // The norm prologue narrows the CTAs instead: 4608 / 32 = 144 CTAs, whole K.
  absl::StatusOr<Tactic> normed = mma.DefaultTactic(q, h200);
  ASSERT_TRUE(normed.ok()) << normed.status();
  EXPECT_EQ(normed->params.at("rows_per_cta"), 32);
  EXPECT_EQ(normed->params.at("split_k"), 1);
  Tactic split = *normed;
  split.params["split_k"] = 2;
  EXPECT_THAT(mma.ValidateTactic(split, q, h200).message(), HasSubstr("RMSNorm prologue"));
  // A share of K takes a 32-wide block of each stage: at most 4 warps per m-tile at 128 wide.
  Tactic wide = *plain;
  wide.params["rows_per_cta"] = 16;
  wide.params["stage_k"] = 128;
  EXPECT_THAT(mma.ValidateTactic(wide, y, h200).message(), HasSubstr("at most 128"));
  // A thread copies one 16-byte column of a stage: 512-wide stages need 64 threads or more.
  wide.params["stage_k"] = 512;
  wide.params["threads"] = 32;
  EXPECT_THAT(mma.ValidateTactic(wide, y, h200).message(), HasSubstr("a multiple of 64"));
  // SwiGLU rows of 64 features: 128 weight rows and 16 of x, 576 bytes each, per stage; the
  // ring of 4 outgrows the H200's 227 KiB, so 2 stages.
  absl::StatusOr<Tactic> swiglu = mma.DefaultTactic(gu, h200);
  ASSERT_TRUE(swiglu.ok()) << swiglu.status();
  EXPECT_EQ(swiglu->params.at("rows_per_cta"), 64);
  EXPECT_EQ(swiglu->params.at("stages"), 2);
  EXPECT_EQ(mma.Geometry(*swiglu, gu).dynamic_shared_memory_bytes,
            2 * (128 + 16) * 576 + 2 * (128 + 1) * 16 * 4);
  EXPECT_TRUE(mma.Work(*swiglu, gu).tensor_core);
  for (const char* name : {"a100", "rtx-pro-6000"}) {
    const TargetDescription target = MustTarget(name);
    absl::StatusOr<Tactic> t = mma.DefaultTactic(gu, target);
    ASSERT_TRUE(t.ok()) << name << ": " << t.status();
    EXPECT_LE(mma.Geometry(*t, gu).dynamic_shared_memory_bytes,
              target.shared_memory_per_block_bytes())
        << name;
  }
  // Stream-K: `ctas` CTAs share the 56 tiles x 14 stages; the grid never exceeds the units,
  // each CTA has two slots of partials and each tile a counter; no split-K, no norm prologue.
  EXPECT_EQ(plain->params.at("ctas"), 0);
  Tactic stream = *plain;
  stream.params["split_k"] = 1;
  stream.params["ctas"] = 264;
  ASSERT_TRUE(mma.ValidateTactic(stream, y, h200).ok());
  EXPECT_EQ(mma.Geometry(stream, y).grid, (std::array<int64_t, 3>{264, 1, 1}));
  EXPECT_EQ(mma.WorkspaceBytes(stream, y), 264 * 2 * 16 * 64 * 4);
  EXPECT_EQ(mma.CounterBytes(stream, y), 56 * 4);
  stream.params["ctas"] = 5000;
  EXPECT_EQ(mma.Geometry(stream, y).grid, (std::array<int64_t, 3>{56 * 14, 1, 1}));
  stream.params["split_k"] = 2;
  EXPECT_THAT(mma.ValidateTactic(stream, y, h200).message(), HasSubstr("stream-K"));
  Tactic normed_stream = *normed;
  normed_stream.params["ctas"] = 132;
  EXPECT_THAT(mma.ValidateTactic(normed_stream, q, h200).message(), HasSubstr("RMSNorm prologue"));
  // Measured where the tiles leave SMs unevenly loaded and the CTAs fit: 56 tiles on 132 SMs.
  stream.params["split_k"] = 1;
  stream.params["ctas"] = 132;
  EXPECT_TRUE(mma.WorthMeasuring(stream, y, h200));
  // Refused: one row (gemv's), more than 16, float operands.
  const BoundGraph b1 = MustBind(graph, {{"B", 1}, {"T", 1}}, 1);
  EXPECT_THAT(mma.CanImplement(BoundRegion(b1, 0), h200).message(),
              HasSubstr("M = 1 rows of operand 0 (%x) are outside [2, 16]"));
  const BoundGraph b32 = MustBind(graph, {{"B", 32}, {"T", 1}}, 1);
  EXPECT_FALSE(mma.CanImplement(BoundRegion(b32, 0), h200).ok());
  EXPECT_THAT(mma.CanImplement(yf, h200).message(), HasSubstr("not both bf16 or both f16"));
}

TEST(KernelFamiliesTest, AttentionPrefillShrinksTilesToTheTargetsSharedMemory) {
  const ir::Graph graph = AttentionGraph("bf16", 8, 2, 128, 0.088);
  const BoundGraph prefill = MustBind(graph, kPrefill, 128);
  const BoundRegion a(prefill, 0);
  const KernelFamily& flash = *GlobalKernelRegistry().Find("attention_prefill");
  for (const char* name : {"h200", "a100", "rtx-pro-6000"}) {
    const TargetDescription target = MustTarget(name);
    absl::StatusOr<CandidateTable> table = flash.Candidates(a, target);
    ASSERT_TRUE(table.ok()) << table.status();
    const LaunchGeometry g = flash.Geometry(table->default_tactic, a);
    EXPECT_LE(g.dynamic_shared_memory_bytes, target.shared_memory_per_block_bytes()) << name;
    EXPECT_EQ(g.grid[1], 8);
  }
  absl::StatusOr<CandidateTable> h200 = flash.Candidates(a, MustTarget("h200"));
  ASSERT_TRUE(h200.ok());
  // 128 tokens of 8 heads in 64-row tiles of 4 warps, one run over the keys.
  EXPECT_EQ(h200->default_tactic.ParamsString(),
            "pack_gqa=0,splits=1,stages=2,tile_kv=64,tile_q=64,warps=4");
  EXPECT_EQ(flash.Geometry(h200->default_tactic, a).dynamic_shared_memory_bytes,
            (64 + 2 * 2 * 64) * 128 * 2);
  absl::StatusOr<CandidateTable> rtx = flash.Candidates(a, MustTarget("rtx-pro-6000"));
  ASSERT_TRUE(rtx.ok());
  EXPECT_EQ(rtx->selected_row, "sm_120");
  EXPECT_EQ(rtx->default_tactic.ParamsString(),
            "pack_gqa=0,splits=1,stages=2,tile_kv=64,tile_q=64,warps=4");
  // A tactic that needs more shared memory than the target has is rejected.
  Tactic big = h200->default_tactic;
  big.params["stages"] = 4;
  absl::Status s = flash.ValidateTactic(big, a, MustTarget("rtx-pro-6000"));
  EXPECT_THAT(s.message(), HasSubstr("shared memory"));
}

// A decode step of Qwen2-7B's grouping at batch 16: the group packed into 64-row tiles, one
// run over the keys by default; a split tactic sizes its workspace and counters per run and
// row tile, and the tuner measures splits only up to the count that fills the GPU.
TEST(KernelFamiliesTest, AttentionPrefillSplitTacticsAndWhichOnesAreMeasured) {
  const ir::Graph graph = AttentionGraph("bf16", 28, 4, 128, 0.088);
  const BoundGraph decode = MustBind(graph, {{"B", 16}, {"T", 1}, {"Smax", 1024}}, 512);
  const BoundRegion a(decode, 0);
  const TargetDescription h200 = MustTarget("h200");
  const KernelFamily& flash = *GlobalKernelRegistry().Find("attention_prefill");
  absl::StatusOr<CandidateTable> table = flash.Candidates(a, h200);
  ASSERT_TRUE(table.ok()) << table.status();
  const Tactic& unsplit = table->default_tactic;
  EXPECT_EQ(unsplit.ParamsString(), "pack_gqa=1,splits=1,stages=2,tile_kv=64,tile_q=64,warps=4");
  EXPECT_EQ(flash.Geometry(unsplit, a).grid, (std::array<int64_t, 3>{1, 4, 16}));
  EXPECT_EQ(flash.WorkspaceBytes(unsplit, a), 0);
  EXPECT_EQ(flash.CounterBytes(unsplit, a), 0);
  Tactic t = unsplit;
  t.params["splits"] = 3;  // 16 x 4 packed tiles of 7 rows, three runs each
  ASSERT_TRUE(flash.ValidateTactic(t, a, h200).ok());
  EXPECT_EQ(flash.Geometry(t, a).grid, (std::array<int64_t, 3>{3, 4, 16}));
  EXPECT_EQ(flash.WorkspaceBytes(t, a), 64 * 3 * 64 * (128 + 4) * 4);
  EXPECT_EQ(flash.CounterBytes(t, a), 64 * 4);

  Tactic probe = t;
  probe.params["tile_kv"] = 32;  // 16 key tiles
  for (int64_t splits : {2, 4}) {
    probe.params["splits"] = splits;
    EXPECT_TRUE(flash.WorthMeasuring(probe, a, h200)) << splits;
  }
  probe.params["splits"] = 8;  // 4 runs already give 256 CTAs
  EXPECT_FALSE(flash.WorthMeasuring(probe, a, h200));
  EXPECT_TRUE(flash.ValidateTactic(probe, a, h200).ok());  // valid, just not worth it
  probe.params["pack_gqa"] = 0;  // 448 CTAs of one head each: no split pays
  probe.params["splits"] = 2;
  EXPECT_FALSE(flash.WorthMeasuring(probe, a, h200));
  probe.params["splits"] = 17;
  EXPECT_THAT(flash.ValidateTactic(probe, a, h200).message(), HasSubstr("splits"));
}

TEST(KernelFamiliesTest, AttentionWorkCountsCausalPairsAndTheWindow) {
  const ir::Graph graph = MustParseVerified(R"(graph @g {
  input %q: bf16[B,T,2,64]
  input %positions: i32[B,T]
  state %k: bf16[B,1,Smax,64]
  state %v: bf16[B,1,Smax,64]
  %a: bf16[B,T,2,64] = attention(%q, %k, %v, %positions) {scale = 0.125, sliding_window = 0}
  %w: bf16[B,T,2,64] = attention(%q, %k, %v, %positions) {scale = 0.125, sliding_window = 4}
  output %a
  output %w
})");
  const KernelFamily& decode_family = *GlobalKernelRegistry().Find("attention_decode");
  const KernelFamily& prefill_family = *GlobalKernelRegistry().Find("attention_prefill");
  // Prefill of 10 tokens: 55 causal pairs; with window 4: 1+2+3+4·7 = 34.
  const BoundGraph prefill = MustBind(graph, {{"B", 1}, {"Smax", 64}, {"T", 10}}, 10);
  for (int i : {0, 1}) {
    const BoundRegion r(prefill, i);
    absl::StatusOr<CandidateTable> t = prefill_family.Candidates(r, MustTarget("h200"));
    ASSERT_TRUE(t.ok()) << t.status();
    const WorkEstimate w = prefill_family.Work(t->default_tactic, r);
    const int64_t pairs = i == 0 ? 55 : 34;
    const int64_t keys = i == 0 ? 10 : 10;
    EXPECT_EQ(w.flops, 4 * 2 * 64 * pairs);
    EXPECT_EQ(w.bytes, 2 * (10 * 2 * 64 * 2) + 10 * 4 + 2 * keys * 64 * 2);
    EXPECT_TRUE(w.tensor_core);
  }
  // One decode token at context 100: 100 pairs and keys; with window 4: 4 of each.
  const BoundGraph decode = MustBind(graph, {{"B", 1}, {"Smax", 128}, {"T", 1}}, 100);
  for (int i : {0, 1}) {
    const BoundRegion r(decode, i);
    absl::StatusOr<CandidateTable> t = decode_family.Candidates(r, MustTarget("h200"));
    ASSERT_TRUE(t.ok()) << t.status();
    const WorkEstimate w = decode_family.Work(t->default_tactic, r);
    const int64_t keys = i == 0 ? 100 : 4;
    EXPECT_EQ(w.flops, 4 * 2 * 64 * keys);
    EXPECT_EQ(w.bytes, 2 * (2 * 64 * 2) + 4 + 2 * keys * 64 * 2);
    // Context 100 takes the smallest chunks (32 rows); splits fill the machine but never
    // exceed the cache's chunks: 128 / 32 -> 4.
    EXPECT_EQ(*t->default_tactic.Param("kv_chunk"), 32);
    EXPECT_EQ(*t->default_tactic.Param("splits"), 4);
    // A walk of one chunk per split loads into registers.
    EXPECT_EQ(*t->default_tactic.Param("stages"), 1);
  }
  // At context 30000 the H200's default walks on tensor cores: a CTA per split holds the kv
  // head's two queries, 132 splits (one CTA per SM) of 128-row chunks, 8 warps. The 4-row
  // window keeps the CUDA-core walk: one CTA per SM.
  const BoundGraph long_decode = MustBind(graph, {{"B", 1}, {"Smax", 32768}, {"T", 1}}, 30000);
  for (int i : {0, 1}) {
    const BoundRegion r(long_decode, i);
    absl::StatusOr<CandidateTable> t = decode_family.Candidates(r, MustTarget("h200"));
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(*t->default_tactic.Param("stages"), 1);
    if (i == 1) {
      EXPECT_EQ(*t->default_tactic.Param("splits"), 66);
      EXPECT_EQ(t->default_tactic.params.count("mma"), 0u);
      continue;
    }
    EXPECT_EQ(t->default_tactic.ParamsString(),
              "head_split=1,kv_chunk=128,mma=1,splits=132,stages=1,warps=8");
    EXPECT_TRUE(decode_family.Work(t->default_tactic, r).tensor_core);
  }
  // The A100's row keeps the CUDA-core walk, whose default takes as many splits as keep 64
  // rows each within 8 CTAs per SM (432 here: 2 parts of the group, 108 SMs), in 32-row
  // chunks, then no more than the context's 938 chunks fill evenly (3 each: 313 splits),
  // loading into registers. Streamed
  // through shared memory (stages 4) the block adds four stages of K and V tiles of 32 rows
  // (one chunk; 4 KiB each at head_dim 64, bf16) after the partials.
  {
    const BoundRegion r(long_decode, 0);
    const TargetDescription a100 = MustTarget("a100");
    absl::StatusOr<CandidateTable> t = decode_family.Candidates(r, a100);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->default_tactic.ParamsString(),
              "head_split=2,kv_chunk=32,splits=313,stages=1,warps=4");
    Tactic streamed = t->default_tactic;
    streamed.params["stages"] = 4;
    EXPECT_TRUE(decode_family.ValidateTactic(streamed, r, a100).ok());
    const int64_t partials =
        decode_family.Geometry(t->default_tactic, r).dynamic_shared_memory_bytes;
    EXPECT_EQ(decode_family.Geometry(streamed, r).dynamic_shared_memory_bytes,
              (partials + 15) / 16 * 16 + 4 * 2 * 32 * 64 * 2);
    // Five stages are refused by name.
    Tactic five = streamed;
    five.params["stages"] = 5;
    EXPECT_THAT(decode_family.ValidateTactic(five, r, a100).message(), HasSubstr("stages"));
  }
}

TEST(KernelFamiliesTest, RopeKvWriteAttentionRunsOnTheSplitKvGrid) {
  const ir::Graph graph = TestGraph("typical_regions.tpir");
  const BoundGraph decode = MustBind(graph, kDecode, 100);
  const TargetDescription h200 = MustTarget("h200");
  const KernelFamily& family = *GlobalKernelRegistry().Find("attention_decode");
  const BoundRegion attn(decode, RegionNamed(graph, "attn"));
  absl::StatusOr<CandidateTable> attn_table = family.Candidates(attn, h200);
  ASSERT_TRUE(attn_table.ok()) << attn_table.status();
  const WorkEstimate attn_work = family.Work(attn_table->default_tactic, attn);
  for (const char* name : {"ha", "ia"}) {
    SCOPED_TRACE(name);
    const BoundRegion fused(decode, RegionNamed(graph, name));
    absl::StatusOr<CandidateTable> table = family.Candidates(fused, h200);
    ASSERT_TRUE(table.ok()) << table.status();
    // The attention's tactic, grid, shared memory and split-KV scratch.
    EXPECT_EQ(table->default_tactic, attn_table->default_tactic);
    const LaunchGeometry g = family.Geometry(table->default_tactic, fused);
    const LaunchGeometry a = family.Geometry(attn_table->default_tactic, attn);
    EXPECT_EQ(g.grid, a.grid);
    EXPECT_EQ(g.block, a.block);
    EXPECT_EQ(g.dynamic_shared_memory_bytes, a.dynamic_shared_memory_bytes);
    EXPECT_EQ(family.WorkspaceBytes(table->default_tactic, fused),
              family.WorkspaceBytes(attn_table->default_tactic, attn));
    EXPECT_EQ(family.CounterBytes(table->default_tactic, fused),
              family.CounterBytes(attn_table->default_tactic, attn));
    // Reads qkv (512 bytes) instead of q (256), writes one k and one v row (256), reads the
    // norms (2 × 128) with them; rotates 2 q and 1 k heads of 64 (and normalizes them).
    const bool norms = std::string(name) == "ha";
    const WorkEstimate w = family.Work(table->default_tactic, fused);
    EXPECT_EQ(w.bytes, attn_work.bytes - 256 + 512 + 256 + (norms ? 256 : 0));
    EXPECT_EQ(w.flops, attn_work.flops + 3 * 3 * 64 + (norms ? 4 * 3 * 64 : 0));
    EXPECT_FALSE(w.tensor_core);
  }
  // Decode only: a prefill-sized instance is refused like the attention's.
  const BoundGraph prefill = MustBind(graph, kPrefill, 128);
  const absl::Status s = family.CanImplement(BoundRegion(prefill, RegionNamed(graph, "ha")), h200);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("T = 128 new tokens exceed 16"));
}

int MeasuredTactics(const KernelFamily& family, const BoundRegion& region,
                    const TargetDescription& target);

// Decode attention of Hq query heads over Hkv kv heads of head_dim D in `dtype`, a cache of
// Smax rows.
ir::Graph DecodeAttentionGraph(int q_heads, int kv_heads, int dim, absl::string_view dtype) {
  const std::string q = absl::StrCat(dtype, "[B,T,", q_heads, ",", dim, "]");
  const std::string cache = absl::StrCat(dtype, "[B,", kv_heads, ",Smax,", dim, "]");
  return MustParseVerified(
      absl::StrCat("graph @g {\n  input %q: ", q, "\n  state %k: ", cache, "\n  state %v: ", cache,
                   "\n  input %positions: i32[B,T]\n  %o: ", q,
                   " = attention(%q, %k, %v, %positions) {scale = 0.088, sliding_window = 0}\n"
                   "  output %o\n}\n"));
}

// The tensor-core walk (mma 1) serves bf16 and f16 at head_dim 64 and 128 with its rows in
// registers (stages 1, or 2 with a step loaded ahead; never streamed through shared memory);
// it is a tunable there only, measured unsplit (head_split 1) with a 16-key step per warp in
// every chunk, and the product stays within the tuner's 255 after the default at the decode
// buckets of Qwen3-0.6B, Qwen3-30B-A3B and Qwen2-7B batch 16.
TEST(KernelFamiliesTest, AttentionDecodeTensorCoreWalk) {
  const KernelFamily& family = *GlobalKernelRegistry().Find("attention_decode");
  const TargetDescription h200 = MustTarget("h200");
  struct Case {
    int q_heads, kv_heads, dim;
    const char* dtype;
    int batch, context;
    bool tunable;
  };
  for (const Case& c :
       {Case{16, 8, 128, "bf16", 1, 512, true}, Case{16, 8, 128, "bf16", 1, 16384, true},
        Case{32, 4, 128, "bf16", 1, 512, true}, Case{28, 4, 128, "bf16", 16, 512, true},
        Case{8, 2, 64, "f16", 1, 2048, true}, Case{32, 32, 96, "bf16", 1, 512, false},
        Case{8, 2, 128, "f32", 1, 512, false}}) {
    SCOPED_TRACE(absl::StrCat(c.q_heads, "/", c.kv_heads, " D=", c.dim, " ", c.dtype,
                              " B=", c.batch, " C=", c.context));
    const ir::Graph graph = DecodeAttentionGraph(c.q_heads, c.kv_heads, c.dim, c.dtype);
    const BoundGraph bound =
        MustBind(graph, {{"B", c.batch}, {"Smax", c.context}, {"T", 1}}, c.context);
    const BoundRegion region(bound, 0);
    absl::StatusOr<CandidateTable> table = family.Candidates(region, h200);
    ASSERT_TRUE(table.ok()) << table.status();
    const bool listed = std::any_of(table->tunables.begin(), table->tunables.end(),
                                    [](const TunableParam& p) { return p.name == "mma"; });
    EXPECT_EQ(listed, c.tunable);
    Tactic mma = table->default_tactic;
    mma.params["mma"] = 1;
    mma.params["head_split"] = 1;
    mma.params["stages"] = 1;
    const absl::Status valid = family.ValidateTactic(mma, region, h200);
    if (!c.tunable) {
      EXPECT_THAT(valid.message(), HasSubstr("the tensor-core walk serves bf16 and f16"));
      continue;
    }
    EXPECT_TRUE(valid.ok()) << valid;
    EXPECT_TRUE(family.Work(mma, region).tensor_core);
    Tactic ahead = mma;
    ahead.params["stages"] = 2;
    EXPECT_TRUE(family.ValidateTactic(ahead, region, h200).ok());
    Tactic streamed = mma;
    streamed.params["stages"] = 4;
    EXPECT_THAT(family.ValidateTactic(streamed, region, h200).message(),
                HasSubstr("1 or 2 with mma 1"));
    Tactic split = mma;
    split.params["head_split"] = 2;
    if (family.ValidateTactic(split, region, h200).ok()) {
      EXPECT_FALSE(family.WorthMeasuring(split, region, h200));
    }
    const int measured = MeasuredTactics(family, region, h200);
    EXPECT_LE(measured, 255);
  }
}

// The cluster merge (cluster 1): a tunable on sm_90 and later only, valid with 2 to 8 splits
// (refused naming the parameter otherwise, and on the A100), launched in clusters of the
// splits with no workspace or counters and the inbox added to the shared memory, and measured
// only where it is valid; the H200's default takes it with 8 splits, the A100's never.
TEST(KernelFamiliesTest, AttentionDecodeClusterMerge) {
  const KernelFamily& family = *GlobalKernelRegistry().Find("attention_decode");
  const TargetDescription h200 = MustTarget("h200");
  const TargetDescription a100 = MustTarget("a100");
  const ir::Graph graph = DecodeAttentionGraph(16, 8, 128, "bf16");
  const BoundGraph bound = MustBind(graph, {{"B", 1}, {"Smax", 2048}, {"T", 1}}, 512);
  const BoundRegion region(bound, 0);
  auto listed = [&](const TargetDescription& target) {
    absl::StatusOr<CandidateTable> table = family.Candidates(region, target);
    EXPECT_TRUE(table.ok()) << table.status();
    EXPECT_EQ(table->default_tactic.params.count("cluster"), target.sm() >= 90 ? 1u : 0u);
    return std::any_of(table->tunables.begin(), table->tunables.end(),
                       [](const TunableParam& p) { return p.name == "cluster"; });
  };
  EXPECT_TRUE(listed(h200));
  EXPECT_FALSE(listed(a100));
  EXPECT_LE(MeasuredTactics(family, region, h200), 255);

  const Tactic plain{"attention_decode",
                     family.version(),
                     {{"head_split", 1},
                      {"kv_chunk", 64},
                      {"mma", 1},
                      {"splits", 8},
                      {"stages", 1},
                      {"warps", 4}}};
  Tactic cluster = plain;
  cluster.params["cluster"] = 1;
  ASSERT_TRUE(family.ValidateTactic(plain, region, h200).ok());
  ASSERT_TRUE(family.ValidateTactic(cluster, region, h200).ok());
  EXPECT_TRUE(family.WorthMeasuring(cluster, region, h200));
  const LaunchGeometry g = family.Geometry(cluster, region);
  EXPECT_EQ(g.cluster, (std::array<int64_t, 3>{8, 1, 1}));
  EXPECT_EQ(family.Geometry(plain, region).cluster, (std::array<int64_t, 3>{1, 1, 1}));
  // Two queries per CTA (a group of 2) of 128 dims: 64 4-dim items dealt to 8 CTAs, each
  // receiving its 8 items and the 2 queries' (max, sum) from each of the 8 splits.
  EXPECT_EQ(g.dynamic_shared_memory_bytes,
            AlignUp(family.Geometry(plain, region).dynamic_shared_memory_bytes, 16) +
                8 * (8 + 2) * 16);
  EXPECT_GT(family.WorkspaceBytes(plain, region), 0);
  EXPECT_EQ(family.WorkspaceBytes(cluster, region), 0);
  EXPECT_EQ(family.CounterBytes(cluster, region), 0);

  EXPECT_THAT(family.ValidateTactic(cluster, region, a100).message(),
              HasSubstr("thread-block clusters need sm_90"));
  for (int64_t splits : {1, 16}) {
    Tactic t = cluster;
    t.params["splits"] = splits;
    EXPECT_THAT(family.ValidateTactic(t, region, h200).message(),
                HasSubstr("with cluster 1 (a cluster's CTAs"));
    EXPECT_FALSE(family.WorthMeasuring(t, region, h200));
  }
  Tactic two = cluster;
  two.params["cluster"] = 2;
  EXPECT_THAT(family.ValidateTactic(two, region, h200).message(), HasSubstr("0 or 1"));
}

// The H200's default picks the walk and its tactic as measured (docs/PERF.md, "Decode
// attention on tensor cores"): the tensor-core walk for Qwen3-0.6B at 512 (8 kv heads x 32
// steps of 16 keys outnumber the SMs: 4 warps over 64-row chunks, 8 splits) and at 2048 (8
// warps over 128 rows, 16 splits), Qwen2-7B batch 16 (a group of 7 per CUDA-core CTA: 2
// splits of 64 pairs) and Qwen3-30B-A3B at 4096 (32 splits); the CUDA-core walk, its group in
// 8 parts, for Qwen3-30B-A3B at 512 (4 kv heads x 32 steps: fewer than the SMs; 8 splits of
// 64 keys) and for head_dim 96 (32 splits of 128 keys, 8 CTAs an SM). Sixteen tokens of a group of 7 at head_dim 64 and context 8192 would take 8
// warps, whose records of 112 queries outgrow the shared memory: 4 warps over 64-row chunks,
// 66 splits. Where each warp walks 4 steps or more (Qwen3-0.6B at 8192 and 16384) the walk
// loads a step ahead (stages 2); at 1 or 2 steps it does not. The A100's row keeps the
// CUDA-core walk.
TEST(KernelFamiliesTest, AttentionDecodeDefaultWalk) {
  const KernelFamily& family = *GlobalKernelRegistry().Find("attention_decode");
  struct Case {
    int q_heads, kv_heads, dim, batch, tokens, context;
    std::string h200, a100;
  };
  for (const Case& c : {
           Case{16, 8, 128, 1, 1, 512,
                "cluster=1,head_split=1,kv_chunk=64,mma=1,splits=8,stages=1,warps=4",
                "head_split=2,kv_chunk=32,splits=8,stages=1,warps=4"},
           Case{16, 8, 128, 1, 1, 2048,
                "head_split=1,kv_chunk=128,mma=1,splits=16,stages=1,warps=8", ""},
           Case{16, 8, 128, 1, 1, 8192,
                "head_split=1,kv_chunk=128,mma=1,splits=16,stages=2,warps=8", ""},
           Case{16, 8, 128, 1, 1, 16384,
                "head_split=1,kv_chunk=128,mma=1,splits=16,stages=2,warps=8", ""},
           Case{28, 4, 128, 16, 1, 512,
                "cluster=1,head_split=1,kv_chunk=128,mma=1,splits=2,stages=1,warps=8", ""},
           Case{32, 4, 128, 1, 1, 4096,
                "head_split=1,kv_chunk=128,mma=1,splits=32,stages=1,warps=8", ""},
           Case{32, 4, 128, 1, 1, 512,
                "cluster=1,head_split=8,kv_chunk=32,splits=8,stages=1,warps=4", ""},
           Case{32, 32, 96, 1, 1, 4096, "head_split=1,kv_chunk=32,splits=32,stages=1,warps=4", ""},
           Case{14, 2, 64, 1, 16, 8192, "head_split=1,kv_chunk=64,mma=1,splits=66,stages=1,warps=4",
                ""},
       }) {
    SCOPED_TRACE(absl::StrCat(c.q_heads, "/", c.kv_heads, " D=", c.dim, " B=", c.batch,
                              " T=", c.tokens, " C=", c.context));
    const ir::Graph graph = DecodeAttentionGraph(c.q_heads, c.kv_heads, c.dim, "bf16");
    const BoundGraph bound =
        MustBind(graph, {{"B", c.batch}, {"Smax", c.context}, {"T", c.tokens}}, c.context);
    const BoundRegion region(bound, 0);
    absl::StatusOr<Tactic> t = family.DefaultTactic(region, MustTarget("h200"));
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->ParamsString(), c.h200);
    if (!c.a100.empty()) {
      absl::StatusOr<Tactic> a = family.DefaultTactic(region, MustTarget("a100"));
      ASSERT_TRUE(a.ok()) << a.status();
      EXPECT_EQ(a->ParamsString(), c.a100);
    }
  }
}

// DeepSeek-V2-Lite's latent attention (16 heads, C = 512, Dr = 64) in `dtype`.
ir::Graph MlaGraph(absl::string_view dtype, int latent = 512, int rope = 64) {
  return MustParseVerified(
      absl::StrCat("graph @g {\n  input %q_nope: ", dtype, "[B,T,16,128]\n  input %q_rope: ", dtype,
                   "[B,T,16,", rope, "]\n  state %latent: ", dtype, "[B,1,Smax,", latent,
                   "]\n  state %rope: ", dtype, "[B,1,Smax,", rope, "]\n  weight %w: ", dtype,
                   "[4096,", latent, "] = \"w\"\n  input %positions: i32[B,T]\n  %o: ", dtype,
                   "[B,T,16,128] = mla_attention(%q_nope, %q_rope, %latent, %rope, %w, %positions) "
                   "{scale = 0.072}\n  output %o\n}\n"));
}

// Decode runs on tensor cores: one CTA per split holds a token's 16 heads, the splits give
// each split at least 64 rows of the planned context (at most 32 splits), and the combine
// takes the most W_V rows per CTA that still give every SM a CTA.
TEST(KernelFamiliesTest, MlaAttentionDecodesOnTensorCoresWithFewSplits) {
  const ir::Graph graph = MlaGraph("bf16");
  const KernelFamily& mla = *GlobalKernelRegistry().Find("mla_attention");
  const TargetDescription h200 = MustTarget("h200");
  struct Expected {
    int64_t batch, context;
    const char* tactic;
  };
  for (const Expected& e :
       {Expected{1, 512, "combine_rows=8,heads_per_cta=16,kv_chunk=64,mma=1,splits=8,threads=128"},
        Expected{1, 128, "combine_rows=8,heads_per_cta=16,kv_chunk=64,mma=1,splits=2,threads=128"},
        Expected{1, 4096,
                 "combine_rows=8,heads_per_cta=16,kv_chunk=64,mma=1,splits=32,threads=128"},
        Expected{16, 512,
                 "combine_rows=32,heads_per_cta=16,kv_chunk=64,mma=1,splits=8,threads=128"}}) {
    const BoundGraph g = MustBind(graph, {{"B", e.batch}, {"Smax", 4096}, {"T", 1}}, e.context);
    const BoundRegion r(g, 0);
    absl::StatusOr<Tactic> t = mla.DefaultTactic(r, h200);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->ParamsString(), e.tactic) << "B = " << e.batch << ", context " << e.context;
  }
  const BoundGraph g = MustBind(graph, kDecode, 512);
  const BoundRegion r(g, 0);
  const Tactic t = *mla.DefaultTactic(r, h200);
  const LaunchGeometry geometry = mla.Geometry(t, r);
  EXPECT_EQ(geometry.grid, (std::array<int64_t, 3>{8, 1, 1}));
  EXPECT_EQ(geometry.block[0], 128);
  // Two stages of 64 rows and the 16 query rows, 576 bf16 each; P; one float per warp and row.
  EXPECT_EQ(geometry.dynamic_shared_memory_bytes,
            (2 * 64 + 16) * 576 * 2 + 16 * 64 * 2 + 4 * 16 * 4);
  // The bf16 queries [1, 16, 576], then 8 splits' records of 16 rows of 512 + 4 floats.
  EXPECT_EQ(mla.WorkspaceBytes(t, r), 16 * 576 * 2 + 8 * 16 * 516 * 4);
  const WorkEstimate w = mla.Work(t, r);
  EXPECT_TRUE(w.tensor_core);
  // Absorption and projection, then 16 rows against 8 chunks of 64 rows (scores over 576,
  // P · latent over 512), and the merge of 8 splits per row.
  EXPECT_EQ(w.flops, 2 * 16 * 512 * 256 + 2 * 16 * 512 * (576 + 512) + 2 * 8 * 16 * 512);
  EXPECT_EQ(w.bytes, r.operand_bytes(0) + r.operand_bytes(1) + r.operand_bytes(4) +
                         r.operand_bytes(5) + r.result_bytes(0) + 512 * 576 * 2);
  EXPECT_EQ(mla.Launches(t, r), 3);
  // The tuner measures a split only while the planned context has a chunk for it, and wider
  // combine CTAs only while half the SMs keep one.
  Tactic probe = t;
  probe.params["splits"] = 16;
  EXPECT_FALSE(mla.WorthMeasuring(probe, r, h200));
  probe.params["splits"] = 4;
  EXPECT_TRUE(mla.WorthMeasuring(probe, r, h200));
  probe.params["combine_rows"] = 16;
  EXPECT_TRUE(mla.WorthMeasuring(probe, r, h200));
  probe.params["combine_rows"] = 64;
  EXPECT_FALSE(mla.WorthMeasuring(probe, r, h200));

  // An A100's 163 KiB take 128 threads and 32-row chunks; its 108 SMs 16 W_V rows per CTA.
  EXPECT_EQ(mla.DefaultTactic(r, MustTarget("a100"))->ParamsString(),
            "combine_rows=16,heads_per_cta=16,kv_chunk=32,mma=1,splits=8,threads=128");
}

// The tensor-core path's refusals name the reason; the CUDA-core path still serves them.
TEST(KernelFamiliesTest, MlaAttentionTensorCoreRefusals) {
  const KernelFamily& mla = *GlobalKernelRegistry().Find("mla_attention");
  const TargetDescription h200 = MustTarget("h200");
  const ir::Graph f32 = MlaGraph("f32");
  const BoundGraph g = MustBind(f32, kDecode, 512);
  const BoundRegion r(g, 0);
  absl::StatusOr<Tactic> t = mla.DefaultTactic(r, h200);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->params.at("mma"), 0);
  Tactic mma = *t;
  mma.params = {{"combine_rows", 8}, {"heads_per_cta", 16}, {"kv_chunk", 64},
                {"mma", 1},          {"splits", 8},         {"threads", 256}};
  EXPECT_THAT(mla.ValidateTactic(mma, r, h200).message(), HasSubstr("not bf16 or f16"));

  // C = 2048 splits over 4 warps, but they would need 256 accumulators a thread; 8 warps would
  // not, but the rows (2112 elements) do not fit the shared memory: CUDA cores by default.
  const ir::Graph wide = MlaGraph("bf16", 2048, 64);
  const BoundGraph gw = MustBind(wide, kDecode, 512);
  const BoundRegion rw(gw, 0);
  mma.params["threads"] = 128;
  EXPECT_THAT(
      mla.ValidateTactic(mma, rw, h200).message(),
      HasSubstr("latent dim C = 2048 needs 256 float accumulators per thread with 4 warps"));
  mma.params["threads"] = 256;
  EXPECT_THAT(mla.ValidateTactic(mma, rw, h200).message(), HasSubstr("shared memory"));
  EXPECT_EQ(mla.DefaultTactic(rw, h200)->params.at("mma"), 0);

  // C = 32 splits over 4 warps (8 columns each), not over 8.
  const ir::Graph small = MlaGraph("bf16", 32, 8);
  const BoundGraph gs = MustBind(small, kDecode, 512);
  const BoundRegion rs(gs, 0);
  EXPECT_EQ(mla.DefaultTactic(rs, h200)->ParamsString(),
            "combine_rows=8,heads_per_cta=16,kv_chunk=64,mma=1,splits=8,threads=128");
  EXPECT_THAT(mla.ValidateTactic(mma, rs, h200).message(),
              HasSubstr("latent dim C = 32 is not a multiple of 64"));
  mma.params["threads"] = 128;
  mma.params["heads_per_cta"] = 4;
  EXPECT_THAT(mla.ValidateTactic(mma, rs, h200).message(), HasSubstr("heads_per_cta"));
  mma.params["heads_per_cta"] = 16;
  mma.params["kv_chunk"] = 16;
  EXPECT_THAT(mla.ValidateTactic(mma, rs, h200).message(), HasSubstr("kv_chunk"));
  mma.params["kv_chunk"] = 32;
  EXPECT_TRUE(mla.ValidateTactic(mma, rs, h200).ok());
}

TEST(KernelFamiliesTest, CublasLtRunsLinearSwigluAsGemmPlusEpilogueKernel) {
  const ir::Graph graph = MustParseVerified(R"(graph @g {
  input %x: bf16[B,T,128]
  weight %w: bf16[512,128] = "w"
  %y: bf16[B,T,512] = linear(%x, %w)
  output %y
})");
  const BoundGraph prefill = MustBind(graph, kPrefill, 128);
  const BoundRegion y(prefill, 0);
  const KernelFamily& lt = *GlobalKernelRegistry().Find("cublaslt_gemm");
  absl::StatusOr<CandidateTable> t = lt.Candidates(y, MustTarget("h200"));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->default_tactic.ParamsString(),
            "reduction_scheme=0,split_k=1,stages=4,swizzle=0,tile_m=64,tile_n=64");
  EXPECT_EQ(lt.Launches(t->default_tactic, y), 1);
  const LaunchGeometry g = lt.Geometry(t->default_tactic, y);
  EXPECT_TRUE(g.library_managed);
  EXPECT_THAT(g.grid, ElementsAre(8, 2, 1));
  EXPECT_TRUE(lt.Work(t->default_tactic, y).tensor_core);
  // A measured tactic may carry the algo id; a negative one is rejected.
  Tactic tuned = t->default_tactic;
  tuned.params["algo_id"] = 66;
  EXPECT_TRUE(lt.ValidateTactic(tuned, y, MustTarget("h200")).ok());
  tuned.params["algo_id"] = -1;
  EXPECT_FALSE(lt.ValidateTactic(tuned, y, MustTarget("h200")).ok());
  // cuBLASLt has no SwiGLU epilogue: the GEMM writes [M, 2F] to the workspace and the
  // swiglu kernel reads it, two launches.
  const ir::Graph typical = TestGraph("typical_regions.tpir");
  const BoundGraph typical_prefill = MustBind(typical, kPrefill, 128);
  const BoundRegion act(typical_prefill, RegionNamed(typical, "fact"));
  absl::StatusOr<CandidateTable> act_table = lt.Candidates(act, MustTarget("h200"));
  ASSERT_TRUE(act_table.ok()) << act_table.status();
  EXPECT_EQ(lt.Launches(act_table->default_tactic, act), 2);
  EXPECT_EQ(lt.WorkspaceBytes(act_table->default_tactic, act), 128 * 512 * 2);
  // Split-K needs a reduction scheme and no split needs none.
  Tactic split = t->default_tactic;
  split.params["split_k"] = 2;
  EXPECT_THAT(lt.ValidateTactic(split, y, MustTarget("h200")).message(),
              HasSubstr("reduction_scheme"));
}

// Raw configs (tile_id and the other cuBLASLt configuration fields, read back from the
// library) may name any tile of cublasLtMatmulTile_t, with tile_m and tile_n its real size;
// without tile_id the cost model's rules hold.
// A K shorter than 16 (a checkpoint with intermediate_size 7) takes the default's split_k 1;
// a split must leave each slice 16 of K, and the refusal names K.
TEST(KernelFamiliesTest, CublasLtTakesAShortKUnsplit) {
  const ir::Graph graph = MustParseVerified(R"(graph @g {
  input %x: bf16[B,T,7]
  weight %w: bf16[64,7] = "w"
  %y: bf16[B,T,64] = linear(%x, %w)
  output %y
})");
  const BoundGraph prefill = MustBind(graph, kPrefill, 128);
  const BoundRegion y(prefill, 0);
  const TargetDescription h200 = MustTarget("h200");
  const KernelFamily& lt = *GlobalKernelRegistry().Find("cublaslt_gemm");
  absl::StatusOr<Tactic> def = lt.DefaultTactic(y, h200);
  ASSERT_TRUE(def.ok()) << def.status();
  EXPECT_EQ(*def->Param("split_k"), 1);
  EXPECT_TRUE(lt.ValidateTactic(*def, y, h200).ok());
  Tactic split = *def;
  split.params["split_k"] = 2;
  split.params["reduction_scheme"] = 2;
  const absl::Status s = lt.ValidateTactic(split, y, h200);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("'split_k' is 2, expected 1, or 2, 4, 8 or 16 leaving >= 16 of K = 7 "
                        "per slice"));
}

TEST(KernelFamiliesTest, WgmmaGemmServesPrefillOnSm90Only) {
  const ir::Graph graph = MustParseVerified(R"(graph @g {
  input %x: bf16[B,T,1024]
  weight %w: bf16[6144,1024] = "w"
  weight %b: bf16[6144] = "b"
  %y: bf16[B,T,3072] = linear_swiglu(%x, %w, %b)
  input %x32: f32[B,T,1024]
  weight %w32: f32[64,1024] = "w32"
  %z: f32[B,T,64] = linear(%x32, %w32)
  input %xo: bf16[B,T,1022]
  weight %wo: bf16[64,1022] = "wo"
  %o: bf16[B,T,64] = linear(%xo, %wo)
  output %y
  output %z
  output %o
})");
  const KernelFamily& wgmma = *GlobalKernelRegistry().Find("wgmma_gemm");
  const TargetDescription h200 = MustTarget("h200");
  const BoundGraph prefill = MustBind(graph, {{"B", 1}, {"Smax", 4096}, {"T", 512}}, 512);
  const BoundRegion y(prefill, 0);
  ASSERT_TRUE(wgmma.CanImplement(y, h200).ok()) << wgmma.CanImplement(y, h200);
  // Only sm_90 has wgmma.
  for (const char* other : {"a100", "b200"}) {
    const absl::Status refused = wgmma.CanImplement(y, MustTarget(other));
    EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << other;
    EXPECT_THAT(std::string(refused.message()), HasSubstr("sm_90")) << other;
  }
  // Decode-sized inputs, f32 operands and a K that is not whole 16-byte chunks are refused.
  const BoundGraph decode = MustBind(graph, {{"B", 16}, {"Smax", 4096}, {"T", 1}}, 512);
  EXPECT_THAT(std::string(wgmma.CanImplement(BoundRegion(decode, 0), h200).message()),
              HasSubstr("M = 16 rows"));
  EXPECT_THAT(std::string(wgmma.CanImplement(BoundRegion(prefill, 1), h200).message()),
              HasSubstr("f32, not bf16 or f16"));
  EXPECT_THAT(std::string(wgmma.CanImplement(BoundRegion(prefill, 2), h200).message()),
              HasSubstr("K = 1022 is not a multiple of 8"));

  // The default tile fills the machine in one wave at M = 512: 128 x 192 (4 x 32 CTAs).
  absl::StatusOr<Tactic> def = wgmma.DefaultTactic(y, h200);
  ASSERT_TRUE(def.ok()) << def.status();
  EXPECT_EQ(def->ParamsString(), "loads=1,split_k=1,stages=4,tile_m=128,tile_n=192");
  const LaunchGeometry g = wgmma.Geometry(*def, y);
  EXPECT_EQ(g.grid, (std::array<int64_t, 3>{32, 4, 1}));
  // Two consumer warpgroups and the TMA producer warp; the ring, its alignment, its barriers.
  EXPECT_EQ(g.block, (std::array<int64_t, 3>{288, 1, 1}));
  EXPECT_EQ(g.dynamic_shared_memory_bytes, 4 * (128 + 192) * 128 + 1024 + 4 * 16);
  // SwiGLU is the GEMM's epilogue: one launch, no workspace, compiled for sm_90a.
  EXPECT_EQ(wgmma.Launches(*def, y), 1);
  EXPECT_EQ(wgmma.WorkspaceBytes(*def, y), 0);
  absl::StatusOr<KernelInstance> instance = InstanceFor(wgmma, y, *def);
  ASSERT_TRUE(instance.ok()) << instance.status();
  EXPECT_TRUE(instance->arch_specific);
  EXPECT_THAT(instance->name_expressions,
              ElementsAre("tileplan::wgmma_gemm_tma<tileplan::bf16, 128, 192, 4, "
                          "tileplan::kWgmmaSwiglu, true>"));
  // The launch names its two tensor maps, which the launch layer encodes: x in boxes of
  // 64 x 128 rows, the weight (all 6144 rows) in gate and up halves of 96 rows.
  RegionBuffers buffers;
  buffers.operands = {reinterpret_cast<void*>(0x10000), reinterpret_cast<void*>(0x20000),
                      reinterpret_cast<void*>(0x30000)};
  buffers.results = {reinterpret_cast<void*>(0x40000)};
  absl::StatusOr<std::vector<KernelLaunch>> launches = PrepareLaunches(wgmma, y, *def, buffers);
  ASSERT_TRUE(launches.ok()) << launches.status();
  ASSERT_EQ(launches->size(), 1u);
  const std::vector<TensorMapSpec>& maps = launches->front().tensor_maps;
  ASSERT_EQ(maps.size(), 2u);
  EXPECT_EQ(maps[0].param, 0);
  EXPECT_EQ(maps[0].address, buffers.operands[0]);
  EXPECT_EQ(std::make_tuple(maps[0].inner, maps[0].rows, maps[0].row_stride_bytes),
            std::make_tuple(1024, 512, 2048));
  EXPECT_EQ(std::make_pair(maps[0].box_inner, maps[0].box_rows), std::make_pair(64, 128));
  EXPECT_EQ(maps[1].param, 1);
  EXPECT_EQ(maps[1].address, buffers.operands[1]);
  EXPECT_EQ(maps[1].rows, 6144);
  EXPECT_EQ(std::make_pair(maps[1].box_inner, maps[1].box_rows), std::make_pair(64, 96));
  // The cp.async loads launch the other kernel, one warpgroup per 64 rows, no tensor map.
  Tactic copies = *def;
  copies.params["loads"] = 0;
  launches = PrepareLaunches(wgmma, y, copies, buffers);
  ASSERT_TRUE(launches.ok()) << launches.status();
  EXPECT_TRUE(launches->front().tensor_maps.empty());
  EXPECT_EQ(launches->front().block, (std::array<int64_t, 3>{256, 1, 1}));
  EXPECT_EQ(launches->front().cluster, (std::array<int64_t, 3>{1, 1, 1}));
  // K split among a cluster's CTAs: the grid's z is the split, launched as one cluster along z;
  // only with the TMA loads.
  Tactic split = *def;
  split.params["split_k"] = 4;
  EXPECT_EQ(wgmma.Geometry(split, y).grid, (std::array<int64_t, 3>{32, 4, 4}));
  launches = PrepareLaunches(wgmma, y, split, buffers);
  ASSERT_TRUE(launches.ok()) << launches.status();
  EXPECT_EQ(launches->front().grid, (std::array<int64_t, 3>{32, 4, 4}));
  EXPECT_EQ(launches->front().cluster, (std::array<int64_t, 3>{1, 1, 4}));
  split.params["loads"] = 0;
  EXPECT_THAT(std::string(wgmma.ValidateTactic(split, y, h200).message()),
              HasSubstr("'split_k' is 4"));
  split.params["loads"] = 1;
  split.params["split_k"] = 3;
  EXPECT_EQ(wgmma.ValidateTactic(split, y, h200).code(), absl::StatusCode::kInvalidArgument);

  // A ring that does not fit the block's shared memory is refused.
  Tactic big = *def;
  big.params["tile_n"] = 256;
  big.params["stages"] = 5;
  const absl::Status s = wgmma.ValidateTactic(big, y, h200);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("'stages' is 5"));
}

TEST(KernelFamiliesTest, CublasLtRawConfigsNameAnyTileAndCheckEveryField) {
  const ir::Graph graph = MustParseVerified(R"(graph @g {
  input %x: bf16[B,T,1024]
  weight %w: bf16[4096,1024] = "w"
  %y: bf16[B,T,4096] = linear(%x, %w)
  output %y
})");
  const BoundGraph prefill = MustBind(graph, kPrefill, 128);
  const BoundRegion y(prefill, 0);
  const TargetDescription h200 = MustTarget("h200");
  const KernelFamily& lt = *GlobalKernelRegistry().Find("cublaslt_gemm");
  EXPECT_EQ(lt.version(), 2);
  absl::StatusOr<Tactic> def = lt.DefaultTactic(y, h200);
  ASSERT_TRUE(def.ok()) << def.status();
  // CUBLASLT_MATMUL_TILE_192x128 (31): 192 weight rows by 128 x rows; stages 64xAUTO (35).
  Tactic raw = *def;
  raw.params.insert({{"algo_id", 66},
                     {"tile_id", 31},
                     {"stages_id", 35},
                     {"inner_shape_id", 0},
                     {"cluster_shape_id", 3},
                     {"custom_option", 0}});
  raw.params["tile_m"] = 128;
  raw.params["tile_n"] = 192;
  raw.params["stages"] = 0;
  raw.params["split_k"] = 1;
  raw.params["reduction_scheme"] = 0;
  {
    const absl::Status ok = lt.ValidateTactic(raw, y, h200);
    EXPECT_TRUE(ok.ok()) << ok;
  }
  // The tile's grid: 4096 / 192 weight-row tiles by 128 / 128 x-row tiles.
  EXPECT_THAT(lt.Geometry(raw, y).grid, ElementsAre(22, 1, 1));

  auto rejects = [&](std::initializer_list<std::pair<const char*, int64_t>> changes,
                     const std::string& what) {
    Tactic t = raw;
    for (const auto& [name, value] : changes) t.params[name] = value;
    const absl::Status s = lt.ValidateTactic(t, y, h200);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << t.ParamsString();
    EXPECT_THAT(std::string(s.message()), HasSubstr(what)) << t.ParamsString();
  };
  rejects({{"tile_m", 192}, {"tile_n", 128}},
          "'tile_m' is 192, expected 128, the x rows of tile 192x128");
  rejects({{"tile_n", 128}}, "'tile_n' is 128, expected 192");
  rejects({{"tile_id", 635}}, "'tile_id' is 635, expected a cublasLtMatmulTile_t");
  rejects({{"stages_id", 29}}, "'stages_id' is 29");
  rejects({{"stages_id", 16}}, "'stages' is 0, expected 4, the stage count of stages_id 16 (64x4)");
  rejects({{"inner_shape_id", 5}}, "'inner_shape_id' is 5");
  rejects({{"cluster_shape_id", 1}}, "'cluster_shape_id' is 1");
  rejects({{"custom_option", -1}}, "'custom_option' is -1");
  rejects({{"split_k", 2}}, "'reduction_scheme' is 0");
  rejects({{"split_k", 1025}, {"reduction_scheme", 2}},
          "'split_k' is 1025, expected in [1, K = 1024]");
  rejects({{"algo_id", -1}}, "'algo_id' is -1");
  // Any split up to K with a scheme, and tile_id 0 (an algo without tile ids) with a
  // nominal tile of the cost model's sizes.
  for (const auto& [changes, label] :
       std::vector<std::pair<std::map<std::string, int64_t>, std::string>>{
           {{{"split_k", 3}, {"reduction_scheme", 4}}, "split 3"},
           {{{"tile_id", 0}, {"tile_m", 64}, {"tile_n", 256}}, "untiled"}}) {
    Tactic t = raw;
    for (const auto& [name, value] : changes) t.params[name] = value;
    const absl::Status s = lt.ValidateTactic(t, y, h200);
    EXPECT_TRUE(s.ok()) << label << ": " << s;
  }
  rejects({{"tile_id", 0}}, "'tile_n' is 192, expected 64, 128 or 256 (nominal");
  // A raw config is whole, and its fields need tile_id.
  Tactic partial = raw;
  partial.params.erase("cluster_shape_id");
  EXPECT_THAT(lt.ValidateTactic(partial, y, h200).message(),
              HasSubstr("a raw configuration (tile_id) needs 'cluster_shape_id'"));
  partial = raw;
  partial.params.erase("algo_id");
  EXPECT_THAT(lt.ValidateTactic(partial, y, h200).message(),
              HasSubstr("a raw configuration (tile_id) needs 'algo_id'"));
  Tactic stray = *def;
  stray.params["stages_id"] = 16;
  EXPECT_THAT(lt.ValidateTactic(stray, y, h200).message(),
              HasSubstr("parameter 'stages_id' belongs to a raw configuration"));
  // Without tile_id: 64, 128 or 256 tiles, 1 to 8 stages, power-of-two splits.
  Tactic assumed = *def;
  assumed.params["tile_n"] = 192;
  EXPECT_THAT(lt.ValidateTactic(assumed, y, h200).message(),
              HasSubstr("'tile_n' is 192, expected 64, 128 or 256"));
  assumed = *def;
  assumed.params["stages"] = 0;
  EXPECT_THAT(lt.ValidateTactic(assumed, y, h200).message(), HasSubstr("'stages' is 0"));
  assumed = *def;
  assumed.params["split_k"] = 3;
  assumed.params["reduction_scheme"] = 2;
  EXPECT_THAT(lt.ValidateTactic(assumed, y, h200).message(), HasSubstr("'split_k' is 3"));
}

// An expert_linear of E experts of [N, H], top K, at B = 1 and `tokens` tokens: x [B, T, H],
// or with `per_selection` the down projection's [B, T, K, H].
ir::Graph ExpertLinearGraph(int experts, int top_k, int n, int h, bool per_selection) {
  const std::string x =
      per_selection ? absl::StrCat("[B,T,", top_k, ",", h, "]") : absl::StrCat("[B,T,", h, "]");
  return MustParseVerified(
      absl::StrCat("graph @g {\n  input %x: bf16", x, "\n  input %ids: i32[B,T,", top_k,
                   "]\n  weight %w: bf16[", experts, ",", n, ",", h, "] = \"w\"\n  %y: bf16[B,T,",
                   top_k, ",", n, "] = expert_linear(%x, %ids, %w)\n  output %y\n}\n"));
}

// The tactics of the tunables' product the tuner would measure (valid and worth measuring).
int MeasuredTactics(const KernelFamily& family, const BoundRegion& region,
                    const TargetDescription& target) {
  absl::StatusOr<CandidateTable> table = family.Candidates(region, target);
  EXPECT_TRUE(table.ok()) << table.status();
  if (!table.ok()) return 0;
  std::vector<Tactic> product;
  testing::TunableProduct(std::string(family.name()), family.version(), table->tunables, product);
  return static_cast<int>(std::count_if(product.begin(), product.end(), [&](const Tactic& t) {
    return family.ValidateTactic(t, region, target).ok() &&
           family.WorthMeasuring(t, region, target);
  }));
}

// The grouped expert GEMM on DeepSeek-V2-Lite's and Qwen3-30B-A3B's experts on an H200: the
// M tile holds an evenly routed expert's rows with a quarter to spare (48 and 32 rows at 512
// tokens: 64; 192 and 128 at 2048: 128, in 2 x 2 warps of 64 x 64 and three stages, so that two
// CTAs share an SM), the feature tiles fastest in the grid, the route table's worst case in
// y; the flops are the used experts' rows rounded up to 16. Every region leaves the tuner at
// most 255 tactics to measure after the default, so its cap of 256 never cuts the product.
TEST(KernelFamiliesTest, ExpertGemmTilesFollowTheRowsPerExpert) {
  const KernelFamily& gemm = *GlobalKernelRegistry().Find("expert_gemm");
  const TargetDescription h200 = MustTarget("h200");
  struct Case {
    int experts, top_k, n, h;
    bool per_selection;
    int tokens;
    std::string tactic;
    std::array<int64_t, 3> grid;
    int64_t shared_memory = 98304;  // (64 + 128) x 64 x 2 bytes x 4 stages, or (128 + 128) x 3
  };
  const std::string small = "stages=4,tile_k=64,tile_m=64,tile_n=128,warps_m=1,warps_n=4";
  const std::string large = "stages=3,tile_k=64,tile_m=128,tile_n=128,warps_m=2,warps_n=2";
  for (const Case& c : {
           Case{64, 6, 1408, 2048, false, 512, small, {11, 3072 / 64 + 64, 1}},
           Case{64, 6, 2048, 1408, true, 512, small, {16, 3072 / 64 + 64, 1}},
           Case{128, 8, 768, 2048, false, 512, small, {6, 4096 / 64 + 128, 1}},
           Case{128, 8, 2048, 768, true, 512, small, {16, 4096 / 64 + 128, 1}},
           Case{64, 6, 1408, 2048, false, 2048, large, {11, 12288 / 128 + 64, 1}},
           Case{128, 8, 2048, 768, true, 2048, large, {16, 16384 / 128 + 128, 1}},
           Case{64,
                6,
                1408,
                2048,
                false,
                128,
                absl::StrReplaceAll(small, {{"m=64", "m=16"}}),
                {11, 768 / 16 + 64, 1},
                (16 + 128) * 64 * 2 * 4},
       }) {
    SCOPED_TRACE(absl::StrCat("E=", c.experts, " N=", c.n, " H=", c.h, " T=", c.tokens));
    const ir::Graph graph = ExpertLinearGraph(c.experts, c.top_k, c.n, c.h, c.per_selection);
    const BoundGraph bound = MustBind(graph, {{"B", 1}, {"T", c.tokens}}, c.tokens);
    const BoundRegion region(bound, 0);
    absl::StatusOr<Tactic> t = gemm.DefaultTactic(region, h200);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->ParamsString(), c.tactic);
    const LaunchGeometry g = gemm.Geometry(*t, region);
    EXPECT_EQ(g.grid, c.grid);
    EXPECT_EQ(g.block[0], 128);
    EXPECT_EQ(g.dynamic_shared_memory_bytes, c.shared_memory);
    const int64_t selections = int64_t{c.tokens} * c.top_k;
    const int64_t rows = c.experts * ((selections / c.experts + 15) / 16 * 16);
    EXPECT_EQ(gemm.Work(*t, region).flops, 2 * rows * c.n * c.h);
    const int measured = MeasuredTactics(gemm, region, h200);
    EXPECT_GT(measured, 20);
    EXPECT_LE(measured, 255);
  }
}

// What the tuner leaves out of expert_gemm's product, at Qwen3-30B-A3B's gate projection of
// 512 tokens (32 rows per expert): M tiles a quarter full, a two-stage pipeline where three
// stages fit, CTAs of fewer than four warps, rows of warps without rows, feature tiles
// narrower than the rows while wider ones still fill the SMs, stages beyond the slices of H;
// each stays valid.
TEST(KernelFamiliesTest, ExpertGemmMeasuresWhatCanPay) {
  const KernelFamily& gemm = *GlobalKernelRegistry().Find("expert_gemm");
  const TargetDescription h200 = MustTarget("h200");
  // Whether the sm_90 default with `params` changed is worth measuring at 512 tokens of E
  // experts of [N, H], top K (and valid there).
  auto worth = [&](int experts, int top_k, int n, int h, std::map<std::string, int64_t> params) {
    const ir::Graph graph = ExpertLinearGraph(experts, top_k, n, h, false);
    const BoundGraph bound = MustBind(graph, {{"B", 1}, {"T", 512}}, 512);
    const BoundRegion region(bound, 0);
    absl::StatusOr<Tactic> t = gemm.DefaultTactic(region, h200);
    EXPECT_TRUE(t.ok()) << t.status();
    if (!t.ok()) return false;
    for (const auto& [name, value] : params) t->params[name] = value;
    EXPECT_TRUE(gemm.ValidateTactic(*t, region, h200).ok()) << t->ParamsString();
    return gemm.WorthMeasuring(*t, region, h200);
  };
  auto qwen = [&](std::map<std::string, int64_t> params) {
    return worth(128, 8, 768, 2048, std::move(params));
  };
  EXPECT_TRUE(qwen({}));
  EXPECT_TRUE(qwen({{"tile_m", 32}}));
  EXPECT_TRUE(qwen({{"tile_m", 16}}));
  EXPECT_FALSE(qwen({{"tile_m", 128}, {"stages", 3}}));  // 32 rows fill a quarter
  EXPECT_TRUE(qwen({{"stages", 3}}));
  EXPECT_FALSE(qwen({{"stages", 2}}));
  EXPECT_FALSE(qwen({{"warps_n", 2}}));                  // 2 warps where 4 fit
  EXPECT_FALSE(qwen({{"warps_m", 2}, {"warps_n", 2}}));  // rows 32-63 hold no rows
  EXPECT_TRUE(qwen({{"tile_m", 32}, {"warps_m", 2}, {"warps_n", 2}}));
  EXPECT_TRUE(qwen({{"tile_n", 64}}));
  EXPECT_TRUE(qwen({{"tile_n", 256}, {"warps_n", 8}, {"stages", 3}}));
  EXPECT_TRUE(qwen({{"tile_k", 128}, {"stages", 3}}));
  // At DeepSeek-V2-Lite's 48 rows per expert a feature tile of 32 is narrower than them,
  // while 64 experts x 22 tiles of 64 would already fill the SMs.
  for (const int64_t tile_n : {32, 64}) {
    EXPECT_EQ(worth(64, 6, 1408, 2048, {{"tile_n", tile_n}, {"warps_m", 2}, {"warps_n", 2}}),
              tile_n == 64);
  }
  // 128-wide slices of a 128-deep row: a third stage has nothing to load.
  EXPECT_FALSE(worth(128, 8, 768, 128, {{"tile_k", 128}, {"stages", 3}}));
  EXPECT_TRUE(worth(128, 8, 768, 256, {{"tile_k", 128}, {"stages", 3}}));
}

TEST(KernelFamiliesTest, ValidateTacticNamesTheProblem) {
  const ir::Graph graph = TestGraph("typical_regions.tpir");
  const BoundGraph decode = MustBind(graph, kDecode, 100);
  const BoundRegion qkv(decode, RegionNamed(graph, "qkv"));
  const TargetDescription h200 = MustTarget("h200");
  const KernelFamily& gemv = *GlobalKernelRegistry().Find("gemv");
  absl::StatusOr<CandidateTable> table = gemv.Candidates(qkv, h200);
  ASSERT_TRUE(table.ok());
  Tactic t = table->default_tactic;
  t.family_version = 99;
  EXPECT_THAT(gemv.ValidateTactic(t, qkv, h200).message(), HasSubstr("gemv v99"));
  t = table->default_tactic;
  t.params.erase("threads");
  EXPECT_THAT(gemv.ValidateTactic(t, qkv, h200).message(),
              HasSubstr("missing parameter 'threads'"));
  t = table->default_tactic;
  t.params["tile_q"] = 64;
  EXPECT_THAT(gemv.ValidateTactic(t, qkv, h200).message(), HasSubstr("unknown parameter 'tile_q'"));
  t = table->default_tactic;
  t.params["threads"] = 100;
  EXPECT_THAT(gemv.ValidateTactic(t, qkv, h200).message(),
              HasSubstr("parameter 'threads' is 100, expected a multiple of 32"));
}

TEST(KernelFamiliesTest, TacticProtoRoundTrip) {
  Tactic t{"gemv", 1, {{"split_k", 2}, {"threads", 256}}};
  proto::Tactic m = TacticToProto(t);
  ASSERT_EQ(m.params_size(), 2);
  EXPECT_EQ(m.params(0).name(), "split_k");
  absl::StatusOr<Tactic> back = TacticFromProto(m);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, t);
  EXPECT_EQ(t.ParamsString(), "split_k=2,threads=256");
  const Tactic none{"view", 1, {}};
  EXPECT_EQ(none.ParamsString(), "-");
  m.add_params()->set_name("threads");
  EXPECT_THAT(TacticFromProto(m).status().message(), HasSubstr("params[2]"));
  EXPECT_FALSE(TacticFromProto(proto::Tactic()).ok());
  EXPECT_THAT(t.Param("tile").status().message(), HasSubstr("gemv tactic has no parameter 'tile'"));
}

TEST(KernelFamiliesTest, OverwritePermissionsFollowTheKernels) {
  const ir::Graph graph = TestGraph("typical_regions.tpir");
  const BoundGraph decode = MustBind(graph, kDecode, 100);
  const KernelRegistry& registry = GlobalKernelRegistry();
  const BoundRegion add(decode, RegionNamed(graph, "h"));
  EXPECT_TRUE(registry.Find("elementwise")->MayOverwriteOperand(add, 0, 1));
  const BoundRegion norm(decode, RegionNamed(graph, "n"));
  EXPECT_TRUE(registry.Find("rms_norm")->MayOverwriteOperand(norm, 0, 0));
  EXPECT_FALSE(registry.Find("rms_norm")->MayOverwriteOperand(norm, 0, 1));  // the weight
  const BoundRegion qkv(decode, RegionNamed(graph, "qkv"));
  EXPECT_FALSE(registry.Find("gemv")->MayOverwriteOperand(qkv, 0, 0));
  EXPECT_FALSE(registry.Find("cublaslt_gemm")->MayOverwriteOperand(qkv, 0, 0));
}

}  // namespace
}  // namespace tileplan::kernels
