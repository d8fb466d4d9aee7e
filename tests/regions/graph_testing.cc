#include "tests/regions/graph_testing.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "regions/parser.h"
#include "tests/testing/paths.h"

namespace tileplan::ir::testing {
namespace {

bool SameDouble(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return std::memcmp(&a, &b, sizeof(double)) == 0;
}

bool SameAttr(const AttrValue& a, const AttrValue& b) {
  if (a.index() != b.index()) return false;
  if (const double* x = std::get_if<double>(&a)) return SameDouble(*x, std::get<double>(b));
  if (const auto* x = std::get_if<std::vector<double>>(&a)) {
    const auto& y = std::get<std::vector<double>>(b);
    if (x->size() != y.size()) return false;
    for (size_t i = 0; i < x->size(); ++i) {
      if (!SameDouble((*x)[i], y[i])) return false;
    }
    return true;
  }
  return a == b;
}

std::string Name(const Graph& g, ValueId id) {
  return id >= 0 && id < g.num_values() ? g.value(id).name : absl::StrCat("<id ", id, ">");
}

std::vector<std::string> Names(const Graph& g, const std::vector<ValueId>& ids) {
  std::vector<std::string> out;
  for (ValueId id : ids) out.push_back(Name(g, id));
  return out;
}

}  // namespace

bool SameAttributes(const Attributes& a, const Attributes& b) {
  if (a.map().size() != b.map().size()) return false;
  auto ib = b.map().begin();
  for (const auto& [key, value] : a.map()) {
    if (key != ib->first || !SameAttr(value, ib->second)) return false;
    ++ib;
  }
  return true;
}

void ExpectSameGraph(const Graph& a, const Graph& b) {
  EXPECT_EQ(a.name(), b.name());
  ASSERT_EQ(a.num_values(), b.num_values());
  for (const Value& va : a.values()) {
    const ValueId id = b.FindValue(va.name);
    ASSERT_NE(id, kNoValue) << "%" << va.name << " is missing";
    const Value& vb = b.value(id);
    EXPECT_EQ(va.type, vb.type) << "%" << va.name;
    EXPECT_EQ(va.kind, vb.kind) << "%" << va.name;
    EXPECT_EQ(va.checkpoint_tensors, vb.checkpoint_tensors) << "%" << va.name;
    EXPECT_EQ(va.producer, vb.producer) << "%" << va.name;
    EXPECT_EQ(va.result_index, vb.result_index) << "%" << va.name;
  }
  ASSERT_EQ(a.regions().size(), b.regions().size());
  for (size_t i = 0; i < a.regions().size(); ++i) {
    const Region& ra = a.regions()[i];
    const Region& rb = b.regions()[i];
    EXPECT_EQ(ra.kind, rb.kind) << "region #" << i;
    EXPECT_EQ(Names(a, ra.operands), Names(b, rb.operands)) << "region #" << i;
    EXPECT_EQ(Names(a, ra.results), Names(b, rb.results)) << "region #" << i;
    EXPECT_EQ(ra.result_aliases, rb.result_aliases) << "region #" << i;
    EXPECT_TRUE(SameAttributes(ra.attrs, rb.attrs)) << "region #" << i;
    EXPECT_EQ(ra.phase, rb.phase) << "region #" << i;
    EXPECT_EQ(ra.fused_from, rb.fused_from) << "region #" << i;
  }
  EXPECT_EQ(Names(a, a.inputs()), Names(b, b.inputs()));
  EXPECT_EQ(Names(a, a.weights()), Names(b, b.weights()));
  EXPECT_EQ(Names(a, a.states()), Names(b, b.states()));
  EXPECT_EQ(Names(a, a.outputs()), Names(b, b.outputs()));
}

std::string ReadTestData(absl::string_view name) {
  const std::string path =
      tileplan::testing::SourcePath(absl::StrCat("tests/regions/testdata/", name)).string();
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    ADD_FAILURE() << "cannot read " << path;
    return "";
  }
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

Graph MustParse(absl::string_view text) {
  absl::StatusOr<Graph> g = ParseGraph(text);
  if (!g.ok()) {
    ADD_FAILURE() << g.status() << "\nin:\n" << text;
    return Graph();
  }
  return *std::move(g);
}

}  // namespace tileplan::ir::testing
