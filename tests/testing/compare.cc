#include "tests/testing/compare.h"

#include <algorithm>
#include <cmath>

#include "gtest/gtest.h"

namespace tileplan::testing {

double MaxRelativeDifference(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size());
  double diff = 0, scale = 0;
  for (size_t k = 0; k < std::min(got.size(), want.size()); ++k) {
    diff = std::max(diff, std::fabs(static_cast<double>(got[k]) - want[k]));
    scale = std::max(scale, std::fabs(static_cast<double>(want[k])));
  }
  return scale > 0 ? diff / scale : diff;
}

}  // namespace tileplan::testing
