// moe_gemv: the fused MoE block (moe, and rms_norm_moe with its RMSNorm) of a decode step,
// B·T <= 16 tokens, in three launches (moe_gemv.cuh): the router GEMV (its warps splitting H;
// with the norm, every CTA first sums each row's squares, and the CTAs share the store of the
// normalized rows)
// whose last CTA runs the top-k and builds the routing table, the gate/up GEMV with SiLU·mul
// over the distinct selected experts and the shared MLP, and the down GEMV whose CTA's threads
// share the slots' rows and that weights, sums and adds the shared MLP and the residual. The
// routing stays in device memory, so a decode CUDA Graph replays with new routing. Version 5
// (the down GEMV reads the routing before its dependency wait, the router stores the
// normalized rows after its logits; version 4 added the norm; version 3's down GEMV first
// shared the slots' rows among a CTA's threads; version
// 2 gave each warp its own rows and split the slots over CTAs, half the memory's rate on the
// H200; version 1's router warps each took their own experts).
#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/core/family_base.h"
#include "kernels/families/moe_fused/moe_fused_params.h"

namespace tileplan::kernels::moe_fused {
// This folder's templates, embedded in its library (tileplan_kernel_family).
const std::vector<std::pair<std::string_view, std::string_view>>& EmbeddedTemplates();
}  // namespace tileplan::kernels::moe_fused

namespace tileplan::kernels::internal {
namespace {

// The operands of a moe region: x, router, gate, up, down [, shared_gate_up, shared_down]
// [, residual]; rms_norm_moe has its norm weight after x (docs/ir.md).
struct MoeShape {
  bool norm = false;         // rms_norm_moe
  int64_t tokens = 0;        // B * T
  int64_t hidden = 0;        // H
  int64_t experts = 0;       // E
  int64_t top_k = 0;         // K
  int64_t inter = 0;         // I, the routed experts' width
  int64_t shared_inter = 0;  // Is, the shared MLP's width (0 without one)
  int64_t cols = 0;          // N, the output features
  int64_t groups = 1;
  int64_t topk_groups = 1;
  bool shared = false;
  bool residual = false;

