// What autotune_regions does without a GPU (tuner/autotune.h, tuner/worker.h): the regions
// of a plan to measure and their keys, the worker protocol, the parent's loop restarting a
// worker past the candidate it died at (launchers standing in for worker processes), its
// summary, and starting a real process and reading how it ended.
#include "tuner/autotune.h"

#include <chrono>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/config.h"
#include "planner/plan_builder.h"
#include "targets/target.h"
#include "tuner/store_lookups.h"
#include "tuner/worker.h"

namespace tileplan::tuner {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Qwen3-0.6B's plan for a prefill of 16 tokens and a decode step at context 32, batch 1.
TuningWork Work(const std::string& environment = "env") {
  const targets::TargetDescription target = *targets::FindTarget("h200");
  planner::PlanOptions options;
  options.prefill_tokens = {16};
  options.max_context = 32;
  absl::StatusOr<planner::proto::ExecutionPlan> plan = planner::BuildExecutionPlan(
      *models::BundledModelConfig("qwen3-0.6b"), target, options, nullptr);
  EXPECT_TRUE(plan.ok()) << plan.status();
  absl::StatusOr<TuningWork> work = TuningWork::Collect(*std::move(plan), target, environment);
  EXPECT_TRUE(work.ok()) << work.status();
  return *std::move(work);
}

// A tensor-parallel rank's plan is tuned on one GPU like any other, except its collectives,
// which need every rank's GPU.
TEST(TuningWorkTest, ARanksCollectivesAreNotMeasured) {
  const targets::TargetDescription target = *targets::FindTarget("h200");
  planner::PlanOptions options;
  options.prefill_tokens = {16};
  options.max_context = 32;
  options.tensor_parallel = 2;
  absl::StatusOr<planner::proto::ExecutionPlan> plan = planner::BuildExecutionPlan(
      *models::BundledModelConfig("qwen3-0.6b"), target, options, nullptr);
  ASSERT_TRUE(plan.ok()) << plan.status();
  absl::StatusOr<TuningWork> work = TuningWork::Collect(*std::move(plan), target, "env");
  ASSERT_TRUE(work.ok()) << work.status();
  bool linear = false;
  for (const TuningItem& item : work->items()) {
    EXPECT_NE(item.family->name(), "collective") << item.label;
    linear = linear || item.family->name() == "gemv";
  }
  EXPECT_TRUE(linear);
}

TEST(TuningWorkTest, OneItemPerDistinctKeyOfEveryFamilyThatCanImplementAStep) {
  const TuningWork work = Work();
  ASSERT_FALSE(work.items().empty());
  std::set<planner::TacticKey> keys;
  for (const TuningItem& item : work.items()) {
    SCOPED_TRACE(item.label);
    EXPECT_TRUE(keys.insert(item.key).second) << "twice: " << item.key.ToString();
    EXPECT_TRUE(HasTacticsToMeasure(*item.family));
    const ir::Phase phase = work.IsDecode(item) ? ir::Phase::kDecode : ir::Phase::kPrefill;
    EXPECT_EQ(item.key, planner::TacticKeyFor(work.Region(item), phase, *item.family, "env"));
    EXPECT_THAT(item.label,
                ::testing::StartsWith(work.IsDecode(item) ? "decode B=1 " : "prefill T=16 "));
  }
  // The 28 layers share their keys; every step names its items, the plan's family first, and
  // a view none.
  int steps = 0;
  ASSERT_EQ(work.step_items().size(), 2u);
  for (size_t f = 0; f < work.step_items().size(); ++f) {
    const planner::proto::Phase& phase = work.plan().phases(static_cast<int>(f));
    ASSERT_EQ(work.step_items()[f].size(), static_cast<size_t>(phase.steps_size()));
    for (int s = 0; s < phase.steps_size(); ++s) {
      const std::vector<int>& of_step = work.step_items()[f][static_cast<size_t>(s)];
      if (phase.steps(s).tactic().family() == "view") {
        EXPECT_TRUE(of_step.empty());
        continue;
      }
      ++steps;
      ASSERT_FALSE(of_step.empty()) << phase.steps(s).name();
      EXPECT_EQ(work.items()[static_cast<size_t>(of_step.front())].family->name(),
                phase.steps(s).tactic().family());
    }
  }
  EXPECT_LT(work.items().size(), static_cast<size_t>(steps));
  // Built again from the same plan: the same items in the same order (parent and worker).
  const TuningWork again = Work();
  ASSERT_EQ(again.items().size(), work.items().size());
  for (size_t i = 0; i < work.items().size(); ++i) {
    EXPECT_EQ(again.items()[i].key, work.items()[i].key);
  }
}

TEST(FindFaultInjectionTest, TheFirstItemToTuneWhoseLabelOrKeyMatches) {
  const TuningWork work = Work();
  std::vector<int> todo;
  for (size_t i = 0; i < work.items().size(); ++i) todo.push_back(static_cast<int>(i));
  absl::StatusOr<CandidateRef> at = FindFaultInjection(work, todo, {"/ rms_norm", 2});
  ASSERT_TRUE(at.ok()) << at.status();
  EXPECT_THAT(work.items()[static_cast<size_t>(at->item)].label, HasSubstr("/ rms_norm"));
  EXPECT_EQ(at->candidate, 2);
  for (int i = 0; i < at->item; ++i) {
    EXPECT_THAT(work.items()[static_cast<size_t>(i)].label,
                ::testing::Not(HasSubstr("/ rms_norm")));
  }
  // Nothing left to tune, or nothing that matches.
  at = FindFaultInjection(work, {}, {"/ rms_norm", 2});
  EXPECT_THAT(at.status().message(), HasSubstr("(none is left to tune)"));
  at = FindFaultInjection(work, todo, {"no such region", 0});
  EXPECT_EQ(at.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(at.status().message(),
              HasSubstr("--inject-fault: no region to tune has 'no such region' in its label"));
}

TEST(WorkerProtocolTest, RequestsRoundTripAndBadLinesAreNamed) {
  WorkerRequest request;
  request.items = {3, 4, 7};
  request.skip[{3, 1}] = "injected fault: the GPU faulted\n(cudaErrorLaunchFailure) (exit 2)";
  request.inject_fault = CandidateRef{4, 2};
  const std::string text = FormatWorkerRequest(request);
  EXPECT_EQ(text,
            "item 3\nitem 4\nitem 7\n"
            "skip 3 1 injected fault: the GPU faulted (cudaErrorLaunchFailure) (exit 2)\n"
            "inject 4 2\n");
  absl::StatusOr<WorkerRequest> parsed = ParseWorkerRequest(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_THAT(parsed->items, ElementsAre(3, 4, 7));
  ASSERT_EQ(parsed->skip.size(), 1u);
  EXPECT_EQ(parsed->skip.begin()->first, (CandidateRef{3, 1}));
  EXPECT_EQ(parsed->skip.begin()->second,
            "injected fault: the GPU faulted (cudaErrorLaunchFailure) (exit 2)");
  EXPECT_EQ(parsed->inject_fault, (CandidateRef{4, 2}));
  for (const char* bad : {"item x", "item 1 2", "skip 1", "inject 1", "measure 3"}) {
    const absl::StatusOr<WorkerRequest> r = ParseWorkerRequest(absl::StrCat("item 0\n", bad));
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(r.status().message(), HasSubstr(absl::StrCat("line 2: cannot parse '", bad)));
  }
}

TEST(WorkerProtocolTest, LinesParseIntoEventsAndAnythingElseIsANote) {
  WorkerLine line = ParseWorkerLine("begin 5 12");
  EXPECT_EQ(line.kind, WorkerLine::Kind::kBegin);
  EXPECT_EQ(line.item, 5);
  EXPECT_EQ(line.count, 12);
  line = ParseWorkerLine("candidate 5 3");
  EXPECT_EQ(line.kind, WorkerLine::Kind::kCandidate);
  EXPECT_EQ(line.candidate, 3);
  line =
      ParseWorkerLine("fault 5 3 split_k=2,threads=256 the GPU faulted (cudaErrorIllegalAddress)");
  EXPECT_EQ(line.kind, WorkerLine::Kind::kFault);
  EXPECT_EQ(line.params, "split_k=2,threads=256");
  EXPECT_EQ(line.reason, "the GPU faulted (cudaErrorIllegalAddress)");
  line = ParseWorkerLine("done 5 12 10 2.5000 3.7500 threads=128");
  EXPECT_EQ(line.kind, WorkerLine::Kind::kDone);
  EXPECT_EQ(line.count, 12);
  EXPECT_EQ(line.valid, 10);
  EXPECT_EQ(line.best_us, 2.5);
  EXPECT_EQ(line.default_us, 3.75);
  EXPECT_EQ(line.params, "threads=128");
  for (const char* note : {"", "begin 5", "done 5 12 10 x 3.75 -", "l0.qkv: no library configs"}) {
    line = ParseWorkerLine(note);
    EXPECT_EQ(line.kind, WorkerLine::Kind::kNote) << note;
    EXPECT_EQ(line.text, note);
  }
}

// A launcher that plays back scripted workers: each call checks the request it gets and
// feeds the script's lines, then ends as the script says.
struct ScriptedWorker {
  std::vector<std::string> lines;
  std::optional<WorkerDeath> death;
};

WorkerLauncher Playback(const std::vector<ScriptedWorker>& workers,
                        std::vector<WorkerRequest>& requests) {
  return [&workers, &requests](const WorkerRequest& request,
                               const std::function<void(const WorkerLine&)>& on_line)
             -> absl::StatusOr<std::optional<WorkerDeath>> {
    if (requests.size() >= workers.size()) return absl::InternalError("one worker too many");
    const ScriptedWorker& worker = workers[requests.size()];
    requests.push_back(request);
    for (const std::string& line : worker.lines) on_line(ParseWorkerLine(line));
    return worker.death;
  };
}

TEST(MeasureInWorkersTest, AWorkerThatDiesIsStartedAgainWithoutItsCandidate) {
  const TuningWork work = Work();
  const std::vector<ScriptedWorker> workers = {
      {{"begin 0 3", "candidate 0 0", "candidate 0 1", "candidate 0 2",
        "done 0 3 3 1.0000 2.0000 threads=64", "begin 1 3", "candidate 1 0", "candidate 1 1",
        "fault 1 1 threads=256 the GPU faulted (cudaErrorIllegalAddress)"},
       WorkerDeath{{1, 1}, "exit 2"}},
      {{"begin 1 3", "candidate 1 0", "candidate 1 2", "a note", "done 1 3 2 4.0000 4.0000 -",
        "begin 2 1", "candidate 2 0", "done 2 1 0 0.0000 0.0000 -"},
       std::nullopt},
  };
  std::vector<WorkerRequest> requests;
  std::ostringstream out;
  absl::StatusOr<AutotuneResult> result =
      MeasureInWorkers(work, {0, 1, 2}, std::nullopt, Playback(workers, requests), out);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_THAT(requests[0].items, ElementsAre(0, 1, 2));
  EXPECT_TRUE(requests[0].skip.empty());
  // The second worker starts at the item the first died in, skipping its candidate.
  EXPECT_THAT(requests[1].items, ElementsAre(1, 2));
  ASSERT_EQ(requests[1].skip.size(), 1u);
  EXPECT_EQ(requests[1].skip.begin()->first, (CandidateRef{1, 1}));
  EXPECT_EQ(requests[1].skip.begin()->second, "the GPU faulted (cudaErrorIllegalAddress) (exit 2)");
  EXPECT_EQ(result->measured.size(), 3u);
  EXPECT_EQ(result->without_valid(), 1);
  EXPECT_EQ(result->faulted_params.at({1, 1}), "threads=256");
  EXPECT_FALSE(result->injection_not_reached.has_value());
  const std::string& label = work.items()[1].label;
  EXPECT_THAT(out.str(), HasSubstr(absl::StrCat("  the worker died (exit 2) measuring candidate 1 "
                                                "of ",
                                                label, "; restarting without it\n")));
  EXPECT_THAT(out.str(), HasSubstr("  worker: a note\n"));
  EXPECT_THAT(out.str(), ::testing::ContainsRegex("\\[  1/3\\] .* 3 candidates +3 valid  best "
                                                  "+1.00 us  cost-model pick +2.00 us  \\(2.00x\\)"
                                                  "  threads=64"));

  std::ostringstream summary;
  PrintAutotuneSummary(work, *result, 1.5, summary);
  EXPECT_THAT(summary.str(), HasSubstr("tuned 3 regions in 1.5 s (1 without any valid candidate, "
                                       "1 candidates faulted the GPU)\n"));
  EXPECT_THAT(summary.str(), HasSubstr(absl::StrCat("  faulted: ", label,
                                                    ", candidate 1 "
                                                    "(threads=256): the GPU faulted "
                                                    "(cudaErrorIllegalAddress) (exit 2)\n")));
  EXPECT_THAT(summary.str(), HasSubstr("(steps measured earlier left out)"));
}

TEST(MeasureInWorkersTest, AnInjectedFaultNeverReachedIsReported) {
  const TuningWork work = Work();
  const std::vector<ScriptedWorker> workers = {
      {{"begin 0 3", "candidate 0 0", "done 0 3 3 1.0000 1.0000 threads=64"}, std::nullopt}};
  std::vector<WorkerRequest> requests;
  std::ostringstream out;
  absl::StatusOr<AutotuneResult> result =
      MeasureInWorkers(work, {0}, CandidateRef{0, 7}, Playback(workers, requests), out);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(requests[0].inject_fault, (CandidateRef{0, 7}));
  ASSERT_TRUE(result->injection_not_reached.has_value());
  EXPECT_EQ(*result->injection_not_reached,
            absl::StrCat("--inject-fault: nothing faulted: ", work.items()[0].label,
                         " has 3 candidates, no candidate 7"));
  // A launcher's own error ends the run.
  requests.clear();
  EXPECT_EQ(MeasureInWorkers(work, {0}, std::nullopt, Playback({}, requests), out).status().code(),
            absl::StatusCode::kInternal);
}

TEST(SpawnWorkerTest, ReadsTheLinesAndHowTheProcessEnded) {
  std::vector<WorkerLine> lines;
  const auto on_line = [&](const WorkerLine& line) { lines.push_back(line); };
  absl::StatusOr<std::optional<WorkerDeath>> r = SpawnWorker(
      "/bin/sh", {"sh", "-c", "echo begin 4 2; echo candidate 4 1; echo a note; exit 3"}, on_line);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ((*r)->candidate, (CandidateRef{4, 1}));
  EXPECT_EQ((*r)->how, "exit 3");
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0].kind, WorkerLine::Kind::kBegin);
  EXPECT_EQ(lines[2].text, "a note");

  r = SpawnWorker("/bin/sh", {"sh", "-c", "echo candidate 1 0; kill -SEGV $$"}, on_line);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ((*r)->how, "signal 11 (Segmentation fault)");

  // Finished: every candidate done.
  r = SpawnWorker("/bin/sh", {"sh", "-c", "echo candidate 1 0; echo done 1 1 1 1.0 1.0 -"},
                  on_line);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->has_value());
  // Ended badly outside any candidate, or not started at all.
  r = SpawnWorker("/bin/sh", {"sh", "-c", "echo candidate 1 0; echo done 1 1 1 1.0 1.0 -; exit 2"},
                  on_line);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(r.status().message(), HasSubstr("the worker stopped (exit 2) outside a candidate"));
  r = SpawnWorker("/nonexistent/worker", {"worker"}, on_line);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(r.status().message(), HasSubstr("cannot start the worker /nonexistent/worker"));
  // A last line without its newline is still a line.
  lines.clear();
  r = SpawnWorker("/bin/sh", {"sh", "-c", "printf 'candidate 2 5'; exit 1"}, on_line);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ((*r)->candidate, (CandidateRef{2, 5}));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].kind, WorkerLine::Kind::kCandidate);
}

