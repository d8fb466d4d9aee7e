// attention_prefill and attention_decode: causal attention of new tokens over the KV cache
// (docs/ir.md `attention`; sliding windows and GQA included).
//
// attention_prefill is flash style on tensor cores: a CTA owns `tile_q` query rows of one
// head, streams the cache in `tile_kv`-row tiles through a `stages`-deep shared-memory
// pipeline with an online softmax; `warps` warps split the query rows (16 per MMA). With
// `pack_gqa` 1 a CTA's rows are instead the (token, query head) pairs of one kv head, so one
// pass over the cache serves the whole GQA group and a decode step's few tokens still fill
// the MMA rows. With `splits` > 1 the key tiles of each row tile are divided among that many
// CTAs, whose partial results (unnormalized output, running max and sum) the last of them
// merges: decode steps and short prompts fill the GPU, and long causal row tiles share
// their walk. It is instantiated for head_dim 16, 32, 64, 96 and 128, in bf16 and f16.
//
// attention_decode is split-KV for up to 16 new tokens, its keys walked on CUDA cores or (`mma`
// 1, bf16 and f16 at head_dim 64 and 128) on tensor cores: CTA (s, h, b) handles
// every `splits`-th chunk of `kv_chunk` cache rows of kv head h for the queries that share it
// (T · Hq/Hkv, or a `head_split`-th of them: a GQA group split among that many CTAs when the
// kv heads are few), reading the live context length from device memory so that one grid serves
// every context under CUDA Graph replay (chunks past the context exit at once). Each CTA
// writes (max, sum, accumulator) partials to the workspace; the last CTA of (b, h) merges
// them (log-sum-exp weights) and writes the output, so a step is one launch. With `stages`
// >= 2 a CTA streams its rows through shared memory by cp.async, stages - 1 tiles ahead of
// the warps (long contexts); with 1 the lanes load K and V into registers. It also serves
// the decode-only fused kinds rope_kv_write_attention and qk_norm_rope_kv_write_attention:
// the same grid, whose CTAs first build their RoPE-rotated (and normalized) queries from the
// packed qkv and write the new cache rows that fall in their chunks.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/core/family_base.h"
#include "kernels/families/attention/attention_params.h"
#include "regions/rope.h"

namespace tileplan::kernels::attention {
// This folder's templates, embedded in its library (tileplan_kernel_family).
const std::vector<std::pair<std::string_view, std::string_view>>& EmbeddedTemplates();
}  // namespace tileplan::kernels::attention

namespace tileplan::kernels::internal {
namespace {

struct AttentionShape {
  int64_t batch = 0, tokens = 0, q_heads = 0, kv_heads = 0, head_dim = 0, capacity = 0;
  int64_t window = 0;   // 0: none
  int64_t context = 0;  // attention span of the last new token
  int64_t es = 2;

