// Test helper: records <count> measurements of distinct keys into the tactic store <path>,
// one Record (one transaction) each, as autotune_regions' worker records each region it
// tuned, so that tests can run several writer processes against one file or kill one. With
// --report it prints the index of each record on stdout (flushed) once Record has returned
// OK, so a test that kills it knows what was committed. Exits 1 with the error on stderr
// when opening the store or any write fails.
//
//   tactic_store_writer <path> <writer name> <count> [--report]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "tests/tuner/store_testing.h"
#include "tuner/tactic_store.h"

int main(int argc, char** argv) {
  using namespace tileplan::tuner;
  const bool report = argc == 5 && std::strcmp(argv[4], "--report") == 0;
  if (argc != 4 && !report) {
    std::fprintf(stderr, "usage: %s <path> <writer name> <count> [--report]\n", argv[0]);
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
    if (report) {
      std::printf("%d\n", i);
      std::fflush(stdout);
    }
  }
  return 0;
}
