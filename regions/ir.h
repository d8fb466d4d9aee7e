// TileRegion IR: the in-memory graph every layer of tileplan speaks.
//
// A Graph is an ordered list of Regions over SSA Values. A Value is a graph input (token
// ids, positions), a weight (bound to a checkpoint tensor by name), a piece of state (the
// KV cache), or a result of a region. Tensor types carry a dtype and dims that are static
// extents or symbols (B batch, T new tokens, S context, Smax cache capacity).
//
// A region states *what* it computes (its kind and typed attributes), never how: tiles,
// threads and stages belong to the tactic chosen for it later. Results may be annotated as
// aliasing an operand: `kInPlace` (the result is the operand's storage after an in-place
// update, e.g. kv_write on the cache) or `kView` (a read-only view of part of the operand,
// e.g. reshape or split).
//
// The text form is documented in docs/ir.md; regions/printer.h and regions/parser.h convert
// to and from it, regions/serialization.h to and from regions/ir.proto.
#ifndef TILEPLAN_REGIONS_IR_H_
#define TILEPLAN_REGIONS_IR_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tileplan::ir {

// Element types. Room is left for fp8 (e4m3/e5m2) without renumbering.
enum class DType : uint8_t { kF32 = 0, kBF16 = 1, kF16 = 2, kI32 = 3 };

// "f32", "bf16", "f16", "i32".
absl::string_view DTypeName(DType dtype);
absl::StatusOr<DType> ParseDType(absl::string_view name);
int64_t DTypeSize(DType dtype);

// One dimension: a static extent (>= 0) or a symbol ([A-Za-z_][A-Za-z0-9_]*).
class Dim {
 public:
  Dim() = default;
  static Dim Static(int64_t extent) { return Dim(extent, {}); }
  static Dim Symbol(std::string name) { return Dim(-1, std::move(name)); }

  bool is_static() const { return symbol_.empty(); }
  int64_t extent() const { return extent_; }            // REQUIRES: is_static()
  const std::string& symbol() const { return symbol_; }  // REQUIRES: !is_static()

  std::string ToString() const;
  friend bool operator==(const Dim& a, const Dim& b) {
    return a.extent_ == b.extent_ && a.symbol_ == b.symbol_;
  }

 private:
  Dim(int64_t extent, std::string symbol) : extent_(extent), symbol_(std::move(symbol)) {}
  int64_t extent_ = 0;
  std::string symbol_;
};

struct TensorType {
  DType dtype = DType::kF32;
  std::vector<Dim> dims;

  int rank() const { return static_cast<int>(dims.size()); }
  // "bf16[B,T,1024]"; a scalar prints as "i32[]".
  std::string ToString() const;
  friend bool operator==(const TensorType& a, const TensorType& b) {
    return a.dtype == b.dtype && a.dims == b.dims;
  }
};

// Convenience: TensorType from dtype and a list of dims.
TensorType MakeType(DType dtype, std::vector<Dim> dims);

using ValueId = int32_t;
inline constexpr ValueId kNoValue = -1;

enum class ValueKind : uint8_t { kInput, kWeight, kState, kResult };

// The part of a checkpoint tensor a weight binds: the whole tensor, or the elements
// [start, start + size) of one dim (a rank's share of a tensor-parallel weight; docs/ir.md,
// "Sliced weights").
struct TensorSlice {
  int32_t dim = -1;  // -1: the whole tensor
  int64_t start = 0;
  int64_t size = 0;

  bool whole() const { return dim < 0; }
  static TensorSlice Whole() { return TensorSlice{}; }
  static TensorSlice Of(int32_t dim, int64_t start, int64_t size) {
    return TensorSlice{dim, start, size};
  }
  friend bool operator==(const TensorSlice& a, const TensorSlice& b) {
    return a.dim == b.dim && a.start == b.start && a.size == b.size;
  }
  friend bool operator<(const TensorSlice& a, const TensorSlice& b) {
    return std::tie(a.dim, a.start, a.size) < std::tie(b.dim, b.start, b.size);
  }
};

struct Value {
  std::string name;  // without the leading '%'; unique in the graph
  TensorType type;
  ValueKind kind = ValueKind::kResult;
  // kWeight only: the checkpoint tensors it binds to, in order. One entry for a plain
  // weight; several for a packed weight, which is their concatenation along dim 0
  // (docs/ir.md, "Packed weights").
  std::vector<std::string> checkpoint_tensors;
  // kWeight only: empty when every part is a whole tensor; otherwise parallel to
  // checkpoint_tensors, the slice of each part (TensorSlice::Whole() for a whole one).
  std::vector<TensorSlice> checkpoint_slices;
  // The slice of part k (whole when checkpoint_slices is empty).
  TensorSlice slice(size_t k) const {
    return checkpoint_slices.empty() ? TensorSlice::Whole() : checkpoint_slices[k];
  }
  bool sliced() const;
  int32_t producer = -1;      // kResult only: index of the producing region
  int32_t result_index = -1;  // kResult only: which result of the producer
};

enum class Phase : uint8_t { kGeneral, kPrefill, kDecode };
absl::string_view PhaseName(Phase phase);  // "general", "prefill", "decode"
absl::StatusOr<Phase> ParsePhase(absl::string_view name);

// Typed attribute values. Floats are doubles and print in shortest round-trip form.
using AttrValue = std::variant<int64_t, double, bool, std::string, std::vector<int64_t>,
                               std::vector<double>>;