  int64_t group() const { return kv_heads == 0 ? 0 : q_heads / kv_heads; }
  // New tokens sit at positions [context - tokens, context - 1].
  int64_t first_position() const { return std::max<int64_t>(0, context - tokens); }
  int64_t last_position() const { return std::max(context, tokens) - 1; }
  // Cache rows read per (batch, kv head): the union of the new tokens' windows.
  int64_t keys() const {
    const int64_t span = last_position() + 1;
    return window > 0 ? std::min(span, tokens + window - 1) : span;
  }
};

// The fused RoPE + KV-write + attention kinds (decode only).
bool IsRopeAttention(const BoundRegion& r) {
  return r.kind() == "rope_kv_write_attention" || r.kind() == "qk_norm_rope_kv_write_attention";
}

// The k_cache operand: 1 for attention and rope_kv_write_attention, 3 with the norms.
int CacheOperand(const BoundRegion& r) {
  return r.kind() == "qk_norm_rope_kv_write_attention" ? 3 : 1;
}

AttentionShape ShapeOf(const BoundRegion& r) {
  AttentionShape s;
  const auto& q = r.result(0).shape;  // [B,T,Hq,D], the queries' shape for every kind
  const auto& cache = r.operand(CacheOperand(r)).shape;
  s.batch = q[0];
  s.tokens = q[1];
  s.q_heads = q[2];
  s.head_dim = q[3];
  s.kv_heads = cache[1];
  s.capacity = cache[2];
  s.window = r.region().attrs.GetIntOr("sliding_window", 0).value_or(0);
  s.context = std::min(std::max(r.bound_graph().context(), s.tokens), s.capacity);
  s.es = ir::DTypeSize(r.result_dtype(0));
  return s;
}

// Bytes and flops shared by both families: q (or qkv) read, output written, K and V rows
// read once, positions read. The fused kinds also write the new K and V rows, read the norm
// weights, and rotate (and normalize) the q and k heads.
WorkEstimate AttentionWork(const BoundRegion& r, bool tensor_core) {
  const AttentionShape s = ShapeOf(r);
  const int positions = r.num_operands() - 1;
  WorkEstimate w;
  w.bytes = r.operand_bytes(0) + r.result_bytes(0) + r.operand_bytes(positions) +
            2 * s.batch * s.kv_heads * s.keys() * s.head_dim * s.es;
  w.flops = 4 * s.batch * s.q_heads * s.head_dim *
            CausalPairs(s.first_position(), s.last_position(), s.window);
  if (IsRopeAttention(r)) {
    const int64_t rows = s.batch * s.tokens * s.head_dim;  // one head of every new token
    const int64_t rotated = (s.q_heads + s.kv_heads) * rows;
    w.bytes += 2 * s.kv_heads * rows * s.es;
    w.flops += 3 * rotated;
    if (r.kind() == "qk_norm_rope_kv_write_attention") {
      w.bytes += r.operand_bytes(1) + r.operand_bytes(2);
      w.flops += 4 * rotated;
    }
  }
  w.tensor_core = tensor_core;
  return w;
}

absl::Status CheckLayouts(const BoundRegion& r) {
  const int cache = CacheOperand(r);
  for (int i : {cache, cache + 1}) {
    if (!r.operand(i).IsContiguous()) {
      return Refuse(absl::StrCat(OperandLabel(r, i), " is not a contiguous cache"));
    }
  }
  return RequireInnerContiguous(r, {0});
}

struct PrefillRow {
  absl::string_view arch;
  int64_t tile_q, tile_kv, stages, warps;
};
constexpr PrefillRow kPrefillRows[] = {{"sm_80", 128, 64, 2, 4},
                                       {"sm_90", 64, 64, 2, 4},
                                       {"sm_100", 128, 128, 2, 8},
                                       {"sm_120", 64, 64, 2, 4},
                                       {"default", 64, 64, 1, 4}};

// The split-KV decode grid's dynamic shared memory (attention_params.h gives the layout): the
// partials, plus with stages >= 2 on CUDA cores the streamed K and V tiles (the tensor-core
// walk's stages are registers), plus with the cluster merge (`cluster_splits` CTAs to a
// cluster; 0 without) its inbox.
int64_t SplitKvSharedMemory(int64_t queries, int64_t head_dim, int64_t warps, int64_t stages,
                            int64_t element_bytes, int64_t kv_chunk, bool mma,
                            int64_t cluster_splits) {
  const int q = static_cast<int>(queries), d = static_cast<int>(head_dim);
  const int w = static_cast<int>(warps), streamed = mma ? 1 : static_cast<int>(stages);
  const int e = static_cast<int>(element_bytes), chunk = static_cast<int>(kv_chunk);
  if (cluster_splits == 0) return SplitKvBodyBytes(q, d, w, streamed, e, chunk);
  return SplitKvInboxOffset(q, d, w, streamed, e, chunk) +
         SplitKvInboxBytes(q, d, static_cast<int>(cluster_splits));
}

// The tactic's head_split and the queries of one split-KV CTA (T · Hq/Hkv / head_split); an
// error when head_split does not divide the group.
struct SplitKvGroup {
  int64_t head_split = 1;
  int64_t queries = 0;
};
absl::StatusOr<SplitKvGroup> SplitKvGroupOf(LaunchBuilder& b, int64_t tokens, int64_t q_heads,
                                            int64_t kv_heads) {
  TP_ASSIGN_OR_RETURN(const int64_t head_split, b.Param("head_split"));
  if (head_split < 1 || (q_heads / kv_heads) % head_split != 0) {
    return b.Error("head_split ", head_split, " does not divide the group of ", q_heads / kv_heads);
  }
  return SplitKvGroup{head_split, tokens * (q_heads / kv_heads / head_split)};
}

// The split-KV decode tactic's engine: `mma` 1 walks the keys on tensor cores
// (attention_decode_mma.cuh: bf16 or f16, head_dim 64 or 128, K and V loaded into registers,
// with `stages` 2 a warp's next step loaded while it scores the current one), absent or 0 on
// CUDA cores.
bool MmaServes(ir::DType dtype, int64_t head_dim) {
  return (dtype == ir::DType::kBF16 || dtype == ir::DType::kF16) &&
         (head_dim == 64 || head_dim == 128);
}
int64_t MmaParam(const Tactic& t) {
  const auto it = t.params.find("mma");
  return it == t.params.end() ? 0 : it->second;
}
absl::StatusOr<bool> MmaEngine(const LaunchBuilder& b, const Tactic& t, ir::DType dtype,
                               int64_t head_dim, int64_t stages) {
  const int64_t mma = MmaParam(t);
  if (mma == 0) return false;
  if (!MmaServes(dtype, head_dim)) {
    return b.Error("the tensor-core walk (mma 1) serves bf16 and f16 at head_dim 64 and 128, not ",
                   ir::DTypeName(dtype), " at ", head_dim);
  }
  if (stages != 1 && stages != 2) {
    return b.Error("the tensor-core walk (mma 1) loads into registers: stages 1 or 2");
  }
  return true;
}

// The split-KV decode tactic's merge of its splits: `cluster` 1 makes the splits of a (b, kv
// head, part) one thread-block cluster that merges through distributed shared memory
// (attention_decode_split_kv.cuh, split_kv_cluster_merge; sm_90 and later, 2 to 8 splits: the
// portable cluster size); absent or 0, the last CTA to finish merges them from the workspace.
int64_t ClusterParam(const Tactic& t) {
  const auto it = t.params.find("cluster");
  return it == t.params.end() ? 0 : it->second;
}
constexpr int64_t kMaxClusterSplits = 8;
absl::StatusOr<bool> ClusterMerge(const LaunchBuilder& b, const Tactic& t, int64_t splits) {
  const int64_t cluster = ClusterParam(t);
  if (cluster == 0) return false;
  if (cluster != 1 || splits < 2 || splits > kMaxClusterSplits) {
    return b.Error("the cluster merge (cluster 1) takes 2 to ", kMaxClusterSplits,
                   " splits, got cluster ", cluster, " with ", splits);
  }
  return true;
}

// The CUDA-core walk's queries per pass (a template parameter); the tensor-core walk takes
// 16 rows a pass whatever it is, so it gets 1 (one instantiation).
int64_t WalkQueries(int64_t queries, bool mma) {
  return mma ? 1 : std::min<int64_t>(8, NextPowerOfTwo(queries));
}

// attention on the split-KV decode grid (`decode`) or the flash prefill grid.
absl::StatusOr<TemplateLaunch> LaunchAttention(const BoundRegion& r, const Tactic& t,
                                               const RegionBuffers* buffers, bool decode) {
  LaunchBuilder b(r, t, buffers);
  const Layout& q = r.operand(0);
  const Layout& k = r.operand(1);
  const int64_t batch = q.shape[0], tokens = q.shape[1], q_heads = q.shape[2], dim = q.shape[3];
  const int64_t kv_heads = k.shape[1], capacity = k.shape[2];
  const ir::DType dtype = r.operand_dtype(0);
  TP_ASSIGN_OR_RETURN(const std::string type, b.TypeName(dtype, "q"));
  TP_ASSIGN_OR_RETURN(const int64_t q_stride, b.TokenStride(0, 2));
  TP_RETURN_IF_ERROR(b.RequireContiguous(k, "k_cache"));
  TP_RETURN_IF_ERROR(b.RequireContiguous(r.operand(2), "v_cache"));
  TP_RETURN_IF_ERROR(b.RequireContiguous(r.operand(3), "positions"));
  TP_RETURN_IF_ERROR(b.RequireContiguous(r.result(0), "the result"));
  if (kv_heads == 0 || q_heads % kv_heads != 0) {
    return b.Error("query heads ", q_heads, " are not a multiple of kv heads ", kv_heads);
  }
  TP_ASSIGN_OR_RETURN(const double scale, r.region().attrs.GetFloat("scale"));
  TP_ASSIGN_OR_RETURN(const int64_t window, r.region().attrs.GetIntOr("sliding_window", 0));
  const int64_t es = ir::DTypeSize(dtype);
  if ((dim * es) % 16 != 0 || (q_stride * es) % 16 != 0) {
    return b.Error("head dim ", dim, " and token stride ", q_stride,
                   " must be whole 16-byte vectors");
  }
  TP_RETURN_IF_ERROR(b.CheckOperands(16, {0, 1, 2}));
  TP_RETURN_IF_ERROR(b.CheckOperands(4, {3}));
  TP_RETURN_IF_ERROR(b.CheckResults(16, {0}));
  AttentionParams p{};
  p.q = b.Operand(0);
  p.q_stride = q_stride;
  p.k_cache = b.Operand(1);
  p.v_cache = b.Operand(2);
  p.positions = static_cast<const int*>(b.Operand(3));
  p.out = b.Result(0);
  p.tokens = static_cast<int>(tokens);
  p.q_heads = static_cast<int>(q_heads);
  p.kv_heads = static_cast<int>(kv_heads);
  p.capacity = static_cast<int>(capacity);
  p.scale = static_cast<float>(scale);
  p.window = static_cast<int>(window);
  if (decode) {
    TP_ASSIGN_OR_RETURN(const int64_t kv_chunk, b.Param("kv_chunk"));
    TP_ASSIGN_OR_RETURN(const int64_t splits, b.Param("splits"));
    TP_ASSIGN_OR_RETURN(const int64_t stages, b.Param("stages"));
    TP_ASSIGN_OR_RETURN(const int64_t warps, b.Param("warps"));
    if (tokens > 16) return b.Error(tokens, " new tokens exceed the 16 of split-KV decode");
    TP_ASSIGN_OR_RETURN(const SplitKvGroup group, SplitKvGroupOf(b, tokens, q_heads, kv_heads));
    TP_ASSIGN_OR_RETURN(const bool mma, MmaEngine(b, t, dtype, dim, stages));
    TP_ASSIGN_OR_RETURN(const bool cluster, ClusterMerge(b, t, splits));
    TP_ASSIGN_OR_RETURN(const LaunchBuilder::SplitPointers split,
                        b.SplitBuffers(cluster ? 1 : splits, "split-KV"));
    p.workspace = static_cast<float*>(split.workspace);
    p.counters = static_cast<unsigned int*>(split.counters);
    b.Launch("attention_decode_split_kv.cuh",
             absl::StrCat("tileplan::attention_decode_split_kv<", type, ", ", dim, ", ", kv_chunk,
                          ", ", splits, ", ", warps, ", ", WalkQueries(group.queries, mma), ", ",
                          stages, ", ", mma ? "true" : "false", ", ", cluster ? "true" : "false",
                          ">"),
             {splits, kv_heads * group.head_split, batch}, {32 * warps, 1, 1},
             SplitKvSharedMemory(group.queries, dim, warps, stages, es, kv_chunk, mma,
                                 cluster ? splits : 0),
             p);
    if (cluster) b.SetCluster({splits, 1, 1});
    return std::move(b).Finish();
  }
  TP_ASSIGN_OR_RETURN(const int64_t tile_q, b.Param("tile_q"));
  TP_ASSIGN_OR_RETURN(const int64_t tile_kv, b.Param("tile_kv"));
  TP_ASSIGN_OR_RETURN(const int64_t stages, b.Param("stages"));
  TP_ASSIGN_OR_RETURN(const int64_t warps, b.Param("warps"));
  TP_ASSIGN_OR_RETURN(const int64_t pack_gqa, b.Param("pack_gqa"));
  TP_ASSIGN_OR_RETURN(const int64_t splits, b.Param("splits"));
  if (dtype != ir::DType::kBF16 && dtype != ir::DType::kF16) {
    return b.Error("tensor-core attention needs bf16 or f16, got ", ir::DTypeName(dtype));
  }
  if (dim % 16 != 0) return b.Error("head dim ", dim, " is not a multiple of 16");
  TP_ASSIGN_OR_RETURN(const LaunchBuilder::SplitPointers split, b.SplitBuffers(splits, "split-KV"));
  p.workspace = static_cast<float*>(split.workspace);
  p.counters = static_cast<unsigned int*>(split.counters);
  // Packed, a CTA's rows are (token, group member) pairs of one kv head.
  const int64_t rows = pack_gqa != 0 ? tokens * (q_heads / kv_heads) : tokens;
  b.Launch("attention_prefill_flash.cuh",
           absl::StrCat("tileplan::attention_prefill_flash<", type, ", ", dim, ", ", tile_q, ", ",
                        tile_kv, ", ", stages, ", ", warps, ", ", pack_gqa != 0 ? "true" : "false",
                        ", ", splits, ">"),
           {CeilDiv(rows, tile_q) * splits, pack_gqa != 0 ? kv_heads : q_heads, batch},
           {32 * warps, 1, 1}, (tile_q + 2 * stages * tile_kv) * dim * es, p);
  return std::move(b).Finish();
}

// qk_norm_rope_kv_write_attention and rope_kv_write_attention on attention_decode's grid.
absl::StatusOr<TemplateLaunch> LaunchAttentionRope(const BoundRegion& r, const Tactic& t,
                                                   const RegionBuffers* buffers) {
  LaunchBuilder b(r, t, buffers);
  TP_ASSIGN_OR_RETURN(const int64_t kv_chunk, b.Param("kv_chunk"));
  TP_ASSIGN_OR_RETURN(const int64_t splits, b.Param("splits"));
  TP_ASSIGN_OR_RETURN(const int64_t stages, b.Param("stages"));
  TP_ASSIGN_OR_RETURN(const int64_t warps, b.Param("warps"));
  const bool norm = r.kind() == "qk_norm_rope_kv_write_attention";
  const int k_index = norm ? 3 : 1;
  const int positions = k_index + 2;
  const Layout& qkv = r.operand(0);
  const Layout& k = r.operand(k_index);
  const int64_t batch = qkv.shape[0], tokens = qkv.shape[1];
  const int64_t dim = k.shape[3], capacity = k.shape[2];
  TP_ASSIGN_OR_RETURN(const int64_t q_heads, r.region().attrs.GetInt("num_heads"));
  TP_ASSIGN_OR_RETURN(const int64_t kv_heads, r.region().attrs.GetInt("num_kv_heads"));
  const ir::DType dtype = r.operand_dtype(0);
  TP_ASSIGN_OR_RETURN(const std::string type, b.TypeName(dtype, "qkv"));
  TP_ASSIGN_OR_RETURN(const int64_t stride, b.TokenStride(0, 2));
  TP_RETURN_IF_ERROR(b.RequireContiguous(k, "k_cache"));
  TP_RETURN_IF_ERROR(b.RequireContiguous(r.operand(k_index + 1), "v_cache"));
  TP_RETURN_IF_ERROR(b.RequireContiguous(r.operand(positions), "positions"));
  TP_RETURN_IF_ERROR(b.RequireContiguous(r.result(0), "the result"));
  if (kv_heads <= 0 || q_heads % kv_heads != 0) {
    return b.Error("query heads ", q_heads, " are not a multiple of kv heads ", kv_heads);
  }
  if (tokens > 16) return b.Error(tokens, " new tokens exceed the 16 of split-KV decode");
  TP_ASSIGN_OR_RETURN(const SplitKvGroup group, SplitKvGroupOf(b, tokens, q_heads, kv_heads));
  TP_ASSIGN_OR_RETURN(const bool mma, MmaEngine(b, t, dtype, dim, stages));
  TP_ASSIGN_OR_RETURN(const bool cluster, ClusterMerge(b, t, splits));
  const int64_t es = ir::DTypeSize(dtype);
  if ((dim * es) % 16 != 0 || dim > 256) {
    return b.Error("head dim ", dim, " must be whole 16-byte vectors, at most 256");
  }
  TP_ASSIGN_OR_RETURN(const double scale, r.region().attrs.GetFloat("scale"));
  TP_ASSIGN_OR_RETURN(const int64_t window, r.region().attrs.GetIntOr("sliding_window", 0));
  absl::StatusOr<ir::RopeParams> rope = ir::RopeParamsFromAttributes(r.region().attrs);
  if (!rope.ok()) return b.Error(rope.status().message());
  // rope_kv_write's vector: whole lanes on each half of a head, dividing the row layout.
  const int64_t rope_vec = RopeVector(dtype, dim, {stride, qkv.offset}, rope->interleaved);
  if (rope_vec == 0) {
    return b.Error("interleaved RoPE needs an even token stride and offset, got ", stride, " and ",
                   qkv.offset);
  }
  const int64_t rope_access = rope->interleaved ? 2 * rope_vec : rope_vec;
  TP_RETURN_IF_ERROR(b.CheckOperands(rope_access * es, {0}));
  TP_RETURN_IF_ERROR(b.CheckOperands(16, {k_index, k_index + 1}));
  TP_RETURN_IF_ERROR(b.CheckOperands(4, {positions}));
  std::string w_type = type;
  if (norm) {
    TP_ASSIGN_OR_RETURN(w_type, b.TypeName(r.operand_dtype(1), "q_norm"));
    TP_RETURN_IF_ERROR(b.CheckOperands(rope_access * ir::DTypeSize(r.operand_dtype(1)), {1, 2}));
  }
  TP_RETURN_IF_ERROR(b.CheckResults(16, {0, 1, 2}));
  TP_RETURN_IF_ERROR(b.RequireRopeTable());
  TP_ASSIGN_OR_RETURN(const LaunchBuilder::SplitPointers split,
                      b.SplitBuffers(cluster ? 1 : splits, "split-KV"));
  AttentionRopeParams p{};
  p.qkv = b.Operand(0);
  p.qkv_stride = stride;
  p.q_norm = norm ? b.Operand(1) : nullptr;
  p.k_norm = norm ? b.Operand(2) : nullptr;
  if (norm) {
    TP_ASSIGN_OR_RETURN(const double eps, r.region().attrs.GetFloat("eps"));
    p.eps = static_cast<float>(eps);
  }
  p.positions = static_cast<const int*>(b.Operand(positions));
  p.inv_freq = b.rope_inv_freq();
  p.attention_factor = static_cast<float>(rope->attention_factor);
  p.k_cache = b.Result(1);
  p.v_cache = b.Result(2);
  p.out = b.Result(0);
  p.workspace = static_cast<float*>(split.workspace);
  p.counters = static_cast<unsigned int*>(split.counters);
  p.tokens = static_cast<int>(tokens);
  p.q_heads = static_cast<int>(q_heads);
  p.kv_heads = static_cast<int>(kv_heads);
  p.capacity = static_cast<int>(capacity);
  p.scale = static_cast<float>(scale);
  p.window = static_cast<int>(window);
  p.error = b.error();
  b.Launch("attention_decode_rope.cuh",
           absl::StrCat("tileplan::attention_decode_rope<", type, ", ", w_type, ", ", dim, ", ",
                        kv_chunk, ", ", splits, ", ", warps, ", ", WalkQueries(group.queries, mma),
                        ", ", stages, ", ", rope_vec, ", ", norm ? "true" : "false", ", ",
                        rope->interleaved ? "true" : "false", ", ", mma ? "true" : "false", ", ",
                        cluster ? "true" : "false", ">"),
           {splits, kv_heads * group.head_split, batch}, {32 * warps, 1, 1},
           SplitKvSharedMemory(group.queries, dim, warps, stages, es, kv_chunk, mma,
                               cluster ? splits : 0),
           p);
  if (cluster) b.SetCluster({splits, 1, 1});
  return std::move(b).Finish();
}

class AttentionPrefillFamily final : public TemplateFamilyBase {
 public:
  AttentionPrefillFamily()
      : TemplateFamilyBase("attention_prefill", 3, {"attention"},
                           {"pack_gqa", "splits", "stages", "tile_kv", "tile_q", "warps"}) {}

