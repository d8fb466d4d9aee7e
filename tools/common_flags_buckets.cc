// The buckets group of tools/common_flags.h.
#include "absl/flags/flag.h"
#include "tools/common_flags.h"

ABSL_FLAG(tileplan::tools::PositiveList, prefill, (tileplan::tools::PositiveList{{128, 512, 2048}}),
          "prefill token buckets T (prompt lengths), one prefill phase each; tileplan-opt "
          "specializes for exactly one");
ABSL_FLAG(tileplan::tools::PositiveInt, batch, tileplan::tools::PositiveInt{1},
          "the batch B: sequences in every prefill and decode phase");
