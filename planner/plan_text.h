// Renderings of an ExecutionPlan (docs/plan.md, "--show-plan"): a table for people, and the
// protobuf text and JSON forms for machines. All three are deterministic: the same plan gives
// the same bytes.
#ifndef TILEPLAN_PLANNER_PLAN_TEXT_H_
#define TILEPLAN_PLANNER_PLAN_TEXT_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "planner/plan.pb.h"

namespace tileplan::planner {

enum class PlanFormat { kTable, kTextProto, kJson, kBinary };

// "table", "textproto", "json" or "binary"; InvalidArgument naming the accepted forms
// otherwise.
absl::StatusOr<PlanFormat> ParsePlanFormat(absl::string_view name);

// The format a plan file's name asks for: ".json" json, ".textproto", ".txtpb" or ".pbtxt"
// textproto, ".binpb" or ".pb" binary (the protobuf wire format), anything else the table.
PlanFormat PlanFormatForPath(absl::string_view path);

// Per phase: a header line, one row per step (step, region (its first result), kind, fused
// from, family, tactic, source, estimated us, bytes), then "launches per <prefill|decode> step: N",
// the phase's estimate and bytes, and a memory line (arena, peak live, sum of intermediates, KV
// cache, weights).
std::string PlanTable(const proto::ExecutionPlan& plan);

// The plan in `format` (binary: deterministic wire bytes); Internal if protobuf cannot print
// it.
absl::StatusOr<std::string> FormatPlan(const proto::ExecutionPlan& plan, PlanFormat format);

// "512 B", "1.50 KiB", "2.00 MiB", "1.40 GiB" (binary units, two decimals).
std::string HumanBytes(int64_t bytes);

// A fused_from list with runs collapsed: "split,reshape*3,rope*2"; "-" when empty.
std::string CompactFusedFrom(const google::protobuf::RepeatedPtrField<std::string>& kinds);

}  // namespace tileplan::planner

#endif  // TILEPLAN_PLANNER_PLAN_TEXT_H_
