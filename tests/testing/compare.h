// Comparing float outputs in tests.
#ifndef TILEPLAN_TESTS_TESTING_COMPARE_H_
#define TILEPLAN_TESTS_TESTING_COMPARE_H_

#include <vector>

namespace tileplan::testing {

// The largest |got - want| relative to the largest |want| (the absolute difference when
// `want` is all zeros); a size mismatch fails the calling test.
double MaxRelativeDifference(const std::vector<float>& got, const std::vector<float>& want);

}  // namespace tileplan::testing

#endif  // TILEPLAN_TESTS_TESTING_COMPARE_H_