  LaunchGeometry Geometry(const Tactic& t, const BoundRegion& r) const override {
    const AttentionShape s = ShapeOf(r);
    const bool packed = t.params.at("pack_gqa") != 0;
    LaunchGeometry g;
    g.grid = {RowTiles(t, s) * t.params.at("splits"), packed ? s.kv_heads : s.q_heads, s.batch};
    g.block = {32 * t.params.at("warps"), 1, 1};
    g.dynamic_shared_memory_bytes =
        SharedMemory(t.params.at("tile_q"), t.params.at("tile_kv"), t.params.at("stages"), s);
    return g;
  }
  WorkEstimate Work(const Tactic&, const BoundRegion& r) const override {
    return AttentionWork(r, true);
  }
  // Split-KV: a 16-byte aligned (o, max, sum) record per row of every run, and a counter
  // per row tile.
  int64_t WorkspaceBytes(const Tactic& t, const BoundRegion& r) const override {
    const int64_t splits = t.params.at("splits");
    if (splits == 1) return 0;
    const AttentionShape s = ShapeOf(r);
    return TileCount(t, s) * splits * t.params.at("tile_q") * (s.head_dim + 4) * 4;
  }
  int64_t CounterBytes(const Tactic& t, const BoundRegion& r) const override {
    return t.params.at("splits") == 1 ? 0 : TileCount(t, ShapeOf(r)) * 4;
  }

