#include "planner/plan_builder.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include "absl/strings/match.h"
#include "base/status_macros.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "kernels/families/registry.h"
#include "models/config.h"
#include "models/lowering.h"
#include "planner/pipelines.h"
#include "planner/plan_svg.h"
#include "planner/plan_text.h"
#include "planner/tactic_cache.h"
#include "targets/target.h"
#include "tests/kernels/kernels_testing.h"
#include "tests/testing/tiny_models.h"
#include "tests/testing/tool_run.h"

namespace tileplan::planner {
namespace {

using kernels::testing::MustTarget;
using ::testing::HasSubstr;
using ::testing::Not;

models::ModelConfig MustConfig(const std::string& name) {
  absl::StatusOr<models::ModelConfig> config = models::BundledModelConfig(name);
  EXPECT_TRUE(config.ok()) << config.status();
  return config.ok() ? *config : models::ModelConfig();
}

proto::ExecutionPlan MustPlan(const std::string& model, const std::string& target,
                              const PlanOptions& options, const TacticCache* cache = nullptr) {
  absl::StatusOr<proto::ExecutionPlan> plan =
      BuildExecutionPlan(MustConfig(model), MustTarget(target), options, cache);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? *std::move(plan) : proto::ExecutionPlan();
}

PlanOptions SmallOptions() {
  PlanOptions options;
  options.prefill_tokens = {64};
  options.decode_batches = {1, 4};
  options.max_context = 512;
  return options;
}

const proto::Phase* FindPhase(const proto::ExecutionPlan& plan, absl::string_view name) {
  for (const proto::Phase& p : plan.phases()) {
    if (p.name() == name) return &p;
  }
  ADD_FAILURE() << "no phase " << name;
  return nullptr;
}

TEST(PlanBuilderTest, Qwen3DecodeAppliesEveryFusionWithinSixLaunchesPerLayer) {
  PlanOptions options;
  options.model_name = "qwen3-0.6b";
  options.prefill_tokens = {128};
  options.max_context = 2048;
  const proto::ExecutionPlan plan = MustPlan("qwen3-0.6b", "sm_90", options);
  ASSERT_EQ(plan.phases_size(), 2);
  EXPECT_EQ(plan.model(), "qwen3-0.6b");
  EXPECT_EQ(plan.target().name(), "h200");
  const proto::Phase* decode = FindPhase(plan, "decode B=1");
  ASSERT_NE(decode, nullptr);
  EXPECT_EQ(decode->kind(), proto::Phase::KIND_DECODE);
  EXPECT_THAT(decode->pipeline(), ::testing::Contains("fuse_residual"));
  std::map<std::string, int> kinds;
  int launches = 0;
  for (const proto::Step& s : decode->steps()) {
    ++kinds[s.kind()];
    launches += s.launches();
    // Untuned: the bundled H200 calibration's pick, or the cost model's where it has none.
    EXPECT_THAT(s.source(),
                ::testing::AnyOf(proto::Step::SOURCE_COST_MODEL, proto::Step::SOURCE_CALIBRATED))
        << s.name();
    EXPECT_FALSE(s.tactic().family().empty()) << s.name();
    EXPECT_GE(s.estimated_us(), 0) << s.name();
    EXPECT_FALSE(s.provenance().cache_key().empty()) << s.name();
  }
  // 28 layers of rms_norm_linear(packed qkv) | qk_norm_rope_kv_write_attention |
  // linear_residual | rms_norm_linear_swiglu | linear_residual, plus embedding, the final
  // norm and the LM head.
  EXPECT_EQ(kinds["qk_norm_rope_kv_write_attention"], 28);
  EXPECT_EQ(kinds["rms_norm_linear_swiglu"], 28);
  EXPECT_EQ(kinds["linear_residual"], 56);
  EXPECT_EQ(kinds["rms_norm_linear"], 28);
  EXPECT_EQ(kinds.count("attention"), 0u);
  EXPECT_EQ(kinds.count("qk_norm_rope_kv_write"), 0u);
  EXPECT_EQ(kinds["rms_norm"], 1);
  EXPECT_EQ(kinds.count("linear"), 0u);
  EXPECT_EQ(kinds.count("linear_swiglu"), 0u);
  EXPECT_EQ(kinds.count("add"), 0u);
  EXPECT_EQ(kinds.count("silu"), 0u);
  EXPECT_EQ(kinds.count("kv_write"), 0u);
  EXPECT_EQ(decode->launches(), launches);
  EXPECT_EQ(launches, 5 * 28 + 3);
  // Packed q/k/v and gate/up weights of every layer, each with its checkpoint tensors in order.
  EXPECT_EQ(plan.weight_packing_size(), 56);
  for (const proto::PackedWeight& w : plan.weight_packing()) {
    EXPECT_GE(w.checkpoint_tensors_size(), 2) << w.weight();
  }
  EXPECT_THAT(plan.weight_packing(0).checkpoint_tensors(0), HasSubstr("model.layers.0."));
  // The decode graph moves the weights once (tied embeddings: the LM head reads the table).
  const proto::Arena& arena = decode->arena();
  EXPECT_EQ(arena.state_bytes(), 28LL * 2 * 8 * 2048 * 128 * 2);
  EXPECT_LT(arena.arena_bytes(), arena.intermediate_bytes());
  EXPECT_LE(arena.peak_live_bytes(), arena.arena_bytes());
  // Decode attention is split-KV; the prefill phase uses the flash kernel and cuBLASLt.
  const proto::Phase* prefill = FindPhase(plan, "prefill T=128");
  ASSERT_NE(prefill, nullptr);
  std::set<std::string> decode_families, prefill_families;
  for (const proto::Step& s : decode->steps()) decode_families.insert(s.tactic().family());
  for (const proto::Step& s : prefill->steps()) prefill_families.insert(s.tactic().family());
  EXPECT_TRUE(decode_families.count("attention_decode"));
  EXPECT_TRUE(decode_families.count("gemv"));
  EXPECT_TRUE(prefill_families.count("attention_prefill"));
  EXPECT_TRUE(prefill_families.count("cublaslt_gemm"));
  EXPECT_FALSE(prefill_families.count("gemv"));
  // Prefill keeps its norms: 2 per layer and the final one.
  int prefill_norms = 0;
  for (const proto::Step& s : prefill->steps()) {
    EXPECT_EQ(s.kind().rfind("rms_norm_linear", 0), std::string::npos) << s.name();
    if (s.kind() == "rms_norm") ++prefill_norms;
  }
  EXPECT_EQ(prefill_norms, 57);
}

// One phase of the tiny qwen3_moe model, planned as BuildExecutionPlan plans its phases (the
// lowered graph is named here: this branch's config layer has no qwen3_moe model_type yet).
absl::StatusOr<proto::Phase> PlanTinyMoePhase(bool decode, int64_t tokens) {
  TP_ASSIGN_OR_RETURN(
      ir::Graph graph,
      models::LowerModel(tileplan::testing::TinyModelConfig(models::Architecture::kQwen3Moe)));
  graph.set_name("qwen3_moe");
  PipelineOptions pipeline;
  pipeline.batch = 1;
  pipeline.tokens = tokens;
  pipeline.fuse_moe = true;       // decode: the moe step (prefill keeps the primitives)
  pipeline.fuse_norm_moe = true;  // with its norm
  TP_ASSIGN_OR_RETURN(PassPipeline passes,
                      decode ? BuildDecodePipeline(pipeline) : BuildPrefillPipeline(pipeline));
  TP_RETURN_IF_ERROR(passes.Run(graph).status());
  PhaseSpec spec;
  spec.kind = decode ? proto::Phase::KIND_DECODE : proto::Phase::KIND_PREFILL;
  spec.name = decode ? "decode B=1" : absl::StrCat("prefill T=", tokens);
  spec.bindings = {{"B", 1}, {"Smax", 512}, {"T", tokens}};
  spec.context = decode ? 512 : tokens;
  spec.pipeline = passes.PassNames();
  return PlanPhase(graph, spec, MustTarget("h200"), kernels::GlobalKernelRegistry(), nullptr);
}

// Prefill plans the routed experts' primitive regions: the router's logits on cuBLASLt,
// moe_topk on moe_routing, the expert linears on either expert family, whose bytes count only
// the weights of the experts the step can select (min(E, tokens·K) of them), and the combine
// on elementwise. Decode (with fuse_norm_moe) fuses each block with its norm into one
// rms_norm_moe step on moe_gemv (three launches), whose bytes count the norm weight, the router,
// the selectable experts' gate, up and down, x, the residual and the result.
TEST(PlanBuilderTest, MoeLayersPlanOnTheirFamilies) {
  const models::ModelConfig config =
      tileplan::testing::TinyModelConfig(models::Architecture::kQwen3Moe);
  const int64_t hidden = config.hidden_size, inter = config.moe.moe_intermediate_size;
  const int64_t experts = config.moe.num_experts, top_k = config.moe.top_k;
  for (const int64_t tokens : {1, 64}) {
    const bool decode = tokens == 1;
    SCOPED_TRACE(decode ? "decode" : "prefill");
    absl::StatusOr<proto::Phase> phase = PlanTinyMoePhase(decode, tokens);
    ASSERT_TRUE(phase.ok()) << phase.status();
    std::map<std::string, std::set<std::string>> families;  // kind -> families
    for (const proto::Step& s : phase->steps()) {
      families[s.kind()].insert(s.tactic().family());
      const int64_t selectable = std::min(experts, tokens * top_k);
      if (s.kind() == "rms_norm_moe") {
        // x (also the residual), the norm weight, the result, the router, the experts.
        EXPECT_EQ(s.launches(), 3) << s.name();
        EXPECT_EQ(s.bytes(), 3 * tokens * hidden * 2 + hidden * 2 + experts * hidden * 2 +
                                 selectable * inter * 3 * hidden * 2)
            << s.name();
      }
      if (s.kind() != "expert_linear") continue;
      // gate and up read x [T, H] and write [T, K, inter]; down reads [T, K, inter].
      const bool down = s.name().find("expert_out") != std::string::npos;
      const int64_t n = down ? hidden : inter, h = down ? inter : hidden;
      const int64_t x = tokens * (down ? top_k : 1) * h * 2;
      EXPECT_EQ(s.bytes(), x + tokens * top_k * 4 + tokens * top_k * n * 2 + selectable * n * h * 2)
          << s.name();
    }
    if (decode) {
      EXPECT_THAT(families["rms_norm_moe"], ::testing::ElementsAre("moe_gemv"));
      for (const char* kind : {"moe", "moe_router", "moe_topk", "expert_linear", "moe_combine"}) {
        EXPECT_EQ(families.count(kind), 0u) << kind;
      }
      continue;
    }
    EXPECT_EQ(families.count("moe"), 0u);
    EXPECT_THAT(families["moe_router"], ::testing::ElementsAre("cublaslt_gemm"));
    EXPECT_THAT(families["moe_topk"], ::testing::ElementsAre("moe_routing"));
    // The cost model's choice (expert_gemm for real prefill shapes).
    EXPECT_THAT(families["expert_linear"], ::testing::IsSubsetOf({"expert_gemm", "expert_gemv"}));
    EXPECT_THAT(families["moe_combine"], ::testing::ElementsAre("elementwise"));
  }
}

// A decode step of batch 16 runs its linears on cuBLASLt, which has no norm prologue: its
// norms stay, as in prefill; the same model at batch 1 folds them.
TEST(PlanBuilderTest, Qwen2LargeBatchDecodeKeepsItsNorms) {
  PlanOptions options;
  options.prefill_tokens = {};
  options.decode_batches = {1, 16};
  options.max_context = 1024;
  const proto::ExecutionPlan plan = MustPlan("qwen2-7b", "h200", options);
  const proto::Phase* b16 = FindPhase(plan, "decode B=16");
  const proto::Phase* b1 = FindPhase(plan, "decode B=1");
  ASSERT_TRUE(b16 != nullptr && b1 != nullptr);
  std::map<std::string, int> kinds16, kinds1;
  for (const proto::Step& s : b16->steps()) ++kinds16[s.kind()];
  for (const proto::Step& s : b1->steps()) ++kinds1[s.kind()];
  EXPECT_EQ(kinds16["rms_norm"], 2 * 28 + 1);
  EXPECT_EQ(kinds16["linear"], 28);
  EXPECT_EQ(kinds16["linear_swiglu"], 28);
  EXPECT_EQ(kinds16.count("rms_norm_linear"), 0u);
  EXPECT_EQ(kinds16.count("rms_norm_linear_swiglu"), 0u);
  EXPECT_EQ(kinds1["rms_norm"], 1);
  EXPECT_EQ(kinds1["rms_norm_linear"], 28);
  EXPECT_EQ(kinds1["rms_norm_linear_swiglu"], 28);
  for (const proto::Step& s : b1->steps()) {
    if (s.kind().rfind("rms_norm_linear", 0) == 0) {
      EXPECT_EQ(s.tactic().family(), "gemv") << s.name();
    }
  }
}

TEST(PlanBuilderTest, StepsBindEveryOperandAndResult) {
  const proto::ExecutionPlan plan = MustPlan("qwen2.5-0.5b", "h200", SmallOptions());
  for (const proto::Phase& phase : plan.phases()) {
    ASSERT_EQ(phase.steps_size(), phase.graph().regions_size());
    for (int i = 0; i < phase.steps_size(); ++i) {
      const proto::Step& s = phase.steps(i);
      EXPECT_EQ(s.region(), i);
      EXPECT_EQ(s.operands_size(), phase.graph().regions(i).operands_size());
      EXPECT_EQ(s.results_size(), phase.graph().regions(i).results_size());
      for (const proto::Binding& b : s.operands()) {
        EXPECT_NE(b.storage(), proto::Binding::STORAGE_UNSPECIFIED) << b.value();
        EXPECT_EQ(b.shape_size(), b.strides_size()) << b.value();
        if (b.storage() == proto::Binding::STORAGE_ARENA ||
            b.storage() == proto::Binding::STORAGE_INPUT) {
          EXPECT_LE(b.offset(), phase.arena().arena_bytes()) << b.value();
        }
      }
      if (absl::StrContains(s.kind(), "rope_kv_write")) {
        // The updated caches are the caches' own storage.
        EXPECT_EQ(s.results(1).storage(), proto::Binding::STORAGE_STATE);
        EXPECT_EQ(s.results(1).offset(), s.operands(s.operands_size() - 3).offset());
      }
      if (s.kind() == "reshape" || s.kind() == "split") {
        EXPECT_EQ(s.launches(), 0);
        EXPECT_EQ(s.results(0).root(), s.operands(0).root());
      }
    }
  }
}

// A bundled geometry cut to two layers, for tests that do not need the whole depth.
models::ModelConfig TwoLayers(const std::string& name) {
  models::ModelConfig config = MustConfig(name);
  config.num_layers = 2;
  config.sliding_window.resize(2);
  if (!config.moe.sparse_layers.empty()) config.moe.sparse_layers.resize(2);
  return config;
}

TEST(PlanBuilderTest, EveryBundledConfigPlansOnEveryTarget) {
  for (const std::string& model : models::BundledConfigNames()) {
    for (const std::string& target : targets::BundledTargetNames()) {
      SCOPED_TRACE(model + " on " + target);
      absl::StatusOr<proto::ExecutionPlan> plan =
          BuildExecutionPlan(TwoLayers(model), MustTarget(target), SmallOptions(), nullptr);
      ASSERT_TRUE(plan.ok()) << plan.status();
      EXPECT_EQ(plan->phases_size(), 3);
    }
  }
}

TEST(PlanBuilderTest, RenderingsAreDeterministicAndParseBack) {
  absl::StatusOr<proto::ExecutionPlan> a =
      BuildExecutionPlan(TwoLayers("qwen3-0.6b"), MustTarget("h200"), SmallOptions(), nullptr);
  absl::StatusOr<proto::ExecutionPlan> b =
      BuildExecutionPlan(TwoLayers("qwen3-0.6b"), MustTarget("h200"), SmallOptions(), nullptr);
  ASSERT_TRUE(a.ok() && b.ok());
  for (PlanFormat format :
       {PlanFormat::kTable, PlanFormat::kTextProto, PlanFormat::kJson, PlanFormat::kBinary}) {
    absl::StatusOr<std::string> x = FormatPlan(*a, format);
    absl::StatusOr<std::string> y = FormatPlan(*b, format);
    ASSERT_TRUE(x.ok() && y.ok());
    EXPECT_EQ(*x, *y);
    EXPECT_FALSE(x->empty());
  }
  proto::ExecutionPlan from_text;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(*FormatPlan(*a, PlanFormat::kTextProto),
                                                            &from_text));
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*a, from_text));
  proto::ExecutionPlan from_json;
  ASSERT_TRUE(
      google::protobuf::util::JsonStringToMessage(*FormatPlan(*a, PlanFormat::kJson), &from_json)
          .ok());
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*a, from_json));
  proto::ExecutionPlan from_binary;
  ASSERT_TRUE(from_binary.ParseFromString(*FormatPlan(*a, PlanFormat::kBinary)));
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*a, from_binary));
}

