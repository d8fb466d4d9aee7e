#include "regions/verifier.h"

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "regions/syntax.h"

namespace tileplan::ir {
namespace {

absl::string_view AliasWord(AliasKind kind) {
  switch (kind) {
    case AliasKind::kNone:
      return "none";
    case AliasKind::kInPlace:
      return "inplace";
    case AliasKind::kView:
      return "view";
  }
  return "?";
}

class Verifier {
 public:
  Verifier(const Graph& graph, const KindRegistry& kinds)
      : g_(graph),
        kinds_(kinds),
        updated_by_(static_cast<size_t>(graph.num_values()), -1),
        view_root_(static_cast<size_t>(graph.num_values())),
        views_of_root_(static_cast<size_t>(graph.num_values())) {
    for (ValueId id = 0; id < graph.num_values(); ++id) view_root_[id] = id;
  }

  absl::Status Run() {
    TP_RETURN_IF_ERROR(CheckValues());
    TP_RETURN_IF_ERROR(CheckDeclarationLists());
    TP_RETURN_IF_ERROR(CheckWeights());
    for (size_t i = 0; i < g_.regions().size(); ++i) {
      absl::Status s = CheckRegion(static_cast<int>(i));
      if (!s.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(RegionLabel(static_cast<int>(i)), ": ", s.message()));
      }
    }
    return CheckOutputs();
  }

 private:
  bool InRange(ValueId id) const { return id >= 0 && id < g_.num_values(); }
  std::string Ref(ValueId id) const { return absl::StrCat("%", g_.value(id).name); }

  std::string RegionLabel(int index) const {
    const Region& r = g_.regions()[index];
    std::string first =
        !r.results.empty() && InRange(r.results[0]) ? Ref(r.results[0]) : std::string("no results");
    return absl::StrCat("region #", index, " '", r.kind, "' (", first, ")");
  }