// Attributes are kept sorted by key, so printing is deterministic.
class Attributes {
 public:
  void Set(std::string key, AttrValue value) { map_[std::move(key)] = std::move(value); }
  bool Has(absl::string_view key) const { return map_.find(std::string(key)) != map_.end(); }
  void Erase(absl::string_view key) { map_.erase(std::string(key)); }
  const std::map<std::string, AttrValue>& map() const { return map_; }
  bool empty() const { return map_.empty(); }

  // Typed getters: NotFound if absent, InvalidArgument if present with another type.
  // GetFloat accepts an integer value too.
  absl::StatusOr<int64_t> GetInt(absl::string_view key) const;
  absl::StatusOr<double> GetFloat(absl::string_view key) const;
  absl::StatusOr<bool> GetBool(absl::string_view key) const;
  absl::StatusOr<std::string> GetString(absl::string_view key) const;
  absl::StatusOr<std::vector<int64_t>> GetInts(absl::string_view key) const;
  absl::StatusOr<std::vector<double>> GetFloats(absl::string_view key) const;

  // Defaulted variants: the default when absent, an error when present with another type.
  absl::StatusOr<int64_t> GetIntOr(absl::string_view key, int64_t def) const;
  absl::StatusOr<double> GetFloatOr(absl::string_view key, double def) const;
  absl::StatusOr<bool> GetBoolOr(absl::string_view key, bool def) const;
  absl::StatusOr<std::string> GetStringOr(absl::string_view key, std::string def) const;

  friend bool operator==(const Attributes& a, const Attributes& b) { return a.map_ == b.map_; }

 private:
  std::map<std::string, AttrValue> map_;
};

enum class AliasKind : uint8_t { kNone, kInPlace, kView };

struct ResultAlias {
  AliasKind kind = AliasKind::kNone;
  int32_t operand = -1;  // index into Region::operands when kind != kNone
  friend bool operator==(const ResultAlias& a, const ResultAlias& b) {
    return a.kind == b.kind && a.operand == b.operand;
  }
};

struct Region {
  std::string kind;               // e.g. "linear", "rms_norm"; see regions/kinds.h
  std::vector<ValueId> operands;  // ordered, per the kind's signature
  std::vector<ValueId> results;
  std::vector<ResultAlias> result_aliases;  // parallel to results
  Attributes attrs;
  Phase phase = Phase::kGeneral;
  // For a region a planner pass formed by fusion: the primitive kinds it replaced, in their
  // original order (text: a trailing "fused(linear, add)"). Empty otherwise.
  std::vector<std::string> fused_from;
};

// Spec of one result when appending a region.
struct ResultSpec {
  std::string name;
  TensorType type;
  ResultAlias alias;
};

// A whole program. Regions are kept in execution order (a topological order); values are
// never deleted in place: a pass that removes regions rebuilds the graph.
class Graph {
 public:
  explicit Graph(std::string name = "main") : name_(std::move(name)) {}

  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }

  // Builders. Names must be unique across all values; an empty or duplicate name is an
  // AlreadyExists / InvalidArgument error.
  absl::StatusOr<ValueId> AddInput(std::string name, TensorType type);
  // A weight bound to one checkpoint tensor, or a packed weight bound to several (their
  // concatenation along dim 0, in order). An empty list or an empty tensor name is an
  // InvalidArgument error; that the names are distinct is checked by Verify.
  absl::StatusOr<ValueId> AddWeight(std::string name, TensorType type,
                                    absl::string_view checkpoint_tensor);
  absl::StatusOr<ValueId> AddWeight(std::string name, TensorType type,
                                    std::vector<std::string> checkpoint_tensors);
  // As above, each part a slice of its tensor (`slices` parallel to `checkpoint_tensors`, or
  // empty for whole tensors). A slice must be whole or have dim >= 0, start >= 0 and
  // size > 0; when every part is whole the weight is stored with no slices.
  absl::StatusOr<ValueId> AddWeight(std::string name, TensorType type,
                                    std::vector<std::string> checkpoint_tensors,
                                    std::vector<TensorSlice> slices);
  absl::StatusOr<ValueId> AddState(std::string name, TensorType type);
  // Appends a region and creates its result values. Operands must already exist.
  // `fused_from` is Region::fused_from (empty for a region that is not a fusion).
  absl::StatusOr<std::vector<ValueId>> AddRegion(std::string kind, std::vector<ValueId> operands,
                                                 std::vector<ResultSpec> results,
                                                 Attributes attrs = {},
                                                 Phase phase = Phase::kGeneral,
                                                 std::vector<std::string> fused_from = {});
  absl::Status AddOutput(ValueId value);

  const Value& value(ValueId id) const { return values_[static_cast<size_t>(id)]; }
  Value& mutable_value(ValueId id) { return values_[static_cast<size_t>(id)]; }
  int num_values() const { return static_cast<int>(values_.size()); }
  const std::vector<Value>& values() const { return values_; }

  const std::vector<ValueId>& inputs() const { return inputs_; }
  const std::vector<ValueId>& weights() const { return weights_; }
  const std::vector<ValueId>& states() const { return states_; }
  const std::vector<ValueId>& outputs() const { return outputs_; }
  const std::vector<Region>& regions() const { return regions_; }
  std::vector<Region>& mutable_regions() { return regions_; }

  // kNoValue when absent.
  ValueId FindValue(absl::string_view name) const;

 private:
  absl::StatusOr<ValueId> NewValue(std::string name, TensorType type, ValueKind kind);

  std::string name_;
  std::vector<Value> values_;
  std::map<std::string, ValueId, std::less<>> by_name_;
  std::vector<ValueId> inputs_, weights_, states_, outputs_;
  std::vector<Region> regions_;
};

}  // namespace tileplan::ir

#endif  // TILEPLAN_REGIONS_IR_H_