  std::vector<SourceFile> Sources() const override {
    return ToSourceFiles(attention::EmbeddedTemplates());
  }
  absl::StatusOr<TemplateLaunch> Launch(const BoundRegion& r, const Tactic& t,
                                        const RegionBuffers* buffers) const override {
    return LaunchAttention(r, t, buffers, /*decode=*/false);
  }

 protected:
  absl::Status CheckRegion(const BoundRegion& r, const TargetDescription&) const override {
    const AttentionShape s = ShapeOf(r);
    if (s.head_dim != 16 && s.head_dim != 32 && s.head_dim != 64 && s.head_dim != 96 &&
        s.head_dim != 128) {
      return Refuse(absl::StrCat("head_dim ", s.head_dim,
                                 " is not one of the instantiated head dims 16, 32, 64, 96, 128"));
    }
    if (r.operand_dtype(0) == ir::DType::kF32) {
      return Refuse("dtype f32 has no tensor-core path (bf16 or f16 only)");
    }
    return CheckLayouts(r);
  }
  Tactic RowTactic(absl::string_view arch, const BoundRegion& r, const TargetDescription& target,
                   int64_t shared_memory) const override {
    PrefillRow row = kPrefillRows[4];
    for (const PrefillRow& candidate : kPrefillRows) {
      if (candidate.arch == arch) row = candidate;
    }
    const AttentionShape s = ShapeOf(r);
    // Decode-sized steps of a GQA model pack the group's heads into the query rows.
    const bool packed = s.group() > 1 && s.tokens <= kMaxPackedTokens;
    // The row's query tile, however few the rows: its warps share the K/V tile loads, and a
    // warp per 16 rows keeps as many warps busy as smaller tiles would (measured on the H200:
    // Qwen2-7B's 7-row packed decode tiles run faster in 64-row tiles of 4 warps than in
    // 16-row tiles of one warp).
    int64_t tile_q = row.tile_q;
    int64_t tile_kv = row.tile_kv, stages = row.stages;
    // Shrink to the row's shared memory: the K/V tile first, then the pipeline, then q.
    while (SharedMemory(tile_q, tile_kv, stages, s) > shared_memory) {
      if (tile_kv > 32) {
        tile_kv /= 2;
      } else if (stages > 1) {
        --stages;
      } else if (tile_q > 16) {
        tile_q /= 2;
      } else {
        break;  // ValidateTactic reports the overflow
      }
    }
    // One run over the keys: on the H200 every measured split (Qwen3-0.6B prefill 128, 512
    // and 2048, Qwen2-7B batch 16 decode and prefill) lost to the unsplit kernel, the extra
    // pass of the merge costing more than the added CTAs gain, so `splits` is left to the
    // tuner (docs/PERF.md).
    const int64_t splits = 1;
    const int64_t warps = std::min(row.warps, tile_q / 16);
    return MakeTactic({{"pack_gqa", packed ? 1 : 0},
                       {"splits", splits},
                       {"stages", stages},
                       {"tile_kv", tile_kv},
                       {"tile_q", tile_q},
                       {"warps", warps}});
  }
  std::vector<TunableParam> Tunables(const BoundRegion& r,
                                     const TargetDescription&) const override {
    const AttentionShape s = ShapeOf(r);
    std::vector<int64_t> pack = {0};
    if (s.group() > 1) pack.push_back(1);
    return {{"pack_gqa", pack},         {"splits", {1, 2, 4, 8, 16}}, {"stages", {1, 2, 3}},
            {"tile_kv", {32, 64, 128}}, {"tile_q", {16, 64, 128}},    {"warps", {1, 4, 8}}};
  }
  // Split-KV pays only while the unsplit grid leaves SMs idle, up to as many runs as it
  // takes to give every SM a CTA (s runs are worth measuring when s / 2 did not fill it) and
  // to one key tile per run at the planned context (more runs would stay empty); three
  // pipeline stages only for long walks (8 or more key tiles per run).
  bool WorthMeasuring(const Tactic& t, const BoundRegion& r,
                      const TargetDescription& target) const override {
    const AttentionShape s = ShapeOf(r);
    const int64_t splits = t.params.at("splits");
    const int64_t key_tiles = std::max<int64_t>(1, CeilDiv(s.keys(), t.params.at("tile_kv")));
    if (splits > 1 && (splits / 2 * TileCount(t, s) >= target.sm_count() || splits > key_tiles)) {
      return false;
    }
    return t.params.at("stages") < 3 || CeilDiv(key_tiles, splits) >= 8;
  }
  absl::Status CheckTactic(const Tactic& t, const BoundRegion& r,
                           const TargetDescription& target) const override {
    const int64_t tile_q = t.params.at("tile_q");
    const int64_t tile_kv = t.params.at("tile_kv");
    const int64_t stages = t.params.at("stages");
    const int64_t warps = t.params.at("warps");
    const int64_t pack_gqa = t.params.at("pack_gqa");
    const int64_t splits = t.params.at("splits");
    if (pack_gqa != 0 && pack_gqa != 1) return BadParam("pack_gqa", pack_gqa, "0 or 1");
    if (pack_gqa == 1 && ShapeOf(r).group() == 1) {
      return BadParam("pack_gqa", pack_gqa, "0 without GQA (as many kv heads as query heads)");
    }
    if (!IsPowerOfTwo(tile_q) || tile_q < 16 || tile_q > 256) {
      return BadParam("tile_q", tile_q, "a power of two in [16, 256]");
    }
    if (!IsPowerOfTwo(tile_kv) || tile_kv < 32 || tile_kv > 256) {
      return BadParam("tile_kv", tile_kv, "a power of two in [32, 256]");
    }
    if (splits < 1 || splits > kMaxSplits) {
      return BadParam("splits", splits, absl::StrCat("in [1, ", kMaxSplits, "]"));
    }
    if (stages < 1 || stages > 4) return BadParam("stages", stages, "in [1, 4]");
    if (!IsPowerOfTwo(warps) || warps > 8 || tile_q % (16 * warps) != 0 || tile_q > 32 * warps) {
      return BadParam("warps", warps,
                      "a power of two <= 8 with 16 * warps dividing tile_q and at most two "
                      "16-row tiles per warp (each holds its S and O tiles in registers)");
    }
    const int64_t smem = SharedMemory(tile_q, tile_kv, stages, ShapeOf(r));
    if (smem > target.shared_memory_per_block_bytes()) {
      return BadParam("stages", stages,
                      absl::StrCat("tiles whose shared memory (", smem, " bytes) fits ",
                                   target.shared_memory_per_block_bytes(), " bytes"));
    }
    return absl::OkStatus();
  }

