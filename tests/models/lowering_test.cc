// Lowering of every architecture to the primitive graph, and binding to checkpoints.
#include "models/lowering.h"

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "regions/parser.h"
#include "regions/printer.h"
#include "regions/verifier.h"
#include "tests/models/safetensors_builder.h"
#include "tests/testing/random_weights.h"
#include "tests/testing/tiny_models.h"

namespace tileplan::models {
namespace {

using ::testing::HasSubstr;
using testing::TinyModelConfig;

ir::Graph Lower(const ModelConfig& config) {
  auto graph = LowerModel(config);
  EXPECT_TRUE(graph.ok()) << graph.status();
  return graph.ok() ? std::move(*graph) : ir::Graph();
}

std::map<std::string, int> KindCounts(const ir::Graph& g) {
  std::map<std::string, int> counts;
  for (const ir::Region& r : g.regions()) ++counts[r.kind];
  return counts;
}

std::string TypeOf(const ir::Graph& g, const std::string& name) {
  const ir::ValueId id = g.FindValue(name);
  return id == ir::kNoValue ? "<missing %" + name + ">" : g.value(id).type.ToString();
}

const ir::Region& ProducerOf(const ir::Graph& g, const std::string& name) {
  return g.regions()[static_cast<size_t>(g.value(g.FindValue(name)).producer)];
}

std::string OperandName(const ir::Graph& g, const std::string& result, size_t k) {
  return g.value(ProducerOf(g, result).operands[k]).name;
}

TEST(Lowering, ModelGraphConventions) {
  const ir::Graph g = Lower(TinyModelConfig(Architecture::kQwen2));
  ASSERT_EQ(g.inputs().size(), 2u);
  EXPECT_EQ(g.value(g.inputs()[0]).name, "tokens");
  EXPECT_EQ(g.value(g.inputs()[1]).name, "positions");
  EXPECT_EQ(TypeOf(g, "tokens"), "i32[B,T]");
  EXPECT_EQ(TypeOf(g, "positions"), "i32[B,T]");
  std::vector<std::string> states;
  for (ir::ValueId id : g.states()) states.push_back(g.value(id).name);
  EXPECT_THAT(states, ::testing::ElementsAre("k_cache.0", "v_cache.0", "k_cache.1", "v_cache.1"));
  EXPECT_EQ(TypeOf(g, "k_cache.1"), "bf16[B,2,Smax,8]");
  ASSERT_EQ(g.outputs().size(), 1u);
  EXPECT_EQ(g.value(g.outputs()[0]).name, "logits");
  EXPECT_EQ(TypeOf(g, "logits"), "f32[B,T,61]");
  for (ir::ValueId id : g.weights()) {
    EXPECT_EQ(g.value(id).checkpoint_tensors, std::vector<std::string>{g.value(id).name});
    EXPECT_EQ(g.value(id).type.dtype, ir::DType::kBF16);
  }
  EXPECT_EQ(g.name(), "qwen2");
}

TEST(Lowering, Qwen2LayerStructure) {
  const ir::Graph g = Lower(TinyModelConfig(Architecture::kQwen2));
  // Per layer: 2 norms, q/k/v/o weights, q/k/v biases, gate/up/down; plus embedding, final
  // norm and an untied lm_head.
  EXPECT_EQ(g.weights().size(), 2u * 12 + 3);
  EXPECT_EQ(KindCounts(g), (std::map<std::string, int>{{"add", 4},
                                                       {"attention", 2},
                                                       {"embedding", 1},
                                                       {"kv_write", 4},
                                                       {"linear", 14},
                                                       {"lm_head", 1},
                                                       {"mul", 2},
                                                       {"reshape", 8},
                                                       {"rms_norm", 5},
                                                       {"rope", 4},
                                                       {"silu", 2}}));
  EXPECT_EQ(TypeOf(g, "model.layers.1.self_attn.q_proj.bias"), "bf16[32]");
  EXPECT_EQ(TypeOf(g, "model.layers.1.self_attn.k_proj.weight"), "bf16[16,32]");
  EXPECT_EQ(g.FindValue("model.layers.0.self_attn.o_proj.bias"), ir::kNoValue);
  EXPECT_EQ(TypeOf(g, "lm_head.weight"), "bf16[61,32]");
  EXPECT_EQ(TypeOf(g, "l0.q"), "bf16[B,T,32]");
  EXPECT_EQ(TypeOf(g, "l0.q_heads"), "bf16[B,T,4,8]");
  EXPECT_EQ(TypeOf(g, "l0.k_heads"), "bf16[B,T,2,8]");
  EXPECT_EQ(ProducerOf(g, "l0.q").operands.size(), 3u);

  // Data flow of one layer.
  EXPECT_EQ(OperandName(g, "l1.attn_norm", 0), "l0.out");
  EXPECT_EQ(OperandName(g, "l1.q_rope", 0), "l1.q_heads");
  EXPECT_EQ(OperandName(g, "l1.q_rope", 1), "positions");
  EXPECT_EQ(OperandName(g, "l1.k_cache", 0), "k_cache.1");
  EXPECT_EQ(OperandName(g, "l1.k_cache", 1), "l1.k_rope");
  EXPECT_EQ(OperandName(g, "l1.v_cache", 1), "l1.v_heads");
  EXPECT_EQ(ProducerOf(g, "l1.k_cache").result_aliases[0].kind, ir::AliasKind::kInPlace);
  EXPECT_EQ(ProducerOf(g, "l1.q_heads").result_aliases[0].kind, ir::AliasKind::kView);
  const ir::Region& attn = ProducerOf(g, "l1.attn");
  EXPECT_EQ(g.value(attn.operands[0]).name, "l1.q_rope");
  EXPECT_EQ(g.value(attn.operands[1]).name, "l1.k_cache");
  EXPECT_EQ(g.value(attn.operands[2]).name, "l1.v_cache");
  EXPECT_EQ(g.value(attn.operands[3]).name, "positions");
  EXPECT_DOUBLE_EQ(*attn.attrs.GetFloat("scale"), 1.0 / std::sqrt(8.0));
  EXPECT_EQ(*attn.attrs.GetInt("sliding_window"), 0);
  EXPECT_EQ(OperandName(g, "l1.attn_out", 0), "l1.attn_flat");
  EXPECT_EQ(OperandName(g, "l1.attn_residual", 0), "l0.out");
  EXPECT_EQ(OperandName(g, "l1.attn_residual", 1), "l1.attn_out");
  EXPECT_EQ(OperandName(g, "l1.swiglu", 0), "l1.gate_act");
  EXPECT_EQ(OperandName(g, "l1.swiglu", 1), "l1.up");
  EXPECT_EQ(OperandName(g, "l1.mlp_out", 0), "l1.swiglu");
  EXPECT_EQ(OperandName(g, "l1.out", 0), "l1.attn_residual");
  EXPECT_EQ(OperandName(g, "final_norm", 0), "l1.out");
  EXPECT_EQ(OperandName(g, "logits", 1), "lm_head.weight");
  const ir::Region& rope = ProducerOf(g, "l0.k_rope");
  EXPECT_EQ(*rope.attrs.GetString("rope_type"), "default");
  EXPECT_DOUBLE_EQ(*rope.attrs.GetFloat("theta"), 1e6);
  EXPECT_DOUBLE_EQ(*ProducerOf(g, "final_norm").attrs.GetFloat("eps"), 1e-5);
}

TEST(Lowering, LlamaBiasesLlama3RopeAndTiedEmbeddings) {
  const ir::Graph g = Lower(TinyModelConfig(Architecture::kLlama));
  // Per layer: 2 norms + 4 attention weights and biases + 3 MLP weights and biases.
  EXPECT_EQ(g.weights().size(), 2u * 16 + 2);
  EXPECT_EQ(TypeOf(g, "model.layers.0.self_attn.o_proj.bias"), "bf16[32]");
  EXPECT_EQ(TypeOf(g, "model.layers.0.mlp.down_proj.bias"), "bf16[32]");
  EXPECT_EQ(TypeOf(g, "model.layers.0.mlp.gate_proj.weight"), "bf16[48,32]");
  EXPECT_EQ(g.FindValue("lm_head.weight"), ir::kNoValue);
  EXPECT_EQ(OperandName(g, "logits", 1), "model.embed_tokens.weight");
  const ir::Region& rope = ProducerOf(g, "l1.q_rope");
  EXPECT_EQ(*rope.attrs.GetString("rope_type"), "llama3");
  EXPECT_DOUBLE_EQ(*rope.attrs.GetFloat("factor"), 8.0);
  EXPECT_DOUBLE_EQ(*rope.attrs.GetFloat("low_freq_factor"), 1.0);
  EXPECT_DOUBLE_EQ(*rope.attrs.GetFloat("high_freq_factor"), 4.0);
  EXPECT_EQ(*rope.attrs.GetInt("original_max_position_embeddings"), 16);
}

TEST(Lowering, Qwen3NormalizesQueriesAndKeysPerHeadBeforeRope) {
  const ir::Graph g = Lower(TinyModelConfig(Architecture::kQwen3));
  EXPECT_EQ(TypeOf(g, "model.layers.0.self_attn.q_norm.weight"), "bf16[16]");
  EXPECT_EQ(TypeOf(g, "model.layers.0.self_attn.k_norm.weight"), "bf16[16]");
  EXPECT_EQ(TypeOf(g, "model.layers.0.self_attn.q_proj.weight"), "bf16[64,32]");
  EXPECT_EQ(TypeOf(g, "l0.q_normed"), "bf16[B,T,4,16]");
  EXPECT_EQ(TypeOf(g, "l0.k_normed"), "bf16[B,T,1,16]");
  EXPECT_EQ(ProducerOf(g, "l0.q_normed").kind, "rms_norm");
  EXPECT_EQ(OperandName(g, "l0.q_normed", 0), "l0.q_heads");
  EXPECT_EQ(OperandName(g, "l0.q_rope", 0), "l0.q_normed");
  EXPECT_EQ(OperandName(g, "l0.k_rope", 0), "l0.k_normed");
  EXPECT_EQ(OperandName(g, "l0.attn_out", 0), "l0.attn_flat");
  EXPECT_EQ(TypeOf(g, "l0.attn_flat"), "bf16[B,T,64]");
  EXPECT_EQ(KindCounts(g)["rms_norm"], 2 * 4 + 1);
  EXPECT_EQ(g.weights().size(), 2u * 11 + 2);  // tied embeddings: no lm_head.weight
}

TEST(Lowering, MistralSlidingWindowPerLayer) {
  const ir::Graph g = Lower(TinyModelConfig(Architecture::kMistral));
  EXPECT_EQ(*ProducerOf(g, "l0.attn").attrs.GetInt("sliding_window"), 3);
  EXPECT_EQ(*ProducerOf(g, "l1.attn").attrs.GetInt("sliding_window"), 3);
  const ir::Graph phi3 = Lower(TinyModelConfig(Architecture::kPhi3));
  EXPECT_EQ(*ProducerOf(phi3, "l0.attn").attrs.GetInt("sliding_window"), 0);
  EXPECT_EQ(*ProducerOf(phi3, "l1.attn").attrs.GetInt("sliding_window"), 5);
}

TEST(Lowering, Phi3SplitsFusedProjections) {
  const ir::Graph g = Lower(TinyModelConfig(Architecture::kPhi3));
  EXPECT_EQ(TypeOf(g, "model.layers.0.self_attn.qkv_proj.weight"), "bf16[96,32]");
  EXPECT_EQ(TypeOf(g, "model.layers.0.mlp.gate_up_proj.weight"), "bf16[96,32]");
  EXPECT_EQ(g.FindValue("model.layers.0.self_attn.q_proj.weight"), ir::kNoValue);
  EXPECT_EQ(g.weights().size(), 2u * 6 + 3);
  EXPECT_EQ(KindCounts(g)["split"], 4);
  EXPECT_EQ(KindCounts(g)["linear"], 2 * 4);

  const ir::Region& qkv = ProducerOf(g, "l0.q");
  EXPECT_EQ(qkv.kind, "split");
  EXPECT_EQ(*qkv.attrs.GetInts("sizes"), (std::vector<int64_t>{32, 32, 32}));
  ASSERT_EQ(qkv.results.size(), 3u);
  EXPECT_EQ(g.value(qkv.results[1]).name, "l0.k");
  EXPECT_EQ(g.value(qkv.results[2]).name, "l0.v");
  EXPECT_EQ(g.value(qkv.operands[0]).name, "l0.qkv");
  for (const ir::ResultAlias& a : qkv.result_aliases) EXPECT_EQ(a.kind, ir::AliasKind::kView);

  const ir::Region& gate_up = ProducerOf(g, "l0.gate");
  EXPECT_EQ(*gate_up.attrs.GetInts("sizes"), (std::vector<int64_t>{48, 48}));
  EXPECT_EQ(g.value(gate_up.results[0]).name, "l0.gate");  // gate first, then up
  EXPECT_EQ(g.value(gate_up.results[1]).name, "l0.up");
  EXPECT_EQ(OperandName(g, "l0.gate_act", 0), "l0.gate");
  EXPECT_EQ(OperandName(g, "l0.swiglu", 1), "l0.up");
}

std::string AttrOf(const ir::Graph& g, const std::string& result, const std::string& key) {
  const ir::Region& r = ProducerOf(g, result);
  auto it = r.attrs.map().find(key);
  return it == r.attrs.map().end() ? "<none>" : ir::PrintAttrValue(it->second);
}

TEST(Lowering, DeepseekV2LatentAttention) {
  const ir::Graph g = Lower(TinyModelConfig(Architecture::kDeepseekV2));
  std::vector<std::string> states;
  for (ir::ValueId id : g.states()) states.push_back(g.value(id).name);
  EXPECT_THAT(states, ::testing::ElementsAre("latent_cache.0", "rope_cache.0", "latent_cache.1",
                                             "rope_cache.1"));
  // The caches hold the normed latent and the rotated shared key, nothing per head.
  EXPECT_EQ(TypeOf(g, "latent_cache.0"), "bf16[B,1,Smax,12]");
  EXPECT_EQ(TypeOf(g, "rope_cache.0"), "bf16[B,1,Smax,4]");
  EXPECT_EQ(TypeOf(g, "l0.q"), "bf16[B,T,40]");  // 4 heads x (6 nope + 4 rope)
  EXPECT_EQ(TypeOf(g, "l0.q_nope"), "bf16[B,T,4,6]");
  EXPECT_EQ(TypeOf(g, "l0.q_pe"), "bf16[B,T,4,4]");
  EXPECT_EQ(TypeOf(g, "l0.kv_a"), "bf16[B,T,16]");
  EXPECT_EQ(TypeOf(g, "l0.latent_norm"), "bf16[B,T,12]");
  EXPECT_EQ(TypeOf(g, "l0.k_rope"), "bf16[B,T,1,4]");
  EXPECT_EQ(TypeOf(g, "l0.attn"), "bf16[B,T,4,5]");
  EXPECT_EQ(TypeOf(g, "model.layers.0.self_attn.kv_b_proj.weight"), "bf16[44,12]");
  EXPECT_EQ(TypeOf(g, "model.layers.0.self_attn.o_proj.weight"), "bf16[32,20]");
  EXPECT_EQ(OperandName(g, "l0.latent_cache", 1), "l0.latent_heads");
  EXPECT_EQ(OperandName(g, "l0.latent_heads", 0), "l0.latent_norm");
  EXPECT_EQ(OperandName(g, "l0.latent_norm", 0), "l0.latent");
  EXPECT_EQ(OperandName(g, "l0.attn", 0), "l0.q_nope");
  EXPECT_EQ(OperandName(g, "l0.attn", 1), "l0.q_rope");
  EXPECT_EQ(OperandName(g, "l0.attn", 2), "l0.latent_cache");
  EXPECT_EQ(OperandName(g, "l0.attn", 3), "l0.rope_cache");
  EXPECT_EQ(OperandName(g, "l0.attn", 4), "model.layers.0.self_attn.kv_b_proj.weight");
  EXPECT_EQ(AttrOf(g, "l0.attn", "scale"), "0.35");
  for (const char* rotated : {"l0.q_rope", "l0.k_rope"}) {
    EXPECT_EQ(AttrOf(g, rotated, "rope_type"), "\"yarn\"");
    EXPECT_EQ(AttrOf(g, rotated, "interleaved"), "true");
    EXPECT_EQ(AttrOf(g, rotated, "attention_factor"), "1.1");
    EXPECT_EQ(AttrOf(g, rotated, "factor"), "4.0");
  }
  EXPECT_EQ(g.FindValue("model.layers.0.self_attn.q_a_proj.weight"), ir::kNoValue);

  ModelConfig lora = TinyModelConfig(Architecture::kDeepseekV2);
  lora.mla.q_lora_rank = 7;
  const ir::Graph q = Lower(lora);
  EXPECT_EQ(TypeOf(q, "model.layers.1.self_attn.q_a_proj.weight"), "bf16[7,32]");
  EXPECT_EQ(TypeOf(q, "model.layers.1.self_attn.q_a_layernorm.weight"), "bf16[7]");
  EXPECT_EQ(TypeOf(q, "model.layers.1.self_attn.q_b_proj.weight"), "bf16[40,7]");
  EXPECT_EQ(OperandName(q, "l1.q", 0), "l1.q_a_norm");
  EXPECT_EQ(q.FindValue("model.layers.1.self_attn.q_proj.weight"), ir::kNoValue);
}

TEST(Lowering, DeepseekV2DenseFirstLayerThenRoutedAndSharedExperts) {
  const ir::Graph g = Lower(TinyModelConfig(Architecture::kDeepseekV2));
  EXPECT_EQ(TypeOf(g, "model.layers.0.mlp.gate_proj.weight"), "bf16[48,32]");
  EXPECT_EQ(g.FindValue("l0.router_logits"), ir::kNoValue);
  EXPECT_EQ(TypeOf(g, "model.layers.1.mlp.gate.weight"), "bf16[6,32]");
  EXPECT_EQ(TypeOf(g, "l1.router_logits"), "f32[B,T,6]");
  EXPECT_EQ(TypeOf(g, "l1.expert_ids"), "i32[B,T,2]");
  EXPECT_EQ(TypeOf(g, "l1.expert_weights"), "f32[B,T,2]");
  EXPECT_EQ(AttrOf(g, "l1.expert_ids", "top_k"), "2");
  EXPECT_EQ(AttrOf(g, "l1.expert_ids", "num_groups"), "3");
  EXPECT_EQ(AttrOf(g, "l1.expert_ids", "topk_groups"), "2");
  EXPECT_EQ(AttrOf(g, "l1.expert_ids", "scaling"), "1.5");
  EXPECT_EQ(AttrOf(g, "l1.expert_ids", "norm_topk_prob"), "false");
  EXPECT_EQ(TypeOf(g, "model.layers.1.mlp.experts.gate_proj"), "bf16[6,8,32]");
  EXPECT_EQ(TypeOf(g, "model.layers.1.mlp.experts.down_proj"), "bf16[6,32,8]");
  const ir::Value& gate = g.value(g.FindValue("model.layers.1.mlp.experts.gate_proj"));
  ASSERT_EQ(gate.checkpoint_tensors.size(), 6u);
  EXPECT_EQ(gate.checkpoint_tensors[0], "model.layers.1.mlp.experts.0.gate_proj.weight");
  EXPECT_EQ(gate.checkpoint_tensors[5], "model.layers.1.mlp.experts.5.gate_proj.weight");
  EXPECT_EQ(TypeOf(g, "l1.expert_gate"), "bf16[B,T,2,8]");
  EXPECT_EQ(OperandName(g, "l1.expert_gate", 0), "l1.mlp_norm");
  EXPECT_EQ(OperandName(g, "l1.expert_out", 0), "l1.expert_swiglu");
  EXPECT_EQ(TypeOf(g, "l1.expert_out"), "bf16[B,T,2,32]");
  EXPECT_EQ(OperandName(g, "l1.moe_out", 1), "l1.expert_weights");
  EXPECT_EQ(TypeOf(g, "model.layers.1.mlp.shared_experts.gate_proj.weight"), "bf16[16,32]");
  EXPECT_EQ(OperandName(g, "l1.shared_out", 0), "l1.shared_swiglu");
  EXPECT_EQ(OperandName(g, "l1.mlp_out", 0), "l1.moe_out");
  EXPECT_EQ(OperandName(g, "l1.mlp_out", 1), "l1.shared_out");
  EXPECT_EQ(OperandName(g, "l1.out", 1), "l1.mlp_out");
}

TEST(Lowering, Qwen3MoeRoutesEveryLayerWithoutSharedExperts) {
  ModelConfig c = TinyModelConfig(Architecture::kQwen3Moe);
  const ir::Graph g = Lower(c);
  EXPECT_EQ(ProducerOf(g, "l0.mlp_out").kind, "moe_combine");
  EXPECT_EQ(AttrOf(g, "l0.expert_ids", "norm_topk_prob"), "true");
  EXPECT_EQ(TypeOf(g, "l1.expert_ids"), "i32[B,T,3]");
  // The router's logits, and so the routing weights, are rounded to the activation dtype.
  EXPECT_EQ(TypeOf(g, "l1.router_logits"), "bf16[B,T,5]");
  EXPECT_EQ(TypeOf(g, "l1.expert_weights"), "bf16[B,T,3]");
  EXPECT_EQ(g.FindValue("l0.shared_out"), ir::kNoValue);
  EXPECT_EQ(OperandName(g, "l0.q_rope", 0), "l0.q_normed");
  EXPECT_EQ(TypeOf(g, "k_cache.0"), "bf16[B,2,Smax,16]");
  c.moe.sparse_layers = {false, true};
  const ir::Graph mixed = Lower(c);
  EXPECT_EQ(ProducerOf(mixed, "l0.mlp_out").kind, "linear");
  EXPECT_EQ(ProducerOf(mixed, "l1.mlp_out").kind, "moe_combine");
}

TEST(Lowering, EveryArchitectureVerifies) {
  for (Architecture arch : testing::EveryArchitecture()) {
    const ir::Graph g = Lower(TinyModelConfig(arch));
    EXPECT_TRUE(ir::Verify(g).ok()) << ArchitectureName(arch) << ": " << ir::Verify(g);
  }
}

TEST(Lowering, BundledPublicConfigsLowerAndVerify) {
  for (const std::string& name : BundledConfigNames()) {
    auto config = BundledModelConfig(name);
    ASSERT_TRUE(config.ok()) << name << ": " << config.status();
    auto g = LowerModel(*config);
    ASSERT_TRUE(g.ok()) << name << ": " << g.status();
    EXPECT_TRUE(ir::Verify(*g).ok()) << name << ": " << ir::Verify(*g);
    EXPECT_EQ(g->states().size(), 2u * static_cast<size_t>(config->num_layers)) << name;
    int attention = 0;
    for (const ir::Region& r : g->regions()) {
      attention += r.kind == (config->is_mla ? "mla_attention" : "attention");
    }
    EXPECT_EQ(attention, config->num_layers) << name;
  }
}

TEST(Lowering, IsDeterministic) {
  for (Architecture arch : testing::EveryArchitecture()) {
    const ir::Graph a = Lower(TinyModelConfig(arch));
    const ir::Graph b = Lower(TinyModelConfig(arch));
    ASSERT_EQ(a.num_values(), b.num_values());
    for (int v = 0; v < a.num_values(); ++v) {
      EXPECT_EQ(a.value(v).name, b.value(v).name);
      EXPECT_EQ(a.value(v).type, b.value(v).type);
    }
    ASSERT_EQ(a.regions().size(), b.regions().size());
    for (size_t r = 0; r < a.regions().size(); ++r) {
      EXPECT_EQ(a.regions()[r].kind, b.regions()[r].kind);
      EXPECT_EQ(a.regions()[r].operands, b.regions()[r].operands);
      EXPECT_EQ(a.regions()[r].attrs, b.regions()[r].attrs);
    }
  }
}

TEST(Lowering, InconsistentGeometryIsRefused) {
  ModelConfig c = TinyModelConfig(Architecture::kLlama);
  c.num_kv_heads = 3;
  auto g = LowerModel(c);
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(std::string(g.status().message()), HasSubstr("num_key_value_heads"));

  c = TinyModelConfig(Architecture::kLlama);
  c.head_dim = 7;
  g = LowerModel(c);
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(std::string(g.status().message()), HasSubstr("head_dim"));

  c = TinyModelConfig(Architecture::kMistral);
  c.sliding_window = {3};
  g = LowerModel(c);
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(std::string(g.status().message()), HasSubstr("sliding_window"));

  c = TinyModelConfig(Architecture::kQwen2);
  c.vocab_size = 0;
  g = LowerModel(c);
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(std::string(g.status().message()), HasSubstr("vocab_size"));
}

using Shape = std::vector<int64_t>;

// Writes `tensors` as DIR/model.safetensors and binds `graph` to it; returns the shapes of
// the tensors bound to each weight.
absl::StatusOr<std::vector<std::vector<Shape>>> BindShapes(const ir::Graph& graph,
                                                           const testing::WeightMap& tensors) {
  const std::filesystem::path dir = testing::MakeTempDir("checkpoint");
  testing::WriteWeights(dir / "model.safetensors", tensors);
  auto checkpoint = Checkpoint::Open(dir);
  if (!checkpoint.ok()) return checkpoint.status();
  auto bound = BindCheckpoint(graph, **checkpoint);
  if (!bound.ok()) return bound.status();
  std::vector<std::vector<Shape>> shapes;
  for (const std::vector<const TensorView*>& parts : *bound) {
    shapes.emplace_back();
    for (const TensorView* t : parts) shapes.back().push_back(t->shape);
  }
  return shapes;
}

TEST(BindCheckpoint, BindsEveryWeightWithItsShape) {
  for (Architecture arch : testing::EveryArchitecture()) {
    const ir::Graph g = Lower(TinyModelConfig(arch));
    auto shapes = BindShapes(g, testing::RandomWeights(g, 1));
    ASSERT_TRUE(shapes.ok()) << ArchitectureName(arch) << ": " << shapes.status();
    ASSERT_EQ(shapes->size(), g.weights().size());
    for (size_t k = 0; k < shapes->size(); ++k) {
      const ir::Value& w = g.value(g.weights()[k]);
      Shape want;
      for (const ir::Dim& d : w.type.dims) want.push_back(d.extent());
      if (w.checkpoint_tensors.size() > 1) {  // stacked experts: one [N,H] tensor per expert
        const Shape slice(want.begin() + 1, want.end());
        EXPECT_EQ((*shapes)[k], std::vector<Shape>(static_cast<size_t>(want[0]), slice)) << w.name;
      } else {
        EXPECT_EQ((*shapes)[k], std::vector<Shape>{want}) << w.name;
      }
    }
  }
}

TEST(BindCheckpoint, StackedExpertWeightsNeedEveryExpertWithItsShape) {
  const ir::Graph g = Lower(TinyModelConfig(Architecture::kQwen3Moe));
  testing::WeightMap tensors = testing::RandomWeights(g, 1);
  tensors["model.layers.1.mlp.experts.3.up_proj.weight"].shape = {6, 64};
  auto shapes = BindShapes(g, tensors);
  ASSERT_FALSE(shapes.ok());
  EXPECT_EQ(shapes.status().message(),
            "checkpoint tensor \"model.layers.1.mlp.experts.3.up_proj.weight\" (a part of packed "
            "weight '%model.layers.1.mlp.experts.up_proj') is BF16[6,64], expected BF16[N,12,32] "
            "or BF16[12,32]");
  tensors = testing::RandomWeights(g, 1);
  tensors.erase("model.layers.0.mlp.experts.4.down_proj.weight");
  shapes = BindShapes(g, tensors);
  ASSERT_FALSE(shapes.ok());
  EXPECT_THAT(std::string(shapes.status().message()),
              HasSubstr("has no tensor \"model.layers.0.mlp.experts.4.down_proj.weight\""));
}

TEST(BindCheckpoint, MissingTensorIsNamed) {
  const ir::Graph g = Lower(TinyModelConfig(Architecture::kQwen2));
  testing::WeightMap tensors = testing::RandomWeights(g, 1);
  tensors.erase("model.layers.1.mlp.down_proj.weight");
  auto shapes = BindShapes(g, tensors);
  ASSERT_FALSE(shapes.ok());
  EXPECT_EQ(shapes.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(
      std::string(shapes.status().message()),
      HasSubstr("no tensor \"model.layers.1.mlp.down_proj.weight\" (expected BF16[32,48])"));
}

TEST(BindCheckpoint, UnusedTensorsAreNamed) {
  // A stray lm_head.weight next to tied embeddings, and a rotary buffer.
  const ir::Graph g = Lower(TinyModelConfig(Architecture::kLlama));
  const std::string inv_freq = "model.layers.0.self_attn.rotary_emb.inv_freq";
  testing::WeightMap tensors = testing::RandomWeights(g, 1);
  tensors[inv_freq] = testing::WeightData{StDType::kF32, {4}, {1, 2, 3, 4}, {}};
  auto shapes = BindShapes(g, tensors);
  ASSERT_FALSE(shapes.ok());
  EXPECT_THAT(std::string(shapes.status().message()),
              HasSubstr("checkpoint tensor \"" + inv_freq + "\" is not used by the llama graph"));

  tensors["lm_head.weight"] =
      testing::WeightData{StDType::kBF16, {61, 32}, std::vector<float>(61 * 32, 0.5f), {}};
  shapes = BindShapes(g, tensors);
  ASSERT_FALSE(shapes.ok());
  EXPECT_THAT(
      std::string(shapes.status().message()),
      HasSubstr("checkpoint tensors \"lm_head.weight\", \"" + inv_freq + "\" are not used"));
}

// Names from a checkpoint reach a message cut (a 3 MB name) and, a thousand unused ones, as the
// first few and a count (base/text_test.cc checks the escaping).
TEST(BindCheckpoint, UntrustedNamesAreEscapedAndCut) {
  const ir::Graph g = Lower(TinyModelConfig(Architecture::kLlama));
  testing::WeightMap tensors = testing::RandomWeights(g, 1);
  const testing::WeightData extra{StDType::kF32, {1}, {1}, {}};
  tensors[std::string(3 << 20, 'n')] = extra;
  auto shapes = BindShapes(g, tensors);
  ASSERT_FALSE(shapes.ok());
  std::string message(shapes.status().message());
  EXPECT_LT(message.size(), 1000u);
  EXPECT_THAT(message, HasSubstr("\"... (3145728 bytes) is not used"));

  tensors = testing::RandomWeights(g, 1);
  for (int i = 0; i < 1000; ++i) tensors["z.unused." + std::to_string(1000 + i)] = extra;
  shapes = BindShapes(g, tensors);
  ASSERT_FALSE(shapes.ok());
  message = std::string(shapes.status().message());
  EXPECT_LT(message.size(), 1000u);
  EXPECT_THAT(message, HasSubstr("\"z.unused.1007\" and 992 more are not used"));
}

TEST(BindCheckpoint, WrongShapeOrDtypeIsNamed) {
  const ir::Graph g = Lower(TinyModelConfig(Architecture::kMistral));
  testing::WeightMap tensors = testing::RandomWeights(g, 1);
  tensors["model.norm.weight"].shape = {31};
  tensors["model.norm.weight"].values.resize(31);
  auto shapes = BindShapes(g, tensors);
  ASSERT_FALSE(shapes.ok());
  EXPECT_THAT(std::string(shapes.status().message()),
              HasSubstr("checkpoint tensor \"model.norm.weight\" is BF16[31], expected BF16[32]"));

  tensors = testing::RandomWeights(g, 1);
  tensors["model.layers.0.self_attn.v_proj.weight"].dtype = StDType::kF32;
  shapes = BindShapes(g, tensors);
  ASSERT_FALSE(shapes.ok());
  EXPECT_THAT(std::string(shapes.status().message()),
              HasSubstr("\"model.layers.0.self_attn.v_proj.weight\" is F32[16,32], expected "
                        "BF16[16,32]"));
}

// A graph with a packed weight %qkv = concat(q [4,4], k [2,4], v [2,4]) and a plain %n.
ir::Graph PackedGraph() {
  auto g = ir::ParseGraph(R"(graph @packed {
  weight %qkv: bf16[8,4] = concat("q", "k", "v")
  weight %n: bf16[4] = "n"
}
)");
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? std::move(*g) : ir::Graph();
}

testing::WeightMap PackedTensors() {
  auto bf16 = [](Shape shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return testing::WeightData{StDType::kBF16, shape, std::vector<float>(n, 0.25f), {}};
  };
  return {{"q", bf16({4, 4})}, {"k", bf16({2, 4})}, {"v", bf16({2, 4})}, {"n", bf16({4})}};
}

TEST(BindCheckpoint, PackedWeightBindsItsPartsInOrder) {
  auto shapes = BindShapes(PackedGraph(), PackedTensors());
  ASSERT_TRUE(shapes.ok()) << shapes.status();
  EXPECT_EQ(*shapes, (std::vector<std::vector<Shape>>{{{4, 4}, {2, 4}, {2, 4}}, {{4}}}));
}

TEST(BindCheckpoint, PackedWeightPartsAreChecked) {
  testing::WeightMap tensors = PackedTensors();
  tensors["k"].dtype = StDType::kF32;
  auto shapes = BindShapes(PackedGraph(), tensors);
  ASSERT_FALSE(shapes.ok());
  EXPECT_EQ(shapes.status().message(),
            "checkpoint tensor \"k\" (a part of packed weight '%qkv') is F32[2,4], expected "
            "BF16[N,4] or BF16[4]");

  tensors = PackedTensors();
  tensors["v"] = testing::WeightData{StDType::kBF16, {1, 8}, std::vector<float>(8, 1.0f), {}};
  shapes = BindShapes(PackedGraph(), tensors);
  ASSERT_FALSE(shapes.ok());
  EXPECT_EQ(shapes.status().message(),
            "checkpoint tensor \"v\" (a part of packed weight '%qkv') is BF16[1,8], expected "
            "BF16[N,4] or BF16[4]");

  tensors = PackedTensors();
  tensors["v"] = testing::WeightData{StDType::kBF16, {3, 4}, std::vector<float>(12, 1.0f), {}};
  shapes = BindShapes(PackedGraph(), tensors);
  ASSERT_FALSE(shapes.ok());
  EXPECT_EQ(shapes.status().message(),
            "packed weight '%qkv' is bf16[8,4] but its parts have dim-0 extents \"q\" 4 + \"k\" 2 "
            "+ \"v\" 3 = 9, expected 8");

  tensors = PackedTensors();
  tensors.erase("v");
  shapes = BindShapes(PackedGraph(), tensors);
  ASSERT_FALSE(shapes.ok());
  EXPECT_EQ(shapes.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(
      std::string(shapes.status().message()),
      HasSubstr("has no tensor \"v\" (a part of packed weight '%qkv') (expected BF16[N,4] or "
                "BF16[4])"));
}

TEST(BindCheckpoint, EveryTensorIsBoundExactlyOnce) {
  auto g = ir::ParseGraph(R"(graph @twice {
  weight %k: bf16[2,4] = "k"
  weight %qkv: bf16[8,4] = concat("q", "k", "v")
  weight %n: bf16[4] = "n"
}
)");
  ASSERT_TRUE(g.ok()) << g.status();
  auto shapes = BindShapes(*g, PackedTensors());
  ASSERT_FALSE(shapes.ok());
  EXPECT_EQ(shapes.status().message(),
            "checkpoint tensor \"k\" is bound twice (by weight '%k' and by weight '%qkv')");

  testing::WeightMap tensors = PackedTensors();
  tensors["extra"] = tensors["n"];
  shapes = BindShapes(PackedGraph(), tensors);
  ASSERT_FALSE(shapes.ok());
  EXPECT_THAT(std::string(shapes.status().message()),
              HasSubstr("checkpoint tensor \"extra\" is not used by the packed graph"));
}

// A tiny config of `arch` whose heads, KV heads, widths and vocabulary divide by 2.
ModelConfig DivisibleByTwo(Architecture arch) {
  ModelConfig c = TinyModelConfig(arch);
  c.vocab_size = 64;
  if (c.num_kv_heads % 2 != 0) c.num_kv_heads = 2;
  return c;
}

ir::Graph LowerRank(const ModelConfig& c, int64_t ranks, int64_t rank) {
  auto graph = LowerModel(c, TensorParallel{ranks, rank});
  EXPECT_TRUE(graph.ok()) << graph.status();
  return graph.ok() ? std::move(*graph) : ir::Graph();
}

TEST(TensorParallelLowering, OneRankIsTheWholeModel) {
  for (Architecture arch : testing::EveryArchitecture()) {
    const ModelConfig c = TinyModelConfig(arch);
    EXPECT_EQ(ir::PrintGraph(LowerRank(c, 1, 0)), ir::PrintGraph(Lower(c)))
        << ArchitectureName(arch);
  }
}

TEST(TensorParallelLowering, EachRankHoldsAShareOfTheHeadsAndWidths) {
  for (Architecture arch : testing::EveryArchitecture()) {
    SCOPED_TRACE(ArchitectureName(arch));
    const ModelConfig c = DivisibleByTwo(arch);
    const ir::Graph whole = Lower(c);
    for (int64_t rank = 0; rank < 2; ++rank) {
      const ir::Graph g = LowerRank(c, 2, rank);
      ASSERT_TRUE(ir::Verify(g).ok()) << ir::Verify(g);
      std::map<std::string, int> kinds = KindCounts(g);
      // Per layer one all_reduce after the attention and one after the MLP (or experts), and
      // the logits gathered once.
      EXPECT_EQ(kinds["all_reduce"], 2 * c.num_layers);
      EXPECT_EQ(kinds["all_gather"], 1);
      EXPECT_EQ(TypeOf(g, "logits"), TypeOf(whole, "logits"));
      EXPECT_EQ(TypeOf(g, "logits_shard"), "f32[B,T,32]");
      // Every other region is the whole model's, with the same kinds in the same order.
      std::map<std::string, int> whole_kinds = KindCounts(whole);
      kinds.erase("all_reduce");
      kinds.erase("all_gather");
      EXPECT_EQ(kinds, whole_kinds);
      // Attention outputs and caches hold half the heads.
      const std::string attn = c.is_mla ? "l0.attn" : "l0.attn";
      const ir::TensorType local = g.value(g.FindValue(attn)).type;
      const ir::TensorType full = whole.value(whole.FindValue(attn)).type;
      EXPECT_EQ(local.dims[2].extent() * 2, full.dims[2].extent());
      if (!c.is_mla) {
        const ir::TensorType cache = g.value(g.FindValue("k_cache.0")).type;
        EXPECT_EQ(cache.dims[1].extent(), c.num_kv_heads / 2);
      } else {
        // The latent cache is shared by every head: each rank holds it whole.
        EXPECT_EQ(TypeOf(g, "latent_cache.0"), TypeOf(whole, "latent_cache.0"));
      }
    }
  }
}

// The ranks' slices of every sliced tensor partition it: along their dim, the ranges of the
// two ranks (and of the segments of a fused projection) cover it exactly once.
TEST(TensorParallelLowering, RankSlicesPartitionEveryTensor) {
  for (Architecture arch : testing::EveryArchitecture()) {
    SCOPED_TRACE(ArchitectureName(arch));
    const ModelConfig c = DivisibleByTwo(arch);
    const ir::Graph whole = Lower(c);
    const testing::WeightMap tensors = testing::RandomWeights(whole, 3);
    // tensor -> dim -> covered flags
    std::map<std::string, std::vector<int>> covered;
    std::map<std::string, int> sliced_dim;
    for (int64_t rank = 0; rank < 2; ++rank) {
      const ir::Graph g = LowerRank(c, 2, rank);
      for (ir::ValueId id : g.weights()) {
        const ir::Value& w = g.value(id);
        for (size_t k = 0; k < w.checkpoint_tensors.size(); ++k) {
          const ir::TensorSlice s = w.slice(k);
          if (s.whole()) continue;
          const std::string& name = w.checkpoint_tensors[k];
          // The tied LM head of a rank reads the embedding table it also reads whole.
          if (name == "model.embed_tokens.weight") continue;
          const auto it = tensors.find(name);
          ASSERT_NE(it, tensors.end()) << name;
          std::vector<int>& flags = covered[name];
          flags.resize(static_cast<size_t>(it->second.shape[static_cast<size_t>(s.dim)]));
          auto [dim, inserted] = sliced_dim.emplace(name, s.dim);
          EXPECT_EQ(dim->second, s.dim) << name;
          for (int64_t e = s.start; e < s.start + s.size; ++e) ++flags[static_cast<size_t>(e)];
        }
      }
    }
    EXPECT_FALSE(covered.empty());
    for (const auto& [name, flags] : covered) {
      EXPECT_EQ(flags, std::vector<int>(flags.size(), 1)) << name;
    }
  }
}

// Each rank's graph binds to the whole model's checkpoint: its slices lie inside the tensors
// and have the weights' shapes, and every tensor is read by some weight.
TEST(TensorParallelLowering, RankGraphsBindTheWholeCheckpoint) {
  for (Architecture arch : testing::EveryArchitecture()) {
    SCOPED_TRACE(ArchitectureName(arch));
    const ModelConfig c = DivisibleByTwo(arch);
    const testing::WeightMap tensors = testing::RandomWeights(Lower(c), 5);
    for (int64_t rank = 0; rank < 2; ++rank) {
      auto shapes = BindShapes(LowerRank(c, 2, rank), tensors);
      EXPECT_TRUE(shapes.ok()) << shapes.status();
    }
  }
}

TEST(TensorParallelLowering, IndivisibleGeometryIsRefusedNamingTheField) {
  const ModelConfig c = DivisibleByTwo(Architecture::kLlama);  // 4 heads, 2 KV heads
  auto three = LowerModel(c, TensorParallel{3, 0});
  ASSERT_FALSE(three.ok());
  EXPECT_EQ(three.status().message(),
            "tensor parallelism over 3 ranks: num_attention_heads (4) is not a multiple of 3; "
            "each rank needs an equal share of it");
  auto four = LowerModel(c, TensorParallel{4, 1});
  ASSERT_FALSE(four.ok());
  EXPECT_THAT(std::string(four.status().message()),
              HasSubstr("num_key_value_heads (2) is not a multiple of 4"));
  ModelConfig odd_vocab = c;
  odd_vocab.vocab_size = 63;
  EXPECT_THAT(std::string(LowerModel(odd_vocab, TensorParallel{2, 0}).status().message()),
              HasSubstr("vocab_size (63) is not a multiple of 2"));
  ModelConfig moe = DivisibleByTwo(Architecture::kDeepseekV2);  // experts 8 wide
  EXPECT_TRUE(LowerModel(moe, TensorParallel{4, 3}).ok());
  moe.moe.moe_intermediate_size = 6;
  EXPECT_THAT(std::string(LowerModel(moe, TensorParallel{4, 0}).status().message()),
              HasSubstr("moe_intermediate_size (6) is not a multiple of 4"));
  for (TensorParallel bad : {TensorParallel{2, 2}, TensorParallel{2, -1}, TensorParallel{0, 0},
                             TensorParallel{kMaxTensorParallelRanks + 1, 0}}) {
    auto refused = LowerModel(c, bad);
    ASSERT_FALSE(refused.ok());
    EXPECT_THAT(std::string(refused.status().message()), HasSubstr("0 <= rank < ranks"));
  }
}

TEST(BindCheckpoint, SlicesOutsideTheirTensorAreRefused) {
  const ModelConfig c = DivisibleByTwo(Architecture::kLlama);
  const testing::WeightMap tensors = testing::RandomWeights(Lower(c), 1);
  auto parsed = ir::ParseGraph(
      "graph @g {\n"
      "  input %tokens: i32[B,T]\n"
      "  weight %w: bf16[40,32] = slice(\"model.layers.0.self_attn.q_proj.weight\", 0, 30, 40)\n"
      "  %x: bf16[B,T,32] = embedding(%tokens, %w)\n"
      "  output %x\n"
      "}\n");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  auto shapes = BindShapes(*parsed, tensors);
  ASSERT_FALSE(shapes.ok());
  EXPECT_THAT(std::string(shapes.status().message()),
              HasSubstr("weight '%w' binds elements [30, 70) of dim 0 of checkpoint tensor "
                        "\"model.layers.0.self_attn.q_proj.weight\", which is BF16[32,32]"));
}

}  // namespace
}  // namespace tileplan::models
