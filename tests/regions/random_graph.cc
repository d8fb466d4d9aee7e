#include "tests/regions/random_graph.h"

#include <algorithm>
#include <bit>
#include <cfloat>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "regions/kinds.h"
#include "regions/shape_rules.h"

namespace tileplan::ir::testing {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

class Random {
 public:
  explicit Random(uint64_t seed) : rng_(seed) {}
  int Int(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  bool Chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  uint64_t Bits() { return rng_(); }
  template <typename T>
  const T& Pick(const std::vector<T>& v) {
    return v[static_cast<size_t>(Int(0, static_cast<int>(v.size()) - 1))];
  }
  template <typename T>
  void Shuffle(std::vector<T>& v) {
    std::shuffle(v.begin(), v.end(), rng_);
  }

  // A finite float >= 0, often one that is hard to print exactly.
  double NonNegativeFloat() {
    static const std::vector<double> kTricky = {0.0,     -0.0, 1e-6,        1e-5,  5e-324,
                                                DBL_MIN, 0.1,  1.0 / 3,     1e300, DBL_MAX,
                                                1e22,    1e23, 123456789.0, 0.5};
    if (Chance(0.6)) return Pick(kTricky);
    return std::uniform_real_distribution<double>(0, 1)(rng_) * std::pow(10.0, Int(-30, 30));
  }
  double PositiveFloat() {
    double v = NonNegativeFloat();
    return v > 0 ? v : 1e-3;
  }
  double FiniteFloat() { return Chance(0.5) ? NonNegativeFloat() : -NonNegativeFloat(); }
  // Any double: random bit patterns (NaN payloads included) and special values.
  double AnyFloat() {
    static const std::vector<double> kSpecial = {kInf, -kInf,  std::nan(""), -std::nan(""),
                                                 -0.0, 5e-324, DBL_MAX,      -DBL_MIN};
    if (Chance(0.3)) return Pick(kSpecial);
    if (Chance(0.5)) return std::bit_cast<double>(Bits());
    return FiniteFloat();
  }
  int64_t AnyInt() {
    static const std::vector<int64_t> kSpecial = {0, -1, 1, std::numeric_limits<int64_t>::min(),
                                                  std::numeric_limits<int64_t>::max()};
    if (Chance(0.3)) return Pick(kSpecial);
    return static_cast<int64_t>(Bits()) >> Int(0, 62);
  }
  // Arbitrary bytes, biased towards those the text form must escape.
  std::string Bytes(int max_len) {
    static const std::string kNasty = std::string("\"\\\n\t\r\x7f\x80\xff", 8) + '\0' + "{}%@,";
    std::string s;
    const int n = Int(0, max_len);
    for (int i = 0; i < n; ++i) {
      const int what = Int(0, 3);
      if (what == 0) s.push_back(kNasty[static_cast<size_t>(Int(0, kNasty.size() - 1))]);
      if (what == 1) s.push_back(static_cast<char>(Int(0, 255)));
      if (what >= 2) s.push_back(static_cast<char>(Int('a', 'z')));
    }
    return s;
  }

 private:
  std::mt19937_64 rng_;
};

Dim S(int64_t extent) { return Dim::Static(extent); }

class ValidGraphBuilder {
 public:
  explicit ValidGraphBuilder(uint64_t seed) : rnd_(seed), g_(absl::StrCat("random.", seed)) {
    b_ = rnd_.Chance(0.7) ? Dim::Symbol("B") : S(rnd_.Int(1, 3));
    t_ = rnd_.Chance(0.7) ? Dim::Symbol("T") : S(rnd_.Int(1, 4));
  }

  Graph Build() {
    const int regions = rnd_.Int(1, 30);
    for (int i = 0; i < regions; ++i) AddRandomRegion();
    std::vector<ValueId> candidates;
    for (ValueId id = 0; id < g_.num_values(); ++id) {
      if (!stale_[id]) candidates.push_back(id);
    }
    rnd_.Shuffle(candidates);
    const int outputs = std::min<int>(rnd_.Int(0, 3), static_cast<int>(candidates.size()));
    for (int i = 0; i < outputs; ++i) Check(g_.AddOutput(candidates[i]));
    return std::move(g_);
  }