 private:
  // Steps of at most this many tokens pack the GQA group by default (decode and speculative
  // steps); longer prompts keep one head per CTA unless measured otherwise.
  static constexpr int64_t kMaxPackedTokens = 16;
  static constexpr int64_t kMaxSplits = 16;
  // Query rows per (batch, CTA head): tokens, or tokens times the group when packed.
  static int64_t Rows(const AttentionShape& s, bool packed) {
    return packed ? s.tokens * s.group() : s.tokens;
  }
  // Row tiles per (batch, CTA head), and over the whole grid.
  static int64_t RowTiles(const Tactic& t, const AttentionShape& s) {
    return CeilDiv(Rows(s, t.params.at("pack_gqa") != 0), t.params.at("tile_q"));
  }
  static int64_t TileCount(const Tactic& t, const AttentionShape& s) {
    return RowTiles(t, s) * (t.params.at("pack_gqa") != 0 ? s.kv_heads : s.q_heads) * s.batch;
  }
  // The q tile plus `stages` K and V tiles.
  static int64_t SharedMemory(int64_t tile_q, int64_t tile_kv, int64_t stages,
                              const AttentionShape& s) {
    return (tile_q + 2 * stages * tile_kv) * s.head_dim * s.es;
  }
};

constexpr int64_t kMaxDecodeTokens = 16;
constexpr int64_t kMaxDecodeHeadDim = 256;

struct DecodeRow {
  absl::string_view arch;
  int64_t kv_chunk, warps;
};
constexpr DecodeRow kDecodeRows[] = {{"sm_80", 128, 4},
                                     {"sm_90", 256, 4},
                                     {"sm_100", 256, 8},
                                     {"sm_120", 128, 4},
                                     {"default", 64, 4}};

class AttentionDecodeFamily final : public TemplateFamilyBase {
 public:
  AttentionDecodeFamily()
      : TemplateFamilyBase(
            "attention_decode", 8,
            {"attention", "qk_norm_rope_kv_write_attention", "rope_kv_write_attention"},
            {"head_split", "kv_chunk", "splits", "stages", "warps"}, {"cluster", "mma"}) {}

  bool persistent_tasks() const override { return true; }
  std::optional<Tactic> WithBlockThreads(const Tactic& t, int64_t threads) const override {
    if (threads % 32 != 0) return std::nullopt;
    Tactic out = t;
    out.params["warps"] = threads / 32;
    return out;
  }
  std::optional<Tactic> WithoutClusters(const Tactic& t) const override {
    Tactic out = t;
    out.params.erase("cluster");  // the splits merge through the workspace
    return out;
  }
  // `cluster` and `mma` at 0 are their absence: the workspace merge, the CUDA-core walk.
  Tactic Canonical(const Tactic& t) const override {
    Tactic out = t;
    for (const char* p : {"cluster", "mma"}) {
      if (auto it = out.params.find(p); it != out.params.end() && it->second == 0) {
        out.params.erase(it);
      }
    }
    return out;
  }

