// The measuring worker process of autotune_regions (docs/tuner.md, "The worker"): what it is
// asked to measure, the lines it prints, the worker loop, and starting one.
//
// A candidate that faults the GPU poisons the CUDA context of the process measuring it, so
// candidates are measured in a worker process that may die. The parent (tuner/autotune.h)
// starts a worker with a WorkerRequest, reads its progress lines, and when it dies at a
// candidate starts another from that item on, with the candidate to skip.
//
// Protocol: the worker prints one line per event on stdout:
//   begin ITEM COUNT                  the item's candidates were listed: COUNT of them
//   candidate ITEM C                  candidate C (0: the default tactic) is about to run
//   fault ITEM C PARAMS REASON        candidate C faulted the GPU; the worker then exits
//   done ITEM CANDIDATES VALID BEST_US DEFAULT_US WINNER
//                                     the item was recorded: its candidates (the skipped
//                                     ones included), how many were valid, the winner's and
//                                     the default tactic's medians and the winner's
//                                     parameters ("-" for none)
// and any other line is a note for the user.
#ifndef TILEPLAN_TUNER_WORKER_H_
#define TILEPLAN_TUNER_WORKER_H_

#include <compare>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "device/device.h"
#include "targets/target.pb.h"
#include "tuner/environment.h"
#include "tuner/tactic_store.h"

namespace tileplan::tuner {

class TuningWork;

// A candidate of a tuning item: the item's index in TuningWork::items() and the candidate's
// in the item's candidate list (0: the default tactic). The list is the same in every
// process for one region, device and library, so the pair names a candidate across workers.
struct CandidateRef {
  int item = 0;
  int candidate = 0;
  friend auto operator<=>(const CandidateRef&, const CandidateRef&) = default;
};

// What one worker measures.
struct WorkerRequest {
  std::vector<int> items;  // indices into TuningWork::items(), in the order to measure
  // Candidates that killed an earlier worker, with how: recorded as faults, not run again.
  std::map<CandidateRef, std::string> skip;
  // A testing aid: make the GPU fault before this candidate runs (TuneOptions::inject_fault).
  std::optional<CandidateRef> inject_fault;
};

// The request as text (one line per entry: "item I", "skip I C REASON", "inject I C"), to
// pass to a worker, and back. ParseWorkerRequest is InvalidArgument naming the line for
// anything else; a reason is kept to one line.
std::string FormatWorkerRequest(const WorkerRequest& request);
absl::StatusOr<WorkerRequest> ParseWorkerRequest(absl::string_view text);

// One line of a worker's output (see the protocol above).
struct WorkerLine {
  enum class Kind { kBegin, kCandidate, kFault, kDone, kNote };
  Kind kind = Kind::kNote;
  int item = -1;
  int candidate = -1;                  // kCandidate, kFault
  int count = 0;                       // kBegin: candidates listed; kDone: candidates recorded
  int valid = 0;                       // kDone
  double best_us = 0, default_us = 0;  // kDone
  // kFault: the tactic's parameters; kDone: the winner's ("-" for none).
  std::string params;
  std::string reason;  // kFault: the CUDA error
  std::string text;    // the whole line
};
// A line that does not parse as an event is a kNote.
WorkerLine ParseWorkerLine(absl::string_view line);

// What the worker measures with; everything must outlive RunWorker.
struct WorkerSetup {
  const device::Device* device = nullptr;
  const targets::TargetDescription* target = nullptr;
  // DetectEnvironment's for the device: every TuningWork key's environment.
  const Environment* environment = nullptr;
  std::string store_path;    // the tactic store, opened for writing
  int max_candidates = 256;  // per item, the default tactic included
  int repeats = 20;          // timed runs per candidate
};

// The worker loop: for each item of `request`, lists its candidates (RegionTuner::Candidates,
// else the family's own when the library cannot list them, with a note), records the
// skipped ones as faults, measures the others (cold L2; decode items as graph replays),
// chooses the winner and records the item in the store, printing the protocol's lines on
// `out`. An error when the GPU faulted (after its "fault" line) or anything cannot be set
// up; the process should then exit with a non-zero status.
absl::Status RunWorker(const TuningWork& work, const WorkerRequest& request,
                       const WorkerSetup& setup, std::FILE* out);

// How a worker ended when it did not finish: the candidate it was measuring and "exit 2" or
// "signal 11 (Segmentation fault)".
struct WorkerDeath {
  CandidateRef candidate;
  std::string how;
};

// Starts the executable `binary` with `argv` (argv[0] is the name it sees; posix_spawn), its
// stdout into a pipe, and passes each line it prints to `on_line` as it comes. nullopt when it
// exits with 0; else where it died (the candidate of its last "candidate" line with no "done" after
// it) and how. Internal when it cannot be started, or ends otherwise outside a candidate.
// With `candidate_timeout_s` > 0, a candidate that runs that long without the worker printing
// another line (a kernel that never ends: a deadlock, an endless loop) has the worker killed
// (SIGKILL, which ends its CUDA context and the kernel with it); its death is then "no
// progress for S s: killed". 0 waits for ever.
absl::StatusOr<std::optional<WorkerDeath>> SpawnWorker(
    const std::string& binary, const std::vector<std::string>& argv,
    const std::function<void(const WorkerLine&)>& on_line, double candidate_timeout_s = 0);

}  // namespace tileplan::tuner

#endif  // TILEPLAN_TUNER_WORKER_H_