  // Slots a routing can fill: min(E, B·T·K) distinct experts.
  int64_t max_slots() const { return std::min(experts, tokens * top_k); }
  // The index in the region of moe's operand i (x 0, router 1, ..., residual 5 or 7).
  int op(int i) const { return i == 0 || !norm ? i : i + 1; }
};

MoeShape ShapeOf(const BoundRegion& r) {
  MoeShape s;
  s.norm = r.kind() == "rms_norm_moe";
  const ir::Attributes& attrs = r.region().attrs;
  // The verifier checked the attributes; an absent one leaves the defaults.
  s.shared = attrs.GetBool("shared_experts").value_or(false);
  s.residual = attrs.GetBool("residual").value_or(false);
  s.top_k = attrs.GetInt("top_k").value_or(1);
  s.groups = attrs.GetInt("num_groups").value_or(1);
  s.topk_groups = attrs.GetInt("topk_groups").value_or(1);
  s.tokens = Rows(r.operand(0).shape);
  s.hidden = r.operand(0).shape.back();
  s.experts = r.operand(s.op(1)).shape[0];
  s.inter = r.operand(s.op(2)).shape[1];
  s.cols = r.operand(s.op(4)).shape[1];
  if (s.shared) s.shared_inter = r.operand(s.op(5)).shape[0] / 2;  // gate rows, then up rows
  return s;
}

int ResidualOperand(const MoeShape& s) { return s.op(s.shared ? 7 : 5); }
// The operands that are weights of the experts' dtype (the router's): all but x, the norm
// weight and the residual.
bool IsExpertWeight(const MoeShape& s, int i) {
  return i != 0 && !(s.norm && i == 1) && !(s.residual && i == ResidualOperand(s));
}

// Bounds of the kernels: the tokens held in registers, and moe_topk's warp selection.
constexpr int64_t kMaxTokens = kMoeMaxTokens;
constexpr int64_t kMaxExperts = 32 * 32;
constexpr int64_t kMaxTopK = 32;
constexpr int64_t kMaxGroups = 32;
constexpr int64_t kMaxRowsPerWarp = 8;
constexpr int64_t kMaxDownRows = 32;
// The router's experts per CTA (its warps share them) and the down projection's splits.
constexpr int64_t kMaxRouterRows = 16;
constexpr int64_t kMaxDownSplits = 16;

// The widest access of at most 16 bytes of the weights that divides every weight row (H, I,
// Is) and x's offset and row strides.
int64_t MoeVec(const BoundRegion& r) {
  const MoeShape s = ShapeOf(r);
  std::vector<int64_t> extents = AlignmentExtents(r, {0});
  for (int64_t e : {s.hidden, s.inter, s.shared_inter}) extents.push_back(e);
  return VectorWidth(r.operand_dtype(s.op(1)), extents);
}

// The step workspace, 16-byte aligned sections in bytes: logits [tokens, E], weights [tokens,
// K], the routing table, act [tokens * K, I], shared_act [tokens, Is], with down_splits S > 1
// the down projection's partial sums [S, tokens, N], and with the norm the normalized rows
// [tokens, H] of x's dtype (x_size bytes each).
struct WorkspaceLayout {
  int64_t logits = 0, weights = 0, table = 0, act = 0, shared_act = 0, partials = 0, xn = 0,
          total = 0;
};

WorkspaceLayout LayoutOf(const MoeShape& s, int64_t down_splits, int64_t x_size) {
  WorkspaceLayout l;
  auto section = [&l](int64_t bytes) {
    const int64_t at = l.total;
    l.total += CeilDiv(bytes, 16) * 16;
    return at;
  };
  l.logits = section(s.tokens * s.experts * 4);
  l.weights = section(s.tokens * s.top_k * 4);
  l.table = section(MoeTableInts(s.max_slots(), s.tokens) * 4);
  l.act = section(s.tokens * s.top_k * s.inter * 4);
  l.shared_act = section(s.tokens * s.shared_inter * 4);
  l.partials = section(down_splits > 1 ? down_splits * s.tokens * s.cols * 4 : 0);
  l.xn = section(s.norm ? s.tokens * s.hidden * x_size : 0);
  return l;
}

// The grids of the three kernels.
int64_t RouteCtas(const MoeShape& s, const Tactic& t) {
  return CeilDiv(s.experts, t.params.at("router_rows"));
}
int64_t RoutedTiles(const MoeShape& s, const Tactic& t) {
  return CeilDiv(s.inter, t.params.at("gate_rows"));
}
int64_t SharedTiles(const MoeShape& s, const Tactic& t) {
  return s.shared ? CeilDiv(s.shared_inter, t.params.at("gate_rows")) : 0;
}
int64_t GateUpCtas(const MoeShape& s, const Tactic& t) {
  return SharedTiles(s, t) + s.max_slots() * RoutedTiles(s, t);
}
int64_t DownTiles(const MoeShape& s, const Tactic& t) {
  return CeilDiv(s.cols, t.params.at("down_rows"));
}
// Whether the gate/up GEMV's CTAs may select the top-k themselves (tactic select = 1): a step
// of one token, whose top_k selections are distinct experts, so slot j is selection j.
bool SelectsInGateUp(const MoeShape& s) { return s.tokens == 1 && s.max_slots() == s.top_k; }

// Completion counters, 4 bytes each: the router's CTAs' arrivals (counter 0), then with
// down_splits > 1 one per down feature tile; none when neither kernel splits its work.
int64_t Counters(const MoeShape& s, const Tactic& t) {
  const int64_t splits = t.params.at("down_splits");
  if (RouteCtas(s, t) == 1 && splits == 1) return 0;
  return 1 + (splits > 1 ? DownTiles(s, t) : 0);
}

// Weight bytes the step streams: the router, the experts a routing can select (min(E, B·T·K)
// distinct ones, gate, up and down each), the shared MLP.
int64_t WeightBytes(const BoundRegion& r) {
  const MoeShape s = ShapeOf(r);
  const int64_t w = ir::DTypeSize(r.operand_dtype(s.op(1)));
  return (s.experts * s.hidden + s.max_slots() * s.inter * (2 * s.hidden + s.cols) +
          s.shared_inter * (2 * s.hidden + s.cols)) *
         w;
}

// The template type a routing dtype attribute (logits_dtype, weights_dtype) rounds to: float
// for "f32", else x's type (the verifier allows no other).
absl::StatusOr<std::string> RoundingType(const ir::Attributes& attrs, absl::string_view key,
                                         const std::string& x_type) {
  TP_ASSIGN_OR_RETURN(const std::string name, attrs.GetString(key));
  if (name == "f32") return std::string("float");
  return x_type;
}

absl::StatusOr<TemplateLaunch> LaunchMoeGemv(const BoundRegion& r, const Tactic& t,
                                             const RegionBuffers* buffers) {
  LaunchBuilder b(r, t, buffers);
  TP_ASSIGN_OR_RETURN(const int64_t threads, b.Param("threads"));
  TP_ASSIGN_OR_RETURN(const int64_t router_rows, b.Param("router_rows"));
  TP_ASSIGN_OR_RETURN(const int64_t gate_rows, b.Param("gate_rows"));
  TP_ASSIGN_OR_RETURN(const int64_t down_rows, b.Param("down_rows"));
  TP_ASSIGN_OR_RETURN(const int64_t down_splits, b.Param("down_splits"));
  TP_ASSIGN_OR_RETURN(const int64_t vec, b.Param("vec"));
  TP_ASSIGN_OR_RETURN(const int64_t select, b.Param("select"));
  const MoeShape s = ShapeOf(r);
  const ir::DType x_dtype = r.operand_dtype(0);
  const ir::DType w_dtype = r.operand_dtype(s.op(1));
  const ir::DType norm_dtype = s.norm ? r.operand_dtype(1) : w_dtype;
  TP_ASSIGN_OR_RETURN(const std::string x_type, b.TypeName(x_dtype, "x"));
  TP_ASSIGN_OR_RETURN(const std::string w_type, b.TypeName(w_dtype, "the router"));
  TP_ASSIGN_OR_RETURN(const std::string norm_type, b.TypeName(norm_dtype, "the norm weight"));
  for (int i = s.op(2); i < r.num_operands(); ++i) {
    const ir::DType want = s.residual && i == ResidualOperand(s) ? x_dtype : w_dtype;
    if (r.operand_dtype(i) != want) {
      return b.Error("operand ", i, " is ", ir::DTypeName(r.operand_dtype(i)), ", not ",
                     ir::DTypeName(want));
    }
  }
  const ir::Attributes& attrs = r.region().attrs;
  TP_ASSIGN_OR_RETURN(const std::string logit_type, RoundingType(attrs, "logits_dtype", x_type));
  TP_ASSIGN_OR_RETURN(const std::string weight_type, RoundingType(attrs, "weights_dtype", x_type));
  TP_ASSIGN_OR_RETURN(const bool norm, attrs.GetBool("norm_topk_prob"));
  TP_ASSIGN_OR_RETURN(const double scaling, attrs.GetFloat("scaling"));
  if (s.tokens < 1 || s.tokens > kMaxTokens || s.experts > kMaxExperts || s.top_k > kMaxTopK ||
      s.groups > kMaxGroups) {
    return b.Error(s.tokens, " tokens, E = ", s.experts, ", top_k ", s.top_k, " and num_groups ",
                   s.groups, " are outside the kernels' bounds");
  }
  if (select != 0 && !SelectsInGateUp(s)) {
    return b.Error("select = 1 takes one token whose top_k selections are the slots, not ",
                   s.tokens, " tokens and ", s.max_slots(), " slots");
  }
  TP_ASSIGN_OR_RETURN(const Matrix x, b.AsMatrix(r.operand(0), "x"));
  if (s.hidden % vec != 0 || s.inter % vec != 0 || s.shared_inter % vec != 0 ||
      x.stride % vec != 0) {
    return b.Error("H = ", s.hidden, ", I = ", s.inter, ", Is = ", s.shared_inter,
                   " and x's stride ", x.stride, " do not split into vec ", vec);
  }
  for (int i = 1; i < r.num_operands(); ++i) {
    if (s.residual && i == ResidualOperand(s)) continue;
    TP_RETURN_IF_ERROR(b.RequireContiguous(r.operand(i), absl::StrCat("operand ", i)));
  }
  float eps = 0.f;
  if (s.norm) {
    TP_ASSIGN_OR_RETURN(const double e, attrs.GetFloat("eps"));
    eps = static_cast<float>(e);
  }
  TP_RETURN_IF_ERROR(b.RequireContiguous(r.result(0), "the result"));
  Matrix residual;
  if (s.residual) {
    TP_ASSIGN_OR_RETURN(residual, b.AsMatrix(r.operand(ResidualOperand(s)), "the residual"));
  }
  const int64_t x_align = std::min<int64_t>(16, vec * ir::DTypeSize(x_dtype));
  const int64_t w_align = vec * ir::DTypeSize(w_dtype);
  TP_RETURN_IF_ERROR(b.CheckOperands(x_align, {0}));
  TP_RETURN_IF_ERROR(b.CheckOperands(w_align, {s.op(1), s.op(2), s.op(3), s.op(4)}));
  if (s.shared) TP_RETURN_IF_ERROR(b.CheckOperands(w_align, {s.op(5), s.op(6)}));
  if (s.norm) TP_RETURN_IF_ERROR(b.CheckOperands(vec * ir::DTypeSize(norm_dtype), {1}));
  if (s.residual) TP_RETURN_IF_ERROR(b.CheckOperands(ir::DTypeSize(x_dtype), {ResidualOperand(s)}));
  TP_RETURN_IF_ERROR(b.CheckResults(ir::DTypeSize(x_dtype), {0}));
  TP_ASSIGN_OR_RETURN(void* workspace, b.Workspace("routing"));
  const int64_t route_ctas = RouteCtas(s, t);
  // Counters exist when the router's CTAs or the down projection's splits share a reduction.
  TP_ASSIGN_OR_RETURN(const LaunchBuilder::SplitPointers split,
                      b.SplitBuffers(route_ctas * down_splits, "router and down projection"));
  unsigned int* counters = static_cast<unsigned int*>(split.counters);
  const WorkspaceLayout layout = LayoutOf(s, down_splits, ir::DTypeSize(x_dtype));
  auto at = [workspace](int64_t offset) -> void* {
    return workspace == nullptr ? nullptr : static_cast<char*>(workspace) + offset;
  };
  float* logits = static_cast<float*>(at(layout.logits));
  float* weights = static_cast<float*>(at(layout.weights));
  int* table = static_cast<int*>(at(layout.table));
  float* act = static_cast<float*>(at(layout.act));
  float* shared_act = s.shared ? static_cast<float*>(at(layout.shared_act)) : nullptr;
  float* partials = down_splits > 1 ? static_cast<float*>(at(layout.partials)) : nullptr;
  void* xn = s.norm ? at(layout.xn) : nullptr;
  const int64_t max_tokens = NextPowerOfTwo(s.tokens);
  // The top-k selection's parameters (TILEPLAN_MOE_SELECTION_PARAMS) of moe_route and
  // moe_gate_up.
  auto set_selection = [&](auto& p) {
    p.experts = static_cast<int>(s.experts);
    p.top_k = static_cast<int>(s.top_k);
    p.groups = static_cast<int>(s.groups);
    p.topk_groups = static_cast<int>(s.topk_groups);
    p.norm_topk_prob = norm ? 1 : 0;
    p.scaling = static_cast<float>(scaling);
  };

  MoeRouteParams rp{};
  rp.x = b.Operand(0);
  rp.x_stride = x.stride;
  rp.norm_w = s.norm ? b.Operand(1) : nullptr;
  rp.eps = eps;
  rp.xn = xn;
  rp.router = b.Operand(s.op(1));
  rp.logits = logits;
  rp.weights = weights;
  rp.table = table;
  rp.counter = route_ctas > 1 && select == 0 ? counters : nullptr;
  rp.tokens = static_cast<int>(s.tokens);
  rp.hidden = static_cast<int>(s.hidden);
  set_selection(rp);
  rp.max_slots = static_cast<int>(s.max_slots());
  b.Launch(
      "moe_gemv.cuh",
      absl::StrCat("tileplan::moe_route<", x_type, ", ", w_type, ", ", norm_type, ", ", logit_type,
                   ", ", weight_type, ", ", threads, ", ", router_rows, ", ", vec, ", ",
                   CeilDiv(s.experts, 32), ", ", max_tokens, ", ", s.norm ? "true" : "false", ", ",
                   select != 0 ? "true" : "false", ">"),
      {route_ctas, 1, 1}, {threads, 1, 1}, 12 * s.tokens * s.top_k, rp);

  MoeGateUpParams gp{};
  // With the norm, the experts read the rows moe_route normalized.
  gp.x = s.norm ? xn : b.Operand(0);
  gp.x_stride = s.norm ? s.hidden : x.stride;
  gp.gate = b.Operand(s.op(2));
  gp.up = b.Operand(s.op(3));
  // The shared MLP's packed weight: Is gate rows, then Is up rows.
  gp.shared_gate = s.shared ? b.Operand(s.op(5)) : nullptr;
  gp.shared_up = s.shared && b.Operand(s.op(5)) != nullptr
                     ? static_cast<const char*>(b.Operand(s.op(5))) +
                           s.shared_inter * s.hidden * ir::DTypeSize(w_dtype)
                     : nullptr;
  gp.table = table;
  gp.act = act;
  gp.shared_act = shared_act;
  gp.tokens = static_cast<int>(s.tokens);
  gp.hidden = static_cast<int>(s.hidden);
  gp.inter = static_cast<int>(s.inter);
  gp.shared_inter = static_cast<int>(s.shared_inter);
  gp.max_slots = static_cast<int>(s.max_slots());
  gp.routed_tiles = static_cast<int>(RoutedTiles(s, t));
  gp.shared_tiles = static_cast<int>(SharedTiles(s, t));
  gp.logits = logits;
  gp.table_out = table;
  gp.weights = weights;
  set_selection(gp);
  b.Launch("moe_gemv.cuh",
           absl::StrCat("tileplan::moe_gate_up<", x_type, ", ", w_type, ", ", weight_type, ", ",
                        threads, ", ", gate_rows, ", ", vec, ", ", max_tokens, ", ",
                        CeilDiv(s.experts, 32), ", ", select != 0 ? "true" : "false", ">"),
           {GateUpCtas(s, t), 1, 1}, {threads, 1, 1}, 0, gp);
  b.MarkMainLaunch();  // Geometry describes the gate/up GEMV, which streams most weights

  MoeDownParams dp{};
  dp.down = b.Operand(s.op(4));
  dp.shared_down = s.shared ? b.Operand(s.op(6)) : nullptr;
  dp.table = table;
  dp.weights = weights;
  dp.act = act;
  dp.shared_act = shared_act;
  dp.residual = s.residual ? b.Operand(ResidualOperand(s)) : nullptr;
  dp.residual_stride = s.residual ? residual.stride : 0;
  dp.out = b.Result(0);
  dp.tokens = static_cast<int>(s.tokens);
  dp.inter = static_cast<int>(s.inter);
  dp.shared_inter = static_cast<int>(s.shared_inter);
  dp.cols = static_cast<int>(s.cols);
  dp.max_slots = static_cast<int>(s.max_slots());
  dp.shared = s.shared ? 1 : 0;
  dp.partials = partials;
  dp.counters = down_splits > 1 && counters != nullptr ? counters + 1 : nullptr;
  b.Launch("moe_gemv.cuh",
           absl::StrCat("tileplan::moe_down<", x_type, ", ", w_type, ", ", threads, ", ", down_rows,
                        ", ", vec, ", ", max_tokens, ", ", select != 0 ? "true" : "false", ">"),
           {DownTiles(s, t), down_splits, 1}, {threads, 1, 1},
           MoeDownSharedBytes(s.max_slots(), max_tokens), dp);
  return std::move(b).Finish();
}

// `one_token_threads`: the block size of a step of one token (a batch-1 decode step).
struct Row {
  absl::string_view arch;
  int64_t threads;
  int64_t one_token_threads;
  int64_t gate_rows;
  int64_t down_rows;
};
constexpr Row kRows[] = {{"sm_80", 128, 128, 8, 8},
                         {"sm_90", 128, 256, 8, 8},
                         {"sm_100", 256, 256, 16, 16},
                         {"sm_120", 128, 128, 8, 8},
                         {"default", 128, 128, 4, 4}};

class MoeGemvFamily final : public TemplateFamilyBase {
 public:
  MoeGemvFamily()
      : TemplateFamilyBase(
            "moe_gemv", 6, {"moe", "rms_norm_moe"},
            {"down_rows", "down_splits", "gate_rows", "router_rows", "select", "threads",
             "vec"}) {}

