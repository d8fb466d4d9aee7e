// How a plan's lookups fared against a tactic store (tuner/store_lookups.h): the counts, and
// for no hit the most specific reason: an unusable or empty store, no GPU, another GPU
// environment (the fields that differ), another family version, other shape buckets,
// regions never measured.
#include "tuner/store_lookups.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/tuner/store_testing.h"

namespace tileplan::tuner {
namespace {

using ::testing::HasSubstr;

class StoreLookupsTest : public ::testing::Test {
 protected:
  StoreLookupsTest() {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ =
        absl::StrCat(::testing::TempDir(), "/store_lookups_test.", ::getpid(), ".", info->name());
    std::filesystem::create_directories(dir_);
    store_ = *TacticStore::Open(dir_ + "/tactics.db");
    stored_ = testing::TestMeasurement(testing::TestEnvironment(), "linear(a)");
  }
  ~StoreLookupsTest() override { std::filesystem::remove_all(dir_); }

  // DescribeLookups after looking up `keys` in `store` (each once).
  static std::string Describe(const TacticStore& store, const std::vector<planner::TacticKey>& keys,
                              bool measured_environment = true) {
    const planner::RecordingTacticCache recording(&store);
    for (const planner::TacticKey& key : keys) recording.Lookup(key);
    return DescribeLookups(recording.records(), store, measured_environment);
  }

  planner::TacticKey Key(const std::string& signature) const {
    planner::TacticKey key = stored_.key;
    key.region_signature = signature;
    return key;
  }

  std::string dir_;
  std::unique_ptr<TacticStore> store_;
  RegionMeasurement stored_;
};

TEST_F(StoreLookupsTest, CountsTheLookupsOfFamiliesWithTacticsToMeasure) {
  ASSERT_TRUE(store_->Record(stored_).ok());
  planner::TacticKey view = Key("reshape(a)");
  view.family = "view";
  const planner::RecordingTacticCache recording(store_.get());
  for (const planner::TacticKey& key : {stored_.key, stored_.key, Key("linear(b)"), view}) {
    recording.Lookup(key);
  }
  EXPECT_EQ(MeasurableKeys(recording.records()),
            (std::vector<planner::TacticKey>{stored_.key, Key("linear(b)")}));
  EXPECT_EQ(DescribeLookups(recording.records(), *store_, true),
            "2 of 3 lookups hit (1 of 2 keys)");
}

TEST_F(StoreLookupsTest, AnEmptyOrUnusableStore) {
  EXPECT_EQ(Describe(*store_, {stored_.key}),
            "0 of 1 lookups hit (0 of 1 keys): the store holds no measured tactics "
            "(autotune_regions fills it)");
  const std::string junk = dir_ + "/junk.db";
  std::ofstream(junk) << std::string(4096, 'x');
  const std::unique_ptr<TacticStore> unusable = *TacticStore::Open(junk);
  ASSERT_FALSE(unusable->warnings().empty());
  EXPECT_EQ(Describe(*unusable, {stored_.key}),
            "0 of 1 lookups hit (0 of 1 keys): the store cannot be used (the warning above says "
            "why)");
}

TEST_F(StoreLookupsTest, AnotherEnvironment) {
  ASSERT_TRUE(store_->Record(stored_).ok());
  const std::string measured = stored_.environment.Fingerprint();
  // Without a GPU the lookups carry the target description's environment.
  planner::TacticKey key = stored_.key;
  key.environment =
      "NVIDIA H200|sm_90|132sm|l2=62914560|bw=4200|driver=0|cudart=0|nvrtc=|"
      "cublaslt=0|schema=1";
  EXPECT_EQ(Describe(*store_, {key}, /*measured_environment=*/false),
            absl::StrCat("0 of 1 lookups hit (0 of 1 keys): no GPU: the lookups are for the "
                         "target description's environment (",
                         key.environment, "), which no measurement matches; the store holds 1 for ",
                         measured));
  // On a GPU with another driver: what differs.
  key.environment = testing::TestEnvironment(12090).Fingerprint();
  EXPECT_EQ(Describe(*store_, {key}),
            absl::StrCat("0 of 1 lookups hit (0 of 1 keys): nothing is stored for this GPU's "
                         "environment; the store holds 1 for ",
                         measured, "; the closest differs in driver=13000 (here driver=12090)"));
}

TEST_F(StoreLookupsTest, TheSameEnvironmentButOtherKeys) {
  ASSERT_TRUE(store_->Record(stored_).ok());
  planner::TacticKey version = stored_.key;
  version.family_version = 3;
  planner::TacticKey bucket = stored_.key;
  bucket.shape_bucket = "B=1,Smax=512,T=1";
  const std::string why = Describe(*store_, {version, bucket, Key("linear(b)"), Key("linear(c)")});
  EXPECT_THAT(why, ::testing::StartsWith("0 of 4 lookups hit (0 of 4 keys): the store holds 1 "
                                         "entries for this environment, none with these keys: "));
  EXPECT_THAT(why, HasSubstr("1 keys' regions are stored for another version of their family "
                             "(gemv v1 stored, v3 looked up); "));
  EXPECT_THAT(why, HasSubstr("1 for other shape buckets or phases (B=1,Smax=4096,T=1 decode "
                             "stored, B=1,Smax=512,T=1 decode looked up); "));
  EXPECT_THAT(why, HasSubstr("2 regions were never measured (autotune_regions with the same "
                             "--model and plan flags measures them)"));
}

}  // namespace
}  // namespace tileplan::tuner
