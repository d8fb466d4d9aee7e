// mla_attention: multi-head latent attention (docs/ir.md `mla_attention`) with the
// up-projection w_kv_b absorbed into the queries and the output, on CUDA cores, in three
// launches (mla_attention_absorbed.cuh): mla_absorb_q forms every (token, head)'s latent query
// once, mla_attend_split_kv streams the latent and rope cache rows split over CTAs (a group of
// heads per CTA sharing every row it reads; splits of the rows for decode, token tiles for
// prefill) with an online softmax and writes per-split records, and mla_combine_project
// merges the records and applies W_V. The main launch (Geometry) is the split-KV one.
#include <algorithm>
#include <numbers>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/core/family_base.h"
#include "kernels/families/mla_attention/mla_attention_params.h"

namespace tileplan::kernels::mla_attention {
// This folder's templates, embedded in its library (tileplan_kernel_family).
const std::vector<std::pair<std::string_view, std::string_view>>& EmbeddedTemplates();
}  // namespace tileplan::kernels::mla_attention

namespace tileplan::kernels::internal {
namespace {

constexpr absl::string_view kSource = "mla_attention_absorbed.cuh";
constexpr int64_t kMaxLatentDim = 4 * 512;  // kMlaPvVec dims for each of at most 512 threads
constexpr int64_t kMaxNopeDim = 512;        // the absorb kernel stages 16 tokens' q_nope

struct MlaShape {
  int64_t batch = 0, tokens = 0, heads = 0;
  int64_t nope = 0, rope = 0, latent = 0, v_dim = 0, capacity = 0;
  int64_t context = 0;  // attention span of the last new token
  int64_t es = 2;       // activation element size

