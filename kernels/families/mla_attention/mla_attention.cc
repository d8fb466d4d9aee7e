// mla_attention: multi-head latent attention (docs/ir.md `mla_attention`) with the
// up-projection w_kv_b absorbed into the queries and the output, in three launches:
// mla_absorb_q forms every (token, head)'s latent query once, a split-KV kernel streams the
// latent and rope cache rows split over CTAs with an online softmax and writes per-split
// records, and mla_combine_project merges the records and applies W_V. The split-KV kernel
// (the main launch, Geometry) is mla_attend_split_kv_mma on tensor cores (`mma` 1: 16 query
// rows of one sequence per CTA, mla_attention_mma.cuh) or mla_attend_split_kv on CUDA cores
// (`mma` 0: a group of heads per CTA, any dtype and dims, mla_attention_absorbed.cuh).
// The family also serves mla_kv_write_attention, the decode form with the query's RoPE and
// mla_kv_write folded in: mla_absorb_q rotates the query and writes the cache rows (one more
// column of CTAs), and the other two launches are unchanged.
#include <algorithm>
#include <numbers>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/core/family_base.h"
#include "kernels/families/mla_attention/mla_attention_params.h"
#include "regions/rope.h"

namespace tileplan::kernels::mla_attention {
// This folder's templates, embedded in its library (tileplan_kernel_family).
const std::vector<std::pair<std::string_view, std::string_view>>& EmbeddedTemplates();
}  // namespace tileplan::kernels::mla_attention

namespace tileplan::kernels::internal {
namespace {

constexpr absl::string_view kSource = "mla_attention_absorbed.cuh";
constexpr absl::string_view kMmaSource = "mla_attention_mma.cuh";
constexpr int64_t kMaxLatentDim = 4 * 512;  // kMlaPvVec dims for each of at most 512 threads
constexpr int64_t kMaxNopeDim = 512;        // the absorb kernel stages 16 tokens' q_nope
// The tensor-core path's default splits: enough CTAs to fill the machine, but each split
// with at least kMinSplitRows rows of the planned context and at most kMaxDefaultSplits
// splits, so that the records and their merge stay small.
constexpr int64_t kMinSplitRows = 64;
constexpr int64_t kMaxDefaultSplits = 32;
// The tensor-core path's latent output accumulators per thread (16 rows by C / warps columns
// over a warp's 32 lanes) at most: more would spill.
constexpr int64_t kMaxMmaAccumulators = 128;

// Where the attention's operands sit: mla_attention's own order, or mla_kv_write_attention's
// (q_nope, q_pe, kv_a, norm, latent_cache, rope_cache, w_kv_b, positions), whose q_pe is the
// unrotated query rope part and whose caches the kernels address through results 1 and 2
// (the same buffers, updated in place).
struct MlaOperands {
  int q_nope = 0, q_rope = 1, latent = 2, rope = 3, w_kv_b = 4, positions = 5;
  int kv_a = -1, norm = -1;  // fused only
  bool fused() const { return kv_a >= 0; }
};

bool IsFused(const BoundRegion& r) { return r.kind() == "mla_kv_write_attention"; }

MlaOperands OperandsOf(const BoundRegion& r) {
  if (!IsFused(r)) return {};
  return {.q_nope = 0,
          .q_rope = 1,
          .latent = 4,
          .rope = 5,
          .w_kv_b = 6,
          .positions = 7,
          .kv_a = 2,
          .norm = 3};
}

struct MlaShape {
  int64_t batch = 0, tokens = 0, heads = 0;
  int64_t nope = 0, rope = 0, latent = 0, v_dim = 0, capacity = 0;
  int64_t context = 0;        // attention span of the last new token
  int64_t es = 2;             // activation element size
  int64_t w_es = 2;           // weight element size
  bool tensor_dtype = false;  // activations in bf16 or f16 (mma.sync inputs)

