#include "models/lowering.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "base/text.h"

namespace tileplan::models {
namespace {

using ir::AliasKind;
using ir::Attributes;
using ir::Dim;
using ir::DType;
using ir::ResultAlias;
using ir::TensorType;
using ir::ValueId;

absl::Status CheckConfig(const ModelConfig& c) {
  auto positive = [](int64_t v, absl::string_view field) -> absl::Status {
    if (v <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("model config: ", field, " must be positive, got ", v));
    }
    return absl::OkStatus();
  };
  TP_RETURN_IF_ERROR(positive(c.hidden_size, "hidden_size"));
  TP_RETURN_IF_ERROR(positive(c.intermediate_size, "intermediate_size"));
  TP_RETURN_IF_ERROR(positive(c.num_layers, "num_hidden_layers"));
  TP_RETURN_IF_ERROR(positive(c.num_heads, "num_attention_heads"));
  TP_RETURN_IF_ERROR(positive(c.num_kv_heads, "num_key_value_heads"));
  TP_RETURN_IF_ERROR(positive(c.head_dim, "head_dim"));
  TP_RETURN_IF_ERROR(positive(c.vocab_size, "vocab_size"));
  if (c.is_mla && c.mla.qk_rope_head_dim % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model config: qk_rope_head_dim must be even for rotary embeddings, got ",
                     c.mla.qk_rope_head_dim));
  }
  if (c.num_heads % c.num_kv_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model config: num_attention_heads (", c.num_heads,
                     ") is not a multiple of num_key_value_heads (", c.num_kv_heads, ")"));
  }
  if (!c.is_mla && c.head_dim % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model config: head_dim must be even for rotary embeddings, got ", c.head_dim));
  }
  if (static_cast<int64_t>(c.sliding_window.size()) != c.num_layers) {
    return absl::InvalidArgumentError(absl::StrCat("model config: sliding_window has ",
                                                   c.sliding_window.size(), " entries for ",
                                                   c.num_layers, " layers"));
  }
  for (size_t i = 0; i < c.sliding_window.size(); ++i) {
    if (c.sliding_window[i] < 0) {
      return absl::InvalidArgumentError(absl::StrCat("model config: sliding_window of layer ", i,
                                                     " is negative (", c.sliding_window[i], ")"));
    }
  }
  if (!(std::isfinite(c.rms_norm_eps) && c.rms_norm_eps >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("model config: rms_norm_eps must be finite and >= 0, got ", c.rms_norm_eps));
  }
  if (!(std::isfinite(c.rope.theta) && c.rope.theta > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("model config: rope_theta must be positive, got ", c.rope.theta));
  }
  if (c.rope.type == "llama3") {
    if (!(c.rope.factor > 0) || !(c.rope.low_freq_factor > 0) ||
        !(c.rope.high_freq_factor > c.rope.low_freq_factor) ||
        c.rope.original_max_position_embeddings <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model config: rope_scaling (llama3) needs factor > 0, 0 < low_freq_factor < "
          "high_freq_factor and original_max_position_embeddings > 0; got factor ",
          c.rope.factor, ", low_freq_factor ", c.rope.low_freq_factor, ", high_freq_factor ",
          c.rope.high_freq_factor, ", original_max_position_embeddings ",
          c.rope.original_max_position_embeddings));
    }
  }
  if (c.rope.type == "yarn") {
    if (!(c.rope.factor >= 1) || !(c.rope.beta_fast > 0) || !(c.rope.beta_slow > 0) ||
        !(c.rope.attention_factor > 0) || !std::isfinite(c.rope.attention_factor) ||
        c.rope.original_max_position_embeddings <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model config: rope_scaling (yarn) needs factor >= 1, beta_fast, beta_slow and "
          "attention_factor > 0 and original_max_position_embeddings > 0; got factor ",
          c.rope.factor, ", beta_fast ", c.rope.beta_fast, ", beta_slow ", c.rope.beta_slow,
          ", attention_factor ", c.rope.attention_factor, ", original_max_position_embeddings ",
          c.rope.original_max_position_embeddings));
    }
  } else if (c.rope.type != "default" && c.rope.type != "llama3") {
    return absl::InvalidArgumentError(
        absl::StrCat("model config: unsupported rope type '", c.rope.type, "'"));
  }
  if (c.dtype == DType::kI32) {
    return absl::InvalidArgumentError("model config: dtype must be a floating-point type");
  }
  if (!(std::isfinite(c.attention_scale) && c.attention_scale >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model config: the attention scale must be finite and >= 0, got ", c.attention_scale));
  }
  if (c.is_mla) {
    TP_RETURN_IF_ERROR(positive(c.mla.kv_lora_rank, "kv_lora_rank"));
    TP_RETURN_IF_ERROR(positive(c.mla.qk_nope_head_dim, "qk_nope_head_dim"));
    TP_RETURN_IF_ERROR(positive(c.mla.qk_rope_head_dim, "qk_rope_head_dim"));
    TP_RETURN_IF_ERROR(positive(c.mla.v_head_dim, "v_head_dim"));
    if (c.mla.q_lora_rank < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model config: q_lora_rank must be positive or null, got ", c.mla.q_lora_rank));
    }
    if (c.head_dim != c.mla.qk_rope_head_dim) {
      return absl::InvalidArgumentError(
          absl::StrCat("model config: head_dim (", c.head_dim, ") must be qk_rope_head_dim (",
                       c.mla.qk_rope_head_dim, ") for multi-head latent attention"));
    }
  }
  const MoeConfig& m = c.moe;
  if (!m.sparse_layers.empty() && static_cast<int64_t>(m.sparse_layers.size()) != c.num_layers) {
    return absl::InvalidArgumentError(absl::StrCat("model config: the MoE layer list has ",
                                                   m.sparse_layers.size(), " entries for ",
                                                   c.num_layers, " layers"));
  }
  if (std::find(m.sparse_layers.begin(), m.sparse_layers.end(), true) != m.sparse_layers.end()) {
    TP_RETURN_IF_ERROR(positive(m.num_experts, "num_experts"));
    TP_RETURN_IF_ERROR(positive(m.moe_intermediate_size, "moe_intermediate_size"));
    TP_RETURN_IF_ERROR(positive(m.num_groups, "n_group"));
    if (m.shared_intermediate_size < 0) {
      return absl::InvalidArgumentError("model config: the shared experts' width is negative");
    }
    if (m.num_experts % m.num_groups != 0 || m.topk_groups < 1 || m.topk_groups > m.num_groups) {
      return absl::InvalidArgumentError(
          absl::StrCat("model config: n_group (", m.num_groups, ") must divide the ", m.num_experts,
                       " experts and topk_group (", m.topk_groups, ") must be in [1, n_group]"));
    }
    const int64_t candidates = m.topk_groups * (m.num_experts / m.num_groups);
    if (m.top_k < 1 || m.top_k > candidates) {
      return absl::InvalidArgumentError(absl::StrCat("model config: num_experts_per_tok (", m.top_k,
                                                     ") must be in [1, ", candidates, "]"));
    }
    if (!(std::isfinite(m.routed_scaling_factor) && m.routed_scaling_factor > 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model config: routed_scaling_factor must be > 0, got ", m.routed_scaling_factor));
    }
  }
  return absl::OkStatus();
}

// transformers' DeepseekV2RMSNorm default: q_a_layernorm and kv_a_layernorm are built
// without the config's rms_norm_eps.
constexpr double kLatentNormEps = 1e-6;

Dim Sym(const char* name) { return Dim::Symbol(name); }
Dim Ext(int64_t extent) { return Dim::Static(extent); }

// Builds the graph for one config. Every helper returns the ValueId of its (first) result.
class Lowerer {
 public:
  Lowerer(const ModelConfig& config, const TensorParallel& tp)
      : c_(config),
        x_(config.dtype),
        ranks_(tp.ranks),
        rank_(tp.rank),
        graph_(std::string(ArchitectureName(config.arch))) {}

  absl::StatusOr<ir::Graph> Lower() {
    const TensorType ids_type = ir::MakeType(DType::kI32, {Sym("B"), Sym("T")});
    TP_ASSIGN_OR_RETURN(ValueId tokens, graph_.AddInput("tokens", ids_type));
    TP_ASSIGN_OR_RETURN(positions_, graph_.AddInput("positions", ids_type));
    TP_ASSIGN_OR_RETURN(ValueId embed_w,
                        Weight("model.embed_tokens.weight", {c_.vocab_size, c_.hidden_size}));
    TP_ASSIGN_OR_RETURN(ValueId h,
                        Op("embedding", {tokens, embed_w}, "embed", Act(c_.hidden_size)));
    for (int64_t layer = 0; layer < c_.num_layers; ++layer) {
      TP_ASSIGN_OR_RETURN(h, Layer(layer, h));
    }
    TP_ASSIGN_OR_RETURN(ValueId final_norm,
                        RmsNorm(h, "model.norm.weight", "final_norm", Act(c_.hidden_size)));
    ValueId head_w = embed_w;
    const std::string head_tensor =
        c_.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
    if (ranks_ > 1) {
      // Vocab-parallel: this rank's rows of the head (a slice of the embedding table when
      // they are tied), its logits gathered from every rank.
      TP_ASSIGN_OR_RETURN(head_w, Sharded(head_tensor, "lm_head.weight",
                                          {c_.vocab_size, c_.hidden_size}, 0, {c_.vocab_size}));
    } else if (!c_.tie_word_embeddings) {
      TP_ASSIGN_OR_RETURN(head_w, Weight(head_tensor, {c_.vocab_size, c_.hidden_size}));
    }
    const int64_t local_vocab = c_.vocab_size / ranks_;
    TP_ASSIGN_OR_RETURN(ValueId logits,
                        Op("lm_head", {final_norm, head_w}, ranks_ > 1 ? "logits_shard" : "logits",
                           ir::MakeType(DType::kF32, {Sym("B"), Sym("T"), Ext(local_vocab)})));
    if (ranks_ > 1) {
      TP_ASSIGN_OR_RETURN(
          logits,
          Op("all_gather", {logits}, "logits",
             ir::MakeType(DType::kF32, {Sym("B"), Sym("T"), Ext(c_.vocab_size)}), RanksAttrs()));
    }
    TP_RETURN_IF_ERROR(graph_.AddOutput(logits));
    return std::move(graph_);
  }

 private:
  // X[B,T,n]
  TensorType Act(int64_t n) const { return ir::MakeType(x_, {Sym("B"), Sym("T"), Ext(n)}); }
  // X[B,T,heads,D]
  TensorType Heads(int64_t heads) const {
    return ir::MakeType(x_, {Sym("B"), Sym("T"), Ext(heads), Ext(c_.head_dim)});
  }
  TensorType Cache() const { return CacheOf(c_.num_kv_heads / ranks_, c_.head_dim); }
  // X[B,T,heads,dim]
  TensorType HeadsOf(int64_t heads, int64_t dim) const {
    return ir::MakeType(x_, {Sym("B"), Sym("T"), Ext(heads), Ext(dim)});
  }
  // The softmax scale: the config's, or 1 / sqrt(qk_dim) when it gives none.
  double Scale(int64_t qk_dim) const {
    return c_.attention_scale > 0 ? c_.attention_scale
                                  : 1.0 / std::sqrt(static_cast<double>(qk_dim));
  }
  // X[B,heads,Smax,dim]
  TensorType CacheOf(int64_t heads, int64_t dim) const {
    return ir::MakeType(x_, {Sym("B"), Ext(heads), Sym("Smax"), Ext(dim)});
  }

  absl::StatusOr<ValueId> Weight(std::string tensor, const std::vector<int64_t>& shape) {
    std::vector<Dim> dims;
    for (int64_t e : shape) dims.push_back(Ext(e));
    std::string name = tensor;
    return graph_.AddWeight(std::move(name), ir::MakeType(x_, std::move(dims)), std::move(tensor));
  }

  Attributes RanksAttrs() const {
    Attributes attrs;
    attrs.Set("ranks", ranks_);
    return attrs;
  }

  // This rank's share of checkpoint tensor `tensor` (of shape `shape`), as weight `name`:
  // dim `dim` is cut into consecutive `segments` (summing to its extent), and the rank
  // takes the rank-th of `ranks` equal pieces of each, in order (a fused QKV projection's
  // q, k and v rows each split across the ranks). The whole tensor when there is one rank.
  absl::StatusOr<ValueId> Sharded(const std::string& tensor, std::string name,
                                  const std::vector<int64_t>& shape, int dim,
                                  const std::vector<int64_t>& segments) {
    std::vector<Dim> dims;
    for (int64_t e : shape) dims.push_back(Ext(e));
    if (ranks_ == 1) {
      return graph_.AddWeight(std::move(name), ir::MakeType(x_, std::move(dims)), tensor);
    }
    std::vector<std::string> parts;
    std::vector<ir::TensorSlice> slices;
    int64_t offset = 0, local = 0;
    for (int64_t segment : segments) {
      const int64_t piece = segment / ranks_;
      parts.push_back(tensor);
      slices.push_back(ir::TensorSlice::Of(dim, offset + rank_ * piece, piece));
      offset += segment;
      local += piece;
    }
    dims[static_cast<size_t>(dim)] = Ext(local);
    return graph_.AddWeight(std::move(name), ir::MakeType(x_, std::move(dims)), std::move(parts),
                            std::move(slices));
  }

  // The sum over the ranks of `partial` (plus `bias` once, when given), named `name`.
  absl::StatusOr<ValueId> AllReduce(ValueId partial, ValueId bias, std::string name) {
    std::vector<ValueId> operands = {partial};
    if (bias != ir::kNoValue) operands.push_back(bias);
    return Op("all_reduce", std::move(operands), std::move(name), graph_.value(partial).type,
              RanksAttrs());
  }

  absl::StatusOr<ValueId> Op(std::string kind, std::vector<ValueId> operands, std::string name,
                             TensorType type, Attributes attrs = {},
                             ResultAlias alias = ResultAlias{}) {
    std::vector<ir::ResultSpec> results;
    results.push_back(ir::ResultSpec{std::move(name), std::move(type), alias});
    TP_ASSIGN_OR_RETURN(std::vector<ValueId> ids,
                        graph_.AddRegion(std::move(kind), std::move(operands), std::move(results),
                                         std::move(attrs)));
    return ids[0];
  }

  // Splits the last dim of `x` (of type `type`; X[B,T,n] when absent) into consecutive views.
  absl::StatusOr<std::vector<ValueId>> Split(
      ValueId x, const std::vector<std::pair<std::string, int64_t>>& parts,
      std::optional<TensorType> type = std::nullopt) {
    const TensorType base = type.has_value() ? *type : Act(1);
    std::vector<ir::ResultSpec> results;
    std::vector<int64_t> sizes;
    for (const auto& [name, size] : parts) {
      TensorType part = base;
      part.dims.back() = Ext(size);
      results.push_back(ir::ResultSpec{name, std::move(part), ResultAlias{AliasKind::kView, 0}});
      sizes.push_back(size);
    }
    Attributes attrs;
    attrs.Set("sizes", std::move(sizes));
    return graph_.AddRegion("split", {x}, std::move(results), std::move(attrs));
  }

  absl::StatusOr<ValueId> Reshape(ValueId x, std::string name, TensorType type) {
    return Op("reshape", {x}, std::move(name), std::move(type), {},
              ResultAlias{AliasKind::kView, 0});
  }

  // `prefix` is the module path, e.g. "model.layers.0.self_attn.q_proj".
  absl::StatusOr<ValueId> Linear(ValueId x, const std::string& prefix, int64_t in, int64_t out,
                                 bool bias, std::string name) {
    TP_ASSIGN_OR_RETURN(ValueId w, Weight(prefix + ".weight", {out, in}));
    std::vector<ValueId> operands = {x, w};
    if (bias) {
      TP_ASSIGN_OR_RETURN(ValueId b, Weight(prefix + ".bias", {out}));
      operands.push_back(b);
    }
    return Op("linear", std::move(operands), std::move(name), Act(out));
  }

  // A column-parallel linear: this rank's share of each of the output `segments` (their sum
  // is the projection's width), from the whole input.
  absl::StatusOr<ValueId> ColumnLinear(ValueId x, const std::string& prefix, int64_t in,
                                       const std::vector<int64_t>& segments, bool bias,
                                       std::string name) {
    int64_t out = 0;
    for (int64_t segment : segments) out += segment;
    TP_ASSIGN_OR_RETURN(ValueId w,
                        Sharded(prefix + ".weight", prefix + ".weight", {out, in}, 0, segments));
    std::vector<ValueId> operands = {x, w};
    if (bias) {
      TP_ASSIGN_OR_RETURN(ValueId b,
                          Sharded(prefix + ".bias", prefix + ".bias", {out}, 0, segments));
      operands.push_back(b);
    }
    return Op("linear", std::move(operands), std::move(name), Act(out / ranks_));
  }

  // A row-parallel linear: this rank's share of the input columns (`in` wide in all), the
  // partial products summed over the ranks by an all_reduce, which adds the bias once.
  // Returns the reduced output; with `reduce` false, the partial product, and the bias it
  // still owes in `owed_bias` (kNoValue when none), for the caller to reduce.
  absl::StatusOr<ValueId> RowLinear(ValueId x, const std::string& prefix, int64_t in, int64_t out,
                                    bool bias, std::string name, bool reduce = true,
                                    ValueId* owed_bias = nullptr) {
    if (ranks_ == 1) {
      if (owed_bias != nullptr) *owed_bias = ir::kNoValue;
      return Linear(x, prefix, in, out, bias, std::move(name));
    }
    TP_ASSIGN_OR_RETURN(ValueId w,
                        Sharded(prefix + ".weight", prefix + ".weight", {out, in}, 1, {in}));
    ValueId b = ir::kNoValue;
    if (bias) {
      TP_ASSIGN_OR_RETURN(b, Weight(prefix + ".bias", {out}));
    }
    if (!reduce) {
      *owed_bias = b;
      return Op("linear", {x, w}, std::move(name), Act(out));
    }
    TP_ASSIGN_OR_RETURN(ValueId partial, Op("linear", {x, w}, name + "_partial", Act(out)));
    return AllReduce(partial, b, std::move(name));
  }

  // RMSNorm over the last dim of `x`; `type` is x's (and the result's) type; `eps` the
  // config's rms_norm_eps when absent.
  absl::StatusOr<ValueId> RmsNorm(ValueId x, std::string tensor, std::string name, TensorType type,
                                  std::optional<double> eps = std::nullopt) {
    const int64_t n = type.dims.back().extent();
    TP_ASSIGN_OR_RETURN(ValueId w, Weight(std::move(tensor), {n}));
    Attributes attrs;
    attrs.Set("eps", eps.value_or(c_.rms_norm_eps));
    return Op("rms_norm", {x, w}, std::move(name), std::move(type), std::move(attrs));
  }

  absl::StatusOr<ValueId> Rope(ValueId x, std::string name, TensorType type) {
    Attributes attrs;
    attrs.Set("theta", c_.rope.theta);
    attrs.Set("rope_type", c_.rope.type);
    if (c_.rope.type == "llama3") {
      attrs.Set("factor", c_.rope.factor);
      attrs.Set("low_freq_factor", c_.rope.low_freq_factor);
      attrs.Set("high_freq_factor", c_.rope.high_freq_factor);
      attrs.Set("original_max_position_embeddings", c_.rope.original_max_position_embeddings);
    } else if (c_.rope.type == "yarn") {
      attrs.Set("factor", c_.rope.factor);
      attrs.Set("original_max_position_embeddings", c_.rope.original_max_position_embeddings);
      attrs.Set("beta_fast", c_.rope.beta_fast);
      attrs.Set("beta_slow", c_.rope.beta_slow);
      attrs.Set("attention_factor", c_.rope.attention_factor);
      attrs.Set("truncate", c_.rope.truncate);
    }
    if (c_.rope.interleaved) attrs.Set("interleaved", true);
    return Op("rope", {x, positions_}, std::move(name), std::move(type), std::move(attrs));
  }

  // One decoder layer; returns the residual stream after it.
  absl::StatusOr<ValueId> Layer(int64_t layer, ValueId h) {
    const std::string l = absl::StrCat("l", layer, ".");
    const std::string p = absl::StrCat("model.layers.", layer, ".");
    const int64_t hidden = c_.hidden_size;
    TP_ASSIGN_OR_RETURN(ValueId attn_norm,
                        RmsNorm(h, p + "input_layernorm.weight", l + "attn_norm", Act(hidden)));
    ValueId attn_out;
    if (c_.is_mla) {
      TP_ASSIGN_OR_RETURN(attn_out, LatentAttention(layer, attn_norm));
    } else {
      TP_ASSIGN_OR_RETURN(attn_out, Attention(layer, attn_norm));
    }
    TP_ASSIGN_OR_RETURN(ValueId attn_residual,
                        Op("add", {h, attn_out}, l + "attn_residual", Act(hidden)));
    TP_ASSIGN_OR_RETURN(
        ValueId mlp_norm,
        RmsNorm(attn_residual, p + "post_attention_layernorm.weight", l + "mlp_norm", Act(hidden)));
    ValueId mlp_out;
    if (!c_.moe.sparse_layers.empty() && c_.moe.sparse_layers[static_cast<size_t>(layer)]) {
      TP_ASSIGN_OR_RETURN(mlp_out, Experts(layer, mlp_norm));
    } else {
      TP_ASSIGN_OR_RETURN(mlp_out, Mlp(mlp_norm, p + "mlp.", l, c_.intermediate_size,
                                       /*fused=*/c_.fused_qkv, l + "mlp_out"));
    }
    return Op("add", {attn_residual, mlp_out}, l + "out", Act(hidden));
  }

  // Multi-head (GQA/MQA) attention of the normed input; returns o_proj's output.
  absl::StatusOr<ValueId> Attention(int64_t layer, ValueId attn_norm) {
    const std::string l = absl::StrCat("l", layer, ".");
    const std::string p = absl::StrCat("model.layers.", layer, ".");
    const int64_t hidden = c_.hidden_size;
    const int64_t q_size = c_.num_heads * c_.head_dim;
    const int64_t kv_size = c_.num_kv_heads * c_.head_dim;
    // This rank's heads (all of them with one rank).
    const int64_t heads = c_.num_heads / ranks_, kv_heads = c_.num_kv_heads / ranks_;
    ValueId q, k, v;
    if (c_.fused_qkv) {
      TP_ASSIGN_OR_RETURN(ValueId qkv,
                          ColumnLinear(attn_norm, p + "self_attn.qkv_proj", hidden,
                                       {q_size, kv_size, kv_size}, c_.qkv_bias, l + "qkv"));
      TP_ASSIGN_OR_RETURN(std::vector<ValueId> parts, Split(qkv, {{l + "q", q_size / ranks_},
                                                                  {l + "k", kv_size / ranks_},
                                                                  {l + "v", kv_size / ranks_}}));
      q = parts[0];
      k = parts[1];
      v = parts[2];
    } else {
      TP_ASSIGN_OR_RETURN(q, ColumnLinear(attn_norm, p + "self_attn.q_proj", hidden, {q_size},
                                          c_.qkv_bias, l + "q"));
      TP_ASSIGN_OR_RETURN(k, ColumnLinear(attn_norm, p + "self_attn.k_proj", hidden, {kv_size},
                                          c_.qkv_bias, l + "k"));
      TP_ASSIGN_OR_RETURN(v, ColumnLinear(attn_norm, p + "self_attn.v_proj", hidden, {kv_size},
                                          c_.qkv_bias, l + "v"));
    }
    TP_ASSIGN_OR_RETURN(ValueId q_heads, Reshape(q, l + "q_heads", Heads(heads)));
    TP_ASSIGN_OR_RETURN(ValueId k_heads, Reshape(k, l + "k_heads", Heads(kv_heads)));
    TP_ASSIGN_OR_RETURN(ValueId v_heads, Reshape(v, l + "v_heads", Heads(kv_heads)));
    if (c_.qk_norm) {
      TP_ASSIGN_OR_RETURN(
          q_heads, RmsNorm(q_heads, p + "self_attn.q_norm.weight", l + "q_normed", Heads(heads)));
      TP_ASSIGN_OR_RETURN(k_heads, RmsNorm(k_heads, p + "self_attn.k_norm.weight", l + "k_normed",
                                           Heads(kv_heads)));
    }
    TP_ASSIGN_OR_RETURN(ValueId q_rope, Rope(q_heads, l + "q_rope", Heads(heads)));
    TP_ASSIGN_OR_RETURN(ValueId k_rope, Rope(k_heads, l + "k_rope", Heads(kv_heads)));

    TP_ASSIGN_OR_RETURN(ValueId k_state, graph_.AddState(absl::StrCat("k_cache.", layer), Cache()));
    TP_ASSIGN_OR_RETURN(ValueId v_state, graph_.AddState(absl::StrCat("v_cache.", layer), Cache()));
    const ResultAlias in_place{AliasKind::kInPlace, 0};
    TP_ASSIGN_OR_RETURN(ValueId k_cache, Op("kv_write", {k_state, k_rope, positions_},
                                            l + "k_cache", Cache(), {}, in_place));
    TP_ASSIGN_OR_RETURN(ValueId v_cache, Op("kv_write", {v_state, v_heads, positions_},
                                            l + "v_cache", Cache(), {}, in_place));
    Attributes attn_attrs;
    attn_attrs.Set("scale", Scale(c_.head_dim));
    attn_attrs.Set("sliding_window", c_.sliding_window[static_cast<size_t>(layer)]);
    TP_ASSIGN_OR_RETURN(ValueId attn, Op("attention", {q_rope, k_cache, v_cache, positions_},
                                         l + "attn", Heads(heads), std::move(attn_attrs)));
    TP_ASSIGN_OR_RETURN(ValueId attn_flat,
                        Reshape(attn, l + "attn_flat", Act(heads * c_.head_dim)));
    return RowLinear(attn_flat, p + "self_attn.o_proj", q_size, hidden, c_.o_bias, l + "attn_out");
  }

  // Multi-head latent attention (docs/ir.md `mla_attention`); returns o_proj's output. The
  // caches hold the normed latent and the rotated shared rope key.
  absl::StatusOr<ValueId> LatentAttention(int64_t layer, ValueId attn_norm) {
    const std::string l = absl::StrCat("l", layer, ".");
    const std::string p = absl::StrCat("model.layers.", layer, ".self_attn.");
    const MlaConfig& m = c_.mla;
    const int64_t hidden = c_.hidden_size;
    const int64_t heads = c_.num_heads / ranks_;  // this rank's
    const int64_t qk = m.qk_nope_head_dim + m.qk_rope_head_dim;
    ValueId q;
    if (m.q_lora_rank == 0) {
      TP_ASSIGN_OR_RETURN(
          q, ColumnLinear(attn_norm, p + "q_proj", hidden, {c_.num_heads * qk}, false, l + "q"));
    } else {
      TP_ASSIGN_OR_RETURN(
          ValueId q_a, Linear(attn_norm, p + "q_a_proj", hidden, m.q_lora_rank, false, l + "q_a"));
      TP_ASSIGN_OR_RETURN(ValueId q_a_norm, RmsNorm(q_a, p + "q_a_layernorm.weight", l + "q_a_norm",
                                                    Act(m.q_lora_rank), kLatentNormEps));
      TP_ASSIGN_OR_RETURN(q, ColumnLinear(q_a_norm, p + "q_b_proj", m.q_lora_rank,
                                          {c_.num_heads * qk}, false, l + "q"));
    }
    TP_ASSIGN_OR_RETURN(ValueId q_heads, Reshape(q, l + "q_heads", HeadsOf(heads, qk)));
    TP_ASSIGN_OR_RETURN(
        std::vector<ValueId> q_parts,
        Split(q_heads, {{l + "q_nope", m.qk_nope_head_dim}, {l + "q_pe", m.qk_rope_head_dim}},
              HeadsOf(heads, qk)));
    TP_ASSIGN_OR_RETURN(ValueId kv_a,
                        Linear(attn_norm, p + "kv_a_proj_with_mqa", hidden,
                               m.kv_lora_rank + m.qk_rope_head_dim, false, l + "kv_a"));
    TP_ASSIGN_OR_RETURN(
        std::vector<ValueId> kv_parts,
        Split(kv_a, {{l + "latent", m.kv_lora_rank}, {l + "k_pe", m.qk_rope_head_dim}}));
    TP_ASSIGN_OR_RETURN(ValueId latent_norm,
                        RmsNorm(kv_parts[0], p + "kv_a_layernorm.weight", l + "latent_norm",
                                Act(m.kv_lora_rank), kLatentNormEps));
    TP_ASSIGN_OR_RETURN(ValueId latent_heads,
                        Reshape(latent_norm, l + "latent_heads", HeadsOf(1, m.kv_lora_rank)));
    TP_ASSIGN_OR_RETURN(ValueId k_pe_heads,
                        Reshape(kv_parts[1], l + "k_pe_heads", HeadsOf(1, m.qk_rope_head_dim)));
    TP_ASSIGN_OR_RETURN(ValueId q_rope,
                        Rope(q_parts[1], l + "q_rope", HeadsOf(heads, m.qk_rope_head_dim)));
    TP_ASSIGN_OR_RETURN(ValueId k_rope,
                        Rope(k_pe_heads, l + "k_rope", HeadsOf(1, m.qk_rope_head_dim)));

    const TensorType latent_type = CacheOf(1, m.kv_lora_rank);
    const TensorType rope_type = CacheOf(1, m.qk_rope_head_dim);
    TP_ASSIGN_OR_RETURN(ValueId latent_state,
                        graph_.AddState(absl::StrCat("latent_cache.", layer), latent_type));
    TP_ASSIGN_OR_RETURN(ValueId rope_state,
                        graph_.AddState(absl::StrCat("rope_cache.", layer), rope_type));
    const ResultAlias in_place{AliasKind::kInPlace, 0};
    TP_ASSIGN_OR_RETURN(ValueId latent_cache,
                        Op("kv_write", {latent_state, latent_heads, positions_}, l + "latent_cache",
                           latent_type, {}, in_place));
    TP_ASSIGN_OR_RETURN(ValueId rope_cache, Op("kv_write", {rope_state, k_rope, positions_},
                                               l + "rope_cache", rope_type, {}, in_place));
    const int64_t kv_b_rows = c_.num_heads * (m.qk_nope_head_dim + m.v_head_dim);
    TP_ASSIGN_OR_RETURN(ValueId kv_b, Sharded(p + "kv_b_proj.weight", p + "kv_b_proj.weight",
                                              {kv_b_rows, m.kv_lora_rank}, 0, {kv_b_rows}));
    Attributes attrs;
    attrs.Set("scale", Scale(qk));
    TP_ASSIGN_OR_RETURN(
        ValueId attn,
        Op("mla_attention", {q_parts[0], q_rope, latent_cache, rope_cache, kv_b, positions_},
           l + "attn", HeadsOf(heads, m.v_head_dim), std::move(attrs)));
    TP_ASSIGN_OR_RETURN(ValueId attn_flat,
                        Reshape(attn, l + "attn_flat", Act(heads * m.v_head_dim)));
    return RowLinear(attn_flat, p + "o_proj", c_.num_heads * m.v_head_dim, hidden, false,
                     l + "attn_out");
  }

  // A SwiGLU MLP of width `inter` on `x` whose weights live under module path `p` (ending in
  // '.'); value names start with `l`; the result is named `out_name`. With several ranks each
  // holds a share of the width and the result is reduced over them, or, with `reduce` false,
  // left partial with the bias it owes in `owed_bias` (RowLinear).
  absl::StatusOr<ValueId> Mlp(ValueId x, const std::string& p, const std::string& l, int64_t inter,
                              bool fused, std::string out_name, bool reduce = true,
                              ValueId* owed_bias = nullptr) {
    const int64_t hidden = c_.hidden_size;
    const int64_t local = inter / ranks_;
    ValueId gate, up;
    if (fused) {
      TP_ASSIGN_OR_RETURN(
          ValueId gate_up,
          ColumnLinear(x, p + "gate_up_proj", hidden, {inter, inter}, c_.mlp_bias, l + "gate_up"));
      TP_ASSIGN_OR_RETURN(std::vector<ValueId> parts,
                          Split(gate_up, {{l + "gate", local}, {l + "up", local}}));
      gate = parts[0];
      up = parts[1];
    } else {
      TP_ASSIGN_OR_RETURN(
          gate, ColumnLinear(x, p + "gate_proj", hidden, {inter}, c_.mlp_bias, l + "gate"));
      TP_ASSIGN_OR_RETURN(up,
                          ColumnLinear(x, p + "up_proj", hidden, {inter}, c_.mlp_bias, l + "up"));
    }
    TP_ASSIGN_OR_RETURN(ValueId gate_act, Op("silu", {gate}, l + "gate_act", Act(local)));
    TP_ASSIGN_OR_RETURN(ValueId swiglu, Op("mul", {gate_act, up}, l + "swiglu", Act(local)));
    return RowLinear(swiglu, p + "down_proj", inter, hidden, c_.mlp_bias, std::move(out_name),
                     reduce, owed_bias);
  }

  // The routed experts (plus the shared experts, when the config has them) of one layer.
  absl::StatusOr<ValueId> Experts(int64_t layer, ValueId x) {
    const std::string l = absl::StrCat("l", layer, ".");
    const std::string p = absl::StrCat("model.layers.", layer, ".mlp.");
    const MoeConfig& m = c_.moe;
    const int64_t hidden = c_.hidden_size;
    const int64_t inter = m.moe_intermediate_size / ranks_;  // this rank's share of each expert
    TP_ASSIGN_OR_RETURN(ValueId router_w, Weight(p + "gate.weight", {m.num_experts, hidden}));
    TP_ASSIGN_OR_RETURN(
        ValueId logits,
        Op("moe_router", {x, router_w}, l + "router_logits",
           m.rounded_logits ? Act(m.num_experts)
                            : ir::MakeType(DType::kF32, {Sym("B"), Sym("T"), Ext(m.num_experts)})));
    Attributes topk;
    topk.Set("top_k", m.top_k);
    topk.Set("norm_topk_prob", m.norm_topk_prob);
    topk.Set("scaling", m.routed_scaling_factor);
    topk.Set("num_groups", m.num_groups);
    topk.Set("topk_groups", m.topk_groups);
    const std::vector<Dim> selection = {Sym("B"), Sym("T"), Ext(m.top_k)};
    std::vector<ir::ResultSpec> routed;
    routed.push_back({l + "expert_ids", ir::MakeType(DType::kI32, selection), {}});
    routed.push_back(
        {l + "expert_weights", ir::MakeType(m.rounded_logits ? x_ : DType::kF32, selection), {}});
    TP_ASSIGN_OR_RETURN(std::vector<ValueId> route,
                        graph_.AddRegion("moe_topk", {logits}, std::move(routed), std::move(topk)));
    const ValueId ids = route[0];
    auto per_expert = [&](TensorType type) {
      type.dims = {Sym("B"), Sym("T"), Ext(m.top_k), type.dims.back()};
      return type;
    };
    TP_ASSIGN_OR_RETURN(ValueId gate, ExpertLinear(x, ids, p + "experts.", "gate_proj", inter,
                                                   hidden, l + "expert_gate"));
    TP_ASSIGN_OR_RETURN(ValueId up, ExpertLinear(x, ids, p + "experts.", "up_proj", inter, hidden,
                                                 l + "expert_up"));
    TP_ASSIGN_OR_RETURN(ValueId gate_act,
                        Op("silu", {gate}, l + "expert_gate_act", per_expert(Act(inter))));
    TP_ASSIGN_OR_RETURN(ValueId swiglu,
                        Op("mul", {gate_act, up}, l + "expert_swiglu", per_expert(Act(inter))));
    TP_ASSIGN_OR_RETURN(ValueId down, ExpertLinear(swiglu, ids, p + "experts.", "down_proj", hidden,
                                                   inter, l + "expert_out"));
    const bool shared = m.shared_intermediate_size > 0;
    // With several ranks every output below is partial (each rank holds a share of every
    // expert's width) until the one all_reduce at the end.
    const bool reduce = ranks_ > 1;
    TP_ASSIGN_OR_RETURN(ValueId combined,
                        Op("moe_combine", {down, route[1]},
                           shared || reduce ? l + "moe_out" : l + "mlp_out", Act(hidden)));
    ValueId sum = combined, owed_bias = ir::kNoValue;
    if (shared) {
      TP_ASSIGN_OR_RETURN(ValueId shared_out,
                          Mlp(x, p + "shared_experts.", l + "shared_", m.shared_intermediate_size,
                              /*fused=*/false, l + "shared_out", /*reduce=*/false, &owed_bias));
      TP_ASSIGN_OR_RETURN(sum, Op("add", {combined, shared_out},
                                  reduce ? l + "mlp_out_partial" : l + "mlp_out", Act(hidden)));
    }
    if (!reduce) return sum;
    return AllReduce(sum, owed_bias, l + "mlp_out");
  }

  // expert_linear of `x` with the experts' `proj` weights ([out, in] each), stacked into
  // one weight [E, out, in] named <p><proj>.
  absl::StatusOr<ValueId> ExpertLinear(ValueId x, ValueId ids, const std::string& p,
                                       const std::string& proj, int64_t out, int64_t in,
                                       std::string name) {
    const MoeConfig& m = c_.moe;
    std::vector<std::string> parts;
    std::vector<ir::TensorSlice> slices;
    for (int64_t e = 0; e < m.num_experts; ++e) {
      parts.push_back(absl::StrCat(p, e, ".", proj, ".weight"));
      // Several ranks: this rank's share of the expert's width, the rows of gate_proj and
      // up_proj ([out, in], out = the width) or the columns of down_proj (in = the width).
      if (ranks_ > 1) {
        const bool rows = proj != "down_proj";
        const int64_t share = rows ? out : in;
        slices.push_back(ir::TensorSlice::Of(rows ? 0 : 1, rank_ * share, share));
      }
    }
    TP_ASSIGN_OR_RETURN(
        ValueId w,
        graph_.AddWeight(p + proj, ir::MakeType(x_, {Ext(m.num_experts), Ext(out), Ext(in)}),
                         std::move(parts), std::move(slices)));
    return Op("expert_linear", {x, ids, w}, std::move(name),
              ir::MakeType(x_, {Sym("B"), Sym("T"), Ext(m.top_k), Ext(out)}));
  }

  const ModelConfig& c_;
  const DType x_;
  const int64_t ranks_;  // tensor-parallel ranks (1: the whole model)
  const int64_t rank_;   // this graph's
  ir::Graph graph_;
  ValueId positions_ = ir::kNoValue;
};

StDType StDTypeFor(DType dtype) {
  switch (dtype) {
    case DType::kBF16:
      return StDType::kBF16;
    case DType::kF16:
      return StDType::kF16;
    case DType::kI32:
      return StDType::kI32;
    case DType::kF32:
      break;
  }
  return StDType::kF32;
}

std::string TypeString(StDType dtype, const std::vector<int64_t>& shape) {
  return absl::StrCat(StDTypeName(dtype), "[", absl::StrJoin(shape, ","), "]");
}

}  // namespace