  absl::Status CheckValues() {
    if (!IsValueName(g_.name())) {
      return absl::InvalidArgumentError(
          absl::StrCat("graph name '", g_.name(), "' is not of the form [A-Za-z0-9_.]+"));
    }
    std::map<std::string, ValueId, std::less<>> seen;
    for (ValueId id = 0; id < g_.num_values(); ++id) {
      const Value& v = g_.value(id);
      if (!IsValueName(v.name)) {
        return absl::InvalidArgumentError(
            absl::StrCat("value #", id, " name '", v.name, "' is not of the form [A-Za-z0-9_.]+"));
      }
      auto [it, inserted] = seen.emplace(v.name, id);
      if (!inserted) {
        return absl::InvalidArgumentError(absl::StrCat(
            "value ", Ref(id), " is defined twice (values #", it->second, " and #", id, ")"));
      }
      absl::Status type = CheckTypeWellFormed(v.type);
      if (!type.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("value ", Ref(id), " has a malformed type: ", type.message()));
      }
      if (v.kind != ValueKind::kWeight && !v.checkpoint_tensors.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("value ", Ref(id), " is not a weight but binds checkpoint tensor \"",
                         v.checkpoint_tensors[0], "\""));
      }
      if (v.kind != ValueKind::kResult && (v.producer != -1 || v.result_index != -1)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "value ", Ref(id), " is a declaration but names producer region #", v.producer));
      }
      if (v.kind == ValueKind::kResult) {
        const bool produced =
            v.producer >= 0 && static_cast<size_t>(v.producer) < g_.regions().size() &&
            v.result_index >= 0 &&
            static_cast<size_t>(v.result_index) < g_.regions()[v.producer].results.size() &&
            g_.regions()[v.producer].results[v.result_index] == id;
        if (!produced) {
          return absl::InvalidArgumentError(absl::StrCat(
              "value ", Ref(id), " is a region result but no region lists it as a result"));
        }
      }
    }
    return absl::OkStatus();
  }

  // Every input, weight and state value is listed exactly once in the list of its kind.
  absl::Status CheckDeclarationLists() {
    std::vector<int> listed(static_cast<size_t>(g_.num_values()), 0);
    const struct {
      const std::vector<ValueId>& ids;
      ValueKind kind;
      const char* what;
    } lists[] = {{g_.inputs(), ValueKind::kInput, "input"},
                 {g_.weights(), ValueKind::kWeight, "weight"},
                 {g_.states(), ValueKind::kState, "state"}};
    for (const auto& list : lists) {
      for (size_t k = 0; k < list.ids.size(); ++k) {
        const ValueId id = list.ids[k];
        if (!InRange(id) || g_.value(id).kind != list.kind || listed[id]++ > 0) {
          return absl::InvalidArgumentError(absl::StrCat(list.what, " #", k, " is not a distinct ",
                                                         list.what, " value (id ", id, ")"));
        }
      }
    }
    for (ValueId id = 0; id < g_.num_values(); ++id) {
      if (g_.value(id).kind != ValueKind::kResult && listed[id] == 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "value ", Ref(id), " is a declaration missing from the graph's declaration lists"));
      }
    }
    return absl::OkStatus();
  }

  // Every weight binds at least one non-empty checkpoint tensor, and no tensor is bound
  // whole twice, within a packed weight or across weights (slices of a tensor may repeat what
  // another binding reads: a tied, vocab-parallel LM head reads a slice of the embedding table
  // the embedding reads whole).
  absl::Status CheckWeights() {
    std::map<std::string, ValueId> bound;
    for (ValueId id : g_.weights()) {
      const Value& w = g_.value(id);
      if (w.checkpoint_tensors.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("weight ", Ref(id), " binds no checkpoint tensor"));
      }
      for (size_t k = 0; k < w.checkpoint_tensors.size(); ++k) {
        const std::string& tensor = w.checkpoint_tensors[k];
        if (tensor.empty()) {
          return absl::InvalidArgumentError(absl::StrCat(
              "weight ", Ref(id), " binds an empty checkpoint tensor name (part ", k, ")"));
        }
        if (const TensorSlice slice = w.slice(k); !slice.whole()) {
          if (slice.dim >= w.type.rank()) {
            return absl::InvalidArgumentError(absl::StrCat(
                "weight ", Ref(id), " slices dim ", slice.dim, " of checkpoint tensor \"", tensor,
                "\", but its type ", w.type.ToString(), " has rank ", w.type.rank()));
          }
          continue;
        }
        auto [it, inserted] = bound.emplace(tensor, id);
        if (!inserted) {
          return absl::InvalidArgumentError(
              it->second == id
                  ? absl::StrCat("weight ", Ref(id), " binds checkpoint tensor \"", tensor,
                                 "\" twice")
                  : absl::StrCat("weight ", Ref(id), " binds checkpoint tensor \"", tensor,
                                 "\", already bound by weight ", Ref(it->second)));
        }
      }
      for (const Dim& d : w.type.dims) {
        if (!d.is_static()) {
          return absl::InvalidArgumentError(
              absl::StrCat("weight ", Ref(id), " has type ", w.type.ToString(), " with symbol ",
                           d.symbol(), "; weight dims must be static"));
        }
      }
      if (w.checkpoint_tensors.size() > 1 && w.type.rank() == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("weight ", Ref(id), " has type ", w.type.ToString(),
                         " but packs several checkpoint tensors; a packed weight needs a dim 0"));
      }
    }
    return absl::OkStatus();
  }

  // Errors from here on are prefixed with the region's label by Run().
  absl::Status CheckRegion(int index) {
    const Region& r = g_.regions()[index];
    TP_RETURN_IF_ERROR(CheckRegionStructure(index, r));
    for (size_t k = 0; k < r.operands.size(); ++k) {
      TP_RETURN_IF_ERROR(CheckOperandUse(index, r, static_cast<int>(k)));
    }
    const KindSpec* spec = kinds_.Find(r.kind);
    if (spec == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown region kind '", r.kind, "'"));
    }
    for (size_t k = 0; k < r.fused_from.size(); ++k) {
      const KindSpec* part = kinds_.Find(r.fused_from[k]);
      if (part == nullptr || part->fused) {
        return absl::InvalidArgumentError(
            absl::StrCat("fused_from entry ", k, " '", r.fused_from[k], "' is not a ",
                         part == nullptr ? "registered region kind" : "primitive kind"));
      }
    }
    std::vector<TensorType> operand_types, declared;
    std::vector<std::string> names;
    for (ValueId id : r.operands) {
      operand_types.push_back(g_.value(id).type);
      names.push_back(Ref(id));
    }
    for (ValueId id : r.results) declared.push_back(g_.value(id).type);
    const KindArgs args{operand_types, names, r.attrs, declared};
    TP_ASSIGN_OR_RETURN(std::vector<InferredResult> inferred, InferResults(*spec, args));
    if (inferred.size() != r.results.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("declares ", r.results.size(), " results, expected ", inferred.size()));
    }
    for (size_t j = 0; j < r.results.size(); ++j) {
      TP_RETURN_IF_ERROR(CheckResult(r, static_cast<int>(j), inferred[j]));
    }
    RecordAliases(index, r);
    return absl::OkStatus();
  }

  absl::Status CheckRegionStructure(int index, const Region& r) {
    if (r.results.empty()) return absl::InvalidArgumentError("has no results");
    if (r.result_aliases.size() != r.results.size()) {
      return absl::InvalidArgumentError(absl::StrCat("has ", r.results.size(), " results but ",
                                                     r.result_aliases.size(), " alias entries"));
    }
    for (size_t j = 0; j < r.results.size(); ++j) {
      const ValueId id = r.results[j];
      if (!InRange(id) || g_.value(id).kind != ValueKind::kResult ||
          g_.value(id).producer != index || g_.value(id).result_index != static_cast<int32_t>(j)) {
        return absl::InvalidArgumentError(
            absl::StrCat("result ", j, " (value id ", id, ") is not a result value produced here"));
      }
      const ResultAlias& alias = r.result_aliases[j];
      if (alias.kind == AliasKind::kNone && alias.operand != -1) {
        return absl::InvalidArgumentError(absl::StrCat("result ", j, " (", Ref(id),
                                                       ") names operand ", alias.operand,
                                                       " without an alias kind"));
      }
      if (alias.kind != AliasKind::kNone &&
          (alias.operand < 0 || static_cast<size_t>(alias.operand) >= r.operands.size())) {
        return absl::InvalidArgumentError(absl::StrCat("result ", j, " (", Ref(id),
                                                       ") aliases operand ", alias.operand,
                                                       ", which does not exist"));
      }
    }
    for (size_t k = 0; k < r.operands.size(); ++k) {
      if (!InRange(r.operands[k])) {
        return absl::InvalidArgumentError(absl::StrCat("operand ", k, " refers to value id ",
                                                       r.operands[k], ", which does not exist"));
      }
    }
    return absl::OkStatus();
  }

  // SSA order and in-place hazards for operand k of region `index`.
  absl::Status CheckOperandUse(int index, const Region& r, int k) {
    const ValueId id = r.operands[k];
    const Value& v = g_.value(id);
    const std::string label = absl::StrCat("operand ", k, " (", Ref(id), ")");
    if (v.kind == ValueKind::kResult && v.producer >= index) {
      return absl::InvalidArgumentError(
          absl::StrCat(label, " is used before it is defined (by region #", v.producer, ")"));
    }
    const int writer = updated_by_[id];
    if (writer >= 0) {
      const Region& w = g_.regions()[writer];
      const bool writes_again = WritesInPlace(r, k);
      return absl::InvalidArgumentError(absl::StrCat(
          label, writes_again ? " is updated in place a second time" : " is read",
          " after region #", writer, " '", w.kind, "' updated its storage in place (new version ",
          Ref(w.results[InPlaceResultOf(w, id)]),
          "); a value version may be updated in place once and not read afterwards"));
    }
    return absl::OkStatus();
  }

  static bool WritesInPlace(const Region& r, int k) {
    for (const ResultAlias& a : r.result_aliases) {
      if (a.kind == AliasKind::kInPlace && a.operand == k) return true;
    }
    return false;
  }

  // The result of writer `w` that is the in-place update of `id`'s storage.
  size_t InPlaceResultOf(const Region& w, ValueId id) const {
    for (size_t j = 0; j < w.result_aliases.size(); ++j) {
      if (w.result_aliases[j].kind == AliasKind::kInPlace &&
          w.operands[w.result_aliases[j].operand] == view_root_[id]) {
        return j;
      }
    }
    return 0;
  }

  absl::Status CheckResult(const Region& r, int j, const InferredResult& want) {
    const ValueId id = r.results[j];
    const std::string label = absl::StrCat("result ", j, " (", Ref(id), ")");
    const TensorType& type = g_.value(id).type;
    if (!(type == want.type)) {
      return absl::InvalidArgumentError(
          absl::StrCat(label, " has type ", type.ToString(), ", expected ", want.type.ToString()));
    }
    const ResultAlias& alias = r.result_aliases[j];
    if (!(alias == want.alias)) {
      const std::string expected = want.alias.kind == AliasKind::kNone
                                       ? std::string("no aliasing")
                                       : absl::StrCat(AliasWord(want.alias.kind), "(",
                                                      Ref(r.operands[want.alias.operand]), ")");
      const std::string found =
          alias.kind == AliasKind::kNone
              ? std::string("none")
              : absl::StrCat(AliasWord(alias.kind), "(", Ref(r.operands[alias.operand]), ")");
      return absl::InvalidArgumentError(
          absl::StrCat(label, " must declare ", expected, ", declares ", found));
    }
    if (alias.kind == AliasKind::kNone) return absl::OkStatus();
    const ValueId target = r.operands[alias.operand];
    for (size_t k = 0; k < r.operands.size(); ++k) {
      if (static_cast<int>(k) != alias.operand && r.operands[k] == target) {
        return absl::InvalidArgumentError(absl::StrCat(
            label, " aliases ", Ref(target), ", which appears more than once among the operands"));
      }
    }
    if (alias.kind == AliasKind::kInPlace) {
      const Value& t = g_.value(target);
      if (t.kind == ValueKind::kWeight) {
        return absl::InvalidArgumentError(absl::StrCat(label, " updates weight ", Ref(target),
                                                       " in place; weights are read-only"));
      }
      if (t.kind == ValueKind::kResult &&
          g_.regions()[t.producer].result_aliases[t.result_index].kind == AliasKind::kView) {
        return absl::InvalidArgumentError(
            absl::StrCat(label, " updates ", Ref(target), " in place, but it is a read-only view"));
      }
    }
    return absl::OkStatus();
  }

  // Views share their root's storage; an in-place update of a root makes the root and
  // every view of it stale. In-place targets are never views (CheckResult), so they are
  // roots.
  void RecordAliases(int index, const Region& r) {
    for (size_t j = 0; j < r.results.size(); ++j) {
      const ResultAlias& a = r.result_aliases[j];
      if (a.kind != AliasKind::kView) continue;
      const ValueId root = view_root_[r.operands[a.operand]];
      view_root_[r.results[j]] = root;
      views_of_root_[root].push_back(r.results[j]);
    }
    for (const ResultAlias& a : r.result_aliases) {
      if (a.kind != AliasKind::kInPlace) continue;
      const ValueId root = r.operands[a.operand];
      updated_by_[root] = index;
      for (ValueId v : views_of_root_[root]) updated_by_[v] = index;
    }
  }

  absl::Status CheckOutputs() {
    std::vector<bool> seen(static_cast<size_t>(g_.num_values()), false);
    for (size_t k = 0; k < g_.outputs().size(); ++k) {
      const ValueId id = g_.outputs()[k];
      if (!InRange(id)) {
        return absl::InvalidArgumentError(
            absl::StrCat("output #", k, " refers to value id ", id, ", which does not exist"));
      }
      if (seen[id]) {
        return absl::InvalidArgumentError(
            absl::StrCat("output #", k, " (", Ref(id), ") is listed twice"));
      }
      seen[id] = true;
      if (updated_by_[id] >= 0) {
        const Region& w = g_.regions()[updated_by_[id]];
        return absl::InvalidArgumentError(absl::StrCat(
            "output #", k, " (", Ref(id), ") was updated in place by region #", updated_by_[id],
            " '", w.kind, "'; output its new version ", Ref(w.results[InPlaceResultOf(w, id)])));
      }
    }
    return absl::OkStatus();
  }

  const Graph& g_;
  const KindRegistry& kinds_;
  std::vector<int> updated_by_;     // the region that updated the value's storage, or -1
  std::vector<ValueId> view_root_;  // the value whose storage a view shares; itself otherwise
  std::vector<std::vector<ValueId>> views_of_root_;  // all views sharing a root's storage
};

}  // namespace

absl::Status Verify(const Graph& graph) { return Verify(graph, GlobalKindRegistry()); }

absl::Status Verify(const Graph& graph, const KindRegistry& kinds) {
  return Verifier(graph, kinds).Run();
}

}  // namespace tileplan::ir
