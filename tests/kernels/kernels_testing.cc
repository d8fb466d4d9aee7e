#include "tests/kernels/kernels_testing.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "regions/parser.h"
#include "regions/verifier.h"
#include "targets/target.h"
#include "tests/testing/paths.h"

namespace tileplan::kernels::testing {

ir::Graph MustParseVerified(absl::string_view text) {
  absl::StatusOr<ir::Graph> graph = ir::ParseGraph(text);
  if (!graph.ok()) {
    ADD_FAILURE() << graph.status();
    return ir::Graph();
  }
  if (absl::Status s = ir::Verify(*graph); !s.ok()) {
    ADD_FAILURE() << s;
    return ir::Graph();
  }
  return *std::move(graph);
}

ir::Graph TestGraph(absl::string_view name) {
  const std::string path =
      tileplan::testing::SourcePath(absl::StrCat("tests/kernels/testdata/", name)).string();
  std::ifstream file(path);
  if (!file) {
    ADD_FAILURE() << "cannot read " << path;
    return ir::Graph();
  }
  std::stringstream text;
  text << file.rdbuf();
  return MustParseVerified(text.str());
}

BoundGraph MustBind(const ir::Graph& graph, ShapeBindings bindings, int64_t context) {
  absl::StatusOr<BoundGraph> bound = BoundGraph::Create(graph, std::move(bindings), context);
  EXPECT_TRUE(bound.ok()) << bound.status();
  if (!bound.ok()) return *BoundGraph::Create(ir::Graph(), {}, 0);
  return *std::move(bound);
}

int RegionNamed(const ir::Graph& graph, absl::string_view name) {
  for (size_t i = 0; i < graph.regions().size(); ++i) {
    const ir::Region& r = graph.regions()[i];
    if (!r.results.empty() && graph.value(r.results[0]).name == name) return static_cast<int>(i);
  }
  ADD_FAILURE() << "no region defines %" << name;
  return -1;
}

TargetDescription MustTarget(absl::string_view name) {
  absl::StatusOr<TargetDescription> target = targets::FindTarget(name);
  EXPECT_TRUE(target.ok()) << target.status();
  return target.ok() ? *target : TargetDescription();
}

void TunableProduct(const std::string& family, int32_t version,
                    const std::vector<TunableParam>& tunables, std::vector<Tactic>& out) {
  std::vector<size_t> index(tunables.size(), 0);
  while (true) {
    Tactic t;
    t.family = family;
    t.family_version = version;
    for (size_t i = 0; i < tunables.size(); ++i) {
      t.params[tunables[i].name] = tunables[i].values[index[i]];
    }
    out.push_back(std::move(t));
    size_t i = 0;
    for (; i < tunables.size(); ++i) {
      if (++index[i] < tunables[i].values.size()) break;
      index[i] = 0;
    }
    if (i == tunables.size()) return;
  }
}

}  // namespace tileplan::kernels::testing
