// Building blocks for kind inference functions (regions/kinds.h): dim matching and the
// operand checks every kind repeats, each returning an error in the verifier's wording
// ("operand 1 (%w) has type bf16[64,32], expected [N,K] with K = 64").
#ifndef TILEPLAN_REGIONS_SHAPE_RULES_H_
#define TILEPLAN_REGIONS_SHAPE_RULES_H_

#include <array>
#include <functional>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "regions/ir.h"
#include "regions/kinds.h"

namespace tileplan::ir::shape {

// A single result of `type` with `alias`.
std::vector<InferredResult> One(TensorType type, ResultAlias alias = {});
// `dims` with its last entry replaced by `last`. REQUIRES: !dims.empty().
std::vector<Dim> WithLast(std::vector<Dim> dims, const Dim& last);

// Two dims match when both are static and equal, or both are the same symbol.
bool DimsMatch(const Dim& a, const Dim& b);
bool IsFloat(DType dtype);  // f32, bf16, f16

// "[N,K] with K = 64, N = 3": a dims pattern followed by the bindings it must honour.
std::string Pattern(absl::string_view dims,
                    std::initializer_list<std::pair<absl::string_view, Dim>> bindings = {});

// The dtype class an operand must have.
enum class Element { kFloat, kI32, kF32, kAny };

// Operand `index` has the element class and exactly `rank` dims, else an error that
// quotes `pattern` (e.g. "[B,T,H,D]").
absl::Status ExpectRank(const KindArgs& args, int index, Element element, int rank,
                        absl::string_view pattern);
// As ExpectRank, but any rank >= `min_rank` (patterns with leading "...").
absl::Status ExpectMinRank(const KindArgs& args, int index, Element element, int min_rank,
                           absl::string_view pattern);
// Operand `index` has the same dtype as operand `other` (both already checked for rank).
absl::Status ExpectSameDType(const KindArgs& args, int index, int other, absl::string_view pattern);
// dims[axis] of operand `index` matches `want`, else an error quoting
// Pattern(pattern, {{name, want}}).
absl::Status ExpectDim(const KindArgs& args, int index, int axis, const Dim& want,
                       absl::string_view pattern, absl::string_view name);

// Operand `index` has exactly operand `other`'s type.
absl::Status ExpectSameType(const KindArgs& args, int index, int other);
// Operand `index` is positions: i32[B,T] with the given B and T.
absl::Status ExpectPositions(const KindArgs& args, int index, const Dim& b, const Dim& t);

// InvalidArgument "attribute '<key>' is <value>, expected <expected>".
absl::Status AttrError(absl::string_view key, absl::string_view value, absl::string_view expected);
// Float attribute `key` (required by the schema): finite and accepted by `ok`, else an
// AttrError quoting `expected`.
absl::StatusOr<double> FloatAttr(const Attributes& attrs, absl::string_view key,
                                 const std::function<bool(double)>& ok, absl::string_view expected);

// rope's attributes (docs/ir.md): theta, rope_type, the llama3 and yarn keys and
// `interleaved`, which are optional in the schema; kinds that embed a RoPE (rope_kv_write, ...)
// append them to theirs.
std::vector<AttrSpec> RopeAttrSpecs();
// theta finite and > 0; rope_type "default" (no type keys), "llama3" (its four keys, factor >
// 0, 0 < low_freq_factor < high_freq_factor, original_max_position_embeddings > 0) or "yarn"
// (factor >= 1, beta_fast, beta_slow and attention_factor > 0, original_max_position_embeddings
// > 0, truncate); a key of another type is refused. `interleaved` may accompany any type.
absl::Status CheckRopeAttrs(const Attributes& attrs);

// attention's attributes (docs/ir.md): scale and sliding_window, which kinds that embed an
// attention (rope_kv_write_attention, ...) append to theirs.
std::vector<AttrSpec> AttentionAttrSpecs();
// scale finite; sliding_window >= 0 (0 = no window).
absl::Status CheckAttentionAttrs(const Attributes& attrs);

// mla_attention's rule (docs/ir.md) for a kind whose operands q_nope, q_rope, latent_cache,
// rope_cache, w_kv_b and positions are operands at[0] ... at[5] of `args` (mla_attention
// itself, {0, 1, 2, 3, 4, 5}; mla_kv_write_attention's other layout): checks them and the
// `scale` attribute and returns the output's type [B,T,Hq,Dv].
absl::StatusOr<TensorType> InferMlaAttention(const KindArgs& args, const std::array<int, 6>& at);

// moe_topk's attributes (docs/ir.md): top_k, norm_topk_prob, scaling, num_groups and
// topk_groups, which the fused moe appends to its own.
std::vector<AttrSpec> MoeTopkAttrSpecs();
// For router logits over `experts` experts (static, > 0): num_groups divides E, 1 <=
// topk_groups <= num_groups, 1 <= top_k <= topk_groups * E / num_groups, scaling finite and
// > 0, norm_topk_prob present. Returns top_k.
absl::StatusOr<int64_t> CheckMoeTopkAttrs(const Attributes& attrs, int64_t experts);

}  // namespace tileplan::ir::shape

#endif  // TILEPLAN_REGIONS_SHAPE_RULES_H_
