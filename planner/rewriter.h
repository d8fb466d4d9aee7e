// Shared machinery of the rewriting passes: use lists, placement of fused regions, and the
// GraphRewriter that rebuilds a graph with some regions replaced or removed.
//
// An ir::Graph never deletes values or regions in place, so a pass that rewrites regions
// builds a new graph: it first analyses the source graph (UseMap, FindAnchor), records what
// happens to each affected region (GraphRewriter::Replace / Drop) and to weights
// (ReplaceWeights), and then calls Rebuild, which copies everything else. Every pass uses
// this one rebuild; none copies regions by hand.
#ifndef TILEPLAN_PLANNER_REWRITER_H_
#define TILEPLAN_PLANNER_REWRITER_H_

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "regions/ir.h"

namespace tileplan::planner {

// "region #12 'linear' (%l0.q)": how the verifier and every pass name a region.
std::string RegionLabel(const ir::Graph& graph, int index);

// The region producing `value`, or nullptr for a declaration.
const ir::Region* Producer(const ir::Graph& graph, ir::ValueId value);

// Whether `value` is result number `result` of a region of kind `kind`.
bool IsResultOf(const ir::Graph& graph, ir::ValueId value, absl::string_view kind, int result = 0);

// One read of a value: operand `operand` of region `region`.
struct Use {
  int region = -1;
  int operand = -1;
};

// Who reads each value of a graph, and which region updates it in place. Built once per
// analysis; REQUIRES: the graph is not modified while the map is in use.
class UseMap {
 public:
  explicit UseMap(const ir::Graph& graph);

  // In region order, then operand order.
  const std::vector<Use>& uses(ir::ValueId value) const { return uses_[value]; }
  bool is_output(ir::ValueId value) const { return is_output_[value]; }
  // The region that reads `value` when that region is its only reader, reads it as one
  // operand, and `value` is not a graph output; -1 otherwise.
  int SoleUser(ir::ValueId value) const;
  // SoleUser(value) when that region of `graph` has `kind` and reads `value` as operand
  // `operand`; -1 otherwise.
  int SoleUserOfKind(const ir::Graph& graph, ir::ValueId value, absl::string_view kind,
                     int operand) const;
  // Whether `value` is not a graph output and every reader is a region in `regions`.
  bool UsedOnlyBy(ir::ValueId value, const std::set<int>& regions) const;
  // The region whose result is `value` updated in place, or -1.
  int InPlaceWriter(ir::ValueId value) const { return inplace_writer_[value]; }

 private:
  std::vector<std::vector<Use>> uses_;
  std::vector<bool> is_output_;
  std::vector<int> inplace_writer_;
};

// Where a region replacing the source regions `match` may be emitted so that the graph
// stays in SSA order and in-place updates keep their meaning: the last region p of `match`
// such that
//   - every value of `operands` (the fused region's operands) is a declaration or a result
//     of a region before p outside `match`, and is not updated in place before p by a
//     region outside `match`;
//   - every read of a value of `exported` (the match's results that stay visible) by a
//     region outside `match` comes after p;
//   - no region of `match` that updates a value in place comes after p.
// Returns -1 when no region of `match` qualifies.
int FindAnchor(const ir::Graph& graph, const UseMap& uses, const std::vector<int>& match,
               const std::vector<ir::ValueId>& operands, const std::vector<ir::ValueId>& exported);

class GraphRewriter;

// What a replacement sees while the new graph is built: it emits regions at the position
// of the region it replaces and tells the rewriter which new values stand for which source
// values.
class RegionEmitter {
 public:
  const ir::Graph& source() const;
  // The source region being replaced.
  int index() const { return index_; }

  // The new graph's value standing for source value `value`: its copy, or what a
  // replacement bound it to. Internal error when the value was removed and never bound.
  absl::StatusOr<ir::ValueId> Map(ir::ValueId value) const;
  // Map() of each value.
  absl::StatusOr<std::vector<ir::ValueId>> MapAll(const std::vector<ir::ValueId>& values) const;
  // The weight declared by GraphRewriter::ReplaceWeights under `key`.
  ir::ValueId NewWeight(int key) const;