  // New tokens sit at positions [context - tokens, context - 1].
  int64_t first_position() const { return std::max<int64_t>(0, context - tokens); }
  // The tensor-core path's 16-row tiles of (token, head) pairs per sequence.
  int64_t mma_tiles() const { return CeilDiv(tokens * heads, kMlaMmaRows); }
};

MlaShape ShapeOf(const BoundRegion& r) {
  const MlaOperands o = OperandsOf(r);
  MlaShape s;
  const auto& q = r.operand(o.q_nope).shape;  // [B,T,Hq,Dn]
  s.batch = q[0];
  s.tokens = q[1];
  s.heads = q[2];
  s.nope = q[3];
  s.rope = r.operand(o.q_rope).shape[3];
  s.capacity = r.operand(o.latent).shape[2];
  s.latent = r.operand(o.latent).shape[3];
  s.v_dim = r.result(0).shape[3];
  s.context = std::min(std::max(r.bound_graph().context(), s.tokens), s.capacity);
  const ir::DType dtype = r.operand_dtype(o.q_nope);
  s.es = ir::DTypeSize(dtype);
  s.w_es = ir::DTypeSize(r.operand_dtype(o.w_kv_b));
  s.tensor_dtype = dtype == ir::DType::kBF16 || dtype == ir::DType::kF16;
  return s;
}

// Both families read the caches, w_kv_b and the positions as whole rows and write the result
// densely: a region whose layout is otherwise is refused (CheckRegion) ...
absl::Status RefuseStridedCaches(const BoundRegion& r) {
  const MlaOperands o = OperandsOf(r);
  for (int i : {o.latent, o.rope, o.w_kv_b, o.positions}) {
    if (!r.operand(i).IsContiguous()) {
      return Refuse(absl::StrCat(OperandLabel(r, i), " is not contiguous"));
    }
  }
  return absl::OkStatus();
}

// ... and checked again when a launch is prepared.
absl::Status RequireContiguousCaches(const LaunchBuilder& b, const BoundRegion& r) {
  const MlaOperands o = OperandsOf(r);
  TP_RETURN_IF_ERROR(b.RequireContiguous(r.operand(o.latent), "latent_cache"));
  TP_RETURN_IF_ERROR(b.RequireContiguous(r.operand(o.rope), "rope_cache"));
  TP_RETURN_IF_ERROR(b.RequireContiguous(r.operand(o.w_kv_b), "w_kv_b"));
  TP_RETURN_IF_ERROR(b.RequireContiguous(r.operand(o.positions), "positions"));
  for (int i = 0; i < r.num_results(); ++i) {
    TP_RETURN_IF_ERROR(b.RequireContiguous(r.result(i), absl::StrCat("result ", i)));
  }
  return absl::OkStatus();
}

// The tactic's parameters.
struct MlaParams {
  int64_t combine_rows = 0, heads = 0, chunk = 0, mma = 0, splits = 0, threads = 0;
};

MlaParams ParamsOf(const Tactic& t) {
  MlaParams p;
  p.combine_rows = t.params.at("combine_rows");
  p.heads = t.params.at("heads_per_cta");
  p.chunk = t.params.at("kv_chunk");
  p.mma = t.params.at("mma");
  p.splits = t.params.at("splits");
  p.threads = t.params.at("threads");
  return p;
}

// How the CUDA-core path's heads_per_cta tiles the queries: `heads` heads per CTA, `tokens`
// new tokens per CTA (as many as kMlaMaxQueries queries allow), and the CTAs that one split
// has.
struct Tiling {
  int64_t heads = 1, tokens = 1, tiles = 1, groups = 1;
  int64_t queries() const { return heads * tokens; }
};

Tiling TilingOf(const MlaShape& s, int64_t heads_per_cta) {
  Tiling t;
  t.heads = heads_per_cta;
  t.tokens = std::clamp<int64_t>(kMlaMaxQueries / heads_per_cta, 1, std::max<int64_t>(1, s.tokens));
  t.tiles = CeilDiv(s.tokens, t.tokens);
  t.groups = CeilDiv(s.heads, heads_per_cta);
  return t;
}

MlaAttendLayout LayoutOf(const MlaShape& s, const Tiling& t, int64_t kv_chunk, int64_t threads) {
  return MlaAttendLayoutFor(static_cast<int>(s.es), static_cast<int>(s.latent),
                            static_cast<int>(s.rope), static_cast<int>(t.queries()),
                            static_cast<int>(kv_chunk), static_cast<int>(threads));
}

int64_t MmaSharedBytes(const MlaShape& s, int64_t kv_chunk, int64_t threads) {
  return MlaMmaLayoutFor(static_cast<int>(s.es), static_cast<int>(s.latent),
                         static_cast<int>(s.rope), static_cast<int>(kv_chunk),
                         static_cast<int>(threads / 32))
      .total;
}

// The split-KV launch's CTAs per split, and its dynamic shared memory.
int64_t CtasPerSplit(const MlaShape& s, const MlaParams& p) {
  if (p.mma) return s.batch * s.mma_tiles();
  const Tiling t = TilingOf(s, p.heads);
  return s.batch * t.tiles * t.groups;
}

int64_t AttendSharedBytes(const MlaShape& s, const MlaParams& p) {
  return p.mma ? MmaSharedBytes(s, p.chunk, p.threads)
               : LayoutOf(s, TilingOf(s, p.heads), p.chunk, p.threads).total;
}

// The combine's grid for `rows` feature rows per CTA, and its dynamic shared memory.
int64_t CombineCtas(const MlaShape& s, int64_t rows) {
  return CeilDiv(s.v_dim, rows) * s.heads * CeilDiv(s.batch * s.tokens, kMlaCombineTokens);
}

int64_t CombineSharedBytes(const MlaShape& s, int64_t rows) {
  return MlaCombineSharedBytes(static_cast<int>(s.latent), static_cast<int>(rows),
                               static_cast<int>(s.w_es));
}

// Why the tensor-core path cannot take the region with `threads` threads ("" when it can).
std::string MmaRefusal(const MlaShape& s, int64_t threads) {
  if (!s.tensor_dtype) return "the activations are not bf16 or f16 (mma.sync inputs)";
  // Decode steps only: over a prompt its bf16 queries and probabilities put deepseek-v2-tiny's
  // prompt logits at 0.091 of the reference on the H200, above the bf16 parity rule's 0.067
  // (docs/fixtures.md), while its decode steps stay at 0.037 (limit 0.097).
  if (s.tokens > 1)
    return absl::StrCat("T = ", s.tokens, " tokens: the tensor cores serve decode (T = 1)");
  const int64_t warps = threads / 32;
  if (s.latent % (8 * warps) != 0) {
    return absl::StrCat("latent dim C = ", s.latent, " is not a multiple of ", 8 * warps,
                        " (each of ", warps, " warps takes C / ", warps,
                        " latent columns in 8-column n-tiles)");
  }
  if (s.latent > kMaxMmaAccumulators * 2 * warps) {
    return absl::StrCat("latent dim C = ", s.latent, " needs ", s.latent / (2 * warps),
                        " float accumulators per thread with ", warps, " warps, more than ",
                        kMaxMmaAccumulators);
  }
  return "";
}

struct Row {
  absl::string_view arch;
  int64_t threads, kv_chunk;          // mla_attend_split_kv
  int64_t mma_threads, mma_kv_chunk;  // mla_attend_split_kv_mma
};
constexpr Row kRows[] = {{"sm_80", 256, 32, 128, 64},
                         {"sm_90", 256, 64, 128, 64},
                         {"sm_100", 256, 64, 128, 64},
                         {"sm_120", 256, 32, 128, 32},
                         {"default", 128, 16, 128, 32}};

// The smallest chunk a block of `threads` may take: at most 32 lanes per row.
int64_t MinChunk(int64_t threads) { return std::max<int64_t>(8, threads / 32); }

const Row& RowOf(absl::string_view arch) {
  for (const Row& row : kRows) {
    if (row.arch == arch) return row;
  }
  return kRows[4];
}

// The row's block size, at least C / kMlaPvVec threads (each accumulates kMlaPvVec latent dims).
int64_t RowThreads(const Row& row, const MlaShape& s) {
  return std::max(row.threads, NextPowerOfTwo(CeilDiv(s.latent, kMlaPvVec)));
}

int64_t MaxSplits(const MlaShape& s, int64_t chunk) {
  return std::max<int64_t>(1, CeilDiv(s.capacity, chunk));
}

// The workspace, in this order (each part a multiple of 16 bytes): the queries ([B·T, Hq,
// C + Dr] in the activation dtype on tensor cores, rounded up to 16 bytes; [B·T, Hq, C] floats
// on CUDA cores), the records ([B, tiles, splits, 16, C + 4] floats on tensor cores, [B ·
// tiles, groups, splits, queries, C + 4] on CUDA cores), and, fused on CUDA cores, the rotated
// q_rope ([B·T, Hq, Dr] in the activation dtype, rounded up to 16 bytes).
int64_t QueryBytes(const MlaShape& s, bool mma) {
  const int64_t tokens = s.batch * s.tokens;
  return mma ? CeilDiv(tokens * s.heads * (s.latent + s.rope) * s.es, 16) * 16
             : tokens * s.heads * s.latent * 4;
}

int64_t RecordBytes(const MlaShape& s, bool mma, const Tiling& tiling, int64_t splits) {
  if (mma) return s.batch * s.mma_tiles() * splits * kMlaMmaRows * (s.latent + 4) * 4;
  return s.batch * tiling.tiles * tiling.groups * splits * tiling.queries() * (s.latent + 4) * 4;
}

int64_t RotatedQueryBytes(const MlaShape& s, bool fused, bool mma) {
  return fused && !mma ? CeilDiv(s.batch * s.tokens * s.heads * s.rope * s.es, 16) * 16 : 0;
}

absl::StatusOr<TemplateLaunch> LaunchMla(const BoundRegion& r, const Tactic& t,
                                         const RegionBuffers* buffers) {
  LaunchBuilder b(r, t, buffers);
  TP_ASSIGN_OR_RETURN(const int64_t combine_rows, b.Param("combine_rows"));
  TP_ASSIGN_OR_RETURN(const int64_t heads_per_cta, b.Param("heads_per_cta"));
  TP_ASSIGN_OR_RETURN(const int64_t kv_chunk, b.Param("kv_chunk"));
  TP_ASSIGN_OR_RETURN(const int64_t mma, b.Param("mma"));
  TP_ASSIGN_OR_RETURN(const int64_t splits, b.Param("splits"));
  TP_ASSIGN_OR_RETURN(const int64_t threads, b.Param("threads"));
  const MlaShape s = ShapeOf(r);
  const MlaOperands o = OperandsOf(r);
  const Tiling tiling = TilingOf(s, heads_per_cta);
  const ir::DType dtype = r.operand_dtype(o.q_nope);
  TP_ASSIGN_OR_RETURN(const std::string type, b.TypeName(dtype, "q_nope"));
  TP_ASSIGN_OR_RETURN(const std::string w_type, b.TypeName(r.operand_dtype(o.w_kv_b), "w_kv_b"));
  TP_ASSIGN_OR_RETURN(const int64_t nope_stride, b.TokenStride(o.q_nope, 3));
  TP_ASSIGN_OR_RETURN(const int64_t rope_stride, b.TokenStride(o.q_rope, 3));
  TP_RETURN_IF_ERROR(RequireContiguousCaches(b, r));
  if (s.latent % 8 != 0 || s.rope % 8 != 0) {
    return b.Error("latent dim ", s.latent, " and rope dim ", s.rope, " must be multiples of 8");
  }
  if (mma) {
    const std::string refusal = MmaRefusal(s, threads);
    if (!refusal.empty()) return b.Error("mma = 1: ", refusal);
  }
  TP_RETURN_IF_ERROR(b.CheckOperands(16, {o.latent, o.rope, o.w_kv_b}));
  TP_RETURN_IF_ERROR(b.CheckOperands(4, {o.positions}));
  TP_RETURN_IF_ERROR(b.CheckResults(s.es, {0}));
  TP_ASSIGN_OR_RETURN(void* const workspace, b.Workspace("mla_attention"));
  TP_ASSIGN_OR_RETURN(const double scale, r.region().attrs.GetFloat("scale"));
  const float log2e_scale = static_cast<float>(scale * std::numbers::log2e);
  const int64_t tokens = s.batch * s.tokens;
  // The queries (T with the rope part for the tensor cores, else float32 latent only), then
  // the records, 16-byte aligned; fused on CUDA cores, the rotated q_rope last.
  const int64_t q_bytes = QueryBytes(s, mma != 0);
  void* const q_lat = workspace;
  auto at = [&](int64_t offset) -> void* {
    return workspace == nullptr ? nullptr : static_cast<unsigned char*>(workspace) + offset;
  };
  float* const partials = static_cast<float*>(at(q_bytes));
  const absl::string_view source = mma ? kMmaSource : kSource;
  // The caches the kernels read: the fused kind's updated results.
  const void* const latent_cache = o.fused() ? b.Result(1) : b.Operand(o.latent);
  const void* const rope_cache = o.fused() ? b.Result(2) : b.Operand(o.rope);
  const void* const positions = b.Operand(o.positions);

  MlaAbsorbQParams absorb{};
  absorb.q_nope = b.Operand(o.q_nope);
  absorb.q_nope_token_stride = nope_stride;
  absorb.q_nope_head_stride = r.operand(o.q_nope).strides[2];
  absorb.q_rope = b.Operand(o.q_rope);
  absorb.q_rope_token_stride = rope_stride;
  absorb.q_rope_head_stride = r.operand(o.q_rope).strides[2];
  absorb.w_kv_b = b.Operand(o.w_kv_b);
  absorb.q_lat = q_lat;
  absorb.tokens = static_cast<int>(tokens);
  absorb.heads = static_cast<int>(s.heads);
  absorb.nope_dim = static_cast<int>(s.nope);
  absorb.v_dim = static_cast<int>(s.v_dim);
  absorb.rope_dim = mma ? static_cast<int>(s.rope) : 0;
  absorb.log2e_scale = log2e_scale;
  std::string fused_policy;  // mla_absorb_q's Fused argument
  int64_t absorb_columns = CeilDiv(s.latent, kMlaAbsorbCols);
  // Fused on CUDA cores, the rotated q_rope the split-KV kernel reads: [B·T, Hq, Dr].
  void* const q_rope_out =
      o.fused() && !mma ? at(q_bytes + RecordBytes(s, mma != 0, tiling, splits)) : nullptr;
  if (o.fused()) {
    absl::StatusOr<ir::RopeParams> rope = ir::RopeParamsFromAttributes(r.region().attrs);
    if (!rope.ok()) return b.Error(rope.status().message());
    TP_ASSIGN_OR_RETURN(const double eps, r.region().attrs.GetFloat("eps"));
    TP_ASSIGN_OR_RETURN(const std::string norm_type,
                        b.TypeName(r.operand_dtype(o.norm), "the norm"));
    TP_ASSIGN_OR_RETURN(const int64_t kv_stride, b.TokenStride(o.kv_a, 2));
    TP_RETURN_IF_ERROR(b.RequireContiguous(r.operand(o.norm), "the norm"));
    const Layout& kv_a = r.operand(o.kv_a);
    const Layout& q_rope = r.operand(o.q_rope);
    // One pair vector for the query's rotation and the key's (it starts C into kv_a's row).
    const int64_t vec =
        std::min(RopeVector(dtype, s.rope, {rope_stride, q_rope.strides[2], q_rope.offset},
                            rope->interleaved),
                 RopeVector(dtype, s.rope, {kv_stride, kv_a.offset + s.latent}, rope->interleaved));
    if (vec == 0) {
      return b.Error("interleaved RoPE needs even strides and offsets of q_pe and kv_a");
    }
    const int64_t latent_vec = VectorWidth(dtype, {s.latent, kv_stride, kv_a.offset});
    const int64_t pair_bytes = (rope->interleaved ? 2 * vec : vec) * s.es;
    TP_RETURN_IF_ERROR(b.CheckOperands(pair_bytes, {o.q_rope}));
    TP_RETURN_IF_ERROR(b.CheckOperands(std::min(latent_vec * s.es, pair_bytes), {o.kv_a}));
    TP_RETURN_IF_ERROR(
        b.CheckOperands(latent_vec * ir::DTypeSize(r.operand_dtype(o.norm)), {o.norm}));
    TP_RETURN_IF_ERROR(b.CheckResults(std::max(latent_vec * s.es, pair_bytes), {1, 2}));
    TP_RETURN_IF_ERROR(b.RequireRopeTable());
    absorb.positions = static_cast<const int*>(positions);
    absorb.inv_freq = b.rope_inv_freq();
    absorb.attention_factor = static_cast<float>(rope->attention_factor);
    absorb.q_rope_out = q_rope_out;
    absorb.kv_a = b.Operand(o.kv_a);
    absorb.kv_a_stride = kv_stride;
    absorb.norm = b.Operand(o.norm);
    absorb.eps = static_cast<float>(eps);
    absorb.latent_cache = b.Result(1);
    absorb.rope_cache = b.Result(2);
    absorb.seq_tokens = static_cast<int>(s.tokens);
    absorb.capacity = static_cast<int>(s.capacity);
    absorb.error = b.error();
    fused_policy =
        absl::StrCat(", tileplan::MlaRopeKvWrite<", norm_type, ", ", s.rope, ", ", latent_vec, ", ",
                     vec, ", ", rope->interleaved ? "true" : "false", ">");
    ++absorb_columns;
  }
  b.Launch(source,
           absl::StrCat("tileplan::mla_absorb_q<", type, ", ", w_type, ", ", mma ? type : "float",
                        ", ", s.latent, fused_policy, ">"),
           {absorb_columns, s.heads, CeilDiv(tokens, kMlaAbsorbTokens)}, {kMlaAbsorbThreads, 1, 1},
           MlaAbsorbSharedBytes(static_cast<int>(s.nope)), absorb);

  // The fields both split-KV kernels take.
  auto caches_and_records = [&](auto& attend) {
    attend.latent_cache = latent_cache;
    attend.rope_cache = rope_cache;
    attend.positions = static_cast<const int*>(positions);
    attend.partials = partials;
    attend.tokens = static_cast<int>(s.tokens);
    attend.heads = static_cast<int>(s.heads);
    attend.capacity = static_cast<int>(s.capacity);
    attend.error = b.error();
  };
  if (mma) {
    MlaAttendMmaParams attend{};
    attend.q = q_lat;
    caches_and_records(attend);
    b.Launch(source,
             absl::StrCat("tileplan::mla_attend_split_kv_mma<", type, ", ", s.latent, ", ", s.rope,
                          ", ", kv_chunk, ", ", threads / 32, ">"),
             {splits, s.mma_tiles(), s.batch}, {threads, 1, 1},
             MmaSharedBytes(s, kv_chunk, threads), attend);
  } else {
    MlaAttendParams attend{};
    attend.q_lat = static_cast<const float*>(q_lat);
    if (o.fused()) {
      attend.q_rope = q_rope_out;
      attend.q_rope_token_stride = s.heads * s.rope;
      attend.q_rope_head_stride = s.rope;
    } else {
      attend.q_rope = b.Operand(o.q_rope);
      attend.q_rope_token_stride = rope_stride;
      attend.q_rope_head_stride = r.operand(o.q_rope).strides[2];
    }
    attend.log2e_scale = log2e_scale;
    caches_and_records(attend);
    b.Launch(
        source,
        absl::StrCat("tileplan::mla_attend_split_kv<", type, ", ", s.latent, ", ", s.rope, ", ",
                     tiling.heads, ", ", tiling.tokens, ", ", kv_chunk, ", ", threads, ">"),
        {splits, tiling.groups, s.batch * tiling.tiles}, {threads, 1, 1},
        LayoutOf(s, tiling, kv_chunk, threads).total, attend);
  }
  b.MarkMainLaunch();

  MlaCombineParams combine{};
  combine.partials = partials;
  combine.positions = static_cast<const int*>(positions);
  combine.w_kv_b = b.Operand(o.w_kv_b);
  combine.out = b.Result(0);
  combine.batch = static_cast<int>(s.batch);
  combine.tokens = static_cast<int>(s.tokens);
  combine.heads = static_cast<int>(s.heads);
  combine.nope_dim = static_cast<int>(s.nope);
  combine.v_dim = static_cast<int>(s.v_dim);
  combine.capacity = static_cast<int>(s.capacity);
  combine.heads_per_cta = static_cast<int>(tiling.heads);
  combine.tokens_per_cta = static_cast<int>(tiling.tokens);
  combine.packed = mma ? 1 : 0;
  combine.kv_chunk = static_cast<int>(kv_chunk);
  combine.splits = static_cast<int>(splits);
  combine.rows_per_cta = static_cast<int>(combine_rows);
  b.Launch(source,
           absl::StrCat("tileplan::mla_combine_project<", type, ", ", w_type, ", ", s.latent, ">"),
           {CeilDiv(s.v_dim, combine_rows), s.heads, CeilDiv(tokens, kMlaCombineTokens)},
           {kMlaCombineThreads, 1, 1}, CombineSharedBytes(s, combine_rows), combine);
  return std::move(b).Finish();
}

class MlaAttentionFamily final : public TemplateFamilyBase {
 public:
  MlaAttentionFamily()
      : TemplateFamilyBase(
            "mla_attention", 2, {"mla_attention", "mla_kv_write_attention"},
            {"combine_rows", "heads_per_cta", "kv_chunk", "mma", "splits", "threads"}) {}