  // New tokens sit at positions [context - tokens, context - 1].
  int64_t first_position() const { return std::max<int64_t>(0, context - tokens); }
};

MlaShape ShapeOf(const BoundRegion& r) {
  MlaShape s;
  const auto& q = r.operand(0).shape;  // [B,T,Hq,Dn]
  s.batch = q[0];
  s.tokens = q[1];
  s.heads = q[2];
  s.nope = q[3];
  s.rope = r.operand(1).shape[3];
  s.capacity = r.operand(2).shape[2];
  s.latent = r.operand(2).shape[3];
  s.v_dim = r.result(0).shape[3];
  s.context = std::min(std::max(r.bound_graph().context(), s.tokens), s.capacity);
  s.es = ir::DTypeSize(r.operand_dtype(0));
  return s;
}

// How a tactic's heads_per_cta tiles the queries: `heads` heads per CTA, `tokens` new tokens
// per CTA (as many as kMlaMaxQueries queries allow), and the CTAs that one split has.
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

struct Row {
  absl::string_view arch;
  int64_t threads, kv_chunk;
};
constexpr Row kRows[] = {{"sm_80", 256, 32},
                         {"sm_90", 256, 64},
                         {"sm_100", 256, 64},
                         {"sm_120", 256, 32},
                         {"default", 128, 16}};

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

absl::StatusOr<TemplateLaunch> LaunchMla(const BoundRegion& r, const Tactic& t,
                                         const RegionBuffers* buffers) {
  LaunchBuilder b(r, t, buffers);
  TP_ASSIGN_OR_RETURN(const int64_t heads_per_cta, b.Param("heads_per_cta"));
  TP_ASSIGN_OR_RETURN(const int64_t kv_chunk, b.Param("kv_chunk"));
  TP_ASSIGN_OR_RETURN(const int64_t splits, b.Param("splits"));
  TP_ASSIGN_OR_RETURN(const int64_t threads, b.Param("threads"));
  const MlaShape s = ShapeOf(r);
  const Tiling tiling = TilingOf(s, heads_per_cta);
  const ir::DType dtype = r.operand_dtype(0);
  TP_ASSIGN_OR_RETURN(const std::string type, b.TypeName(dtype, "q_nope"));
  TP_ASSIGN_OR_RETURN(const std::string w_type, b.TypeName(r.operand_dtype(4), "w_kv_b"));
  TP_ASSIGN_OR_RETURN(const int64_t nope_stride, b.TokenStride(0, 3));
  TP_ASSIGN_OR_RETURN(const int64_t rope_stride, b.TokenStride(1, 3));
  TP_RETURN_IF_ERROR(b.RequireContiguous(r.operand(2), "latent_cache"));
  TP_RETURN_IF_ERROR(b.RequireContiguous(r.operand(3), "rope_cache"));
  TP_RETURN_IF_ERROR(b.RequireContiguous(r.operand(4), "w_kv_b"));
  TP_RETURN_IF_ERROR(b.RequireContiguous(r.operand(5), "positions"));
  TP_RETURN_IF_ERROR(b.RequireContiguous(r.result(0), "the result"));
  if (s.latent % 8 != 0 || s.rope % 8 != 0) {
    return b.Error("latent dim ", s.latent, " and rope dim ", s.rope, " must be multiples of 8");
  }
  TP_RETURN_IF_ERROR(b.CheckOperands(16, {2, 3, 4}));
  TP_RETURN_IF_ERROR(b.CheckOperands(4, {5}));
  TP_RETURN_IF_ERROR(b.CheckResults(s.es, {0}));
  TP_ASSIGN_OR_RETURN(void* const workspace_bytes, b.Workspace("mla_attention"));
  float* const workspace = static_cast<float*>(workspace_bytes);
  TP_ASSIGN_OR_RETURN(const double scale, r.region().attrs.GetFloat("scale"));
  const float log2e_scale = static_cast<float>(scale * std::numbers::log2e);
  const int64_t tokens = s.batch * s.tokens;
  float* q_lat = workspace;
  float* partials = workspace == nullptr ? nullptr : workspace + tokens * s.heads * s.latent;
  // Strides of the heads within a token (any, for a single head).
  const int64_t nope_head_stride = r.operand(0).strides[2];
  const int64_t rope_head_stride = r.operand(1).strides[2];

  MlaAbsorbQParams absorb{};
  absorb.q_nope = b.Operand(0);
  absorb.q_nope_token_stride = nope_stride;
  absorb.q_nope_head_stride = nope_head_stride;
  absorb.w_kv_b = b.Operand(4);
  absorb.q_lat = q_lat;
  absorb.tokens = static_cast<int>(tokens);
  absorb.heads = static_cast<int>(s.heads);
  absorb.nope_dim = static_cast<int>(s.nope);
  absorb.v_dim = static_cast<int>(s.v_dim);
  absorb.log2e_scale = log2e_scale;
  b.Launch(kSource,
           absl::StrCat("tileplan::mla_absorb_q<", type, ", ", w_type, ", ", s.latent, ">"),
           {CeilDiv(s.latent, kMlaAbsorbCols), s.heads, CeilDiv(tokens, kMlaAbsorbTokens)},
           {kMlaAbsorbThreads, 1, 1}, MlaAbsorbSharedBytes(static_cast<int>(s.nope)), absorb);

  MlaAttendParams attend{};
  attend.q_lat = q_lat;
  attend.q_rope = b.Operand(1);
  attend.q_rope_token_stride = rope_stride;
  attend.q_rope_head_stride = rope_head_stride;
  attend.latent_cache = b.Operand(2);
  attend.rope_cache = b.Operand(3);
  attend.positions = static_cast<const int*>(b.Operand(5));
  attend.partials = partials;
  attend.tokens = static_cast<int>(s.tokens);
  attend.heads = static_cast<int>(s.heads);
  attend.capacity = static_cast<int>(s.capacity);
  attend.log2e_scale = log2e_scale;
  attend.error = b.error();
  b.Launch(kSource,
           absl::StrCat("tileplan::mla_attend_split_kv<", type, ", ", s.latent, ", ", s.rope, ", ",
                        tiling.heads, ", ", tiling.tokens, ", ", kv_chunk, ", ", threads, ">"),
           {splits, tiling.groups, s.batch * tiling.tiles}, {threads, 1, 1},
           LayoutOf(s, tiling, kv_chunk, threads).total, attend);
  b.MarkMainLaunch();

  MlaCombineParams combine{};
  combine.partials = partials;
  combine.positions = static_cast<const int*>(b.Operand(5));
  combine.w_kv_b = b.Operand(4);
  combine.out = b.Result(0);
  combine.batch = static_cast<int>(s.batch);
  combine.tokens = static_cast<int>(s.tokens);
  combine.heads = static_cast<int>(s.heads);
  combine.nope_dim = static_cast<int>(s.nope);
  combine.v_dim = static_cast<int>(s.v_dim);
  combine.capacity = static_cast<int>(s.capacity);
  combine.heads_per_cta = static_cast<int>(tiling.heads);
  combine.tokens_per_cta = static_cast<int>(tiling.tokens);
  combine.kv_chunk = static_cast<int>(kv_chunk);
  combine.splits = static_cast<int>(splits);
  b.Launch(kSource,
           absl::StrCat("tileplan::mla_combine_project<", type, ", ", w_type, ", ", s.latent, ">"),
           {CeilDiv(s.v_dim, kMlaCombineRows), s.heads, CeilDiv(tokens, kMlaCombineTokens)},
           {kMlaCombineThreads, 1, 1}, MlaCombineSharedBytes(static_cast<int>(s.latent)), combine);
  return std::move(b).Finish();
}

class MlaAttentionFamily final : public TemplateFamilyBase {
 public:
  MlaAttentionFamily()
      : TemplateFamilyBase("mla_attention", 1, {"mla_attention"},
                           {"heads_per_cta", "kv_chunk", "splits", "threads"}) {}