 private:
  using Pred = std::function<bool(const Value&)>;

  static void Check(const absl::Status& s) { ASSERT_TRUE(s.ok()) << s; }
  template <typename T>
  static T Check(absl::StatusOr<T> s) {
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *std::move(s) : T();
  }

  std::string Name(absl::string_view role) {
    static const std::vector<std::string> kPrefixes = {"v", "l0.", "x_", "_t", "7", "a.b"};
    return absl::StrCat(rnd_.Chance(0.5) ? rnd_.Pick(kPrefixes) : std::string(), role, ".",
                        counter_++);
  }
  DType Float() { return rnd_.Pick(std::vector<DType>{DType::kF32, DType::kBF16, DType::kF16}); }
  Dim Extent(int lo, int hi) { return S(rnd_.Int(lo, hi)); }
  Dim AnyDim() {
    static const std::vector<std::string> kSymbols = {"B", "T", "Smax", "S", "n_1"};
    return rnd_.Chance(0.4) ? Dim::Symbol(rnd_.Pick(kSymbols)) : Extent(1, 8);
  }
  std::vector<Dim> Leading(int max_rank) {
    std::vector<Dim> dims;
    const int n = rnd_.Int(0, max_rank);
    for (int i = 0; i < n; ++i) dims.push_back(AnyDim());
    return dims;
  }

  void Track() {
    while (static_cast<int>(stale_.size()) < g_.num_values()) {
      const ValueId id = static_cast<ValueId>(stale_.size());
      stale_.push_back(false);
      view_root_.push_back(id);
      views_.emplace_back();
    }
  }
  ValueId NewInput(TensorType type) {
    ValueId id = Check(g_.AddInput(Name("in"), std::move(type)));
    Track();
    return id;
  }
  ValueId NewState(TensorType type) {
    ValueId id = Check(g_.AddState(Name("state"), std::move(type)));
    Track();
    return id;
  }
  ValueId Weight(TensorType type) {
    for (ValueId id : g_.weights()) {
      if (g_.value(id).type == type && rnd_.Chance(0.3)) return id;
    }
    // Sometimes a packed weight: the concatenation of 2 or 3 checkpoint tensors.
    std::vector<std::string> tensors(type.rank() > 0 && rnd_.Chance(0.3) ? rnd_.Int(2, 3) : 1);
    for (std::string& t : tensors) t = absl::StrCat(rnd_.Bytes(12), "#", counter_++);
    ValueId id = Check(g_.AddWeight(Name("w"), std::move(type), std::move(tensors)));
    Track();
    return id;
  }

  // A live (not updated in place), non-weight value accepted by `pred`, else a new input of
  // type make().
  ValueId Pick(const Pred& pred, const std::function<TensorType()>& make,
               ValueId exclude = kNoValue) {
    std::vector<ValueId> found;
    for (ValueId id = 0; id < g_.num_values(); ++id) {
      const Value& v = g_.value(id);
      if (!stale_[id] && id != exclude && v.kind != ValueKind::kWeight && pred(v)) {
        found.push_back(id);
      }
    }
    if (!found.empty() && rnd_.Chance(0.8)) return rnd_.Pick(found);
    return NewInput(make());
  }
  static Pred FloatRank(int rank) {
    return [rank](const Value& v) { return shape::IsFloat(v.type.dtype) && v.type.rank() == rank; };
  }
  static Pred FloatLastStatic() {
    return [](const Value& v) {
      return shape::IsFloat(v.type.dtype) && v.type.rank() >= 1 && v.type.dims.back().is_static();
    };
  }
  static Pred OfType(const TensorType& t) {
    return [t](const Value& v) { return v.type == t; };
  }
  ValueId Positions(const Dim& b, const Dim& t) {
    TensorType type = MakeType(DType::kI32, {b, t});
    return Pick(OfType(type), [type] { return type; });
  }

  // Usually empty; otherwise 1 to 4 primitive kinds.
  std::vector<std::string> FusedFrom() {
    static const std::vector<std::string> kPrimitive = PrimitiveKindNames();
    std::vector<std::string> kinds;
    if (rnd_.Chance(0.75)) return kinds;
    const int n = rnd_.Int(1, 4);
    for (int i = 0; i < n; ++i) kinds.push_back(rnd_.Pick(kPrimitive));
    return kinds;
  }