  // The gate/up GEMV's launch (the router before it and the down GEMV after it are smaller).
  LaunchGeometry Geometry(const Tactic& t, const BoundRegion& r) const override {
    LaunchGeometry g;
    g.grid = {GateUpCtas(ShapeOf(r), t), 1, 1};
    g.block = {t.params.at("threads"), 1, 1};
    return g;
  }
  // Bytes: x, the residual and the result once, and the weights the step can read (the
  // experts of the distinct selections only); the workspace stays in L2. Flops: the three
  // GEMVs (the router over every expert, each selection's gate, up and down, the shared MLP).
  WorkEstimate Work(const Tactic&, const BoundRegion& r) const override {
    const MoeShape s = ShapeOf(r);
    WorkEstimate w;
    w.bytes = r.operand_bytes(0) + r.result_bytes(0) + WeightBytes(r) +
              (s.norm ? r.operand_bytes(1) : 0) +
              (s.residual ? r.operand_bytes(ResidualOperand(s)) : 0);
    w.flops = 2 * s.tokens *
              (s.experts * s.hidden + s.top_k * s.inter * (2 * s.hidden + s.cols) +
               s.shared_inter * (2 * s.hidden + s.cols));
    return w;
  }
  int Launches(const Tactic&, const BoundRegion&) const override { return 3; }
  int64_t WorkspaceBytes(const Tactic& t, const BoundRegion& r) const override {
    return LayoutOf(ShapeOf(r), t.params.at("down_splits"), ir::DTypeSize(r.operand_dtype(0)))
        .total;
  }
  int64_t CounterBytes(const Tactic& t, const BoundRegion& r) const override {
    return 4 * Counters(ShapeOf(r), t);
  }
  bool MayOverwriteOperand(const BoundRegion& r, int result, int operand) const override {
    // The down GEMV reads each residual element and then writes the output element at its
    // position; nothing reads the residual after it.
    const MoeShape s = ShapeOf(r);
    return s.residual && result == 0 && operand == ResidualOperand(s);
  }