  LaunchGeometry Geometry(const Tactic& t, const BoundRegion& r) const override {
    const MlaShape s = ShapeOf(r);
    const Tiling tiling = TilingOf(s, t.params.at("heads_per_cta"));
    const int64_t chunk = t.params.at("kv_chunk"), threads = t.params.at("threads");
    LaunchGeometry g;
    g.grid = {t.params.at("splits"), tiling.groups, s.batch * tiling.tiles};
    g.block = {threads, 1, 1};
    g.dynamic_shared_memory_bytes = LayoutOf(s, tiling, chunk, threads).total;
    return g;
  }
  // DRAM: the queries, positions and output, w_kv_b once (W_K by the absorb kernel, W_V by the
  // combine), and every sequence's cache rows up to the last position once. In L2, not
  // counted: the re-reads of each cache row by the other head groups and token tiles of its
  // sequence (none with one group and one tile, the decode default for up to 16 heads), of
  // W_K and W_V by every 16 (absorb) or 4 (combine) tokens, and the workspace (latent queries
  // and records). Flops as executed: the absorption and the projection per (token, head),
  // and per CTA the scores of every query slot with every row of its chunks and P · latent
  // over the rows it sees.
  WorkEstimate Work(const Tactic& t, const BoundRegion& r) const override {
    const MlaShape s = ShapeOf(r);
    const Tiling tiling = TilingOf(s, t.params.at("heads_per_cta"));
    const int64_t chunk = t.params.at("kv_chunk");
    const int64_t splits = t.params.at("splits");
    WorkEstimate w;
    w.bytes = r.operand_bytes(0) + r.operand_bytes(1) + r.operand_bytes(4) + r.operand_bytes(5) +
              r.result_bytes(0) + s.batch * s.context * (s.latent + s.rope) * s.es;
    const int64_t tokens = s.batch * s.tokens;
    // Rows seen by each tile: up to the position of its last token.
    int64_t visited = 0, seen = 0, merged = 0;
    for (int64_t tile = 0; tile < tiling.tiles; ++tile) {
      const int64_t last = std::min(s.tokens, (tile + 1) * tiling.tokens) - 1;
      const int64_t rows = std::min(s.capacity, s.first_position() + last + 1);
      const int64_t chunks = CeilDiv(rows, chunk);
      visited += chunks * chunk;
      seen += rows;
      merged += std::min(splits, chunks) * std::min(tiling.tokens, s.tokens - tile * tiling.tokens);
    }
    const int64_t slots = s.batch * tiling.groups * tiling.queries();  // query slots per tile
    w.flops = 2 * tokens * s.heads * s.latent * (s.nope + s.v_dim) +
              2 * slots * (visited * (s.latent + s.rope) + seen * s.latent) +
              2 * s.batch * merged * s.heads * s.latent;
    return w;
  }
  int Launches(const Tactic&, const BoundRegion&) const override { return 3; }
  // The latent queries [B·T, Hq, C] and the records [B · tiles, groups, splits, queries, C + 4],
  // in floats.
  int64_t WorkspaceBytes(const Tactic& t, const BoundRegion& r) const override {
    const MlaShape s = ShapeOf(r);
    const Tiling tiling = TilingOf(s, t.params.at("heads_per_cta"));
    return (s.batch * s.tokens * s.heads * s.latent + s.batch * tiling.tiles * tiling.groups *
                                                          t.params.at("splits") * tiling.queries() *
                                                          (s.latent + 4)) *
           4;
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
    for (int i : {2, 3, 4, 5}) {
      if (!r.operand(i).IsContiguous()) {
        return Refuse(absl::StrCat(OperandLabel(r, i), " is not contiguous"));
      }
    }
    // The smallest tactic of the target's row: one head per CTA, the smallest chunks.
    const int64_t threads = RowThreads(RowOf(ArchRowFor(target.sm())), s);
    const int64_t smallest = LayoutOf(s, TilingOf(s, 1), MinChunk(threads), threads).total;
    if (smallest > target.shared_memory_per_block_bytes()) {
      return Refuse(absl::StrCat("latent dim C = ", s.latent, " and rope dim Dr = ", s.rope,
                                 " need ", smallest, " bytes of shared memory per block (two ",
                                 MinChunk(threads), "-row chunks), more than the target's ",
                                 target.shared_memory_per_block_bytes()));
    }
    return RequireInnerContiguous(r, {0, 1});
  }
  Tactic RowTactic(absl::string_view arch, const BoundRegion& r, const TargetDescription& target,
                   int64_t shared_memory) const override {
    const Row& row = RowOf(arch);
    const MlaShape s = ShapeOf(r);
    // Every head of a group shares the rows it reads: up to 16 heads (the queries of a CTA).
    int64_t heads = std::min<int64_t>(kMlaMaxQueries, NextPowerOfTwo(s.heads));
    const int64_t threads = RowThreads(row, s);
    int64_t chunk = std::max(row.kv_chunk, MinChunk(threads));
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
    const int64_t wanted = CeilDiv(target.sm_count(), std::max<int64_t>(1, per_split));
    const int64_t context = std::max<int64_t>(1, r.bound_graph().context());
    while (chunk > MinChunk(threads) && context < 2 * wanted * chunk) chunk /= 2;
    const int64_t splits =
        std::clamp<int64_t>(wanted, 1, std::min<int64_t>(kMlaMaxSplits, MaxSplits(s, chunk)));
    return MakeTactic(
        {{"heads_per_cta", heads}, {"kv_chunk", chunk}, {"splits", splits}, {"threads", threads}});
  }
  std::vector<TunableParam> Tunables(const BoundRegion&, const TargetDescription&) const override {
    return {{"heads_per_cta", {1, 2, 4, 8, 16}},
            {"kv_chunk", {8, 16, 32, 64}},
            {"splits", {1, 2, 4, 8, 16, 32, 64, 128}},
            {"threads", {128, 256, 512}}};
  }
  // A split S > 1 pays only while S / 2 splits leave SMs without a CTA, and while the
  // planned context has a chunk for each split.
  bool WorthMeasuring(const Tactic& t, const BoundRegion& r,
                      const TargetDescription& target) const override {
    const MlaShape s = ShapeOf(r);
    const Tiling tiling = TilingOf(s, t.params.at("heads_per_cta"));
    const int64_t splits = t.params.at("splits");
    const int64_t per_split = s.batch * tiling.tiles * tiling.groups;
    const int64_t chunks = CeilDiv(std::max<int64_t>(1, s.context), t.params.at("kv_chunk"));
    return splits == 1 || (splits / 2 * per_split < target.sm_count() && splits <= chunks);
  }
  absl::Status CheckTactic(const Tactic& t, const BoundRegion& r,
                           const TargetDescription& target) const override {
    const MlaShape s = ShapeOf(r);
    const int64_t heads = t.params.at("heads_per_cta");
    const int64_t chunk = t.params.at("kv_chunk");
    const int64_t splits = t.params.at("splits");
    const int64_t threads = t.params.at("threads");
    if (!IsPowerOfTwo(heads) || heads > kMlaMaxQueries) {
      return BadParam("heads_per_cta", heads, absl::StrCat("a power of two <= ", kMlaMaxQueries));
    }
    if (!IsPowerOfTwo(threads) || threads < 64 || threads > 512) {
      return BadParam("threads", threads, "a power of two in [64, 512]");
    }
    if (threads * kMlaPvVec < s.latent) {
      return BadParam(
          "threads", threads,
          absl::StrCat("at least C / ", kMlaPvVec, " = ", CeilDiv(s.latent, kMlaPvVec),
                       " (each thread accumulates ", kMlaPvVec, " latent dims of every query)"));
    }
    if (!IsPowerOfTwo(chunk) || chunk < 8 || chunk > threads || threads / chunk > 32) {
      return BadParam(
          "kv_chunk", chunk,
          absl::StrCat("a power of two in [", MinChunk(threads), ", ",
                       std::min<int64_t>(threads, 128), "] (1 to 32 lanes of the block per row)"));
    }
    if (chunk > 128) return BadParam("kv_chunk", chunk, "at most 128");
    const int64_t max_splits = std::min<int64_t>(kMlaMaxSplits, MaxSplits(s, chunk));
    if (splits < 1 || splits > max_splits) {
      return BadParam("splits", splits,
                      absl::StrCat("in [1, ", max_splits, "] (chunks of the cache capacity ",
                                   s.capacity, ", at most ", kMlaMaxSplits, ")"));
    }
    const int64_t limit = target.shared_memory_per_block_bytes();
    const int64_t smem = LayoutOf(s, TilingOf(s, heads), chunk, threads).total;
    if (smem > limit) {
      return BadParam("kv_chunk", chunk,
                      absl::StrCat("a chunk and head group whose shared memory (", smem,
                                   " bytes) fits ", limit, " bytes"));
    }
    return absl::OkStatus();
  }

 private:
  static int64_t MaxSplits(const MlaShape& s, int64_t chunk) {
    return std::max<int64_t>(1, CeilDiv(s.capacity, chunk));
  }
};

}  // namespace

std::unique_ptr<KernelFamily> MakeMlaAttentionFamily() {
  return std::make_unique<MlaAttentionFamily>();
}

}  // namespace tileplan::kernels::internal