  Phase RandomPhase() {
    if (rnd_.Chance(0.7)) return Phase::kGeneral;
    return rnd_.Chance(0.5) ? Phase::kPrefill : Phase::kDecode;
  }

  std::vector<ValueId> Emit(const std::string& kind, std::vector<ValueId> operands,
                            std::vector<TensorType> types, std::vector<ResultAlias> aliases,
                            Attributes attrs = {}) {
    std::vector<ResultSpec> specs;
    for (size_t i = 0; i < types.size(); ++i) {
      specs.push_back({Name(kind), std::move(types[i]), aliases[i]});
    }
    std::vector<ValueId> ids = Check(g_.AddRegion(kind, operands, std::move(specs),
                                                  std::move(attrs), RandomPhase(), FusedFrom()));
    Track();
    for (size_t i = 0; i < ids.size(); ++i) {
      if (aliases[i].kind == AliasKind::kView) {
        const ValueId root = view_root_[operands[aliases[i].operand]];
        view_root_[ids[i]] = root;
        views_[root].push_back(ids[i]);
      }
      if (aliases[i].kind == AliasKind::kInPlace) {
        const ValueId root = operands[aliases[i].operand];
        stale_[root] = true;
        for (ValueId v : views_[root]) stale_[v] = true;
      }
    }
    return ids;
  }
  std::vector<ValueId> Emit1(const std::string& kind, std::vector<ValueId> operands,
                             TensorType type, Attributes attrs = {}) {
    return Emit(kind, std::move(operands), {std::move(type)}, {ResultAlias{}}, std::move(attrs));
  }

  void AddRandomRegion() {
    switch (rnd_.Int(0, 22)) {
      case 0:
        return Embedding();
      case 1:
        return RmsNorm();
      case 2:
        return Linear();
      case 3:
        return Reshape();
      case 4:
        return Split();
      case 5:
        return Rope();
      case 6:
        return KvWrite();
      case 7:
        return Attention();
      case 8:
        return Binary("add");
      case 9:
        return Binary("mul");
      case 10:
        return Silu();
      case 11:
        return LmHead();
      case 12:
        return Argmax();
      case 13:
        return Swiglu();
      case 14:
        return LinearSwiglu();
      case 15:
        return LinearResidual();
      case 16:
        return AddRmsNorm();
      case 17:
        return RopeKvWrite(/*norms=*/true, /*attention=*/false);
      case 18:
        return RopeKvWrite(/*norms=*/false, /*attention=*/false);
      case 19:
        return RopeKvWrite(/*norms=*/true, /*attention=*/true);
      case 20:
        return RmsNormLinear(/*swiglu=*/false);
      case 21:
        return RmsNormLinear(/*swiglu=*/true);
      default:
        return RopeKvWrite(/*norms=*/false, /*attention=*/true);
    }
  }

  void Embedding() {
    const ValueId ids =
        Pick([](const Value& v) { return v.type.dtype == DType::kI32 && v.type.rank() == 2; },
             [this] {
               return MakeType(DType::kI32, {b_, t_});
             });
    const Dim h = Extent(1, 16);
    const ValueId table = Weight(MakeType(Float(), {Extent(1, 32), h}));
    const TensorType& it = g_.value(ids).type;
    Emit1("embedding", {ids, table},
          MakeType(g_.value(table).type.dtype, {it.dims[0], it.dims[1], h}));
  }

  void RmsNorm() {
    const ValueId x = Pick(FloatLastStatic(), [this] {
      std::vector<Dim> dims = Leading(3);
      dims.push_back(Extent(1, 16));
      return MakeType(Float(), dims);
    });
    const TensorType xt = g_.value(x).type;
    const ValueId w = Weight(MakeType(Float(), {xt.dims.back()}));
    Attributes attrs;
    attrs.Set("eps", rnd_.NonNegativeFloat());
    Emit1("rms_norm", {x, w}, xt, std::move(attrs));
  }