// Phases of several batches share one KV cache, laid out for the largest: every phase has the
// same state slots, a phase of fewer sequences binds the first rows of each, and the KV cache
// is the largest batch's.
TEST(PlanBuilderTest, PhasesOfSeveralBatchesShareOneKvCacheLayout) {
  PlanOptions options;
  options.prefill_tokens = {16};
  options.prefill_batch = 2;
  options.decode_batches = {1, 4, 3};
  options.max_context = 64;
  const proto::ExecutionPlan plan = MustPlan("qwen3-0.6b", "h200", options);
  ASSERT_EQ(plan.phases_size(), 4);
  const proto::Arena& first = plan.phases(0).arena();
  EXPECT_EQ(first.state_bytes(), 28LL * 2 * 4 * 8 * 64 * 128 * 2);  // 4 sequences
  // Per token: the same whichever phase's table says it.
  const std::string table = PlanTable(plan);
  int per_token_lines = 0;
  for (size_t at = table.find("KV cache per token: 4096 B per layer"); at != std::string::npos;
       at = table.find("KV cache per token: 4096 B per layer", at + 1)) {
    ++per_token_lines;
  }
  EXPECT_EQ(per_token_lines, 4) << table;
  for (const proto::Phase& phase : plan.phases()) {
    SCOPED_TRACE(phase.name());
    EXPECT_EQ(phase.arena().state_bytes(), first.state_bytes());
    EXPECT_EQ(phase.arena().state_sequences(), 4);
    ASSERT_EQ(phase.arena().states_size(), first.states_size());
    for (int i = 0; i < first.states_size(); ++i) {
      EXPECT_EQ(phase.arena().states(i).state(), first.states(i).state());
      EXPECT_EQ(phase.arena().states(i).offset(), first.states(i).offset());
      EXPECT_EQ(phase.arena().states(i).bytes(), first.states(i).bytes());
    }
    // Every binding of a state starts at its slot and stays inside it.
    for (const proto::Step& step : phase.steps()) {
      for (const auto* bindings : {&step.operands(), &step.results()}) {
        for (const proto::Binding& b : *bindings) {
          if (b.storage() != proto::Binding::STORAGE_STATE) continue;
          bool inside = false;
          for (const proto::StateSlot& slot : first.states()) {
            inside |= slot.state() == b.root() && b.offset() >= slot.offset() &&
                      b.offset() < slot.offset() + slot.bytes();
          }
          EXPECT_TRUE(inside) << step.name() << " %" << b.value();
          EXPECT_EQ(b.shape(0), phase.name() == "decode B=1"   ? 1
                                : phase.name() == "decode B=3" ? 3
                                : phase.name() == "decode B=4" ? 4
                                                               : 2)
              << step.name();
        }
      }
    }
  }
}

