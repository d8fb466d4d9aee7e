// Renderings of an ExecutionPlan (docs/plan.md, "--show-plan"): tables for people (the steps,
// identical layers folded or not, and the arena's buffers), and the protobuf text, JSON and
// binary forms for machines. All are deterministic: the same plan gives the same bytes.
#ifndef TILEPLAN_PLANNER_PLAN_TEXT_H_
#define TILEPLAN_PLANNER_PLAN_TEXT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "planner/plan.pb.h"

namespace tileplan::planner {

enum class PlanFormat { kTable, kTableAll, kMemory, kSvg, kTextProto, kJson, kBinary };

// "table", "table-all", "memory", "svg", "textproto", "json" or "binary"; InvalidArgument
// naming the accepted forms otherwise.
absl::StatusOr<PlanFormat> ParsePlanFormat(absl::string_view name);

// The format a plan file's name asks for: ".json" json, ".textproto", ".txtpb" or ".pbtxt"
// textproto, ".binpb" or ".pb" binary (the protobuf wire format), ".svg" the picture, anything
// else the table.
PlanFormat PlanFormatForPath(absl::string_view path);

// Per phase: a header line, one row per step (step, region (its first result), kind, fused
// from, family, tactic, source, estimated us, measured us, bytes, flops, grid, what bounds the
// estimate, and the first operand's and result's shapes), then "launches per <prefill|decode>
// step: N", the phase's estimate and bytes, a memory line (arena, peak live, sum of
// intermediates, KV cache, weights) and a summary per region kind (steps, launches, estimated
// time and its share, bytes). With `fold_layers`, a run of consecutive layers whose steps are
// identical but for the layer number ("l3.qkv", "l4.qkv", ...) is shown once, as "l3-27.qkv",
// under a line naming the layers and their count.
std::string PlanTable(const proto::ExecutionPlan& plan, bool fold_layers = true);

// Per phase: the arena's buffers by offset (offset, bytes, live steps, what they hold: values,
// a step's workspace or counters, a graph input) and the KV-cache state slots.
std::string PlanMemory(const proto::ExecutionPlan& plan);

// The plan in `format` (binary: deterministic wire bytes; svg: PlanSvg of DefaultSvgPhase, or
// of `svg_phase` when it is not negative); Internal if protobuf cannot print it,
// InvalidArgument for an svg_phase the plan does not have.
absl::StatusOr<std::string> FormatPlan(const proto::ExecutionPlan& plan, PlanFormat format,
                                       int svg_phase = -1);

// The largest plan file ReadPlanFile reads: plans of the default buckets are 4 MB of JSON for
// Qwen3-0.6B and 15 MB for Qwen2-72B (80 layers), about 4 MB a phase.
inline constexpr uint64_t kMaxPlanFileBytes = uint64_t{256} << 20;

// A plan read back from one of its machine forms (textproto, JSON or binary, as FormatPlan
// writes them; JSON and binary skip fields this version does not know, as proto3 does, and
// text names the first, since text cannot skip a field whose type it does not know).
// InvalidArgument for the table, memory and svg forms, for bytes that do not parse (naming the
// first error: line and column in text, the field in JSON), for a string that is not UTF-8
// (which text escapes can write and the wire format refuses), and for a parsed plan without
// phases;
// FailedPrecondition for another format_version than kPlanFormatVersion, naming both. The
// plan's contents are checked where it is run (the GPU runtime's LayOutPlan and binding
// checks), not here.
absl::StatusOr<proto::ExecutionPlan> ParsePlan(absl::string_view data, PlanFormat format);

// ParsePlan of the file at `path` (a regular file of at most kMaxPlanFileBytes), in the form
// its name asks for (PlanFormatForPath); errors name the file.
absl::StatusOr<proto::ExecutionPlan> ReadPlanFile(const std::string& path);

// "512 B", "1.50 KiB", "2.00 MiB", "1.40 GiB" (binary units, two decimals).
std::string HumanBytes(int64_t bytes);

// A fused_from list with runs collapsed: "split,reshape*3,rope*2"; "-" when empty.
std::string CompactFusedFrom(const google::protobuf::RepeatedPtrField<std::string>& kinds);

}  // namespace tileplan::planner

#endif  // TILEPLAN_PLANNER_PLAN_TEXT_H_