  LaunchGeometry Geometry(const Tactic& t, const BoundRegion& r) const override {
    const AttentionShape s = ShapeOf(r);
    LaunchGeometry g;
    g.grid = {t.params.at("splits"), s.kv_heads * t.params.at("head_split"), s.batch};
    g.block = {32 * t.params.at("warps"), 1, 1};
    g.dynamic_shared_memory_bytes = SharedMemory(t, s);
    if (ClusterParam(t) != 0) g.cluster = {t.params.at("splits"), 1, 1};
    return g;
  }
  WorkEstimate Work(const Tactic& t, const BoundRegion& r) const override {
    return AttentionWork(r, MmaParam(t) != 0);
  }
  int64_t WorkspaceBytes(const Tactic& t, const BoundRegion& r) const override {
    const AttentionShape s = ShapeOf(r);
    // Per (b, kv head, part) and split, the part's queries' partials (o, m, l, padded to 16
    // bytes).
    const int64_t head_split = t.params.at("head_split");
    const int64_t pairs = s.batch * s.kv_heads * head_split;
    const int64_t queries = s.tokens * (s.group() / head_split);
    if (ClusterParam(t) != 0) return 0;  // merged through the cluster's shared memory
    return pairs * t.params.at("splits") * queries * (s.head_dim + 4) * 4;
  }
  int64_t CounterBytes(const Tactic& t, const BoundRegion& r) const override {
    const AttentionShape s = ShapeOf(r);
    if (ClusterParam(t) != 0) return 0;
    return s.batch * s.kv_heads * t.params.at("head_split") * 4;  // one per (b, kv head, part)
  }

  std::vector<SourceFile> Sources() const override {
    return ToSourceFiles(attention::EmbeddedTemplates());
  }
  absl::StatusOr<TemplateLaunch> Launch(const BoundRegion& r, const Tactic& t,
                                        const RegionBuffers* buffers) const override {
    return r.kind() == "attention" ? LaunchAttention(r, t, buffers, /*decode=*/true)
                                   : LaunchAttentionRope(r, t, buffers);
  }