// ParsePlan reads back every machine form; a form that leaves things out, bytes that are no
// plan, another format_version and a plan without phases are refused.
TEST(PlanBuilderTest, PlansAreReadBackFromEveryMachineForm) {
  const proto::ExecutionPlan plan = MustPlan("qwen3-0.6b", "h200", SmallOptions());
  for (PlanFormat format : {PlanFormat::kTextProto, PlanFormat::kJson, PlanFormat::kBinary}) {
    const std::string bytes = *FormatPlan(plan, format);
    absl::StatusOr<proto::ExecutionPlan> back = ParsePlan(bytes, format);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(plan, *back));
    // Another form's bytes, or a cut-off one, are not read as a plan.
    const PlanFormat other =
        format == PlanFormat::kJson ? PlanFormat::kTextProto : PlanFormat::kJson;
    EXPECT_EQ(ParsePlan(bytes, other).status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(ParsePlan(bytes.substr(0, bytes.size() / 2), format).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  for (PlanFormat format :
       {PlanFormat::kTable, PlanFormat::kTableAll, PlanFormat::kMemory, PlanFormat::kSvg}) {
    EXPECT_THAT(ParsePlan(*FormatPlan(plan, format), format).status().message(),
                HasSubstr("only the textproto, json and binary forms can be read back"));
  }
  EXPECT_THAT(ParsePlan("format_version: 1\nmodel: \"x\"\nbogus {", PlanFormat::kTextProto)
                  .status()
                  .message(),
              HasSubstr("plan:3:"));

  // A string that is not UTF-8 (a text escape can write one) is refused in every form.
  EXPECT_THAT(
      ParsePlan("format_version: 1\nmodel: \"\\376\\377\"\nphases {}", PlanFormat::kTextProto)
          .status()
          .message(),
      HasSubstr("a string field holds bytes that are not UTF-8"));

  proto::ExecutionPlan newer = plan;
  newer.set_format_version(kPlanFormatVersion + 1);
  absl::StatusOr<proto::ExecutionPlan> refused =
      ParsePlan(*FormatPlan(newer, PlanFormat::kBinary), PlanFormat::kBinary);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(),
              HasSubstr(absl::StrCat("format_version ", kPlanFormatVersion + 1,
                                     "; this version of tileplan reads ", kPlanFormatVersion)));
  proto::ExecutionPlan empty = plan;
  empty.clear_phases();
  EXPECT_THAT(
      ParsePlan(*FormatPlan(empty, PlanFormat::kJson), PlanFormat::kJson).status().message(),
      HasSubstr("the plan has no phases"));

  // A field a later version adds is skipped in JSON and binary (proto3's rule for additions);
  // text, whose unknown fields cannot be skipped safely, names it.
  std::string json = *FormatPlan(plan, PlanFormat::kJson);
  json.insert(json.find('{') + 1, "\"a_later_field\": 7,");
  EXPECT_TRUE(ParsePlan(json, PlanFormat::kJson).ok());
  EXPECT_THAT(ParsePlan("a_later_field: 7\n" + *FormatPlan(plan, PlanFormat::kTextProto),
                        PlanFormat::kTextProto)
                  .status()
                  .message(),
              HasSubstr("plan:1:"));
  EXPECT_TRUE(ParsePlan(*FormatPlan(plan, PlanFormat::kBinary) + std::string("\xf8\x06\x07", 3),
                        PlanFormat::kBinary)
                  .ok());
}

// ReadPlanFile takes the form from the file's name and names the file in its errors.
TEST(PlanBuilderTest, PlanFilesAreReadByTheirName) {
  const std::filesystem::path dir = testing::ScratchDir("plan_files");
  const proto::ExecutionPlan plan = MustPlan("qwen3-0.6b", "h200", SmallOptions());
  for (const char* name : {"p.json", "p.textproto", "p.txtpb", "p.pbtxt", "p.binpb", "p.pb"}) {
    const std::string path = (dir / name).string();
    std::ofstream(path, std::ios::binary) << *FormatPlan(plan, PlanFormatForPath(path));
    absl::StatusOr<proto::ExecutionPlan> back = ReadPlanFile(path);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(plan, *back)) << name;
  }
  const std::string table = (dir / "p.txt").string();
  std::ofstream(table) << PlanTable(plan);
  EXPECT_THAT(ReadPlanFile(table).status().message(),
              HasSubstr("p.txt: a plan file is read by its name"));
  const std::string wrong = (dir / "wrong.json").string();
  std::ofstream(wrong) << *FormatPlan(plan, PlanFormat::kTextProto);
  EXPECT_THAT(ReadPlanFile(wrong).status().message(),
              HasSubstr("wrong.json: plan: not a plan's JSON"));
  EXPECT_EQ(ReadPlanFile((dir / "missing.json").string()).status().code(),
            absl::StatusCode::kNotFound);
  std::filesystem::create_directory(dir / "d.json");
  EXPECT_EQ(ReadPlanFile((dir / "d.json").string()).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::filesystem::remove_all(dir);
}

TEST(PlanBuilderTest, FormatsAreNamedAndFileNamesChooseThem) {
  EXPECT_EQ(*ParsePlanFormat("binary"), PlanFormat::kBinary);
  EXPECT_THAT(ParsePlanFormat("xml").status().message(),
              ::testing::HasSubstr("unknown plan format 'xml' (table, table-all, memory, svg, "
                                   "textproto, json or binary)"));
  EXPECT_EQ(*ParsePlanFormat("table-all"), PlanFormat::kTableAll);
  EXPECT_EQ(*ParsePlanFormat("memory"), PlanFormat::kMemory);
  EXPECT_EQ(PlanFormatForPath("out/plan.json"), PlanFormat::kJson);
  EXPECT_EQ(PlanFormatForPath("plan.textproto"), PlanFormat::kTextProto);
  EXPECT_EQ(PlanFormatForPath("plan.txtpb"), PlanFormat::kTextProto);
  EXPECT_EQ(PlanFormatForPath("plan.pbtxt"), PlanFormat::kTextProto);
  EXPECT_EQ(PlanFormatForPath("plan.binpb"), PlanFormat::kBinary);
  EXPECT_EQ(PlanFormatForPath("plan.pb"), PlanFormat::kBinary);
  EXPECT_EQ(PlanFormatForPath("plan.txt"), PlanFormat::kTable);
  EXPECT_EQ(PlanFormatForPath("plan"), PlanFormat::kTable);
}

TEST(PlanBuilderTest, TableShowsStepsLaunchesAndMemory) {
  const std::string table = PlanTable(MustPlan("qwen3-0.6b", "h200", SmallOptions()));
  EXPECT_THAT(table, HasSubstr("plan qwen3 on h200 (NVIDIA H200, sm_90, 132 SMs): 3 phases"));
  EXPECT_THAT(table, HasSubstr("step  region"));
  EXPECT_THAT(table, HasSubstr("fused from"));
  EXPECT_THAT(table, HasSubstr("linear,split,silu,mul"));
  EXPECT_THAT(table, HasSubstr("split,reshape*3,rms_norm*2,rope*2,kv_write*2"));
  EXPECT_THAT(table, HasSubstr("launches per prefill step: "));
  EXPECT_THAT(table, HasSubstr("rms_norm,linear,split,silu,mul"));
  EXPECT_THAT(table, HasSubstr("split,reshape*3,rms_norm*2,rope*2,kv_write*2,attention"));
  // Five kernels per layer (both norms in the GEMVs after them, the RoPE + KV write inside
  // the attention) and three more.
  EXPECT_THAT(table, HasSubstr("launches per decode step: 143\n"));
  EXPECT_THAT(table, HasSubstr("memory: arena "));
  // The KV cache holds the largest batch's 4 sequences (SmallOptions: decode batches 1 and 4).
  EXPECT_THAT(table, HasSubstr(", KV cache 224.00 MiB, weights "));
  EXPECT_THAT(table, HasSubstr("cost model"));
  EXPECT_THAT(table, HasSubstr("flops  grid"));
  EXPECT_THAT(table, HasSubstr("bound   shape"));
}

// Qwen3-0.6B's 28 layers are identical in every phase: the table shows one block of them,
// under a line naming the layers, with the first layer's step numbers; table-all keeps every
// row. Either way each phase ends with its per-kind summary, whose shares sum to the phase.
TEST(PlanBuilderTest, TableFoldsIdenticalLayersAndSummarizesKinds) {
  const proto::ExecutionPlan plan = MustPlan("qwen3-0.6b", "h200", SmallOptions());
  const std::string folded = PlanTable(plan);
  const std::string all = PlanTable(plan, /*fold_layers=*/false);
  EXPECT_THAT(folded, HasSubstr("layers 0-27: 28 identical layers, each as below"));
  EXPECT_THAT(folded, HasSubstr("l0-27.qkv"));
  EXPECT_THAT(folded, Not(HasSubstr(" l5.qkv ")));
  EXPECT_THAT(all, HasSubstr(" l5.qkv "));
  EXPECT_THAT(all, Not(HasSubstr("identical layers")));
  EXPECT_LT(folded.size() * 5, all.size());
  const proto::Phase& decode = *FindPhase(plan, "decode B=1");
  // Every step of the phase is one of the all-table's rows.
  for (const proto::Step& s : decode.steps()) {
    EXPECT_THAT(all, HasSubstr(absl::StrCat(" ", s.name(), " "))) << s.name();
  }
  // The summary: one row per kind with its step count, the costliest first.
  std::map<std::string, int> steps;
  for (const proto::Step& s : decode.steps()) ++steps[s.kind()];
  const size_t at = folded.find("by kind", folded.find("\ndecode B=1 "));
  ASSERT_NE(at, std::string::npos);
  const std::string summary = folded.substr(at, folded.find("\n\n", at) - at);
  for (const auto& [kind, n] : steps) {
    EXPECT_THAT(summary, ::testing::ContainsRegex(absl::StrCat("\n", kind, " +", n, " "))) << kind;
  }
  // Bound: a decode GEMV is bound by its bytes, a prefill GEMM by its flops.
  for (const proto::Step& s : decode.steps()) {
    if (s.kind() == "linear_residual") {
      EXPECT_EQ(s.bound(), proto::Step::BOUND_MEMORY);
    }
    if (s.kind() == "reshape") {
      EXPECT_EQ(s.bound(), proto::Step::BOUND_UNSPECIFIED);
    }
  }
  for (const proto::Step& s : FindPhase(plan, "prefill T=64")->steps()) {
    if (s.kind() == "lm_head") {
      EXPECT_NE(s.bound(), proto::Step::BOUND_UNSPECIFIED);
    }
  }
}

// The picture: a standalone SVG with one point per step that executes flops and one
// rectangle per arena buffer, each titled; the same plan draws the same bytes, and a phase the
// plan does not have is refused.
TEST(PlanBuilderTest, SvgDrawsTheStepsOnTheRooflineAndTheArena) {
  const proto::ExecutionPlan plan = MustPlan("qwen3-0.6b", "h200", SmallOptions());
  EXPECT_EQ(DefaultSvgPhase(plan), 1);  // prefill T=64, then decode B=1
  for (int phase = 0; phase < plan.phases_size(); ++phase) {
    absl::StatusOr<std::string> svg = PlanSvg(plan, phase);
    ASSERT_TRUE(svg.ok()) << svg.status();
    EXPECT_TRUE(absl::StartsWith(*svg, "<svg xmlns=\"http://www.w3.org/2000/svg\""));
    EXPECT_TRUE(absl::EndsWith(*svg, "</svg>\n"));
    EXPECT_EQ(*svg, *PlanSvg(plan, phase));
    const proto::Phase& p = plan.phases(phase);
    EXPECT_THAT(*svg, HasSubstr(absl::StrCat(": ", p.name(), "</text>")));
    int computing = 0;
    for (const proto::Step& s : p.steps()) {
      if (s.launches() > 0 && s.flops() > 0 && s.bytes() > 0) ++computing;
    }
    auto count = [&](const std::string& what) {
      int n = 0;
      for (size_t at = svg->find(what); at != std::string::npos; at = svg->find(what, at + 1)) ++n;
      return n;
    };
    EXPECT_EQ(count("</title></circle>"), computing);
    EXPECT_EQ(count("</title></rect>"), p.arena().buffers_size());
    EXPECT_THAT(*svg, HasSubstr(absl::StrCat(computing, " steps: filled measured")));
  }
  absl::StatusOr<std::string> none = PlanSvg(plan, plan.phases_size());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(none.status().message(), HasSubstr("does not exist"));
  EXPECT_EQ(*ParsePlanFormat("svg"), PlanFormat::kSvg);
  EXPECT_EQ(PlanFormatForPath("plan.svg"), PlanFormat::kSvg);
  EXPECT_EQ(*FormatPlan(plan, PlanFormat::kSvg), *PlanSvg(plan, 1));
  EXPECT_EQ(*FormatPlan(plan, PlanFormat::kSvg, 0), *PlanSvg(plan, 0));
}

// The memory view lists every arena buffer of every phase by offset, with its live steps and
// what it holds, and the KV-cache slots.
TEST(PlanBuilderTest, MemoryViewListsTheArenaBuffers) {
  const proto::ExecutionPlan plan = MustPlan("qwen3-0.6b", "h200", SmallOptions());
  const std::string memory = PlanMemory(plan);
  EXPECT_THAT(memory, HasSubstr("offset       bytes"));
  EXPECT_THAT(memory, HasSubstr("state offset"));
  EXPECT_THAT(memory, HasSubstr("k_cache.0"));
  for (const proto::Phase& phase : plan.phases()) {
    EXPECT_THAT(memory, HasSubstr(absl::StrCat("\n", phase.name(), " (")));
    for (const proto::ArenaBuffer& b : phase.arena().buffers()) {
      EXPECT_THAT(memory, ::testing::ContainsRegex(
                              absl::StrCat("\n *", b.offset(), "  +", HumanBytes(b.bytes()), "  +",
                                           b.first_step(), "-", b.last_step(), "  ")));
    }
  }
}

// Answers a hit for every decode rms_norm_linear_swiglu on gemv.
class SwigluCache : public TacticCache {
 public:
  std::optional<MeasuredTactic> Lookup(const TacticKey& key) const override {
    ++lookups_;
    if (key.phase != ir::Phase::kDecode || key.family != "gemv" ||
        key.region_signature.rfind("rms_norm_linear_swiglu(", 0) != 0) {
      return std::nullopt;
    }
    return MeasuredTactic{{"gemv",
                           key.family_version,
                           {{"rows_per_cta", 8}, {"split_k", 1}, {"threads", 128}, {"vec", 8}}},
                          1.25};
  }
  mutable int lookups_ = 0;
};

TEST(PlanBuilderTest, CachedTacticsAreTunedAndTheRestCostModel) {
  SwigluCache cache;
  const proto::ExecutionPlan plan = MustPlan("qwen3-0.6b", "h200", SmallOptions(), &cache);
  EXPECT_GT(cache.lookups_, 0);
  int tuned = 0;
  for (const proto::Phase& phase : plan.phases()) {
    for (const proto::Step& s : phase.steps()) {
      if (s.source() != proto::Step::SOURCE_TUNED) continue;
      ++tuned;
      EXPECT_EQ(phase.kind(), proto::Phase::KIND_DECODE);
      EXPECT_EQ(s.kind(), "rms_norm_linear_swiglu");
      EXPECT_EQ(s.measured_us(), 1.25);
      EXPECT_EQ(s.tactic().family(), "gemv");
      EXPECT_EQ(s.launch().grid(0), 3072 / 8);
      EXPECT_THAT(s.provenance().considered(), ::testing::Contains("gemv: 1.25 us (tuned)"));
    }
  }
  EXPECT_EQ(tuned, 2 * 28);  // both decode phases
  EXPECT_THAT(PlanTable(plan), HasSubstr("tuned"));
}

TEST(PlanBuilderTest, BadOptionsNameTheOption) {
  PlanOptions options = SmallOptions();
  options.prefill_tokens = {1024};
  absl::StatusOr<proto::ExecutionPlan> plan =
      BuildExecutionPlan(MustConfig("qwen3-0.6b"), MustTarget("h200"), options, nullptr);
  EXPECT_THAT(plan.status().message(), HasSubstr("prefill_tokens has 1024"));
  options = SmallOptions();
  options.decode_batches = {0};
  plan = BuildExecutionPlan(MustConfig("qwen3-0.6b"), MustTarget("h200"), options, nullptr);
  EXPECT_THAT(plan.status().message(), HasSubstr("decode_batches"));
  options.prefill_tokens.clear();
  options.decode_batches.clear();
  plan = BuildExecutionPlan(MustConfig("qwen3-0.6b"), MustTarget("h200"), options, nullptr);
  EXPECT_THAT(plan.status().message(), HasSubstr("nothing to plan"));
}

// wgmma_gemm is left out by default and recorded so; an empty list lets it compete (on sm_90
// prefill linears, which the calibration has no sample of); an unknown name is refused.
TEST(PlanBuilderTest, ExcludedFamiliesAreLeftOffAndRecorded) {
  auto families = [](const proto::ExecutionPlan& plan) {
    std::set<std::string> out;
    for (const proto::Phase& phase : plan.phases()) {
      for (const proto::Step& s : phase.steps()) out.insert(s.tactic().family());
    }
    return out;
  };
  PlanOptions options = SmallOptions();
  const proto::ExecutionPlan by_default = MustPlan("qwen3-0.6b", "h200", options);
  EXPECT_THAT(by_default.options().excluded_families(), ::testing::ElementsAre("wgmma_gemm"));
  EXPECT_FALSE(families(by_default).contains("wgmma_gemm"));
  EXPECT_TRUE(families(by_default).contains("cublaslt_gemm"));
  options.excluded_families.clear();
  const proto::ExecutionPlan all = MustPlan("qwen3-0.6b", "h200", options);
  EXPECT_TRUE(all.options().excluded_families().empty());
  EXPECT_TRUE(families(all).contains("wgmma_gemm"));
  // prefill_mla_expanded off is mla_prefill left out, recorded so that the tuner skips it too.
  options.prefill_mla_expanded = false;
  EXPECT_THAT(MustPlan("qwen3-0.6b", "h200", options).options().excluded_families(),
              ::testing::ElementsAre("mla_prefill"));
  options.prefill_mla_expanded = true;
  // Not on sm_80, which has no wgmma.
  EXPECT_FALSE(families(MustPlan("qwen3-0.6b", "a100", options)).contains("wgmma_gemm"));
  options.excluded_families = {"cublaslt_gemm", "no_such_family"};
  const absl::StatusOr<proto::ExecutionPlan> bad =
      BuildExecutionPlan(MustConfig("qwen3-0.6b"), MustTarget("h200"), options, nullptr);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("'no_such_family', not a kernel family"));
}

