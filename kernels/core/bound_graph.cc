#include "kernels/core/bound_graph.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"

namespace tileplan::kernels {
namespace {

// A maximal run of dims that address elements at one uniform stride: `count` elements,
// `stride` apart.
struct Run {
  int64_t count;
  int64_t stride;
};

// The runs of a strided layout, outermost first. Size-1 dims are skipped; a dim joins the
// run inside it when its stride is the inner run's count times the inner run's stride.
std::vector<Run> Runs(const Layout& l) {
  std::vector<Run> runs;
  for (int d = static_cast<int>(l.shape.size()) - 1; d >= 0; --d) {
    const int64_t n = l.shape[static_cast<size_t>(d)];
    const int64_t s = l.strides[static_cast<size_t>(d)];
    if (n == 1) continue;
    if (!runs.empty() && runs.back().count * runs.back().stride == s) {
      runs.back().count *= n;
    } else {
      runs.push_back(Run{n, s});
    }
  }
  return std::vector<Run>(runs.rbegin(), runs.rend());
}

// Strides that address `shape` in the element order of `from` (row-major over from's
// shape), or false when a new dim would straddle two runs of `from`.
bool ReshapeStrides(const Layout& from, const std::vector<int64_t>& shape,
                    std::vector<int64_t>* strides) {
  *strides = RowMajorStrides(shape);
  if (from.NumElements() == 0) return true;
  const std::vector<Run> runs = Runs(from);
  size_t run = 0;
  int64_t left = runs.empty() ? 1 : runs[0].count;  // elements of the current run not yet used
  for (size_t d = 0; d < shape.size(); ++d) {
    const int64_t n = shape[d];
    if (n == 1) continue;
    if (run >= runs.size() || left % n != 0) return false;
    left /= n;
    (*strides)[d] = left * runs[run].stride;
    if (left == 1 && ++run < runs.size()) left = runs[run].count;
  }
  return run == runs.size();
}

}  // namespace

std::string BindingsString(const ShapeBindings& bindings) {
  return absl::StrJoin(bindings, ",", absl::PairFormatter("="));
}

int64_t Layout::NumElements() const {
  int64_t n = 1;
  for (int64_t e : shape) n *= e;
  return n;
}

int64_t Layout::SpanElements() const {
  if (NumElements() == 0) return 0;
  int64_t span = 1;
  for (size_t d = 0; d < shape.size(); ++d) span += (shape[d] - 1) * strides[d];
  return span;
}

std::vector<int64_t> RowMajorStrides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  int64_t s = 1;
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    strides[static_cast<size_t>(d)] = s;
    s *= shape[static_cast<size_t>(d)];
  }
  return strides;
}

bool Layout::IsContiguous() const {
  const std::vector<int64_t> want = RowMajorStrides(shape);
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] != 1 && strides[d] != want[d]) return false;
  }
  return true;
}

bool Layout::InnerContiguous() const {
  return shape.empty() || shape.back() <= 1 || strides.back() == 1;
}

absl::StatusOr<BoundGraph> BoundGraph::Create(const ir::Graph& graph, ShapeBindings bindings,
                                              int64_t context) {
  if (context < 0) {
    return absl::InvalidArgumentError(absl::StrCat("context must be >= 0, got ", context));
  }
  BoundGraph bound(graph, std::move(bindings), context);
  bound.layouts_.resize(static_cast<size_t>(graph.num_values()));
  for (ir::ValueId id = 0; id < graph.num_values(); ++id) {
    const ir::Value& v = graph.value(id);
    Layout& l = bound.layouts_[static_cast<size_t>(id)];
    int64_t count = 1;
    for (const ir::Dim& d : v.type.dims) {
      int64_t e = 0;
      if (d.is_static()) {
        e = d.extent();
      } else {
        auto it = bound.bindings_.find(d.symbol());
        if (it == bound.bindings_.end()) {
          return absl::InvalidArgumentError(absl::StrCat("value %", v.name, " of type ",
                                                         v.type.ToString(), ": symbol ", d.symbol(),
                                                         " is not bound"));
        }
        e = it->second;
      }
      int64_t bytes = 0;
      if (e < 0 || __builtin_mul_overflow(count, e, &count) ||
          __builtin_mul_overflow(count, ir::DTypeSize(v.type.dtype), &bytes)) {
        return absl::InvalidArgumentError(
            absl::StrCat("value %", v.name, " of type ", v.type.ToString(), " bound with ",
                         BindingsString(bound.bindings_),
                         e < 0 ? " has a negative extent" : " has too many elements"));
      }
      l.shape.push_back(e);
    }
    l.root = id;
    l.strides = RowMajorStrides(l.shape);
  }
  // Aliased results take their operand's storage; operands precede their uses, so one pass
  // in region order sees every operand's final layout.
  for (size_t r = 0; r < graph.regions().size(); ++r) {
    const ir::Region& region = graph.regions()[r];
    int64_t split_start = 0;
    for (size_t k = 0; k < region.results.size(); ++k) {
      const ir::ResultAlias& alias = region.result_aliases[k];
      if (alias.kind == ir::AliasKind::kNone) continue;
      const ir::ValueId source = region.operands[static_cast<size_t>(alias.operand)];
      const Layout& from = bound.layouts_[static_cast<size_t>(source)];
      Layout& l = bound.layouts_[static_cast<size_t>(region.results[k])];
      std::vector<int64_t> shape = l.shape;
      if (alias.kind == ir::AliasKind::kInPlace) {
        l = from;
      } else if (region.kind == "split") {
        l = from;
        l.shape = shape;
        l.offset += split_start * from.strides.back();
        split_start += shape.back();
      } else {
        std::vector<int64_t> strides;
        if (!ReshapeStrides(from, shape, &strides)) {
          return absl::InvalidArgumentError(absl::StrCat(
              "region #", r, " '", region.kind, "' (%", graph.value(region.results[k]).name,
              "): the view of %", graph.value(source).name, " with strides [",
              absl::StrJoin(from.strides, ","), "] cannot be reshaped to [",
              absl::StrJoin(shape, ","), "] without a copy"));
        }
        l = from;
        l.shape = std::move(shape);
        l.strides = std::move(strides);
      }
    }
  }
  return bound;
}

int64_t BoundGraph::bytes(ir::ValueId id) const {
  return layout(id).NumElements() * ir::DTypeSize(dtype(id));
}

int64_t BoundGraph::storage_bytes(ir::ValueId root) const {
  return layout(root).SpanElements() * ir::DTypeSize(dtype(root));
}

std::string BoundRegion::Label() const {
  const ir::Region& r = region();
  std::string first = r.results.empty() ? std::string("no results")
                                        : absl::StrCat("%", graph().value(r.results[0]).name);
  return absl::StrCat("region #", index_, " '", r.kind, "' (", first, ")");
}

}  // namespace tileplan::kernels