 protected:
  absl::Status CheckRegion(const BoundRegion& r, const TargetDescription&) const override {
    const AttentionShape s = ShapeOf(r);
    if (s.tokens > kMaxDecodeTokens) {
      return Refuse(absl::StrCat("T = ", s.tokens, " new tokens exceed ", kMaxDecodeTokens,
                                 " (split-KV decode serves decode steps)"));
    }
    const int64_t vec = 16 / s.es;
    if (s.head_dim > kMaxDecodeHeadDim || s.head_dim % vec != 0) {
      return Refuse(absl::StrCat("head_dim ", s.head_dim, " is not a multiple of ", vec, " up to ",
                                 kMaxDecodeHeadDim, " (16-byte loads per lane)"));
    }
    // A key's lanes hold one 16-byte vector each and fit in a warp.
    if (s.head_dim / vec > 32) {
      return Refuse(absl::StrCat("head_dim ", s.head_dim, " in ", ir::DTypeName(r.operand_dtype(0)),
                                 " takes ", s.head_dim / vec,
                                 " lanes of 16-byte vectors per key, more than a warp's 32"));
    }
    // Interleaved pairs are read as 2 * vec consecutive elements of the qkv rows.
    if (IsRopeAttention(r)) TP_RETURN_IF_ERROR(CheckRopeLayout(r, 0));
    return CheckLayouts(r);
  }
  Tactic RowTactic(absl::string_view arch, const BoundRegion& r, const TargetDescription& target,
                   int64_t shared_memory) const override {
    DecodeRow row = kDecodeRows[4];
    for (const DecodeRow& candidate : kDecodeRows) {
      if (candidate.arch == arch) row = candidate;
    }
    const AttentionShape s = ShapeOf(r);
    // The GQA group split among CTAs as far as one query head per CTA (at most 8 parts, a
    // power of two dividing the group) while the (b, kv head, part) CTAs do not outnumber the
    // SMs: a CTA's CUDA-core work per key grows with its queries, and a kv head's parts read
    // its rows from L2 after the first. Measured on the H200 (docs/PERF.md): Qwen3-30B-A3B's
    // fused decode attention (8 query heads per kv head, 4 kv heads) 28.5 µs unsplit, 7.9 µs
    // in 8 parts.
    int64_t head_split = 1;
    while (head_split < 8 && s.group() % (2 * head_split) == 0 &&
           s.batch * s.kv_heads * 2 * head_split <= target.sm_count()) {
      head_split *= 2;
    }
    // At least enough splits to give every SM a CTA, and as many as keep kMinSplitRows of the
    // keys the phase is planned for each while the grid stays within kMaxCtasPerSm CTAs per
    // SM: a CTA's walk is a chain of dependent steps per key (its lane groups' shuffles and
    // exponentials; at one CTA per SM, one warp per scheduler), so long contexts need more
    // CTAs in flight. Measured on the H200 (docs/PERF.md): Qwen3-0.6B decode at context 8192
    // 2.363 -> 1.423 ms (9 -> 36 splits), 16384 3.950 -> 1.941 ms; deeper loads alone (the
    // rows streamed through shared memory at 9 splits) made it slower. Chunks small enough
    // that the planned context spans two chunks per split (so a shorter context still keeps
    // most splits busy), at least 32 rows and at most the row's chunk; no more splits than
    // the cache has chunks. Last, without a window, no more splits than the planned keys'
    // chunks fill evenly: the chunks go to the splits round-robin, so a count whose longest
    // split walks as many chunks as a smaller count's adds CTAs and merge work and no
    // parallelism (Qwen3-30B-A3B at context 512 on the H100: 5 splits of 32-key chunks 10.41
    // µs, as slow as 4 at 10.32, 8 splits 8.11 µs; its one-token prompt 5.92 µs unsplit
    // against 7.26 in 5 splits).
    const int64_t pairs = std::max<int64_t>(1, s.batch * s.kv_heads * head_split);
    const int64_t wanted =
        std::max(CeilDiv(target.sm_count(), pairs),
                 std::min(s.keys() / kMinSplitRows, kMaxCtasPerSm * target.sm_count() / pairs));
    const int64_t context = std::max<int64_t>(1, r.bound_graph().context());
    int64_t chunk = row.kv_chunk;
    while (chunk > 32 && context < 2 * wanted * chunk) chunk /= 2;
    int64_t splits =
        std::clamp<int64_t>(wanted, 1, std::max<int64_t>(1, CeilDiv(s.capacity, chunk)));
    if (s.window == 0) {  // a window's chunks are dealt round-robin from wherever it starts
      const int64_t chunks = CeilDiv(s.keys(), chunk);
      splits = CeilDiv(chunks, CeilDiv(chunks, splits));
    }
    // The tensor-core walk where the CUDA-core CTAs would each score more than
    // kMmaMinQueries queries per key, or where its 16-key steps of every (b, kv head) are at
    // least as many as the SMs (the CUDA-core walk is left the short contexts of few kv heads,
    // whose group it splits among more CTAs than the tensor-core walk has steps); measured on
    // sm_90 only, so the other rows keep the CUDA-core walk.
    if (row.arch == "sm_90" && MmaServes(r.operand_dtype(0), s.head_dim) &&
        (s.tokens * (s.group() / head_split) > kMmaMinQueries ||
         s.batch * s.kv_heads * CeilDiv(s.keys(), kMmaStepKeys) >= target.sm_count())) {
      if (std::optional<Tactic> mma = MmaTactic(s, target, shared_memory)) {
        return WithClusterMerge(row.arch, *std::move(mma), s, shared_memory);
      }
    }
    // Registers: streaming the rows through shared memory (stages >= 2) measured slower at
    // contexts 2048 to 16384 with one CTA per SM (docs/PERF.md), so it is left to the tuner.
    const int64_t stages = 1;
    return WithClusterMerge(row.arch,
                            MakeTactic({{"head_split", head_split},
                                        {"kv_chunk", chunk},
                                        {"splits", splits},
                                        {"stages", stages},
                                        {"warps", row.warps}}),
                            s, shared_memory);
  }
  // The default merges 2 to 8 splits in a thread-block cluster where its inbox fits, on sm_90
  // (the row measured; docs/PERF.md): decode steps whose attention regions were tuned with and
  // without cluster candidates (H100) took 0.8094 -> 0.7364 ms (Qwen3-0.6B), 3.3296 -> 3.2433
  // ms (Qwen3-30B-A3B) and 5.8814 -> 5.7672 ms (Qwen2-7B batch 16), and the winners of
  // Qwen3-0.6B and Qwen2-7B were the default tactic with the cluster merge.
  Tactic WithClusterMerge(absl::string_view arch, Tactic t, const AttentionShape& s,
                          int64_t shared_memory) const {
    const int64_t splits = t.params.at("splits");
    if (arch != "sm_90" || splits < 2 || splits > kMaxClusterSplits) return t;
    t.params["cluster"] = 1;
    if (SharedMemory(t, s) > shared_memory) t.params.erase("cluster");
    return t;
  }
  // The tensor-core walk's default: a CTA per (b, kv head) and split holds the whole group
  // (head_split 1), and a chunk is one 16-key step per warp: 8 warps over 128-row chunks
  // where the keys give at least half the SMs' CTAs a whole chunk, else 4 warps over 64 rows
  // (more, shorter splits), fewer where the warps' records outgrow the shared memory (none fitting:
  // the CUDA-core walk); as many splits as give every SM one CTA without a second wave (8
  // warps take most of an SM's registers), at most one per chunk of the keys. Measured on the H200
  // (docs/PERF.md): Qwen3-0.6B at context 512 and 8192, Qwen2-7B batch 16, Qwen3-30B-A3B at 4096
  // tuned to these.
  std::optional<Tactic> MmaTactic(const AttentionShape& s, const TargetDescription& target,
                                  int64_t shared_memory) const {
    const int64_t pairs = std::max<int64_t>(1, s.batch * s.kv_heads);
    const int64_t per_sm = std::max<int64_t>(1, target.sm_count() / pairs);
    int64_t warps = 2 * CeilDiv(s.keys(), kMmaStepKeys * 8) >= per_sm ? 8 : 4;
    while (SharedMemory(1, kMmaStepKeys * warps, 1, warps, /*mma=*/true, s) > shared_memory) {
      if (warps == 1) return std::nullopt;
      warps /= 2;
    }
    const int64_t chunk = std::max<int64_t>(32, kMmaStepKeys * warps);
    const int64_t limit = std::min(std::max<int64_t>(1, CeilDiv(s.keys(), chunk)),
                                   std::max<int64_t>(1, CeilDiv(s.capacity, chunk)));
    const int64_t splits = std::clamp<int64_t>(per_sm, 1, limit);
    // A step loaded ahead where each warp walks kAheadMinSteps steps or more (measured on the
    // H100, docs/PERF.md: Qwen3-0.6B's attention at context 8192, 4 steps a warp, 21.43 ->
    // 20.84 us; at 2 steps a warp, Qwen2-7B batch 16, 16.48 -> 16.64 us).
    const bool ahead =
        LoadsAhead(chunk, warps, s.keys(), splits, pairs * splits, target, kAheadMinSteps);
    return MakeTactic({{"head_split", 1},
                       {"kv_chunk", chunk},
                       {"mma", 1},
                       {"splits", splits},
                       {"stages", ahead ? 2 : 1},
                       {"warps", warps}});
  }
  std::vector<TunableParam> Tunables(const BoundRegion& r,
                                     const TargetDescription& target) const override {
    const AttentionShape s = ShapeOf(r);
    std::vector<TunableParam> out = {{"head_split", {1, 2, 4, 8}},
                                     {"kv_chunk", {32, 64, 128, 256, 512}},
                                     {"splits", {1, 2, 4, 8, 16, 32, 64, 128}},
                                     {"stages", {1, 2, 4}},
                                     {"warps", {2, 4, 8}}};
    if (target.sm() >= kMinClusterSm) out.push_back({"cluster", {0, 1}});
    if (MmaServes(r.operand_dtype(0), s.head_dim)) out.push_back({"mma", {0, 1}});
    return out;
  }
  // Streaming pays only for walks of several tiles: stages >= 2 are measured where a split
  // holds at least kStreamedTiles tiles at the planned context; splits past the chunks the
  // planned context fills would stay empty, and a grid that leaves half the SMs without a
  // CTA while more splits would still find keys, or that holds more than kMaxCtasPerSm CTAs
  // per SM, is not measured. Streamed and tensor-core walks are measured unsplit
  // (head_split 1: a CTA serves its kv head's whole group, so the rows it brings in serve
  // every query of it once), the tensor-core walk with chunks that give every warp a 16-key
  // step, and with stages 2 only in chunks of one step per warp where a warp has at least
  // two steps in its split and the grid fits the SMs at once.
  bool WorthMeasuring(const Tactic& t, const BoundRegion& r,
                      const TargetDescription& target) const override {
    const AttentionShape s = ShapeOf(r);
    const int64_t keys = std::max<int64_t>(1, s.keys());
    const int64_t chunk = t.params.at("kv_chunk");
    const int64_t splits = t.params.at("splits");
    const int64_t filled = CeilDiv(keys, chunk);  // chunks the planned context reaches
    if (splits > 1 && splits > filled) return false;
    const int64_t ctas = splits * s.batch * s.kv_heads * t.params.at("head_split");
    if (2 * ctas < target.sm_count() && 2 * splits <= filled) return false;
    if (ctas > kMaxCtasPerSm * target.sm_count()) return false;
    // The cluster merge saves a merge's round trips through the workspace, which count where
    // each split's walk is short: measured with 2 to 8 splits of at most kClusterSplitKeys keys
    // each at the planned context, whose rows stay in registers (stages 1).
    if (ClusterParam(t) != 0 &&
        (splits < 2 || splits > kMaxClusterSplits || t.params.at("stages") != 1 ||
         CeilDiv(keys, splits) > kClusterSplitKeys)) {
      return false;
    }
    if (MmaParam(t) != 0) {
      const int64_t warps = t.params.at("warps");
      return t.params.at("head_split") == 1 && chunk >= kMmaStepKeys * warps &&
             (t.params.at("stages") == 1 ||
              LoadsAhead(chunk, warps, keys, splits, ctas, target, /*min_steps=*/2));
    }
    if (t.params.at("stages") > 1 && t.params.at("head_split") > 1) return false;
    return t.params.at("stages") == 1 ||
           CeilDiv(keys, splits) >= kStreamedTiles * SplitKvTileRows(s.head_dim, s.es, chunk);
  }
  absl::Status CheckTactic(const Tactic& t, const BoundRegion& r,
                           const TargetDescription& target) const override {
    const AttentionShape s = ShapeOf(r);
    const int64_t chunk = t.params.at("kv_chunk");
    const int64_t splits = t.params.at("splits");
    const int64_t warps = t.params.at("warps");
    const int64_t head_split = t.params.at("head_split");
    if (!IsPowerOfTwo(head_split) || s.group() % head_split != 0) {
      return BadParam("head_split", head_split,
                      absl::StrCat("a power of two dividing the GQA group of ", s.group()));
    }
    if (!IsPowerOfTwo(chunk) || chunk < 32 || chunk > 1024) {
      return BadParam("kv_chunk", chunk, "a power of two in [32, 1024]");
    }
    if (splits < 1 || splits > std::max<int64_t>(1, CeilDiv(s.capacity, chunk))) {
      return BadParam("splits", splits,
                      absl::StrCat("in [1, ", CeilDiv(s.capacity, chunk),
                                   "] (chunks of the cache capacity ", s.capacity, ")"));
    }
    if (!IsPowerOfTwo(warps) || warps > 16) return BadParam("warps", warps, "a power of two <= 16");
    const int64_t stages = t.params.at("stages");
    if (stages < 1 || stages > 4) return BadParam("stages", stages, "in [1, 4]");
    const int64_t mma = MmaParam(t);
    if (mma != 0 && mma != 1) return BadParam("mma", mma, "0 or 1");
    if (mma == 1 && !MmaServes(r.operand_dtype(0), s.head_dim)) {
      return BadParam("mma", mma,
                      absl::StrCat("0: the tensor-core walk serves bf16 and f16 at head_dim 64 "
                                   "and 128, not ",
                                   ir::DTypeName(r.operand_dtype(0)), " at ", s.head_dim));
    }
    if (mma == 1 && stages > 2) {
      return BadParam("stages", stages,
                      "1 or 2 with mma 1 (the tensor-core walk loads into registers)");
    }
    const int64_t cluster = ClusterParam(t);
    if (cluster != 0 && cluster != 1) return BadParam("cluster", cluster, "0 or 1");
    if (cluster == 1 && target.sm() < kMinClusterSm) {
      return BadParam("cluster", cluster,
                      absl::StrCat("0 on sm_", target.sm(),
                                   " (thread-block clusters need sm_90 or later)"));
    }
    if (cluster == 1 && (splits < 2 || splits > kMaxClusterSplits)) {
      return BadParam("splits", splits,
                      absl::StrCat("in [2, ", kMaxClusterSplits,
                                   "] with cluster 1 (a cluster's CTAs, at most the portable 8)"));
    }
    const int64_t smem = SharedMemory(t, s);
    if (cluster == 1 && smem > target.shared_memory_per_block_bytes()) {
      return BadParam("cluster", cluster,
                      absl::StrCat("0: the partials, tiles and the cluster merge's inbox take ",
                                   smem, " bytes of shared memory, more than the ",
                                   target.shared_memory_per_block_bytes(), " of a block"));
    }
    if (smem > target.shared_memory_per_block_bytes()) {
      return BadParam(stages > 1 ? "stages" : "warps", stages > 1 ? stages : warps,
                      absl::StrCat("a block whose partials", stages > 1 ? " and tiles" : "",
                                   " fit in shared memory (", smem, " bytes of ",
                                   target.shared_memory_per_block_bytes(), ")"));
    }
    return absl::OkStatus();
  }

