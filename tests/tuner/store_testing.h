// Measurements for the tactic store's tests and their writer helper binary.
#ifndef TILEPLAN_TESTS_TUNER_STORE_TESTING_H_
#define TILEPLAN_TESTS_TUNER_STORE_TESTING_H_

#include <cstdint>
#include <string>

#include "tuner/environment.h"
#include "tuner/tactic_store.h"

namespace tileplan::tuner::testing {

// An H200 as DetectEnvironment reports it with the given driver version.
Environment TestEnvironment(int32_t driver_version = 13000);

// A decode measurement of the gemv family (version 1) for `signature` in `env`: three
// candidates (threads 128, 256 and 512), the one with `winner_threads` fastest; 512 fails
// with a launch error. No winner when winner_threads is 0.
RegionMeasurement TestMeasurement(const Environment& env, const std::string& signature,
                                  int64_t winner_threads = 256);

}  // namespace tileplan::tuner::testing

#endif  // TILEPLAN_TESTS_TUNER_STORE_TESTING_H_