  void Linear() {
    const ValueId x = Pick(FloatLastStatic(), [this] {
      std::vector<Dim> dims = Leading(3);
      dims.push_back(Extent(1, 16));
      return MakeType(Float(), dims);
    });
    const TensorType xt = g_.value(x).type;
    const Dim n = Extent(1, 16);
    const DType wd = Float();
    std::vector<ValueId> operands = {x, Weight(MakeType(wd, {n, xt.dims.back()}))};
    if (rnd_.Chance(0.5)) operands.push_back(Weight(MakeType(wd, {n})));
    std::vector<Dim> dims = xt.dims;
    dims.back() = n;
    Emit1("linear", operands, MakeType(xt.dtype, dims));
  }

  void Reshape() {
    const ValueId x = Pick([](const Value& v) { return v.type.rank() >= 1; },
                           [this] {
                             std::vector<Dim> dims = Leading(3);
                             dims.push_back(AnyDim());
                             return MakeType(Float(), dims);
                           });
    const TensorType xt = g_.value(x).type;
    std::vector<Dim> dims;
    int64_t product = 1;
    for (const Dim& d : xt.dims) {
      if (d.is_static()) {
        product *= d.extent();
      } else {
        dims.push_back(d);
      }
    }
    // Split the static element count into random factors.
    for (int64_t f = 2; f <= product;) {
      if (product % f == 0 && rnd_.Chance(0.5)) {
        dims.push_back(S(f));
        product /= f;
      } else {
        ++f;
      }
    }
    if (product > 1 || rnd_.Chance(0.2)) dims.push_back(S(product));
    rnd_.Shuffle(dims);
    Emit("reshape", {x}, {MakeType(xt.dtype, dims)}, {ResultAlias{AliasKind::kView, 0}});
  }

  void Split() {
    const ValueId x = Pick(
        [](const Value& v) {
          return v.type.rank() >= 1 && v.type.dims.back().is_static() &&
                 v.type.dims.back().extent() > 0;
        },
        [this] {
          std::vector<Dim> dims = Leading(3);
          dims.push_back(Extent(1, 12));
          return MakeType(rnd_.Chance(0.2) ? DType::kI32 : Float(), dims);
        });
    const TensorType xt = g_.value(x).type;
    int64_t left = xt.dims.back().extent();
    std::vector<int64_t> sizes;
    std::vector<TensorType> types;
    while (left > 0) {
      const int64_t s = sizes.size() == 3 ? left : rnd_.Int(1, static_cast<int>(left));
      sizes.push_back(s);
      left -= s;
      std::vector<Dim> dims = xt.dims;
      dims.back() = S(s);
      types.push_back(MakeType(xt.dtype, dims));
    }
    Attributes attrs;
    attrs.Set("sizes", sizes);
    Emit("split", {x}, types,
         std::vector<ResultAlias>(types.size(), ResultAlias{AliasKind::kView, 0}),
         std::move(attrs));
  }

  static Pred Rank4EvenD() {
    return [](const Value& v) {
      return shape::IsFloat(v.type.dtype) && v.type.rank() == 4 && v.type.dims[3].is_static() &&
             v.type.dims[3].extent() > 0 && v.type.dims[3].extent() % 2 == 0;
    };
  }
  TensorType Heads(const Dim& b, const Dim& t) {
    return MakeType(Float(), {b, t, Extent(1, 4), S(2 * rnd_.Int(1, 4))});
  }

  void Rope() {
    const ValueId x = Pick(Rank4EvenD(), [this] { return Heads(b_, t_); });
    const TensorType xt = g_.value(x).type;
    const ValueId pos = Positions(xt.dims[0], xt.dims[1]);
    Attributes attrs;
    SetRopeAttrs(attrs);
    Emit1("rope", {x, pos}, xt, std::move(attrs));
  }

  void SetRopeAttrs(Attributes& attrs) {
    attrs.Set("theta", rnd_.PositiveFloat());
    if (rnd_.Chance(0.5)) {
      attrs.Set("rope_type", std::string("default"));
    } else {
      attrs.Set("rope_type", std::string("llama3"));
      attrs.Set("factor", rnd_.PositiveFloat());
      const double low = rnd_.Chance(0.5) ? 1.0 : 0.25 + rnd_.Int(0, 8);
      attrs.Set("low_freq_factor", low);
      attrs.Set("high_freq_factor", rnd_.Chance(0.3) ? std::nextafter(low, kInf) : low * 4);
      attrs.Set("original_max_position_embeddings", int64_t{rnd_.Int(1, 1 << 20)});
    }
  }

