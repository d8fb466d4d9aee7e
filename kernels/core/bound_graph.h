// A specialized graph with every symbol bound to an extent: the shape and the strided
// layout of every value, as kernels and the memory planner see them.
//
// Storage is shared along the graph's aliasing: a `view` result (reshape, split) and an
// `inplace` result (kv_write on the cache) live in the storage of their operand's *root*
// (the declaration or fresh result that owns it), at an element offset with strides. Every
// other value is its own root, contiguous and row-major.
#ifndef TILEPLAN_KERNELS_CORE_BOUND_GRAPH_H_
#define TILEPLAN_KERNELS_CORE_BOUND_GRAPH_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "regions/ir.h"

namespace tileplan::kernels {

// Extents of a graph's symbols ("B", "T", "Smax"), sorted by symbol.
using ShapeBindings = std::map<std::string, int64_t, std::less<>>;

// "B=1,Smax=4096,T=128"
std::string BindingsString(const ShapeBindings& bindings);

// Where a value's elements live inside its root's storage.
struct Layout {
  ir::ValueId root = ir::kNoValue;  // itself for declarations and fresh results
  int64_t offset = 0;               // elements from the root's first element
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // in elements, one per dim

  int64_t NumElements() const;
  // Elements from the first to one past the last element addressed (0 when empty).
  int64_t SpanElements() const;
  // Row-major strides for `shape` (size-1 dims may have any stride).
  bool IsContiguous() const;
  // strides.back() == 1 (or the tensor is empty or a scalar).
  bool InnerContiguous() const;
};

// Row-major strides of a shape.
std::vector<int64_t> RowMajorStrides(const std::vector<int64_t>& shape);

class BoundGraph {
 public:
  // Binds every value of `graph` (which must pass ir::Verify and outlive the result).
  // `context` is the attention span of the last new token of the step (its position + 1):
  // T for a prefill from an empty cache, the context length for a decode step. Only cost
  // estimates read it. InvalidArgument names the value for an unbound symbol, a negative
  // extent or context, an element count that overflows, or a reshape of a strided view that
  // no strides can express.
  static absl::StatusOr<BoundGraph> Create(const ir::Graph& graph, ShapeBindings bindings,
                                           int64_t context);

  const ir::Graph& graph() const { return *graph_; }
  const ShapeBindings& bindings() const { return bindings_; }
  int64_t context() const { return context_; }

  const Layout& layout(ir::ValueId id) const { return layouts_[static_cast<size_t>(id)]; }
  const std::vector<int64_t>& shape(ir::ValueId id) const { return layout(id).shape; }
  ir::DType dtype(ir::ValueId id) const { return graph_->value(id).type.dtype; }
  // Bytes of the value's own elements.
  int64_t bytes(ir::ValueId id) const;
  // Bytes a root must own: its span (for a root, its element count) times the dtype size.
  int64_t storage_bytes(ir::ValueId root) const;

 private:
  BoundGraph(const ir::Graph& graph, ShapeBindings bindings, int64_t context)
      : graph_(&graph), bindings_(std::move(bindings)), context_(context) {}

  const ir::Graph* graph_;
  ShapeBindings bindings_;
  int64_t context_;
  std::vector<Layout> layouts_;
};

// One region of a BoundGraph (which must outlive it).
class BoundRegion {
 public:
  BoundRegion(const BoundGraph& graph, int index) : graph_(&graph), index_(index) {}

  const BoundGraph& bound_graph() const { return *graph_; }
  const ir::Graph& graph() const { return graph_->graph(); }
  const ir::Region& region() const { return graph().regions()[static_cast<size_t>(index_)]; }
  int index() const { return index_; }
  const std::string& kind() const { return region().kind; }

  int num_operands() const { return static_cast<int>(region().operands.size()); }
  int num_results() const { return static_cast<int>(region().results.size()); }
  ir::ValueId operand_id(int i) const { return region().operands[static_cast<size_t>(i)]; }
  ir::ValueId result_id(int i) const { return region().results[static_cast<size_t>(i)]; }
  const Layout& operand(int i) const { return graph_->layout(operand_id(i)); }
  const Layout& result(int i) const { return graph_->layout(result_id(i)); }
  ir::DType operand_dtype(int i) const { return graph_->dtype(operand_id(i)); }
  ir::DType result_dtype(int i) const { return graph_->dtype(result_id(i)); }
  int64_t operand_bytes(int i) const { return graph_->bytes(operand_id(i)); }
  int64_t result_bytes(int i) const { return graph_->bytes(result_id(i)); }
  // The bytes of every operand and every result: what a step that touches each once moves.
  int64_t io_bytes() const {
    int64_t bytes = 0;
    for (int i = 0; i < num_operands(); ++i) bytes += operand_bytes(i);
    for (int i = 0; i < num_results(); ++i) bytes += result_bytes(i);
    return bytes;
  }

  // "region #12 'linear' (%l0.q)", as the verifier names regions.
  std::string Label() const;

 private:
  const BoundGraph* graph_;
  int index_;
};

}  // namespace tileplan::kernels

#endif  // TILEPLAN_KERNELS_CORE_BOUND_GRAPH_H_