  LaunchGeometry Geometry(const Tactic& t, const BoundRegion& r) const override {
    const MlaShape s = ShapeOf(r);
    const MlaParams p = ParamsOf(t);
    LaunchGeometry g;
    if (p.mma) {
      g.grid = {p.splits, s.mma_tiles(), s.batch};
    } else {
      const Tiling tiling = TilingOf(s, p.heads);
      g.grid = {p.splits, tiling.groups, s.batch * tiling.tiles};
    }
    g.block = {p.threads, 1, 1};
    g.dynamic_shared_memory_bytes = AttendSharedBytes(s, p);
    return g;
  }
  // DRAM: the queries, positions and output, w_kv_b once (W_K by the absorb kernel, W_V by the
  // combine), and every sequence's cache rows up to the last position once. In L2, not
  // counted: the re-reads of each cache row by the other query tiles (and, on CUDA cores, head
  // groups) of its sequence (none with one tile, the decode default for up to 16 heads), of
  // W_K and W_V by every 16 (absorb) or 4 (combine) tokens, and the workspace (queries and
  // records). Flops as executed: the absorption and the projection per (token, head); on
  // tensor cores, per CTA the 16 query rows against every row of its chunks, scores (over
  // C + Dr rounded up to the k-step) and P · latent (whole chunks); on CUDA cores the scores of
  // every query slot with every row of its chunks and P · latent over the rows it sees; and the
  // merge. Fused (mla_kv_write_attention), also the kv_a rows and the norm read and the new
  // cache rows written, and the normalization's and rotations' flops.
  WorkEstimate Work(const Tactic& t, const BoundRegion& r) const override {
    const MlaShape s = ShapeOf(r);
    const MlaParams p = ParamsOf(t);
    WorkEstimate w;
    const MlaOperands o = OperandsOf(r);
    w.bytes = r.operand_bytes(o.q_nope) + r.operand_bytes(o.q_rope) + r.operand_bytes(o.w_kv_b) +
              r.operand_bytes(o.positions) + r.result_bytes(0) +
              s.batch * s.context * (s.latent + s.rope) * s.es;
    const int64_t tokens = s.batch * s.tokens;
    w.flops = 2 * tokens * s.heads * s.latent * (s.nope + s.v_dim);
    if (o.fused()) {
      // The kv_a rows and the norm read, the new cache rows written; the normalization and
      // both rotations.
      w.bytes +=
          r.operand_bytes(o.kv_a) + r.operand_bytes(o.norm) + tokens * (s.latent + s.rope) * s.es;
      w.flops += tokens * (3 * s.latent + 3 * s.rope * (s.heads + 1));
    }
    // The rows a tile sees: up to the position of its last token.
    auto chunks_to = [&](int64_t last_token) {
      return CeilDiv(std::min(s.capacity, s.first_position() + last_token + 1), p.chunk);
    };
    if (p.mma) {
      const int64_t rows = s.tokens * s.heads;
      int64_t visited = 0, merged = 0;
      for (int64_t tile = 0; tile < s.mma_tiles(); ++tile) {
        const int64_t end = std::min(rows, (tile + 1) * kMlaMmaRows);
        const int64_t chunks = chunks_to((end - 1) / s.heads);
        visited += chunks * p.chunk;
        merged += std::min(p.splits, chunks) * (end - tile * kMlaMmaRows);
      }
      const int64_t row = MlaMmaRowElems(static_cast<int>(s.latent), static_cast<int>(s.rope));
      w.flops += s.batch * (2 * kMlaMmaRows * visited * (row + s.latent) + 2 * merged * s.latent);
      w.tensor_core = true;
      return w;
    }
    const Tiling tiling = TilingOf(s, p.heads);
    int64_t visited = 0, seen = 0, merged = 0;
    for (int64_t tile = 0; tile < tiling.tiles; ++tile) {
      const int64_t last = std::min(s.tokens, (tile + 1) * tiling.tokens) - 1;
      const int64_t chunks = chunks_to(last);
      visited += chunks * p.chunk;
      seen += std::min(s.capacity, s.first_position() + last + 1);
      merged +=
          std::min(p.splits, chunks) * std::min(tiling.tokens, s.tokens - tile * tiling.tokens);
    }
    const int64_t slots = s.batch * tiling.groups * tiling.queries();  // query slots per tile
    w.flops += 2 * slots * (visited * (s.latent + s.rope) + seen * s.latent) +
               2 * s.batch * merged * s.heads * s.latent;
    return w;
  }
  int Launches(const Tactic&, const BoundRegion&) const override { return 3; }
  // QueryBytes, RecordBytes and RotatedQueryBytes above.
  int64_t WorkspaceBytes(const Tactic& t, const BoundRegion& r) const override {
    const MlaShape s = ShapeOf(r);
    const MlaParams p = ParamsOf(t);
    const bool mma = p.mma != 0;
    return QueryBytes(s, mma) + RecordBytes(s, mma, TilingOf(s, p.heads), p.splits) +
           RotatedQueryBytes(s, IsFused(r), mma);
  }