  void KvWrite() {
    std::vector<ValueId> caches;
    for (ValueId id = 0; id < g_.num_values(); ++id) {
      const Value& v = g_.value(id);
      if (!stale_[id] && v.kind != ValueKind::kWeight && view_root_[id] == id &&
          shape::IsFloat(v.type.dtype) && v.type.rank() == 4) {
        caches.push_back(id);
      }
    }
    const ValueId cache = !caches.empty() && rnd_.Chance(0.6)
                              ? rnd_.Pick(caches)
                              : NewState(MakeType(Float(), {b_, AnyDim(), AnyDim(), AnyDim()}));
    const TensorType ct = g_.value(cache).type;
    const ValueId x = Pick(
        [ct](const Value& v) {
          return v.type.dtype == ct.dtype && v.type.rank() == 4 && v.type.dims[0] == ct.dims[0] &&
                 v.type.dims[2] == ct.dims[1] && v.type.dims[3] == ct.dims[3];
        },
        [this, ct] {
          return MakeType(ct.dtype, {ct.dims[0], t_, ct.dims[1], ct.dims[3]});
        },
        cache);
    const TensorType xt = g_.value(x).type;
    const ValueId pos = Positions(xt.dims[0], xt.dims[1]);
    Emit("kv_write", {cache, x, pos}, {ct}, {ResultAlias{AliasKind::kInPlace, 0}});
  }

  void Attention() {
    const ValueId q = Pick(FloatRank(4), [this] { return Heads(b_, t_); });
    const TensorType qt = g_.value(q).type;
    const Dim& hq = qt.dims[2];
    auto fits = [qt, hq](const Value& v) {
      if (v.type.dtype != qt.dtype || v.type.rank() != 4 || !(v.type.dims[0] == qt.dims[0]) ||
          !(v.type.dims[3] == qt.dims[3])) {
        return false;
      }
      const Dim& hkv = v.type.dims[1];
      return hkv == hq || (hq.is_static() && hkv.is_static() && hkv.extent() > 0 &&
                           hq.extent() % hkv.extent() == 0);
    };
    auto make = [this, qt, hq] {
      Dim hkv = hq;
      if (hq.is_static()) {
        std::vector<int64_t> divisors;
        for (int64_t d = 1; d <= hq.extent(); ++d) {
          if (hq.extent() % d == 0) divisors.push_back(d);
        }
        if (!divisors.empty()) hkv = S(rnd_.Pick(divisors));
      }
      return MakeType(qt.dtype, {qt.dims[0], hkv, AnyDim(), qt.dims[3]});
    };
    const ValueId k = Pick(fits, make);
    const TensorType kt = g_.value(k).type;
    const ValueId v = Pick(OfType(kt), [kt] { return kt; });
    const ValueId pos = Positions(qt.dims[0], qt.dims[1]);
    Attributes attrs;
    attrs.Set("scale", rnd_.FiniteFloat());
    attrs.Set("sliding_window", int64_t{rnd_.Chance(0.5) ? 0 : rnd_.Int(1, 4096)});
    Emit1("attention", {q, k, v, pos}, qt, std::move(attrs));
  }

  void Binary(const std::string& kind) {
    const ValueId a = Pick([](const Value& v) { return shape::IsFloat(v.type.dtype); },
                           [this] { return MakeType(Float(), Leading(4)); });
    const TensorType at = g_.value(a).type;
    const ValueId b = Pick(OfType(at), [at] { return at; });
    Emit1(kind, {a, b}, at);
  }

  void Silu() {
    const ValueId x = Pick([](const Value& v) { return shape::IsFloat(v.type.dtype); },
                           [this] { return MakeType(Float(), Leading(4)); });
    Emit1("silu", {x}, g_.value(x).type);
  }

  void LmHead() {
    const ValueId x = Pick(
        [](const Value& v) {
          return shape::IsFloat(v.type.dtype) && v.type.rank() == 3 && v.type.dims[2].is_static();
        },
        [this] {
          return MakeType(Float(), {b_, t_, Extent(1, 16)});
        });
    const TensorType xt = g_.value(x).type;
    const Dim vocab = Extent(1, 64);
    const ValueId w = Weight(MakeType(Float(), {vocab, xt.dims[2]}));
    Emit1("lm_head", {x, w}, MakeType(DType::kF32, {xt.dims[0], xt.dims[1], vocab}));
  }