// A context past the model's max_position_embeddings, and a plan whose weights, KV cache and
// arena exceed the target's memory, are refused with the numbers.
TEST(PlanBuilderTest, InfeasiblePlansAreRefusedWithTheSizes) {
  PlanOptions options = SmallOptions();
  options.max_context = 40961;  // Qwen3-0.6B's max_position_embeddings is 40960
  absl::StatusOr<proto::ExecutionPlan> plan =
      BuildExecutionPlan(MustConfig("qwen3-0.6b"), MustTarget("h200"), options, nullptr);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(plan.status().message(),
              HasSubstr("max_context 40961 exceeds the model's max_position_embeddings 40960"));
  options.max_context = 40960;
  options.decode_context = 0;
  plan = BuildExecutionPlan(TwoLayers("qwen3-0.6b"), MustTarget("h200"), options, nullptr);
  EXPECT_TRUE(plan.ok()) << plan.status();

  // Qwen2-7B (15.2 GB of weights) at batch 32 and 32768 positions: 56 GiB of KV cache.
  options = SmallOptions();
  options.prefill_tokens = {128};
  options.decode_batches = {32};
  options.max_context = 32768;
  plan = BuildExecutionPlan(MustConfig("qwen2-7b"), MustTarget("l40s"), options, nullptr);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(plan.status().message(), HasSubstr("weights 14.19 GiB, KV cache 56.00 GiB for "
                                                 "max_context 32768"));
  EXPECT_THAT(plan.status().message(), HasSubstr("but l40s has 44.99 GiB"));
  plan = BuildExecutionPlan(MustConfig("qwen2-7b"), MustTarget("h200"), options, nullptr);
  EXPECT_TRUE(plan.ok()) << plan.status();
}