  std::vector<SourceFile> Sources() const override {
    return ToSourceFiles(mla_attention::EmbeddedTemplates());
  }
  absl::StatusOr<TemplateLaunch> Launch(const BoundRegion& r, const Tactic& t,
                                        const RegionBuffers* buffers) const override {
    return LaunchMla(r, t, buffers);
  }

 protected:
  absl::Status CheckRegion(const BoundRegion& r, const TargetDescription& target) const override {
    const MlaShape s = ShapeOf(r);
    if (s.latent % 8 != 0 || s.rope % 8 != 0) {
      return Refuse(absl::StrCat("latent dim C = ", s.latent, " and rope dim Dr = ", s.rope,
                                 " must be multiples of 8 (16-byte cache rows)"));
    }
    if (s.latent > kMaxLatentDim) {
      return Refuse(absl::StrCat("latent dim C = ", s.latent, " exceeds ", kMaxLatentDim,
                                 " (4 dims per thread of at most 512)"));
    }
    if (s.nope > kMaxNopeDim) {
      return Refuse(absl::StrCat("nope dim Dn = ", s.nope, " exceeds ", kMaxNopeDim,
                                 " (the absorb kernel stages 16 tokens' q_nope in 48 KiB)"));
    }
    TP_RETURN_IF_ERROR(RefuseStridedCaches(r));
    const MlaOperands o = OperandsOf(r);
    if (o.fused()) {
      // The query's rotation and mla_kv_write_part: one warp per head, a rope head of at
      // most 256 elements.
      if (s.rope > 256) {
        return Refuse(absl::StrCat("rope dim Dr = ", s.rope,
                                   " exceeds 256 (one warp rotates a head in registers)"));
      }
      TP_RETURN_IF_ERROR(CheckRopeLayout(r, o.q_rope));
      TP_RETURN_IF_ERROR(CheckRopeLayout(r, o.kv_a));
      TP_RETURN_IF_ERROR(RequireInnerContiguous(r, {o.kv_a}));
    }
    const int64_t limit = target.shared_memory_per_block_bytes();
    // The smallest split-KV tactic of the target's row: one head per CTA, the smallest chunks.
    const int64_t threads = RowThreads(RowOf(ArchRowFor(target.sm())), s);
    const int64_t smallest = LayoutOf(s, TilingOf(s, 1), MinChunk(threads), threads).total;
    if (smallest > limit) {
      return Refuse(absl::StrCat("latent dim C = ", s.latent, " and rope dim Dr = ", s.rope,
                                 " need ", smallest, " bytes of shared memory per block (two ",
                                 MinChunk(threads), "-row chunks), more than the target's ",
                                 limit));
    }
    const int64_t combine = CombineSharedBytes(s, kMlaCombineMinRows);
    if (combine > limit) {
      return Refuse(absl::StrCat("latent dim C = ", s.latent, " needs ", combine,
                                 " bytes of shared memory per block in the combine (",
                                 kMlaCombineMinRows, " W_V rows and ", kMlaCombineTokens,
                                 " merged latent rows), more than the target's ", limit));
    }
    return RequireInnerContiguous(r, {0, 1});
  }
  Tactic RowTactic(absl::string_view arch, const BoundRegion& r, const TargetDescription& target,
                   int64_t shared_memory) const override {
    const Row& row = RowOf(arch);
    const MlaShape s = ShapeOf(r);
    const int64_t sms = target.sm_count();
    // The combine: the most W_V rows per CTA (the fewest re-reads of the records) that still
    // give every SM a CTA and fit the shared memory.
    int64_t combine_rows = kMlaCombineMaxRows;
    while (combine_rows > kMlaCombineMinRows &&
           (CombineCtas(s, combine_rows) < sms ||
            CombineSharedBytes(s, combine_rows) > shared_memory)) {
      combine_rows /= 2;
    }
    const int64_t context = std::max<int64_t>(1, r.bound_graph().context());

    // Tensor cores where the region allows: the row's block and chunk, the chunk halved to 32
    // while the shared memory exceeds the row's.
    int64_t threads = row.mma_threads, chunk = row.mma_kv_chunk;
    if (chunk > 32 && MmaSharedBytes(s, chunk, threads) > shared_memory) chunk = 32;
    if (MmaRefusal(s, threads).empty() && MmaSharedBytes(s, chunk, threads) <= shared_memory) {
      const int64_t per_split = s.batch * s.mma_tiles();
      const int64_t wanted = CeilDiv(sms, per_split);
      const int64_t by_rows = std::max<int64_t>(1, context / kMinSplitRows);
      const int64_t splits = std::clamp<int64_t>(std::min(wanted, by_rows), 1,
                                                 std::min(kMaxDefaultSplits, MaxSplits(s, chunk)));
      return MakeTactic({{"combine_rows", combine_rows},
                         {"heads_per_cta", kMlaMmaRows},
                         {"kv_chunk", chunk},
                         {"mma", 1},
                         {"splits", splits},
                         {"threads", threads}});
    }

    // CUDA cores. Every head of a group shares the rows it reads: up to 16 heads (the
    // queries of a CTA).
    int64_t heads = std::min<int64_t>(kMlaMaxQueries, NextPowerOfTwo(s.heads));
    threads = RowThreads(row, s);
    chunk = std::max(row.kv_chunk, MinChunk(threads));
    // Shrink to the row's shared memory: the chunk first, then the heads of a group.
    while (LayoutOf(s, TilingOf(s, heads), chunk, threads).total > shared_memory) {
      if (chunk > MinChunk(threads)) {
        chunk /= 2;
      } else if (heads > 1) {
        heads /= 2;
      } else {
        break;  // ValidateTactic reports the overflow
      }
    }
    // Enough splits to give every SM a CTA; chunks small enough that the context the phase
    // is planned for spans two chunks per split; no more splits than the cache has chunks.
    const Tiling tiling = TilingOf(s, heads);
    const int64_t per_split = s.batch * tiling.tiles * tiling.groups;
    const int64_t wanted = CeilDiv(sms, std::max<int64_t>(1, per_split));
    while (chunk > MinChunk(threads) && context < 2 * wanted * chunk) chunk /= 2;
    const int64_t splits =
        std::clamp<int64_t>(wanted, 1, std::min<int64_t>(kMlaMaxSplits, MaxSplits(s, chunk)));
    return MakeTactic({{"combine_rows", combine_rows},
                       {"heads_per_cta", heads},
                       {"kv_chunk", chunk},
                       {"mma", 0},
                       {"splits", splits},
                       {"threads", threads}});
  }
  std::vector<TunableParam> Tunables(const BoundRegion&, const TargetDescription&) const override {
    return {{"combine_rows", {8, 16, 32, 64}},
            {"heads_per_cta", {1, 2, 4, 8, 16}},
            {"kv_chunk", {8, 16, 32, 64}},
            {"mma", {0, 1}},
            {"splits", {1, 2, 4, 8, 16, 32, 64, 128}},
            {"threads", {128, 256, 512}}};
  }
  // A split S > 1 pays only while S / 2 splits leave SMs without a CTA, and while the
  // planned context has a chunk for each split; more W_V rows per combine CTA only while
  // its grid keeps at least half the SMs (or half the 8-row grid) busy.
  bool WorthMeasuring(const Tactic& t, const BoundRegion& r,
                      const TargetDescription& target) const override {
    const MlaShape s = ShapeOf(r);
    const MlaParams p = ParamsOf(t);
    const int64_t per_split = CtasPerSplit(s, p);
    const int64_t chunks = CeilDiv(std::max<int64_t>(1, s.context), p.chunk);
    const bool splits_pay =
        p.splits == 1 || (p.splits / 2 * per_split < target.sm_count() && p.splits <= chunks);
    const int64_t busy = std::min<int64_t>(target.sm_count(), CombineCtas(s, kMlaCombineMinRows));
    const bool rows_pay =
        p.combine_rows == kMlaCombineMinRows || 2 * CombineCtas(s, p.combine_rows) >= busy;
    return splits_pay && rows_pay;
  }
  absl::Status CheckTactic(const Tactic& t, const BoundRegion& r,
                           const TargetDescription& target) const override {
    const MlaShape s = ShapeOf(r);
    const MlaParams p = ParamsOf(t);
    const int64_t limit = target.shared_memory_per_block_bytes();
    if (p.mma != 0 && p.mma != 1) return BadParam("mma", p.mma, "0 or 1");
    if (!IsPowerOfTwo(p.combine_rows) || p.combine_rows < kMlaCombineMinRows ||
        p.combine_rows > kMlaCombineMaxRows) {
      return BadParam(
          "combine_rows", p.combine_rows,
          absl::StrCat("a power of two in [", kMlaCombineMinRows, ", ", kMlaCombineMaxRows, "]"));
    }
    if (const int64_t bytes = CombineSharedBytes(s, p.combine_rows); bytes > limit) {
      return BadParam("combine_rows", p.combine_rows,
                      absl::StrCat("rows whose combine shared memory (", bytes, " bytes) fits ",
                                   limit, " bytes"));
    }
    if (p.mma) {
      if (p.heads != kMlaMmaRows) {
        return BadParam("heads_per_cta", p.heads,
                        absl::StrCat(kMlaMmaRows, " with mma (the query rows of the mma tile)"));
      }
      if (p.threads != 128 && p.threads != 256) {
        return BadParam("threads", p.threads, "128 or 256 with mma");
      }
      if (const std::string refusal = MmaRefusal(s, p.threads); !refusal.empty()) {
        return BadParam("mma", p.mma, absl::StrCat("0 here: ", refusal));
      }
      if ((p.chunk != 32 && p.chunk != 64) || p.chunk % (8 * (p.threads / 32)) != 0) {
        return BadParam("kv_chunk", p.chunk,
                        absl::StrCat("32 or 64 with mma, at least 8 keys per warp (",
                                     8 * (p.threads / 32), ")"));
      }
    } else {
      if (!IsPowerOfTwo(p.heads) || p.heads > kMlaMaxQueries) {
        return BadParam("heads_per_cta", p.heads,
                        absl::StrCat("a power of two <= ", kMlaMaxQueries));
      }
      if (!IsPowerOfTwo(p.threads) || p.threads < 64 || p.threads > 512) {
        return BadParam("threads", p.threads, "a power of two in [64, 512]");
      }
      if (p.threads * kMlaPvVec < s.latent) {
        return BadParam(
            "threads", p.threads,
            absl::StrCat("at least C / ", kMlaPvVec, " = ", CeilDiv(s.latent, kMlaPvVec),
                         " (each thread accumulates ", kMlaPvVec, " latent dims of every query)"));
      }
      if (!IsPowerOfTwo(p.chunk) || p.chunk < 8 || p.chunk > p.threads ||
          p.threads / p.chunk > 32) {
        return BadParam("kv_chunk", p.chunk,
                        absl::StrCat("a power of two in [", MinChunk(p.threads), ", ",
                                     std::min<int64_t>(p.threads, 128),
                                     "] (1 to 32 lanes of the block per row)"));
      }
      if (p.chunk > 128) return BadParam("kv_chunk", p.chunk, "at most 128");
    }
    const int64_t max_splits = std::min<int64_t>(kMlaMaxSplits, MaxSplits(s, p.chunk));
    if (p.splits < 1 || p.splits > max_splits) {
      return BadParam("splits", p.splits,
                      absl::StrCat("in [1, ", max_splits, "] (chunks of the cache capacity ",
                                   s.capacity, ", at most ", kMlaMaxSplits, ")"));
    }
    if (const int64_t smem = AttendSharedBytes(s, p); smem > limit) {
      return BadParam("kv_chunk", p.chunk,
                      absl::StrCat("a chunk and block whose shared memory (", smem, " bytes) fits ",
                                   limit, " bytes"));
    }
    return absl::OkStatus();
  }
};

// mla_prefill: the same kind over a prompt in the un-absorbed form (mla_attention_prefill.cuh):
// mla_expand_kv up-projects every cache row a sequence's new tokens see into keys and values
// (one GEMM into the workspace), then mla_prefill_flash runs flash attention with QK dim
// Dn + Dr and V dim Dv. Decode steps keep the absorbed family: expanding the whole context
// for a token's queries costs more than it saves.
constexpr absl::string_view kPrefillSource = "mla_attention_prefill.cuh";
constexpr int64_t kMinPrefillTokens = 16;

struct PrefillRow {
  absl::string_view arch;
  int64_t tile_q, tile_kv, stages, warps, expand_tile_m;
};
constexpr PrefillRow kPrefillRows[] = {{"sm_80", 64, 64, 2, 4, 128},
                                       {"sm_90", 64, 64, 2, 4, 128},
                                       {"sm_100", 64, 64, 2, 4, 128},
                                       {"sm_120", 64, 32, 2, 4, 64},
                                       {"default", 64, 32, 1, 4, 64}};
// mla_expand_kv's fixed shape: 128 features per CTA, three stages, 2 × 4 warps.
constexpr int64_t kExpandTileN = 128;
constexpr int64_t kExpandStages = 3;
constexpr int64_t kExpandWarpsM = 2;
constexpr int64_t kExpandWarpsN = 4;

struct PrefillParams {
  int64_t expand_tile_m = 0, stages = 0, tile_kv = 0, tile_q = 0, warps = 0;
};

PrefillParams PrefillParamsOf(const Tactic& t) {
  PrefillParams p;
  p.expand_tile_m = t.params.at("expand_tile_m");
  p.stages = t.params.at("stages");
  p.tile_kv = t.params.at("tile_kv");
  p.tile_q = t.params.at("tile_q");
  p.warps = t.params.at("warps");
  return p;
}

int64_t PrefillFlashBytes(const MlaShape& s, const PrefillParams& p) {
  return MlaPrefillSharedBytes(static_cast<int>(2 * s.nope + s.rope), static_cast<int>(s.v_dim),
                               static_cast<int>(p.tile_q), static_cast<int>(p.tile_kv),
                               static_cast<int>(p.stages), static_cast<int>(s.es));
}

int64_t ExpandBytes(const MlaShape& s, int64_t tile_m) {
  return MlaExpandSharedBytes(static_cast<int>(tile_m), static_cast<int>(kExpandTileN),
                              static_cast<int>(kExpandStages), static_cast<int>(s.es));
}

// The expanded keys and values: [B, capacity, Hq·(Dn+Dv)] in the activation dtype.
int64_t ExpandedFeatures(const MlaShape& s) { return s.heads * (s.nope + s.v_dim); }

absl::StatusOr<TemplateLaunch> LaunchMlaPrefill(const BoundRegion& r, const Tactic& t,
                                                const RegionBuffers* buffers) {
  LaunchBuilder b(r, t, buffers);
  TP_ASSIGN_OR_RETURN(const int64_t expand_tile_m, b.Param("expand_tile_m"));
  TP_ASSIGN_OR_RETURN(const int64_t stages, b.Param("stages"));
  TP_ASSIGN_OR_RETURN(const int64_t tile_kv, b.Param("tile_kv"));
  TP_ASSIGN_OR_RETURN(const int64_t tile_q, b.Param("tile_q"));
  TP_ASSIGN_OR_RETURN(const int64_t warps, b.Param("warps"));
  const MlaShape s = ShapeOf(r);
  TP_ASSIGN_OR_RETURN(const std::string type, b.TypeName(r.operand_dtype(0), "q_nope"));
  TP_ASSIGN_OR_RETURN(const int64_t nope_stride, b.TokenStride(0, 3));
  TP_ASSIGN_OR_RETURN(const int64_t rope_stride, b.TokenStride(1, 3));
  TP_RETURN_IF_ERROR(RequireContiguousCaches(b, r));
  const int64_t head_strides[] = {r.operand(0).strides[2], r.operand(1).strides[2]};
  for (int64_t stride : {nope_stride, rope_stride, head_strides[0], head_strides[1]}) {
    if (stride % 8 != 0) {
      return b.Error("query strides must be multiples of 8 elements (16-byte chunks), got ",
                     stride);
    }
  }
  TP_RETURN_IF_ERROR(b.CheckOperands(16, {0, 1, 2, 3, 4}));
  TP_RETURN_IF_ERROR(b.CheckOperands(4, {5}));
  TP_RETURN_IF_ERROR(b.CheckResults(16, {0}));
  TP_ASSIGN_OR_RETURN(void* const kv, b.Workspace("the expanded keys and values"));
  TP_ASSIGN_OR_RETURN(const double scale, r.region().attrs.GetFloat("scale"));
  const int64_t n = ExpandedFeatures(s);
  // The rounded part, then the residual part, each [B, Smax, n] (n · element size is a
  // multiple of 16 bytes).
  void* const kv_lo =
      kv == nullptr ? nullptr : static_cast<unsigned char*>(kv) + s.batch * s.capacity * n * s.es;

  MlaExpandKvParams expand{};
  expand.latent_cache = b.Operand(2);
  expand.w_kv_b = b.Operand(4);
  expand.positions = static_cast<const int*>(b.Operand(5));
  expand.kv = kv;
  expand.kv_lo = kv_lo;
  expand.tokens = static_cast<int>(s.tokens);
  expand.capacity = static_cast<int>(s.capacity);
  expand.n = static_cast<int>(n);
  b.Launch(kPrefillSource,
           absl::StrCat("tileplan::mla_expand_kv<", type, ", ", s.latent, ", ", expand_tile_m, ", ",
                        kExpandTileN, ", ", kExpandStages, ", ", kExpandWarpsM, ", ", kExpandWarpsN,
                        ">"),
           {CeilDiv(n, kExpandTileN), CeilDiv(s.capacity, expand_tile_m), s.batch},
           {32 * kExpandWarpsM * kExpandWarpsN, 1, 1}, ExpandBytes(s, expand_tile_m), expand);

  MlaPrefillParams flash{};
  flash.q_nope = b.Operand(0);
  flash.q_nope_token_stride = nope_stride;
  flash.q_nope_head_stride = head_strides[0];
  flash.q_rope = b.Operand(1);
  flash.q_rope_token_stride = rope_stride;
  flash.q_rope_head_stride = head_strides[1];
  flash.kv = kv;
  flash.kv_lo = kv_lo;
  flash.rope_cache = b.Operand(3);
  flash.positions = static_cast<const int*>(b.Operand(5));
  flash.out = b.Result(0);
  flash.tokens = static_cast<int>(s.tokens);
  flash.heads = static_cast<int>(s.heads);
  flash.capacity = static_cast<int>(s.capacity);
  flash.log2e_scale = static_cast<float>(scale * std::numbers::log2e);
  flash.error = b.error();
  const PrefillParams p{expand_tile_m, stages, tile_kv, tile_q, warps};
  b.Launch(kPrefillSource,
           absl::StrCat("tileplan::mla_prefill_flash<", type, ", ", s.nope + s.rope, ", ", s.nope,
                        ", ", s.v_dim, ", ", tile_q, ", ", tile_kv, ", ", stages, ", ", warps, ">"),
           {CeilDiv(s.tokens, tile_q), s.heads, s.batch}, {32 * warps, 1, 1},
           PrefillFlashBytes(s, p), flash);
  b.MarkMainLaunch();
  return std::move(b).Finish();
}

class MlaPrefillFamily final : public TemplateFamilyBase {
 public:
  MlaPrefillFamily()
      : TemplateFamilyBase("mla_prefill", 1, {"mla_attention"},
                           {"expand_tile_m", "stages", "tile_kv", "tile_q", "warps"}) {}