  void Argmax() {
    const ValueId logits = Pick(
        [](const Value& v) {
          return v.type.dtype == DType::kF32 && v.type.rank() == 3 &&
                 !(v.type.dims[2] == Dim::Static(0));
        },
        [this] {
          return MakeType(DType::kF32, {b_, t_, rnd_.Chance(0.5) ? Extent(1, 64) : AnyDim()});
        });
    const TensorType lt = g_.value(logits).type;
    Emit1("argmax", {logits}, MakeType(DType::kI32, {lt.dims[0], lt.dims[1]}));
  }

  // ---- Fused kinds.

  static Pred FloatLastEven() {
    return [](const Value& v) {
      return shape::IsFloat(v.type.dtype) && v.type.rank() >= 1 && v.type.dims.back().is_static() &&
             v.type.dims.back().extent() > 0 && v.type.dims.back().extent() % 2 == 0;
    };
  }

  void Swiglu() {
    const ValueId x = Pick(FloatLastEven(), [this] {
      std::vector<Dim> dims = Leading(3);
      dims.push_back(S(2 * rnd_.Int(1, 8)));
      return MakeType(Float(), dims);
    });
    const TensorType xt = g_.value(x).type;
    Emit1("swiglu", {x},
          MakeType(xt.dtype, shape::WithLast(xt.dims, S(xt.dims.back().extent() / 2))));
  }

  // x and a weight [n,K] (and a bias [n] half the time) of a linear step.
  std::vector<ValueId> LinearOperands(const Dim& n) {
    const ValueId x = Pick(FloatLastStatic(), [this] {
      std::vector<Dim> dims = Leading(3);
      dims.push_back(Extent(1, 16));
      return MakeType(Float(), dims);
    });
    const DType wd = Float();
    return {x, Weight(MakeType(wd, {n, g_.value(x).type.dims.back()}))};
  }
  ValueId Bias(ValueId w) {
    const TensorType& wt = g_.value(w).type;
    return Weight(MakeType(wt.dtype, {wt.dims[0]}));
  }
  void LinearSwiglu() {
    const int64_t f = rnd_.Int(1, 8);
    std::vector<ValueId> operands = LinearOperands(S(2 * f));
    if (rnd_.Chance(0.5)) operands.push_back(Bias(operands[1]));
    const TensorType xt = g_.value(operands[0]).type;
    Emit1("linear_swiglu", operands, MakeType(xt.dtype, shape::WithLast(xt.dims, S(f))));
  }

  void LinearResidual() {
    const Dim n = Extent(1, 16);
    std::vector<ValueId> operands = LinearOperands(n);
    const TensorType xt = g_.value(operands[0]).type;
    const TensorType out = MakeType(xt.dtype, shape::WithLast(xt.dims, n));
    operands.push_back(Pick(OfType(out), [out] { return out; }));
    if (rnd_.Chance(0.5)) operands.push_back(Bias(operands[1]));
    Emit1("linear_residual", operands, out);
  }

  // rms_norm_linear or rms_norm_linear_swiglu: x, a norm weight [K], a weight [n,K] and a
  // bias half the time.
  void RmsNormLinear(bool swiglu) {
    const int64_t f = rnd_.Int(1, 8);
    std::vector<ValueId> operands = LinearOperands(swiglu ? S(2 * f) : Extent(1, 16));
    const TensorType xt = g_.value(operands[0]).type;
    operands.insert(operands.begin() + 1, Weight(MakeType(Float(), {xt.dims.back()})));
    if (rnd_.Chance(0.5)) operands.push_back(Bias(operands[2]));
    const Dim out = swiglu ? S(f) : g_.value(operands[2]).type.dims[0];
    Attributes attrs;
    attrs.Set("eps", rnd_.NonNegativeFloat());
    Emit1(swiglu ? "rms_norm_linear_swiglu" : "rms_norm_linear", operands,
          MakeType(xt.dtype, shape::WithLast(xt.dims, out)), std::move(attrs));
  }