TEST(PlanBuilderTest, UnplannableRegionNamesThePhaseAndTheReasons) {
  // head_dim 80: the flash kernel is not instantiated for it, and prefill is not decode.
  models::ModelConfig config = MustConfig("qwen3-0.6b");
  config.head_dim = 80;
  PlanOptions options = SmallOptions();
  absl::StatusOr<proto::ExecutionPlan> plan =
      BuildExecutionPlan(config, MustTarget("h200"), options, nullptr);
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(plan.status().message(), HasSubstr("prefill T=64: region #"));
  EXPECT_THAT(plan.status().message(), HasSubstr("attention_prefill: head_dim 80"));
}

// The tuner's keys of a rank's steps carry the tensor-parallel degree; a whole model's do not.
TEST(PlanBuilder, TensorParallelRanksLookUpTheirOwnKeys) {
  for (int64_t ranks : {1, 2}) {
    PlanOptions options = SmallOptions();
    options.tensor_parallel = ranks;
    const RecordingTacticCache lookups(nullptr);
    absl::StatusOr<models::ModelConfig> config = models::BundledModelConfig("qwen2-7b");
    ASSERT_TRUE(config.ok());
    ASSERT_TRUE(BuildExecutionPlan(*config, MustTarget("h200"), options, &lookups).ok());
    ASSERT_FALSE(lookups.records().empty());
    for (const auto& [key, record] : lookups.records()) {
      EXPECT_EQ(absl::EndsWith(key.shape_bucket, ";tp=2"), ranks == 2) << key.ToString();
    }
  }
}