  LaunchGeometry Geometry(const Tactic& t, const BoundRegion& r) const override {
    const MlaShape s = ShapeOf(r);
    const PrefillParams p = PrefillParamsOf(t);
    LaunchGeometry g;
    g.grid = {CeilDiv(s.tokens, p.tile_q), s.heads, s.batch};
    g.block = {32 * p.warps, 1, 1};
    g.dynamic_shared_memory_bytes = PrefillFlashBytes(s, p);
    return g;
  }
  // DRAM: the queries, positions and output, w_kv_b once, every sequence's latent and rope
  // cache rows up to the last position once, and both parts of the expanded keys and values
  // written once and read once (their re-reads by the other query tiles of a head stay in
  // L2). Flops as executed: the expansion over whole row and feature tiles, and per
  // (sequence, head, query tile) Q·Kᵀ over 2 · Dn + Dr and P·V over Dv, padded to 16, for
  // every key tile of its causal walk.
  WorkEstimate Work(const Tactic& t, const BoundRegion& r) const override {
    const MlaShape s = ShapeOf(r);
    const PrefillParams p = PrefillParamsOf(t);
    const int64_t n = ExpandedFeatures(s);
    WorkEstimate w;
    w.bytes = r.operand_bytes(0) + r.operand_bytes(1) + r.operand_bytes(4) + r.operand_bytes(5) +
              r.result_bytes(0) + s.batch * s.context * (s.latent + s.rope) * s.es +
              4 * s.batch * s.context * n * s.es;
    const int64_t rows = CeilDiv(s.context, p.expand_tile_m) * p.expand_tile_m;
    w.flops = 2 * s.batch * rows * s.latent * CeilDiv(n, kExpandTileN) * kExpandTileN;
    int64_t keys = 0;  // keys walked, summed over query tiles
    for (int64_t tile = 0; tile < CeilDiv(s.tokens, p.tile_q); ++tile) {
      const int64_t last = std::min(s.tokens, (tile + 1) * p.tile_q) - 1;
      const int64_t end = std::min(s.capacity, s.first_position() + last + 1);
      keys += CeilDiv(end, p.tile_kv) * p.tile_kv;
    }
    w.flops += 2 * s.batch * s.heads * p.tile_q * keys *
               (CeilDiv(2 * s.nope + s.rope, 16) + CeilDiv(s.v_dim, 16)) * 16;
    w.tensor_core = true;
    return w;
  }
  int Launches(const Tactic&, const BoundRegion&) const override { return 2; }
  int64_t WorkspaceBytes(const Tactic&, const BoundRegion& r) const override {
    const MlaShape s = ShapeOf(r);
    return 2 * s.batch * s.capacity * ExpandedFeatures(s) * s.es;
  }