  // Appends a region to the new graph (operands are new-graph values) with the phase of the
  // replaced region, and records `fused_from`.
  absl::StatusOr<std::vector<ir::ValueId>> Emit(std::string kind, std::vector<ir::ValueId> operands,
                                                std::vector<ir::ResultSpec> results,
                                                ir::Attributes attrs,
                                                std::vector<std::string> fused_from = {});
  // From here on, source value `source` stands for new value `value`.
  void Bind(ir::ValueId source, ir::ValueId value);

  // The usual fused replacement: Emit of one region of `kind` on the new values of the
  // source values `operands`, whose results take the names and types of the source values
  // `exported` with `aliases` (parallel to `exported`), then Bind of each exported value to
  // its result.
  absl::Status EmitFused(std::string kind, const std::vector<ir::ValueId>& operands,
                         const std::vector<ir::ValueId>& exported,
                         const std::vector<ir::ResultAlias>& aliases, ir::Attributes attrs,
                         std::vector<std::string> fused_from);

 private:
  friend class GraphRewriter;
  RegionEmitter(GraphRewriter& rewriter, int index) : rw_(rewriter), index_(index) {}
  GraphRewriter& rw_;
  int index_;
};

class GraphRewriter {
 public:
  using EmitFn = std::function<absl::Status(RegionEmitter&)>;

  // REQUIRES: `source` outlives the rewriter and verifies.
  explicit GraphRewriter(const ir::Graph& source);

  const ir::Graph& source() const { return source_; }

  // Declares a weight `name` of `type` bound to `checkpoint_tensors` (in order; each part the
  // slice of `checkpoint_slices` at its index, or whole when that list is empty) in place of
  // the source weights `parts`, which the new graph no longer declares; it takes the
  // position of the first part among the declarations. Returns the key for
  // RegionEmitter::NewWeight. `name` should come from UniqueName. InvalidArgument when a
  // part is not a weight or is already replaced.
  absl::StatusOr<int> ReplaceWeights(const std::vector<ir::ValueId>& parts, std::string name,
                                     ir::TensorType type,
                                     std::vector<std::string> checkpoint_tensors,
                                     std::vector<ir::TensorSlice> checkpoint_slices = {});

  // Source region `index` is replaced by what `emit` emits, at its position. InvalidArgument
  // when the region is already replaced or dropped.
  absl::Status Replace(int index, EmitFn emit);
  // Source region `index` is left out; no kept region may read its results unless a
  // replacement bound them. InvalidArgument when it is already replaced or dropped.
  absl::Status Drop(int index);
  // Whether Replace or Drop was called for region `index`.
  bool claimed(int index) const { return actions_.count(index) > 0; }
  bool empty() const { return actions_.empty() && replaced_weights_.empty(); }

  // Claims and returns a value name for a new value: `base` when no source value and no
  // name claimed before has it, else the first free `base.1`, `base.2`, ...
  std::string UniqueName(absl::string_view base);

  // Builds the new graph: the source's name; its declarations in value-id order (with the
  // weight replacements); for each source region in order, its copy, nothing, or what its
  // replacement emits; the source's outputs, mapped. Internal error when a kept region or an
  // output reads a value that was removed and not bound (a bug in the calling pass).
  absl::StatusOr<ir::Graph> Rebuild();

 private:
  friend class RegionEmitter;
  struct WeightReplacement {
    std::vector<ir::ValueId> parts;
    std::string name;
    ir::TensorType type;
    std::vector<std::string> checkpoint_tensors;
    std::vector<ir::TensorSlice> checkpoint_slices;
    ir::ValueId new_id = ir::kNoValue;
  };
  struct Action {
    bool drop = false;
    EmitFn emit;
  };

  absl::Status CopyDeclarations();
  absl::Status CopyRegion(int index);

  const ir::Graph& source_;
  std::vector<WeightReplacement> weight_replacements_;
  std::map<ir::ValueId, int> replaced_weights_;  // source weight -> replacement key
  std::map<int, Action> actions_;
  std::set<std::string> claimed_names_;
  // While rebuilding:
  ir::Graph* target_ = nullptr;
  std::vector<ir::ValueId> map_;  // source value id -> new value id, or kNoValue
};

}  // namespace tileplan::planner

#endif  // TILEPLAN_PLANNER_REWRITER_H_