int64_t PackedPartRows(const std::vector<int64_t>& part, const std::vector<int64_t>& weight,
                       size_t num_parts) {
  if (num_parts <= 1) return part == weight ? (weight.empty() ? 1 : weight[0]) : -1;
  if (weight.empty()) return -1;
  if (part.size() == weight.size() &&
      std::equal(part.begin() + 1, part.end(), weight.begin() + 1, weight.end())) {
    return part[0];
  }
  if (part.size() + 1 == weight.size() &&
      std::equal(part.begin(), part.end(), weight.begin() + 1, weight.end())) {
    return 1;
  }
  return -1;
}

absl::StatusOr<ir::Graph> LowerModel(const ModelConfig& config) {
  return LowerModel(config, TensorParallel{});
}

absl::Status CheckTensorParallel(const ModelConfig& config, const TensorParallel& tp) {
  if (tp.ranks < 1 || tp.ranks > kMaxTensorParallelRanks || tp.rank < 0 || tp.rank >= tp.ranks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor parallelism: rank ", tp.rank, " of ", tp.ranks,
        " ranks; needs 1 <= ranks <= ", kMaxTensorParallelRanks, " and 0 <= rank < ranks"));
  }
  if (tp.ranks == 1) return absl::OkStatus();
  std::vector<std::pair<std::string, int64_t>> divided = {
      {"num_attention_heads", config.num_heads},
      {"vocab_size", config.vocab_size},
  };
  if (!config.is_mla) divided.push_back({"num_key_value_heads", config.num_kv_heads});
  const MoeConfig& m = config.moe;
  const bool any_dense =
      m.sparse_layers.empty() ||
      std::find(m.sparse_layers.begin(), m.sparse_layers.end(), false) != m.sparse_layers.end();
  const bool any_sparse =
      std::find(m.sparse_layers.begin(), m.sparse_layers.end(), true) != m.sparse_layers.end();
  if (any_dense) divided.push_back({"intermediate_size", config.intermediate_size});
  if (any_sparse) {
    divided.push_back({"moe_intermediate_size", m.moe_intermediate_size});
    if (m.shared_intermediate_size > 0) {
      divided.push_back({"the shared experts' width (n_shared_experts * moe_intermediate_size)",
                         m.shared_intermediate_size});
    }
  }
  for (const auto& [field, value] : divided) {
    if (value % tp.ranks != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor parallelism over ", tp.ranks, " ranks: ", field, " (", value,
          ") is not a multiple of ", tp.ranks, "; each rank needs an equal share of it"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ir::Graph> LowerModel(const ModelConfig& config, const TensorParallel& tp) {
  TP_RETURN_IF_ERROR(CheckConfig(config));
  TP_RETURN_IF_ERROR(CheckTensorParallel(config, tp));
  return Lowerer(config, tp).Lower();
}

absl::StatusOr<std::vector<std::vector<const TensorView*>>> BindCheckpoint(
    const ir::Graph& graph, const Checkpoint& checkpoint) {
  std::vector<std::vector<const TensorView*>> bound;
  // Checkpoint tensor name -> the weight binding it, or kNoValue while unbound.
  std::map<absl::string_view, ValueId> bound_by;
  for (const absl::string_view name : checkpoint.TensorNames()) bound_by[name] = ir::kNoValue;
  std::set<std::string> whole_bound;  // tensors some weight binds whole
  for (ValueId id : graph.weights()) {
    const ir::Value& w = graph.value(id);
    const StDType want_dtype = StDTypeFor(w.type.dtype);
    std::vector<int64_t> want_shape;
    for (const Dim& d : w.type.dims) {
      if (!d.is_static()) {
        return absl::InvalidArgumentError(absl::StrCat("weight '%", w.name, "' has type ",
                                                       w.type.ToString(), " with a symbolic dim"));
      }
      want_shape.push_back(d.extent());
    }
    const size_t num_parts = w.checkpoint_tensors.size();
    if (num_parts == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("weight '%", w.name, "' binds no checkpoint tensor"));
    }
    if (num_parts > 1 && want_shape.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("packed weight '%", w.name, "' has type ",
                                                     w.type.ToString(), ", which has no dim 0"));
    }
    // A part's expected type; for a packed weight dim 0 is free ("N"), or the part is one
    // stacked slice (the weight's trailing dims).
    std::string expected = TypeString(want_dtype, want_shape);
    if (num_parts > 1) {
      const std::string trailing = absl::StrJoin(want_shape.begin() + 1, want_shape.end(), ",");
      expected = absl::StrCat(StDTypeName(want_dtype), "[N", want_shape.size() > 1 ? "," : "",
                              trailing, "]");
      if (want_shape.size() > 1) {
        absl::StrAppend(&expected, " or ", StDTypeName(want_dtype), "[", trailing, "]");
      }
    }
    const std::string role =
        num_parts == 1 ? std::string() : absl::StrCat(" (a part of packed weight '%", w.name, "')");
    std::vector<const TensorView*> parts;
    std::vector<std::vector<int64_t>> part_shapes;  // after slicing
    int64_t rows = 0;
    for (size_t k = 0; k < num_parts; ++k) {
      const std::string& name = w.checkpoint_tensors[k];
      const TensorView* t = checkpoint.Find(name);
      if (t == nullptr) {
        return absl::NotFoundError(absl::StrCat("checkpoint ", checkpoint.dir().string(),
                                                " has no tensor ", QuoteUntrusted(name), role,
                                                " (expected ", expected, ")"));
      }
      const ir::TensorSlice slice = w.slice(k);
      const std::optional<std::vector<int64_t>> part_shape = SlicedShape(t->shape, slice);
      if (!part_shape.has_value()) {
        return absl::InvalidArgumentError(
            absl::StrCat("weight '%", w.name, "' binds elements [", slice.start, ", ",
                         slice.start + slice.size, ") of dim ", slice.dim, " of checkpoint tensor ",
                         QuoteUntrusted(name), ", which is ", TypeString(t->dtype, t->shape)));
      }
      const std::vector<int64_t>& shape = *part_shape;
      const std::string sliced =
          slice.whole() ? std::string()
                        : absl::StrCat(" (sliced to ", TypeString(t->dtype, shape), ")");
      const int64_t part_rows = PackedPartRows(shape, want_shape, num_parts);
      if (t->dtype != want_dtype || part_rows < 0) {
        return absl::InvalidArgumentError(absl::StrCat("checkpoint tensor ", QuoteUntrusted(name),
                                                       role, " is ", TypeString(t->dtype, t->shape),
                                                       sliced, ", expected ", expected));
      }
      auto it = bound_by.find(name);
      // A tensor is bound whole once; slices may read it again (docs/ir.md, "Sliced weights").
      if (it->second != ir::kNoValue && slice.whole() && whole_bound.count(name) > 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "checkpoint tensor ", QuoteUntrusted(name), " is bound twice (by weight '%",
            graph.value(it->second).name, "' and by weight '%", w.name, "')"));
      }
      if (slice.whole()) whole_bound.insert(name);
      it->second = id;
      rows += part_rows;
      parts.push_back(t);
      part_shapes.push_back(std::move(shape));
    }
    if (num_parts > 1 && rows != want_shape[0]) {
      std::vector<std::string> extents;
      for (size_t k = 0; k < num_parts; ++k) {
        extents.push_back(absl::StrCat(QuoteUntrusted(w.checkpoint_tensors[k]), " ",
                                       PackedPartRows(part_shapes[k], want_shape, num_parts)));
      }
      return absl::InvalidArgumentError(absl::StrCat(
          "packed weight '%", w.name, "' is ", w.type.ToString(), " but its parts have dim-0 ",
          "extents ", absl::StrJoin(extents, " + "), " = ", rows, ", expected ", want_shape[0]));
    }
    bound.push_back(std::move(parts));
  }
  std::vector<std::string> unused;
  for (const auto& [name, weight] : bound_by) {
    if (weight == ir::kNoValue) unused.emplace_back(name);
  }
  if (!unused.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint tensor", unused.size() > 1 ? "s " : " ", QuoteList(unused),
                     unused.size() > 1 ? " are" : " is", " not used by the ", graph.name(),
                     " graph (unexpected for this architecture and config)"));
  }
  return bound;
}

