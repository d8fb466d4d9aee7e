// The environment fingerprint: every field, canonical text, and a target's environment
// never equal to a measured one.
#include "tuner/environment.h"

#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "targets/target.h"
#include "tests/tuner/store_testing.h"

namespace tileplan::tuner {
namespace {

TEST(EnvironmentTest, FingerprintNamesEveryField) {
  EXPECT_EQ(testing::TestEnvironment().Fingerprint(),
            "NVIDIA H200|sm_90|132sm|l2=62914560|bw=4200|driver=13000|cudart=13000|nvrtc=13.0|"
            "cublaslt=130000|schema=1");
}

TEST(EnvironmentTest, EveryFieldChangesTheFingerprint) {
  const Environment base = testing::TestEnvironment();
  std::vector<Environment> variants(10, base);
  variants[0].gpu = "NVIDIA H100 80GB HBM3";
  variants[1].sm = 89;
  variants[2].sm_count = 114;
  variants[3].l2_bytes = 52428800;
  variants[4].bandwidth_gbps = 4200.25;
  variants[5].driver_version = 12080;
  variants[6].cuda_runtime_version = 12080;
  variants[7].nvrtc_version = "12.8";
  variants[8].cublaslt_version = 120805;
  variants[9].schema_version = 2;
  std::set<std::string> fingerprints = {base.Fingerprint()};
  for (const Environment& v : variants) {
    EXPECT_NE(v, base);
    fingerprints.insert(v.Fingerprint());
  }
  EXPECT_EQ(fingerprints.size(), variants.size() + 1);
}

TEST(EnvironmentTest, BandwidthPrintsAsTheShortestExactDecimal) {
  Environment env = testing::TestEnvironment();
  env.bandwidth_gbps = 3350.5;
  EXPECT_THAT(env.Fingerprint(), ::testing::HasSubstr("|bw=3350.5|"));
  env.bandwidth_gbps = 0.1;
  EXPECT_THAT(env.Fingerprint(), ::testing::HasSubstr("|bw=0.1|"));
}

TEST(EnvironmentTest, FromTargetLeavesSoftwareVersionsUnknown) {
  absl::StatusOr<targets::TargetDescription> target = targets::FindTarget("h200");
  ASSERT_TRUE(target.ok()) << target.status();
  const Environment env = FromTarget(*target);
  EXPECT_EQ(env.gpu, "NVIDIA H200");
  EXPECT_EQ(env.sm, 90);
  EXPECT_EQ(env.sm_count, 132);
  EXPECT_EQ(env.l2_bytes, 62914560);
  EXPECT_EQ(env.bandwidth_gbps, 4200);
  EXPECT_EQ(env.schema_version, kTacticStoreSchemaVersion);
  EXPECT_EQ(env.Fingerprint(),
            "NVIDIA H200|sm_90|132sm|l2=62914560|bw=4200|driver=0|cudart=0|nvrtc=|cublaslt=0|"
            "schema=1");
  EXPECT_NE(env.Fingerprint(), testing::TestEnvironment().Fingerprint());
}

}  // namespace
}  // namespace tileplan::tuner