 private:
  // The first architecture with thread-block clusters.
  static constexpr int kMinClusterSm = 90;
  // Keys per split up to which the cluster merge is measured.
  static constexpr int64_t kClusterSplitKeys = 1024;
  // Tiles a split walks before streaming them is measured.
  static constexpr int64_t kStreamedTiles = 4;
  // Keys a warp of the tensor-core walk takes per step.
  static constexpr int64_t kMmaStepKeys = 16;
  // Warps an SM holds of the tensor-core walk with a step loaded ahead (255 registers a
  // thread).
  static constexpr int64_t kAheadWarpsPerSm = 8;
  // Steps per warp from which the default loads a step ahead.
  static constexpr int64_t kAheadMinSteps = 4;
  // Queries per CUDA-core CTA above which the default takes the tensor-core walk.
  static constexpr int64_t kMmaMinQueries = 2;
  // The default's split count: rows per split, CTAs per SM.
  static constexpr int64_t kMinSplitRows = 64;
  static constexpr int64_t kMaxCtasPerSm = 8;
  // Whether the tensor-core walk with `ctas` CTAs of `warps` warps, each split of `keys` keys
  // in `splits`, suits a step loaded ahead (stages 2): chunks of one step per warp, at least
  // `min_steps` steps a warp in its split, and the grid in one wave of the warps an SM holds
  // at 255 registers a thread.
  static bool LoadsAhead(int64_t chunk, int64_t warps, int64_t keys, int64_t splits, int64_t ctas,
                         const TargetDescription& target, int64_t min_steps) {
    return chunk == kMmaStepKeys * warps && CeilDiv(keys, splits) >= min_steps * chunk &&
           ctas * warps <= kAheadWarpsPerSm * target.sm_count();
  }
  static int64_t SharedMemory(int64_t head_split, int64_t kv_chunk, int64_t stages, int64_t warps,
                              bool mma, const AttentionShape& s, int64_t cluster_splits = 0) {
    return SplitKvSharedMemory(s.tokens * (s.group() / head_split), s.head_dim, warps, stages, s.es,
                               kv_chunk, mma, cluster_splits);
  }
  static int64_t SharedMemory(const Tactic& t, const AttentionShape& s) {
    return SharedMemory(t.params.at("head_split"), t.params.at("kv_chunk"), t.params.at("stages"),
                        t.params.at("warps"), MmaParam(t) != 0, s,
                        ClusterParam(t) != 0 ? t.params.at("splits") : 0);
  }
};

}  // namespace

std::unique_ptr<KernelFamily> MakeAttentionPrefillFamily() {
  return std::make_unique<AttentionPrefillFamily>();
}
std::unique_ptr<KernelFamily> MakeAttentionDecodeFamily() {
  return std::make_unique<AttentionDecodeFamily>();
}

}  // namespace tileplan::kernels::internal