std::optional<std::vector<int64_t>> SlicedShape(const std::vector<int64_t>& shape,
                                                const ir::TensorSlice& slice) {
  if (slice.whole()) return shape;
  const size_t dim = static_cast<size_t>(slice.dim);
  if (slice.dim < 0 || dim >= shape.size() || slice.start < 0 || slice.size < 0 ||
      slice.start > shape[dim] || slice.size > shape[dim] - slice.start) {
    return std::nullopt;
  }
  std::vector<int64_t> out = shape;
  out[dim] = slice.size;
  return out;
}

std::vector<ElementRun> SliceRuns(const std::vector<int64_t>& shape, const ir::TensorSlice& slice) {
  int64_t total = 1;
  for (int64_t e : shape) total *= e;
  if (slice.whole()) return {ElementRun{0, total}};
  const size_t dim = static_cast<size_t>(slice.dim);
  int64_t outer = 1, inner = 1;
  for (size_t d = 0; d < dim; ++d) outer *= shape[d];
  for (size_t d = dim + 1; d < shape.size(); ++d) inner *= shape[d];
  std::vector<ElementRun> runs;
  runs.reserve(static_cast<size_t>(outer));
  for (int64_t o = 0; o < outer; ++o) {
    runs.push_back(ElementRun{(o * shape[dim] + slice.start) * inner, slice.size * inner});
  }
  return runs;
}

absl::StatusOr<std::vector<float>> PartToFloat32(const TensorView& tensor,
                                                 const ir::TensorSlice& slice) {
  if (slice.whole()) return ToFloat32(tensor);
  if (!SlicedShape(tensor.shape, slice).has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("slice [", slice.start, ", ", slice.start + slice.size, ") of dim ", slice.dim,
                     " is outside checkpoint tensor ", QuoteUntrusted(tensor.name), ", which is ",
                     TypeString(tensor.dtype, tensor.shape)));
  }
  // Only the slice's runs are converted, each as a one-dimensional view of the tensor.
  const int64_t element_bytes = StDTypeSize(tensor.dtype);
  std::vector<float> out;
  for (const ElementRun& run : SliceRuns(tensor.shape, slice)) {
    TensorView part = tensor;
    part.shape = {run.count};
    part.data = tensor.data + run.first * element_bytes;
    part.nbytes = static_cast<size_t>(run.count * element_bytes);
    TP_ASSIGN_OR_RETURN(std::vector<float> values, ToFloat32(part));
    out.insert(out.end(), values.begin(), values.end());
  }
  return out;
}

}  // namespace tileplan::models