  std::vector<SourceFile> Sources() const override {
    return ToSourceFiles(mla_attention::EmbeddedTemplates());
  }
  absl::StatusOr<TemplateLaunch> Launch(const BoundRegion& r, const Tactic& t,
                                        const RegionBuffers* buffers) const override {
    return LaunchMlaPrefill(r, t, buffers);
  }

 protected:
  absl::Status CheckRegion(const BoundRegion& r, const TargetDescription& target) const override {
    const MlaShape s = ShapeOf(r);
    if (s.tokens < kMinPrefillTokens) {
      return Refuse(absl::StrCat("T = ", s.tokens, " new tokens: fewer than ", kMinPrefillTokens,
                                 " take the absorbed form (expanding the context for so few "
                                 "queries costs more than it saves)"));
    }
    if (!s.tensor_dtype) return Refuse("the activations are not bf16 or f16 (mma.sync inputs)");
    if (r.operand_dtype(4) != r.operand_dtype(0)) {
      return Refuse(absl::StrCat("w_kv_b is ", ir::DTypeName(r.operand_dtype(4)),
                                 ", not the activations' ", ir::DTypeName(r.operand_dtype(0)),
                                 " (both are mma.sync inputs of the expansion)"));
    }
    if (s.nope % 8 != 0 || s.rope % 8 != 0 || s.v_dim % 8 != 0 || s.latent % 8 != 0) {
      return Refuse(absl::StrCat("dims Dn = ", s.nope, ", Dr = ", s.rope, ", Dv = ", s.v_dim,
                                 ", C = ", s.latent, " must be multiples of 8 (16-byte chunks)"));
    }
    TP_RETURN_IF_ERROR(RefuseStridedCaches(r));
    const PrefillParams smallest{64, 1, 32, 16, 1};
    const int64_t need = std::max(PrefillFlashBytes(s, smallest), ExpandBytes(s, 64));
    if (need > target.shared_memory_per_block_bytes()) {
      return Refuse(absl::StrCat("dims Dn + Dr = ", s.nope + s.rope, " and Dv = ", s.v_dim,
                                 " need ", need, " bytes of shared memory per block, more than ",
                                 target.shared_memory_per_block_bytes()));
    }
    return RequireInnerContiguous(r, {0, 1});
  }
  Tactic RowTactic(absl::string_view arch, const BoundRegion& r, const TargetDescription&,
                   int64_t shared_memory) const override {
    PrefillRow row = kPrefillRows[4];
    for (const PrefillRow& candidate : kPrefillRows) {
      if (candidate.arch == arch) row = candidate;
    }
    const MlaShape s = ShapeOf(r);
    PrefillParams p{row.expand_tile_m, row.stages, row.tile_kv, row.tile_q, row.warps};
    // Shrink to the row's shared memory: the pipeline, then the key tile, then the queries.
    while (PrefillFlashBytes(s, p) > shared_memory) {
      if (p.stages > 1) {
        --p.stages;
      } else if (p.tile_kv > 32) {
        p.tile_kv /= 2;
      } else if (p.tile_q > 16) {
        p.tile_q /= 2;
        p.warps = std::min(p.warps, p.tile_q / 16);
      } else {
        break;  // ValidateTactic reports the overflow
      }
    }
    if (ExpandBytes(s, p.expand_tile_m) > shared_memory) p.expand_tile_m = 64;
    return MakeTactic({{"expand_tile_m", p.expand_tile_m},
                       {"stages", p.stages},
                       {"tile_kv", p.tile_kv},
                       {"tile_q", p.tile_q},
                       {"warps", p.warps}});
  }
  std::vector<TunableParam> Tunables(const BoundRegion&, const TargetDescription&) const override {
    return {{"expand_tile_m", {64, 128}},
            {"stages", {1, 2, 3}},
            {"tile_kv", {32, 64}},
            {"tile_q", {16, 32, 64, 128}},
            {"warps", {1, 2, 4, 8}}};
  }
  absl::Status CheckTactic(const Tactic& t, const BoundRegion& r,
                           const TargetDescription& target) const override {
    const MlaShape s = ShapeOf(r);
    const PrefillParams p = PrefillParamsOf(t);
    if (p.expand_tile_m != 64 && p.expand_tile_m != 128) {
      return BadParam("expand_tile_m", p.expand_tile_m, "64 or 128");
    }
    if (p.stages < 1 || p.stages > 3) return BadParam("stages", p.stages, "in [1, 3]");
    if (p.tile_kv != 32 && p.tile_kv != 64) return BadParam("tile_kv", p.tile_kv, "32 or 64");
    if (!IsPowerOfTwo(p.tile_q) || p.tile_q < 16 || p.tile_q > 128) {
      return BadParam("tile_q", p.tile_q, "a power of two in [16, 128]");
    }
    if (!IsPowerOfTwo(p.warps) || p.warps > 8 || p.tile_q % (16 * p.warps) != 0 ||
        p.tile_q > 32 * p.warps) {
      return BadParam("warps", p.warps,
                      "a power of two <= 8 with 16 * warps dividing tile_q and at most two "
                      "16-row tiles per warp (each holds its S and O tiles in registers)");
    }
    const int64_t limit = target.shared_memory_per_block_bytes();
    if (const int64_t smem = PrefillFlashBytes(s, p); smem > limit) {
      return BadParam(
          "stages", p.stages,
          absl::StrCat("tiles whose shared memory (", smem, " bytes) fits ", limit, " bytes"));
    }
    if (const int64_t smem = ExpandBytes(s, p.expand_tile_m); smem > limit) {
      return BadParam("expand_tile_m", p.expand_tile_m,
                      absl::StrCat("an expansion tile whose shared memory (", smem, " bytes) fits ",
                                   limit, " bytes"));
    }
    return absl::OkStatus();
  }
};

}  // namespace

std::unique_ptr<KernelFamily> MakeMlaAttentionFamily() {
  return std::make_unique<MlaAttentionFamily>();
}

std::unique_ptr<KernelFamily> MakeMlaPrefillFamily() {
  return std::make_unique<MlaPrefillFamily>();
}

}  // namespace tileplan::kernels::internal
