// The store group of tools/common_flags.h.
#include "absl/flags/flag.h"
#include "tools/common_flags.h"

ABSL_FLAG(std::string, tactic_cache, "",
          "the SQLite tactic store (docs/tuner.md) that autotune_regions fills and "
          "benchmark_transformer plans with");
ABSL_FLAG(bool, freeze, false,
          "with --tactic-cache: a key the store holds no measured tactic for is an error");
ABSL_FLAG(bool, print_keys, false,
          "print the tactic-cache key of every region the plan looks up and autotune_regions "
          "measures (families with tactics to choose), sorted, one per line, and stop; without "
          "a GPU the keys are for the target description's environment");