  std::vector<SourceFile> Sources() const override {
    return ToSourceFiles(moe_fused::EmbeddedTemplates());
  }
  absl::StatusOr<TemplateLaunch> Launch(const BoundRegion& r, const Tactic& t,
                                        const RegionBuffers* buffers) const override {
    return LaunchMoeGemv(r, t, buffers);
  }

 protected:
  absl::Status CheckRegion(const BoundRegion& r, const TargetDescription& target) const override {
    const MoeShape s = ShapeOf(r);
    if (s.tokens > kMaxTokens) {
      return Refuse(absl::StrCat("M = ", s.tokens, " tokens exceed ", kMaxTokens,
                                 " (the kernels hold a step's tokens in registers)"));
    }
    if (s.experts > kMaxExperts) {
      return Refuse(absl::StrCat("E = ", s.experts, " experts exceed ", kMaxExperts,
                                 " (a warp holds a token's logits, 32 per lane)"));
    }
    if (s.top_k > kMaxTopK || s.groups > kMaxGroups) {
      return Refuse(absl::StrCat("top_k ", s.top_k, " or num_groups ", s.groups, " exceeds ",
                                 kMaxTopK, " (a lane holds each selection and each group)"));
    }
    const ir::DType w = r.operand_dtype(s.op(1));
    for (int i = s.op(2); i < r.num_operands(); ++i) {
      if (!IsExpertWeight(s, i)) continue;
      if (r.operand_dtype(i) != w) {
        return Refuse(absl::StrCat(OperandLabel(r, i), " is ", ir::DTypeName(r.operand_dtype(i)),
                                   ", the router ", ir::DTypeName(w),
                                   ": the kernels take one weight dtype"));
      }
    }
    const int64_t down_shared = MoeDownSharedBytes(s.max_slots(), NextPowerOfTwo(s.tokens));
    if (down_shared > target.shared_memory_per_block_bytes()) {
      return Refuse(absl::StrCat("the down projection's slot table of ", s.max_slots(),
                                 " slots and ", s.tokens, " tokens (", down_shared,
                                 " bytes) exceeds the target's shared memory per block (",
                                 target.shared_memory_per_block_bytes(), " bytes)"));
    }
    TP_RETURN_IF_ERROR(RequireInnerContiguous(r, {0}));
    if (!IsMatrix(r.operand(0)) || (s.residual && !IsMatrix(r.operand(ResidualOperand(s))))) {
      return Refuse("x and the residual must each be one matrix of token rows");
    }
    return absl::OkStatus();
  }
  Tactic RowTactic(absl::string_view arch, const BoundRegion& r, const TargetDescription& target,
                   int64_t) const override {
    Row row = kRows[4];
    for (const Row& candidate : kRows) {
      if (candidate.arch == arch) row = candidate;
    }
    const MoeShape s = ShapeOf(r);
    const int64_t threads = s.tokens == 1 ? row.one_token_threads : row.threads;
    const int64_t warps = threads / 32;
    // The router: one expert per CTA (its warps split H) while the grid stays within two
    // CTAs per SM; the down projection unsplit (its CTA's warps already share the slots).
    int64_t router_rows = 1;
    while (router_rows < kMaxRouterRows &&
           CeilDiv(s.experts, router_rows) > 2 * target.sm_count()) {
      router_rows *= 2;
    }
    // A step of one token selects its top-k in the gate/up GEMV's CTAs (docs/kernels.md):
    // the router then has no last CTA to wait for.
    Tactic t = MakeTactic({{"down_rows", row.down_rows},
                           {"down_splits", 1},
                           {"gate_rows", row.gate_rows},
                           {"router_rows", router_rows},
                           {"select", SelectsInGateUp(s) ? 1 : 0},
                           {"threads", threads},
                           {"vec", MoeVec(r)}});
    // Fewer rows per CTA, down to one per warp, while the gate/up grid leaves SMs idle, and
    // down to one while the down grid has fewer than two CTAs per SM.
    while (t.params["gate_rows"] > warps && GateUpCtas(s, t) < target.sm_count()) {
      t.params["gate_rows"] /= 2;
    }
    while (t.params["down_rows"] > 1 && DownTiles(s, t) < 2 * target.sm_count()) {
      t.params["down_rows"] /= 2;
    }
    return t;
  }
  std::vector<TunableParam> Tunables(const BoundRegion& r,
                                     const TargetDescription&) const override {
    return {{"down_rows", {2, 4, 8, 16}},  {"down_splits", {1, 2, 4, 8, 16}},
            {"gate_rows", {4, 8, 16, 32}}, {"router_rows", {1, 4, 16}},
            {"select", SelectsInGateUp(ShapeOf(r)) ? std::vector<int64_t>{0, 1}
                                                   : std::vector<int64_t>{0}},
            {"threads", {128, 256}},       {"vec", {MoeVec(r)}}};
  }
  absl::Status CheckTactic(const Tactic& t, const BoundRegion& r,
                           const TargetDescription&) const override {
    const int64_t threads = t.params.at("threads");
    if (!IsBlockSize(threads) || threads > 512) {
      return BadParam("threads", threads, "a multiple of 32 in [32, 512]");
    }
    const int64_t warps = threads / 32;
    const int64_t router_rows = t.params.at("router_rows");
    if (!IsPowerOfTwo(router_rows) || router_rows > kMaxRouterRows) {
      return BadParam("router_rows", router_rows,
                      absl::StrCat("a power of two <= ", kMaxRouterRows));
    }
    const int64_t splits = t.params.at("down_splits");
    if (splits < 1 || splits > kMaxDownSplits) {
      return BadParam("down_splits", splits, absl::StrCat("1 to ", kMaxDownSplits));
    }
    const int64_t gate_rows = t.params.at("gate_rows");
    if (!IsPowerOfTwo(gate_rows) || gate_rows % warps != 0 || gate_rows / warps > kMaxRowsPerWarp) {
      return BadParam("gate_rows", gate_rows,
                      absl::StrCat("a power of two holding 1 to ", kMaxRowsPerWarp,
                                   " rows for each of the ", warps, " warps"));
    }
    // Every thread of the down GEMV holds all its CTA's rows (kPass at a time).
    const int64_t down_rows = t.params.at("down_rows");
    if (!IsPowerOfTwo(down_rows) || down_rows > kMaxDownRows) {
      return BadParam("down_rows", down_rows, absl::StrCat("a power of two <= ", kMaxDownRows));
    }
    const int64_t select = t.params.at("select");
    if (select != 0 && (select != 1 || !SelectsInGateUp(ShapeOf(r)))) {
      return BadParam("select", select,
                      "0, or 1 for a step of one token (its top_k selections are the slots)");
    }
    const int64_t vec = t.params.at("vec");
    if (!IsPowerOfTwo(vec) || vec > MoeVec(r)) {
      return BadParam("vec", vec, absl::StrCat("a power of two <= ", MoeVec(r)));
    }
    return absl::OkStatus();
  }
};

}  // namespace

std::unique_ptr<KernelFamily> MakeMoeGemvFamily() { return std::make_unique<MoeGemvFamily>(); }

}  // namespace tileplan::kernels::internal
