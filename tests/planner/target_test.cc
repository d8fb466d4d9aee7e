#include "targets/target.h"

#include <set>
#include <string>

#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace tileplan::planner {
namespace {

TEST(TargetTest, BundledTargetsParseAndAreUnique) {
  std::vector<std::string> names = targets::BundledTargetNames();
  ASSERT_EQ(names.size(), 6u);
  std::set<std::string> seen;
  for (const std::string& name : names) {
    auto t = targets::FindTarget(name);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_TRUE(seen.insert(t->name()).second);
    for (const std::string& alias : t->aliases()) {
      EXPECT_TRUE(seen.insert(alias).second) << "duplicate alias " << alias;
    }
  }
}

TEST(TargetTest, EveryRequiredArchitectureHasATarget) {
  for (int sm : {80, 89, 90, 100, 120}) {
    auto t = targets::FindTarget("sm_" + std::to_string(sm));
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->sm(), sm);
  }
}

TEST(TargetTest, AliasSelectsMeasuredH200) {
  auto t = targets::FindTarget("sm_90");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->name(), "h200");
  EXPECT_EQ(t->sm_count(), 132);
}

TEST(TargetTest, UnknownTargetListsKnownNames) {
  auto t = targets::FindTarget("sm_42");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("h200"), std::string::npos) << t.status();
}

TEST(TargetTest, SyntaxErrorHasLineAndColumn) {
  auto t = targets::ParseTarget("name: \"x\"\nsm: ninety\n", "bad.textproto");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("2:5"), std::string::npos) << t.status();
}

TEST(TargetTest, InvalidValueNamesField) {
  auto good = targets::FindTarget("h200");
  ASSERT_TRUE(good.ok());
  targets::TargetDescription t = *good;
  t.set_achievable_memory_bandwidth_gbps(t.peak_memory_bandwidth_gbps() * 2);
  std::string text;
  ASSERT_TRUE(google::protobuf::TextFormat::PrintToString(t, &text));
  auto parsed = targets::ParseTarget(text, "edited");
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.status().message().find("achievable_memory_bandwidth_gbps"), std::string::npos)
      << parsed.status();
  // The L2's rate may be unknown (0), not negative.
  t = *good;
  t.set_achievable_l2_bandwidth_gbps(-1);
  ASSERT_TRUE(google::protobuf::TextFormat::PrintToString(t, &text));
  parsed = targets::ParseTarget(text, "edited");
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.status().message().find("achievable_l2_bandwidth_gbps"), std::string::npos)
      << parsed.status();
  t.set_achievable_l2_bandwidth_gbps(0);
  ASSERT_TRUE(google::protobuf::TextFormat::PrintToString(t, &text));
  EXPECT_TRUE(targets::ParseTarget(text, "edited").ok());
  // Threads per SM: unknown (0) or a plausible count.
  for (int threads : {-1, 5000}) {
    t = *good;
    t.set_max_threads_per_sm(threads);
    ASSERT_TRUE(google::protobuf::TextFormat::PrintToString(t, &text));
    parsed = targets::ParseTarget(text, "edited");
    ASSERT_FALSE(parsed.ok()) << threads;
    EXPECT_NE(parsed.status().message().find("max_threads_per_sm"), std::string::npos)
        << parsed.status();
  }
  EXPECT_EQ(good->max_threads_per_sm(), 2048);
}

// The interconnect is all described or not at all; achievable within the datasheet's.
TEST(TargetTest, InterconnectIsWholeOrAbsent) {
  auto good = targets::FindTarget("h200");
  ASSERT_TRUE(good.ok());
  EXPECT_GT(good->achievable_interconnect_bandwidth_gbps(), 0);
  auto parse = [](const targets::TargetDescription& t) {
    std::string text;
    EXPECT_TRUE(google::protobuf::TextFormat::PrintToString(t, &text));
    return targets::ParseTarget(text, "edited");
  };
  targets::TargetDescription t = *good;
  t.clear_interconnect();
  t.clear_peak_interconnect_bandwidth_gbps();
  t.clear_achievable_interconnect_bandwidth_gbps();
  t.clear_interconnect_step_latency_us();
  t.clear_interconnect_provenance();
  EXPECT_TRUE(parse(t).ok());
  t.set_interconnect("NVLink");
  auto partial = parse(t);
  ASSERT_FALSE(partial.ok());
  EXPECT_NE(partial.status().message().find("peak_interconnect_bandwidth_gbps"), std::string::npos)
      << partial.status();
  t = *good;
  t.set_achievable_interconnect_bandwidth_gbps(t.peak_interconnect_bandwidth_gbps() + 1);
  auto over = parse(t);
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.status().message().find("achievable_interconnect_bandwidth_gbps"),
            std::string::npos)
      << over.status();
  t = *good;
  t.clear_interconnect_provenance();
  EXPECT_FALSE(parse(t).ok());
}

}  // namespace
}  // namespace tileplan::planner
