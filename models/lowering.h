// Lowering of a decoder architecture to the primitive TileRegion graph, and binding of that
// graph's weights to a checkpoint.
//
// The graph follows docs/ir.md ("Model graph conventions"): inputs %tokens and %positions
// (i32[B,T]), one state pair %k_cache.L / %v_cache.L (X[B,Hkv,Smax,D]) per layer, weights
// named after their checkpoint tensors, one output %logits (f32[B,T,V]). X and W are the
// config's dtype. Only primitive kinds are emitted; fusion is left to planner passes.
//
// Value names are stable and readable: %embed, then per layer L %lL.attn_norm, %lL.q, %lL.k,
// %lL.v (phi3: %lL.qkv split into them), %lL.q_heads, %lL.k_heads, %lL.v_heads,
// [%lL.q_normed, %lL.k_normed], %lL.q_rope, %lL.k_rope, %lL.k_cache, %lL.v_cache (the
// updated caches), %lL.attn, %lL.attn_flat, %lL.attn_out, %lL.attn_residual,
// %lL.mlp_norm, %lL.gate, %lL.up (phi3: %lL.gate_up split into them), %lL.gate_act,
// %lL.swiglu, %lL.mlp_out, %lL.out; finally %final_norm and %logits.
#ifndef TILEPLAN_MODELS_LOWERING_H_
#define TILEPLAN_MODELS_LOWERING_H_

#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "models/config.h"
#include "models/safetensors.h"
#include "regions/ir.h"

namespace tileplan::models {

// Builds the primitive graph of `config`. Fails (InvalidArgument, naming the field) on a
// config whose geometry is inconsistent: non-positive sizes, num_heads not a multiple of
// num_kv_heads, an odd head_dim, a sliding_window list whose size is not num_layers.
absl::StatusOr<ir::Graph> LowerModel(const ModelConfig& config);

// Tensor parallelism (docs/ir.md, "Tensor-parallel lowering"): the graph of rank `rank` of
// `ranks`, which holds a 1/ranks share of every attention's heads (query and KV heads alike;
// the KV cache holds only those), of every MLP's and expert's width and of the LM head's
// vocabulary rows, its weights bound to the matching slices of the checkpoint tensors
// (column-parallel q/k/v, gate/up, q_b and kv_b projections; row-parallel o_proj and
// down_proj followed by an `all_reduce`; the embedding, the norms, the router and the latent
// projections of multi-head latent attention replicated), and its logits gathered from
// every rank by an `all_gather`, so each rank's graph outputs the whole %logits.
struct TensorParallel {
  int64_t ranks = 1;
  int64_t rank = 0;
};
inline constexpr int64_t kMaxTensorParallelRanks = 64;
// InvalidArgument naming the field when a share would not be whole (heads, KV heads,
// widths or vocabulary not a multiple of ranks), or when rank is not in [0, ranks).
absl::Status CheckTensorParallel(const ModelConfig& config, const TensorParallel& tp);
// LowerModel(config) for rank tp.rank of tp.ranks; with one rank, LowerModel(config).
absl::StatusOr<ir::Graph> LowerModel(const ModelConfig& config, const TensorParallel& tp);

// How many dim-0 rows a checkpoint tensor of shape `part` contributes to a weight of shape
// `weight` bound to `num_parts` tensors (docs/ir.md, "Packed weights"): a single part must have
// the weight's shape; one of several either its rank and trailing dims (its dim-0 extent) or,
// stacked, exactly the weight's trailing dims (one row). -1 when it does not fit.
int64_t PackedPartRows(const std::vector<int64_t>& part, const std::vector<int64_t>& weight,
                       size_t num_parts);

// Checks that `checkpoint` holds exactly the weights of `graph`: every checkpoint tensor a
// weight binds exists with the weight's dtype and (static) shape, and every checkpoint
// tensor is bound: whole by exactly one weight, or by slices (docs/ir.md, "Sliced weights"),
// which may repeat what other bindings read. A part's shape is its tensor's with a slice's
// dim cut to the slice's size, and the slice must lie inside the tensor. A packed weight
// (several parts, docs/ir.md "Packed weights") needs each part to have the weight's dtype and
// to fit it (PackedPartRows), and the parts' rows to sum to the weight's dim 0. Errors name
// the tensor, the expected and the found type. On success returns, parallel to
// graph.weights(), the tensors each weight binds to, in order (views into `checkpoint`, valid
// while it lives); a runtime packs them by concatenating the row-major data of each part
// (PartToFloat32 with the weight's slice of that part).
absl::StatusOr<std::vector<std::vector<const TensorView*>>> BindCheckpoint(
    const ir::Graph& graph, const Checkpoint& checkpoint);

// The shape of the part of a tensor of `shape` that `slice` selects: `shape` itself for a
// whole one, else with the slice's dim cut to its size; nullopt when the slice is not inside
// the tensor (a dim past its rank, or a range past the dim's extent).
std::optional<std::vector<int64_t>> SlicedShape(const std::vector<int64_t>& shape,
                                                const ir::TensorSlice& slice);

// A run of consecutive elements of a row-major tensor: `count` elements from `first`.
struct ElementRun {
  int64_t first = 0;
  int64_t count = 0;
};
// The runs of a tensor of `shape` that `slice` (inside it: SlicedShape) selects, in row-major
// order: the whole tensor as one run, or for a slice of dim d one run per index of the dims
// before d (the slice's rows of the dims from d on are contiguous).
std::vector<ElementRun> SliceRuns(const std::vector<int64_t>& shape, const ir::TensorSlice& slice);

// The float32 elements of the part of `tensor` that `slice` selects (ir::TensorSlice: the
// whole tensor, or a range of one dim), row-major. InvalidArgument when the slice is outside
// the tensor.
absl::StatusOr<std::vector<float>> PartToFloat32(const TensorView& tensor,
                                                 const ir::TensorSlice& slice);

}  // namespace tileplan::models

#endif  // TILEPLAN_MODELS_LOWERING_H_