// A candidate that runs past the timeout without a line (a kernel that never ends) has its
// worker killed, and the death names the candidate; the clock restarts at every line, runs
// only while a candidate is measured (not between items), and 0 never kills.
TEST(SpawnWorkerTest, KillsAWorkerWhoseCandidateHangs) {
  std::vector<WorkerLine> lines;
  const auto on_line = [&](const WorkerLine& line) { lines.push_back(line); };
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::optional<WorkerDeath>> r = SpawnWorker(
      "/bin/sh", {"sh", "-c", "echo begin 3 9; echo candidate 3 4; exec sleep 30"}, on_line,
      /*candidate_timeout_s=*/0.5);
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ((*r)->candidate, (CandidateRef{3, 4}));
  EXPECT_EQ((*r)->how, "no progress for 0.5 s: killed");
  EXPECT_LT(took, 20.0);  // killed, not waited for
  EXPECT_EQ(lines.size(), 2u);

  // Lines keep a slow candidate alive; a pause outside any candidate is not timed.
  r = SpawnWorker("/bin/sh",
                  {"sh", "-c",
                   "echo candidate 1 0; sleep 0.3; echo note; sleep 0.3; echo done 1 1 1 1.0 1.0 "
                   "-; sleep 1.2; echo candidate 2 0; echo done 2 1 1 1.0 1.0 -"},
                  on_line, /*candidate_timeout_s=*/0.8);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->has_value());

  // 0: no timeout.
  r = SpawnWorker("/bin/sh", {"sh", "-c", "echo candidate 1 0; sleep 0.5; exit 4"}, on_line, 0);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ((*r)->how, "exit 4");
}

}  // namespace
}  // namespace tileplan::tuner