  void AddRmsNorm() {
    const ValueId a = Pick(FloatLastStatic(), [this] {
      std::vector<Dim> dims = Leading(3);
      dims.push_back(Extent(1, 16));
      return MakeType(Float(), dims);
    });
    const TensorType at = g_.value(a).type;
    const ValueId b = Pick(OfType(at), [at] { return at; });
    const ValueId w = Weight(MakeType(Float(), {at.dims.back()}));
    Attributes attrs;
    attrs.Set("eps", rnd_.NonNegativeFloat());
    Emit("add_rms_norm", {a, b, w}, {at, at}, {ResultAlias{}, ResultAlias{}}, std::move(attrs));
  }

  // A live cache [b, hkv, *, d] that no region updated yet, or a new state.
  ValueId Cache(DType dtype, const Dim& b, int64_t hkv, int64_t d, ValueId exclude) {
    std::vector<ValueId> caches;
    for (ValueId id = 0; id < g_.num_values(); ++id) {
      const Value& v = g_.value(id);
      if (!stale_[id] && id != exclude && v.kind != ValueKind::kWeight && view_root_[id] == id &&
          v.type.dtype == dtype && v.type.rank() == 4 && v.type.dims[0] == b &&
          v.type.dims[1] == S(hkv) && v.type.dims[3] == S(d)) {
        caches.push_back(id);
      }
    }
    if (!caches.empty() && rnd_.Chance(0.6)) return rnd_.Pick(caches);
    return NewState(MakeType(dtype, {b, S(hkv), AnyDim(), S(d)}));
  }

  // (qk_norm_)rope_kv_write, or with `attention` its _attention form.
  void RopeKvWrite(bool norms, bool attention) {
    const int64_t hkv = rnd_.Int(1, 3);
    const int64_t hq = hkv * rnd_.Int(1, 3);
    const int64_t d = 2 * rnd_.Int(1, 4);
    const TensorType qkv_type = MakeType(Float(), {b_, t_, S((hq + 2 * hkv) * d)});
    const ValueId qkv = Pick(OfType(qkv_type), [qkv_type] { return qkv_type; });
    const ValueId k_cache = Cache(qkv_type.dtype, b_, hkv, d, kNoValue);
    const TensorType ct = g_.value(k_cache).type;
    const ValueId v_cache = Pick(
        [this, ct](const Value& v) {
          const ValueId id = g_.FindValue(v.name);
          return v.type == ct && view_root_[id] == id;
        },
        [ct] { return ct; }, k_cache);
    std::vector<ValueId> operands = {qkv};
    Attributes attrs;
    attrs.Set("num_heads", hq);
    attrs.Set("num_kv_heads", hkv);
    if (norms) {
      operands.push_back(Weight(MakeType(Float(), {S(d)})));
      operands.push_back(Weight(MakeType(Float(), {S(d)})));
      attrs.Set("eps", rnd_.NonNegativeFloat());
    }
    SetRopeAttrs(attrs);
    if (attention) {
      attrs.Set("scale", rnd_.NonNegativeFloat());
      attrs.Set("sliding_window", static_cast<int64_t>(rnd_.Int(0, 8)));
    }
    const int32_t k_index = static_cast<int32_t>(operands.size());
    operands.insert(operands.end(), {k_cache, v_cache, Positions(b_, t_)});
    const std::string kind = norms ? "qk_norm_rope_kv_write" : "rope_kv_write";
    Emit(attention ? kind + "_attention" : kind, operands,
         {MakeType(qkv_type.dtype, {b_, t_, S(hq), S(d)}), ct, ct},
         {ResultAlias{}, ResultAlias{AliasKind::kInPlace, k_index},
          ResultAlias{AliasKind::kInPlace, k_index + 1}},
         std::move(attrs));
  }

