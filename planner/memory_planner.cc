#include "planner/memory_planner.h"

#include <algorithm>
#include <numeric>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/align.h"
#include "base/status_macros.h"

namespace tileplan::planner {
namespace {

using kernels::BoundGraph;
using kernels::Layout;

class UnionFind {
 public:
  explicit UnionFind(int n) : parent_(static_cast<size_t>(n)) {
    std::iota(parent_.begin(), parent_.end(), 0);
  }
  int Find(int x) {
    while (parent_[static_cast<size_t>(x)] != x) {
      parent_[static_cast<size_t>(x)] =
          parent_[static_cast<size_t>(parent_[static_cast<size_t>(x)])];
      x = parent_[static_cast<size_t>(x)];
    }
    return x;
  }
  // Makes `into`'s class absorb `x`'s; returns the representative.
  int Join(int into, int x) {
    into = Find(into);
    x = Find(x);
    parent_[static_cast<size_t>(x)] = into;
    return into;
  }

 private:
  std::vector<int> parent_;
};

bool IsDeclaration(const ir::Value& v) { return v.kind != ir::ValueKind::kResult; }

// Whether a fresh result may take an operand's bytes position for position.
bool SameAddressing(const BoundGraph& g, ir::ValueId operand, ir::ValueId result) {
  const Layout& lo = g.layout(operand);
  const Layout& lr = g.layout(result);
  return lo.IsContiguous() && lo.shape == lr.shape &&
         ir::DTypeSize(g.dtype(operand)) == ir::DTypeSize(g.dtype(result));
}

absl::Status CheckOptions(const BoundGraph& g, const MemoryPlanOptions& options) {
  const int64_t a = options.alignment;
  if (a <= 0 || (a & (a - 1)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("memory plan: alignment must be a power of two, got ", a));
  }
  const size_t n = g.graph().regions().size();
  for (const auto& [sizes, what] : {std::pair(&options.workspace_bytes, "workspace"),
                                    std::pair(&options.counter_bytes, "counter")}) {
    if (!sizes->empty() && sizes->size() != n) {
      return absl::InvalidArgumentError(absl::StrCat("memory plan: ", sizes->size(), " ", what,
                                                     " sizes given for ", n, " regions"));
    }
    for (size_t i = 0; i < sizes->size(); ++i) {
      if ((*sizes)[i] < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("memory plan: region #", i, " has a negative ", what, " size"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::string_view StorageKindName(StorageKind kind) {
  switch (kind) {
    case StorageKind::kArena:
      return "arena";
    case StorageKind::kInput:
      return "input";
    case StorageKind::kWeight:
      return "weight";
    case StorageKind::kState:
      return "state";
  }
  return "?";
}

absl::StatusOr<MemoryPlan> PlanMemory(const BoundGraph& g, const MemoryPlanOptions& options) {
  TP_RETURN_IF_ERROR(CheckOptions(g, options));
  const ir::Graph& graph = g.graph();
  const int n = static_cast<int>(graph.regions().size());
  const int num_values = graph.num_values();
  auto root_of = [&](ir::ValueId v) { return g.layout(v).root; };

  // Lifetimes of base roots (the storage owners of the graph's own aliasing).
  std::vector<int> first(static_cast<size_t>(num_values), 0);
  std::vector<int> last(static_cast<size_t>(num_values), -1);
  for (int i = 0; i < n; ++i) {
    const ir::Region& r = graph.regions()[static_cast<size_t>(i)];
    for (ir::ValueId o : r.operands) {
      int& l = last[static_cast<size_t>(root_of(o))];
      l = std::max(l, i);
    }
    for (ir::ValueId v : r.results) {
      if (root_of(v) == v) first[static_cast<size_t>(v)] = i;
      int& l = last[static_cast<size_t>(root_of(v))];
      l = std::max(l, i);
    }
  }
  for (ir::ValueId o : graph.outputs()) last[static_cast<size_t>(root_of(o))] = n;

  // Reuse: fresh results joining a dead operand's storage group.
  MemoryPlan plan;
  plan.alignment = options.alignment;
  UnionFind groups(num_values);
  std::vector<int64_t> offset_in_group(static_cast<size_t>(num_values), 0);  // bytes
  std::vector<int64_t> group_bytes(static_cast<size_t>(num_values), 0);
  for (ir::ValueId v = 0; v < num_values; ++v) {
    if (root_of(v) == v) group_bytes[static_cast<size_t>(v)] = g.storage_bytes(v);
  }
  std::vector<int> group_last = last;
  if (options.may_overwrite) {
    for (int i = 0; i < n; ++i) {
      const ir::Region& r = graph.regions()[static_cast<size_t>(i)];
      std::set<int> taken;  // groups a result of this region already took
      for (size_t k = 0; k < r.results.size(); ++k) {
        const ir::ValueId v = r.results[k];
        if (r.result_aliases[k].kind != ir::AliasKind::kNone) continue;
        for (size_t j = 0; j < r.operands.size(); ++j) {
          const ir::ValueId o = r.operands[j];
          const ir::ValueId base = root_of(o);
          if (IsDeclaration(graph.value(base))) continue;
          const int group = groups.Find(base);
          if (taken.count(group) || group_last[static_cast<size_t>(group)] != i) continue;
          bool shared_with_other_operand = false;
          for (size_t j2 = 0; j2 < r.operands.size(); ++j2) {
            if (j2 != j && groups.Find(root_of(r.operands[j2])) == group) {
              shared_with_other_operand = true;
            }
          }
          if (shared_with_other_operand || !SameAddressing(g, o, v) ||
              !options.may_overwrite(i, static_cast<int>(k), static_cast<int>(j))) {
            continue;
          }
          groups.Join(group, v);
          offset_in_group[static_cast<size_t>(v)] = offset_in_group[static_cast<size_t>(base)] +
                                                    g.layout(o).offset * ir::DTypeSize(g.dtype(o));
          group_last[static_cast<size_t>(group)] =
              std::max(group_last[static_cast<size_t>(group)], last[static_cast<size_t>(v)]);
          group_bytes[static_cast<size_t>(group)] =
              std::max(group_bytes[static_cast<size_t>(group)],
                       offset_in_group[static_cast<size_t>(v)] + g.storage_bytes(v));
          taken.insert(group);
          plan.reuses.push_back(Reuse{i, static_cast<int>(k), static_cast<int>(j)});
          break;
        }
      }
    }
  }

  // One arena buffer per group of inputs and fresh results, one per workspace.
  std::vector<ArenaBuffer> buffers;
  std::vector<int32_t> buffer_of_group(static_cast<size_t>(num_values), -1);
  for (ir::ValueId v = 0; v < num_values; ++v) {
    const ir::Value& value = graph.value(v);
    if (root_of(v) != v || value.kind == ir::ValueKind::kWeight ||
        value.kind == ir::ValueKind::kState) {
      continue;
    }
    plan.intermediate_bytes += AlignUp(g.storage_bytes(v), options.alignment);
    const int group = groups.Find(v);
    if (group != v) continue;
    ArenaBuffer b;
    b.bytes = AlignUp(group_bytes[static_cast<size_t>(v)], options.alignment);
    b.first_step = first[static_cast<size_t>(v)];
    b.input = value.kind == ir::ValueKind::kInput;
    // Inputs live for the whole run: a replayed graph finds them as the host (or a
    // device-side loop between replays) left them.
    b.last_step = b.input ? n : std::max(group_last[static_cast<size_t>(v)], b.first_step);
    buffer_of_group[static_cast<size_t>(v)] = static_cast<int32_t>(buffers.size());
    buffers.push_back(std::move(b));
  }
  // Workspaces live for their step; counters for the whole run.
  plan.workspace.assign(static_cast<size_t>(n), -1);
  plan.counters.assign(static_cast<size_t>(n), -1);
  for (int i = 0; i < n; ++i) {
    const size_t k = static_cast<size_t>(i);
    if (k < options.workspace_bytes.size() && options.workspace_bytes[k] > 0) {
      ArenaBuffer b;
      b.bytes = AlignUp(options.workspace_bytes[k], options.alignment);
      b.first_step = b.last_step = i;
      b.workspace_of = i;
      plan.intermediate_bytes += b.bytes;
      plan.workspace[k] = static_cast<int32_t>(buffers.size());
      buffers.push_back(std::move(b));
    }
    if (k < options.counter_bytes.size() && options.counter_bytes[k] > 0) {
      ArenaBuffer b;
      b.bytes = AlignUp(options.counter_bytes[k], options.alignment);
      b.first_step = 0;
      b.last_step = n;
      b.counters_of = i;
      plan.intermediate_bytes += b.bytes;
      plan.counters[k] = static_cast<int32_t>(buffers.size());
      buffers.push_back(std::move(b));
    }
  }

  // Greedy placement, largest first, each at the tightest gap among time-overlapping buffers.
  std::vector<size_t> order(buffers.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (buffers[a].bytes != buffers[b].bytes) return buffers[a].bytes > buffers[b].bytes;
    return buffers[a].first_step < buffers[b].first_step;
  });
  std::vector<size_t> placed;
  std::vector<std::pair<int64_t, int64_t>> busy;
  for (size_t index : order) {
    ArenaBuffer& b = buffers[index];
    busy.clear();
    for (size_t p : placed) {
      const ArenaBuffer& q = buffers[p];
      if (q.first_step <= b.last_step && b.first_step <= q.last_step && q.bytes > 0) {
        busy.emplace_back(q.offset, q.offset + q.bytes);
      }
    }
    std::sort(busy.begin(), busy.end());
    int64_t cursor = 0, best = -1, best_gap = 0;
    for (const auto& [start, end] : busy) {
      const int64_t gap = start - cursor;
      if (gap >= b.bytes && (best < 0 || gap < best_gap)) {
        best = cursor;
        best_gap = gap;
      }
      cursor = std::max(cursor, end);
    }
    b.offset = best >= 0 ? best : cursor;
    plan.arena_bytes = std::max(plan.arena_bytes, b.offset + b.bytes);
    placed.push_back(index);
  }

  // Peak of live bytes over steps 0..n (n: after the last region, outputs only).
  std::vector<int64_t> delta(static_cast<size_t>(n) + 2, 0);
  for (const ArenaBuffer& b : buffers) {
    delta[static_cast<size_t>(b.first_step)] += b.bytes;
    delta[static_cast<size_t>(b.last_step) + 1] -= b.bytes;
  }
  int64_t live = 0;
  for (int64_t d : delta) {
    live += d;
    plan.peak_live_bytes = std::max(plan.peak_live_bytes, live);
  }

  // Sort buffers by address and renumber.
  std::vector<size_t> by_offset(buffers.size());
  std::iota(by_offset.begin(), by_offset.end(), 0);
  std::stable_sort(by_offset.begin(), by_offset.end(), [&](size_t a, size_t b) {
    if (buffers[a].offset != buffers[b].offset) return buffers[a].offset < buffers[b].offset;
    return buffers[a].first_step < buffers[b].first_step;
  });
  std::vector<int32_t> renumber(buffers.size());
  for (size_t k = 0; k < by_offset.size(); ++k) {
    renumber[by_offset[k]] = static_cast<int32_t>(k);
    plan.buffers.push_back(std::move(buffers[by_offset[k]]));
  }
  for (std::vector<int32_t>* per_region : {&plan.workspace, &plan.counters}) {
    for (int32_t& w : *per_region) {
      if (w >= 0) w = renumber[static_cast<size_t>(w)];
    }
  }

  // States, then every value's placement.
  std::vector<int64_t> state_offset(static_cast<size_t>(num_values), 0);
  if (!options.state_bytes.empty() && options.state_bytes.size() != graph.states().size()) {
    return absl::InvalidArgumentError(absl::StrCat("state_bytes has ", options.state_bytes.size(),
                                                   " entries for ", graph.states().size(),
                                                   " states"));
  }
  for (size_t k = 0; k < graph.states().size(); ++k) {
    const ir::ValueId s = graph.states()[k];
    int64_t bytes = g.storage_bytes(s);
    if (!options.state_bytes.empty()) {
      if (options.state_bytes[k] < bytes) {
        return absl::InvalidArgumentError(absl::StrCat("state %", graph.value(s).name, " needs ",
                                                       bytes, " bytes; state_bytes gives ",
                                                       options.state_bytes[k]));
      }
      bytes = options.state_bytes[k];
    }
    state_offset[static_cast<size_t>(s)] = plan.state_bytes;
    plan.states.push_back(StateBuffer{s, plan.state_bytes, bytes});
    plan.state_bytes += AlignUp(bytes, options.alignment);
  }
  for (ir::ValueId w : graph.weights()) plan.weight_bytes += g.storage_bytes(w);
  plan.values.resize(static_cast<size_t>(num_values));
  for (ir::ValueId v = 0; v < num_values; ++v) {
    const ir::ValueId base = root_of(v);
    const int64_t element_offset = g.layout(v).offset * ir::DTypeSize(g.dtype(v));
    ValuePlacement& p = plan.values[static_cast<size_t>(v)];
    const ir::ValueKind kind = graph.value(base).kind;
    if (kind == ir::ValueKind::kWeight) {
      p = ValuePlacement{StorageKind::kWeight, element_offset, base, -1};
    } else if (kind == ir::ValueKind::kState) {
      p = ValuePlacement{StorageKind::kState,
                         state_offset[static_cast<size_t>(base)] + element_offset, base, -1};
    } else {
      const int group = groups.Find(base);
      const int32_t buffer =
          renumber[static_cast<size_t>(buffer_of_group[static_cast<size_t>(group)])];
      ArenaBuffer& b = plan.buffers[static_cast<size_t>(buffer)];
      b.values.push_back(v);
      p = ValuePlacement{b.input ? StorageKind::kInput : StorageKind::kArena,
                         b.offset + offset_in_group[static_cast<size_t>(base)] + element_offset,
                         group, buffer};
    }
  }
  return plan;
}

absl::Status CheckMemoryPlan(const BoundGraph& g, const MemoryPlan& plan,
                             const MemoryPlanOptions& options) {
  TP_RETURN_IF_ERROR(CheckOptions(g, options));
  const ir::Graph& graph = g.graph();
  const int n = static_cast<int>(graph.regions().size());
  const int num_values = graph.num_values();
  auto fail = [](auto&&... parts) {
    return absl::InternalError(absl::StrCat("memory plan: ", parts...));
  };
  if (static_cast<int>(plan.values.size()) != num_values ||
      static_cast<int>(plan.workspace.size()) != n || static_cast<int>(plan.counters.size()) != n) {
    return fail("has ", plan.values.size(), " placements, ", plan.workspace.size(),
                " workspace and ", plan.counters.size(), " counter entries for ", num_values,
                " values and ", n, " regions");
  }
  auto name = [&](ir::ValueId v) { return absl::StrCat("%", graph.value(v).name); };

  // Value lifetimes from the graph alone: defined at the producer (declarations at 0), alive
  // to the last read of the value or of anything aliasing it; outputs to the end.
  std::vector<int> def(static_cast<size_t>(num_values), 0),
      last(static_cast<size_t>(num_values), 0);
  UnionFind alias(num_values);
  for (int i = 0; i < n; ++i) {
    const ir::Region& r = graph.regions()[static_cast<size_t>(i)];
    for (ir::ValueId o : r.operands)
      last[static_cast<size_t>(o)] = std::max(last[static_cast<size_t>(o)], i);
    for (size_t k = 0; k < r.results.size(); ++k) {
      def[static_cast<size_t>(r.results[k])] = i;
      last[static_cast<size_t>(r.results[k])] =
          std::max(last[static_cast<size_t>(r.results[k])], i);
      const ir::ResultAlias& a = r.result_aliases[k];
      if (a.kind != ir::AliasKind::kNone) {
        alias.Join(r.operands[static_cast<size_t>(a.operand)], r.results[k]);
      }
    }
  }
  for (ir::ValueId o : graph.outputs()) last[static_cast<size_t>(o)] = n;
  for (int i = n - 1; i >= 0; --i) {
    const ir::Region& r = graph.regions()[static_cast<size_t>(i)];
    for (size_t k = 0; k < r.results.size(); ++k) {
      const ir::ResultAlias& a = r.result_aliases[k];
      if (a.kind == ir::AliasKind::kNone) continue;
      int& l = last[static_cast<size_t>(r.operands[static_cast<size_t>(a.operand)])];
      l = std::max(l, last[static_cast<size_t>(r.results[k])]);
    }
  }
  std::vector<int> class_last(static_cast<size_t>(num_values), -1);
  for (ir::ValueId v = 0; v < num_values; ++v) {
    int& l = class_last[static_cast<size_t>(alias.Find(v))];
    l = std::max(l, last[static_cast<size_t>(v)]);
  }

  // Every reuse must be allowed; it then joins the two storage classes.
  UnionFind storage = alias;
  for (const Reuse& u : plan.reuses) {
    if (u.region < 0 || u.region >= n) return fail("a reuse names region #", u.region);
    const ir::Region& r = graph.regions()[static_cast<size_t>(u.region)];
    if (u.result < 0 || u.result >= static_cast<int>(r.results.size()) || u.operand < 0 ||
        u.operand >= static_cast<int>(r.operands.size())) {
      return fail("a reuse of region #", u.region, " names result ", u.result, " and operand ",
                  u.operand);
    }
    const ir::ValueId res = r.results[static_cast<size_t>(u.result)];
    const ir::ValueId op = r.operands[static_cast<size_t>(u.operand)];
    const std::string what =
        absl::StrCat("region #", u.region, " writes ", name(res), " over ", name(op));
    if (r.result_aliases[static_cast<size_t>(u.result)].kind != ir::AliasKind::kNone ||
        !SameAddressing(g, op, res) || !options.may_overwrite ||
        !options.may_overwrite(u.region, u.result, u.operand)) {
      return fail(what, ", which its kernel or the layouts do not allow");
    }
    if (class_last[static_cast<size_t>(alias.Find(op))] != u.region) {
      return fail(what, ", whose storage is still read after that step");
    }
    for (size_t j = 0; j < r.operands.size(); ++j) {
      if (static_cast<int>(j) != u.operand && alias.Find(r.operands[j]) == alias.Find(op)) {
        return fail(what, ", whose storage another operand of the step reads");
      }
    }
    storage.Join(op, res);
  }

  // Arena items: values and workspaces, each a byte range, a step range and a class.
  struct Item {
    int64_t begin, end;
    int first, last;
    int cls;  // storage class; negative and unique for a workspace or counters
    std::string label;
  };
  std::vector<Item> items;
  auto check_buffer = [&](int32_t index, int64_t begin, int64_t end,
                          const std::string& label) -> absl::Status {
    if (index < 0 || index >= static_cast<int32_t>(plan.buffers.size())) {
      return fail(label, " names arena buffer ", index);
    }
    const ArenaBuffer& b = plan.buffers[static_cast<size_t>(index)];
    if (b.offset % plan.alignment != 0 || b.bytes % plan.alignment != 0 ||
        b.offset + b.bytes > plan.arena_bytes || begin < b.offset || end > b.offset + b.bytes) {
      return fail(label, " at bytes [", begin, ", ", end, ") is outside its buffer [", b.offset,
                  ", ", b.offset + b.bytes, ") or the buffer is misaligned or outside ",
                  "the arena of ", plan.arena_bytes, " bytes");
    }
    return absl::OkStatus();
  };
  for (ir::ValueId v = 0; v < num_values; ++v) {
    const ValuePlacement& p = plan.values[static_cast<size_t>(v)];
    if (p.storage != StorageKind::kArena && p.storage != StorageKind::kInput) continue;
    const int64_t span = g.layout(v).SpanElements() * ir::DTypeSize(g.dtype(v));
    const std::string label = absl::StrCat("value ", name(v));
    TP_RETURN_IF_ERROR(check_buffer(p.buffer, p.offset, p.offset + span, label));
    if (span == 0) continue;
    items.push_back(Item{p.offset, p.offset + span, def[static_cast<size_t>(v)],
                         last[static_cast<size_t>(v)], storage.Find(v), label});
  }
  // Scratch of the steps: workspaces live for their step, counters for the whole run.
  int scratch_class = -1;
  for (const bool counters : {false, true}) {
    const std::vector<int32_t>& index = counters ? plan.counters : plan.workspace;
    const std::vector<int64_t>& sizes = counters ? options.counter_bytes : options.workspace_bytes;
    for (int i = 0; i < n; ++i) {
      const int32_t w = index[static_cast<size_t>(i)];
      const int64_t want = sizes.empty() ? 0 : sizes[static_cast<size_t>(i)];
      const std::string label =
          absl::StrCat("the ", counters ? "counters" : "workspace", " of region #", i);
      if (w < 0) {
        if (want > 0) return fail(label, " are missing; the step needs ", want, " bytes");
        continue;
      }
      if (w >= static_cast<int32_t>(plan.buffers.size())) return fail(label, " name buffer ", w);
      const ArenaBuffer& b = plan.buffers[static_cast<size_t>(w)];
      TP_RETURN_IF_ERROR(check_buffer(w, b.offset, b.offset + want, label));
      if (want > 0) {
        items.push_back(Item{b.offset, b.offset + want, counters ? 0 : i, counters ? n : i,
                             scratch_class--, label});
      }
    }
  }
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  for (size_t a = 0; a < items.size(); ++a) {
    for (size_t b = a + 1; b < items.size() && items[b].begin < items[a].end; ++b) {
      const Item& x = items[a];
      const Item& y = items[b];
      if (x.cls == y.cls || x.last < y.first || y.last < x.first) continue;
      return fail(x.label, " (bytes [", x.begin, ", ", x.end, "), steps ", x.first, "..", x.last,
                  ") overlaps ", y.label, " (bytes [", y.begin, ", ", y.end, "), steps ", y.first,
                  "..", y.last, ")");
    }
  }

  // States: disjoint, inside the state space.
  std::vector<std::pair<int64_t, int64_t>> states;
  for (const StateBuffer& s : plan.states) states.emplace_back(s.offset, s.offset + s.bytes);
  std::sort(states.begin(), states.end());
  for (size_t k = 0; k < states.size(); ++k) {
    if (states[k].second > plan.state_bytes || (k > 0 && states[k].first < states[k - 1].second)) {
      return fail("state bytes [", states[k].first, ", ", states[k].second,
                  ") overlap another state or leave the state space of ", plan.state_bytes,
                  " bytes");
    }
  }
  return absl::OkStatus();
}

}  // namespace tileplan::planner