// A tensor-parallel rank's plan: the same phases on a share of the heads and widths, one
// all_reduce after each attention and MLP and the logits gathered, all run by the collective
// family and priced by the target's link; a target without one is refused.
TEST(PlanBuilder, TensorParallelRankPlansCollectivesOnTheLink) {
  PlanOptions options = SmallOptions();
  options.tensor_parallel = 2;
  options.rank = 1;
  const proto::ExecutionPlan plan = MustPlan("qwen2-7b", "h200", options);
  EXPECT_EQ(plan.options().tensor_parallel_ranks(), 2);
  EXPECT_EQ(plan.options().tensor_parallel_rank(), 1);
  const proto::ExecutionPlan whole = MustPlan("qwen2-7b", "h200", SmallOptions());
  EXPECT_EQ(whole.options().tensor_parallel_ranks(), 0);
  const proto::Phase* decode = FindPhase(plan, "decode B=4");
  ASSERT_NE(decode, nullptr);
  int reduces = 0, gathers = 0;
  for (const proto::Step& s : decode->steps()) {
    if (s.kind() == "all_reduce" || s.kind() == "all_gather") {
      EXPECT_EQ(s.tactic().family(), "collective") << s.name();
      EXPECT_GT(s.estimated_us(), 0) << s.name();
      (s.kind() == "all_reduce" ? reduces : gathers) += 1;
    }
  }
  EXPECT_EQ(reduces, 2 * 28);
  EXPECT_EQ(gathers, 1);
  absl::StatusOr<std::string> text = FormatPlan(plan, PlanFormat::kTable);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_THAT(*text, ::testing::HasSubstr("tensor parallel: rank 1 of 2 over NVLink"));
  // Sliced weights are listed with their slices, for the runtime that loads them.
  bool sliced = false;
  for (const proto::PackedWeight& w : plan.weight_packing()) {
    sliced = sliced || w.checkpoint_slices_size() > 0;
  }
  EXPECT_TRUE(sliced);

  targets::TargetDescription no_link = MustTarget("h200");
  no_link.clear_interconnect();
  no_link.clear_achievable_interconnect_bandwidth_gbps();
  auto refused = BuildExecutionPlan(MustConfig("qwen2-7b"), no_link, options, nullptr);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()),
              ::testing::HasSubstr("describes no interconnect between its GPUs"));
  options.tensor_parallel = 3;
  options.rank = 0;
  refused = BuildExecutionPlan(MustConfig("qwen2-7b"), MustTarget("h200"), options, nullptr);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()),
              ::testing::HasSubstr("num_attention_heads (28) is not a multiple of 3"));
}

}  // namespace
}  // namespace tileplan::planner
