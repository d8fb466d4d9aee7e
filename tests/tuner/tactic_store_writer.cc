// Test helper: records <count> measurements of distinct keys into the tactic store <path>,
// one Record (one transaction) each, so that tests can run several writer processes
// against one file. Exits 1 with the error on stderr when any write fails.
//
//   tactic_store_writer <path> <writer name> <count>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "absl/strings/str_cat.h"
#include "tests/tuner/store_testing.h"
#include "tuner/tactic_store.h"

int main(int argc, char** argv) {
  using namespace tileplan::tuner;
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s <path> <writer name> <count>\n", argv[0]);
    return 2;
  }
  absl::StatusOr<std::unique_ptr<TacticStore>> store = TacticStore::Open(argv[1]);
  if (!store.ok()) {
    std::fprintf(stderr, "%s\n", store.status().ToString().c_str());
    return 1;
  }
  const Environment env = testing::TestEnvironment();
  const int count = std::atoi(argv[3]);
  for (int i = 0; i < count; ++i) {
    const absl::Status status = (*store)->Record(
        testing::TestMeasurement(env, absl::StrCat("linear(", argv[2], ", ", i, ")")));
    if (!status.ok()) {
      std::fprintf(stderr, "record %d: %s\n", i, status.ToString().c_str());
      return 1;
    }
  }
  return 0;
}
