// autotune_regions --inject-fault's value (no GPU): REGION:CANDIDATE, the index after the
// last ':', and clear refusals of anything else.
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tuner/region_tuner.h"

namespace tileplan::tuner {
namespace {

using ::testing::HasSubstr;

TEST(ParseFaultInjectionTest, RegionTextAndCandidateIndex) {
  absl::StatusOr<FaultInjection> f = ParseFaultInjection("/ rms_norm:1");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->region, "/ rms_norm");
  EXPECT_EQ(f->candidate, 1);
  // The region text may hold ':' and '=' (a key's shape bucket); the index is last.
  f = ParseFaultInjection("prefill T=16 l0.qkv:linear(bf16[1,16,64]:0");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->region, "prefill T=16 l0.qkv:linear(bf16[1,16,64]");
  EXPECT_EQ(f->candidate, 0);
}

TEST(ParseFaultInjectionTest, RefusesAnythingElseSayingWhatItTakes) {
  for (const char* bad : {"", "rms_norm", "rms_norm:", ":3", "rms_norm:-1", "rms_norm:x",
                          "rms_norm:1.5", "rms_norm:99999999999"}) {
    const absl::StatusOr<FaultInjection> f = ParseFaultInjection(bad);
    ASSERT_FALSE(f.ok()) << bad;
    EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(f.status().message()),
                HasSubstr(std::string("--inject-fault takes REGION:CANDIDATE")));
    EXPECT_THAT(std::string(f.status().message()), HasSubstr(absl::StrCat("'", bad, "'")));
  }
}

}  // namespace
}  // namespace tileplan::tuner