  Random rnd_;
  Graph g_;
  Dim b_, t_;
  int counter_ = 0;
  std::vector<bool> stale_;                  // updated in place (or a view of such a value)
  std::vector<ValueId> view_root_;           // the value whose storage a view shares
  std::vector<std::vector<ValueId>> views_;  // views of each root
};

AttrValue RandomAttr(Random& rnd) {
  switch (rnd.Int(0, 5)) {
    case 0:
      return rnd.AnyInt();
    case 1:
      return rnd.AnyFloat();
    case 2:
      return rnd.Chance(0.5);
    case 3:
      return rnd.Bytes(20);
    case 4: {
      std::vector<int64_t> v(static_cast<size_t>(rnd.Int(0, 4)));
      for (int64_t& x : v) x = rnd.AnyInt();
      return v;
    }
    default: {
      std::vector<double> v(static_cast<size_t>(rnd.Int(0, 4)));
      for (double& x : v) x = rnd.AnyFloat();
      return v;
    }
  }
}

}  // namespace

Graph RandomValidGraph(uint64_t seed) { return ValidGraphBuilder(seed).Build(); }

Graph RandomAttributeGraph(uint64_t seed) {
  Random rnd(seed);
  Graph g(absl::StrCat("attrs_", seed));
  auto type = [&rnd] {
    std::vector<Dim> dims(static_cast<size_t>(rnd.Int(0, 3)));
    for (Dim& d : dims) {
      d = rnd.Chance(0.3)
              ? Dim::Symbol(rnd.Chance(0.5) ? "B" : "f32")
              : Dim::Static(rnd.Chance(0.1) ? std::numeric_limits<int64_t>::max() : rnd.Int(0, 9));
    }
    return MakeType(static_cast<DType>(rnd.Int(0, 3)), dims);
  };
  int counter = 0;
  const int inputs = rnd.Int(1, 3);
  for (int i = 0; i < inputs; ++i) {
    EXPECT_TRUE(g.AddInput(absl::StrCat("in", counter++), type()).ok());
  }
  const int weights = rnd.Int(0, 2);
  for (int i = 0; i < weights; ++i) {
    std::vector<std::string> tensors(static_cast<size_t>(rnd.Int(1, 3)));
    for (std::string& t : tensors) t = absl::StrCat(rnd.Bytes(10), "#", counter++);
    EXPECT_TRUE(g.AddWeight(absl::StrCat("w", counter++), type(), std::move(tensors)).ok());
  }
  static const std::vector<std::string> kKinds = {"custom", "graph", "input", "phase", "_x9"};
  static const std::vector<std::string> kFused = {"linear", "fused", "phase", "concat", "x_1"};
  static const std::vector<std::string> kKeys = {"a", "inf", "nan", "true", "ints", "k_2", "Z"};
  const int regions = rnd.Int(0, 12);
  for (int r = 0; r < regions; ++r) {
    std::vector<ValueId> operands(static_cast<size_t>(rnd.Int(0, 3)));
    for (ValueId& op : operands) op = rnd.Int(0, g.num_values() - 1);
    std::vector<ResultSpec> results(static_cast<size_t>(rnd.Int(1, 3)));
    for (ResultSpec& spec : results) {
      spec.name = absl::StrCat("r", counter++);
      spec.type = type();
      if (!operands.empty() && rnd.Chance(0.3)) {
        // The text form names the aliased operand by value: the first occurrence.
        const ValueId target = rnd.Pick(operands);
        const auto first = std::find(operands.begin(), operands.end(), target);
        spec.alias = {rnd.Chance(0.5) ? AliasKind::kInPlace : AliasKind::kView,
                      static_cast<int32_t>(first - operands.begin())};
      }
    }
    Attributes attrs;
    const int n_attrs = rnd.Int(0, 5);
    for (int a = 0; a < n_attrs; ++a) attrs.Set(rnd.Pick(kKeys), RandomAttr(rnd));
    const Phase phase = static_cast<Phase>(rnd.Int(0, 2));
    std::vector<std::string> fused_from(static_cast<size_t>(rnd.Chance(0.5) ? 0 : rnd.Int(1, 3)));
    for (std::string& kind : fused_from) kind = rnd.Pick(kFused);
    EXPECT_TRUE(g.AddRegion(rnd.Pick(kKinds), operands, std::move(results), std::move(attrs), phase,
                            std::move(fused_from))
                    .ok());
  }
  const int outputs = rnd.Int(0, 2);
  for (int i = 0; i < outputs; ++i) EXPECT_TRUE(g.AddOutput(rnd.Int(0, g.num_values() - 1)).ok());
  return g;
}

}  // namespace tileplan::ir::testing
