// libFuzzer target: an execution plan read back from arbitrary bytes, as each of the three
// machine forms, and checked as tileplan_plan_deserialize (the C API) and tileplan.load_plan
// (Python) check it: planner::ParsePlan, then the GPU runtime's LayOutPlan (phase graphs,
// KV-cache layout, weights), which needs no device. A plan that is accepted must serialize to
// wire bytes that read back to the same plan.
#include <cstddef>
#include <cstdint>
#include <string>

#include "google/protobuf/util/message_differencer.h"
#include "planner/plan_text.h"
#include "runtime/gpu/program.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace planner = tileplan::planner;
  for (planner::PlanFormat format : {planner::PlanFormat::kBinary, planner::PlanFormat::kTextProto,
                                     planner::PlanFormat::kJson}) {
    auto plan = planner::ParsePlan(tileplan::fuzz::AsText(data, size), format);
    if (!plan.ok()) continue;
    (void)tileplan::runtime::gpu::LayOutPlan(*plan);
    auto wire = planner::FormatPlan(*plan, planner::PlanFormat::kBinary);
    if (!wire.ok()) tileplan::fuzz::Broken("an accepted plan does not serialize");
    auto again = planner::ParsePlan(*wire, planner::PlanFormat::kBinary);
    if (!again.ok()) tileplan::fuzz::Broken("a serialized plan does not read back");
    if (!google::protobuf::util::MessageDifferencer::Equals(*plan, *again)) {
      tileplan::fuzz::Broken("a serialized plan reads back as another plan");
    }
  }
  return 0;
}
