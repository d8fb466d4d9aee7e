#include "tuner/worker.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "kernels/step/step_launcher.h"
#include "tuner/autotune.h"
#include "tuner/region_tuner.h"

extern char** environ;

namespace tileplan::tuner {
namespace {

// One line of text: a reason as the protocol carries it.
std::string OneLine(absl::string_view text) {
  std::string line(text);
  std::replace(line.begin(), line.end(), '\n', ' ');
  return line;
}

bool ParseInts(const std::vector<absl::string_view>& words, size_t first, size_t count,
               std::vector<int>& out) {
  if (words.size() < first + count) return false;
  out.resize(count);
  for (size_t i = 0; i < count; ++i) {
    if (!absl::SimpleAtoi(words[first + i], &out[i])) return false;
  }
  return true;
}

}  // namespace

std::string FormatWorkerRequest(const WorkerRequest& request) {
  std::string out;
  for (int item : request.items) absl::StrAppend(&out, "item ", item, "\n");
  for (const auto& [at, reason] : request.skip) {
    absl::StrAppend(&out, "skip ", at.item, " ", at.candidate, " ", OneLine(reason), "\n");
  }
  if (request.inject_fault.has_value()) {
    absl::StrAppend(&out, "inject ", request.inject_fault->item, " ",
                    request.inject_fault->candidate, "\n");
  }
  return out;
}

absl::StatusOr<WorkerRequest> ParseWorkerRequest(absl::string_view text) {
  WorkerRequest request;
  int number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    ++number;
    const std::vector<absl::string_view> words = absl::StrSplit(line, absl::MaxSplits(' ', 3));
    std::vector<int> n;
    if (words[0] == "item" && words.size() == 2 && ParseInts(words, 1, 1, n)) {
      request.items.push_back(n[0]);
    } else if (words[0] == "skip" && words.size() == 4 && ParseInts(words, 1, 2, n)) {
      request.skip[{n[0], n[1]}] = std::string(words[3]);
    } else if (words[0] == "inject" && words.size() == 3 && ParseInts(words, 1, 2, n)) {
      request.inject_fault = CandidateRef{n[0], n[1]};
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("worker request line ", number, ": cannot parse '", line, "'"));
    }
  }
  return request;
}

WorkerLine ParseWorkerLine(absl::string_view text) {
  WorkerLine line;
  line.text = std::string(text);
  const std::vector<absl::string_view> w = absl::StrSplit(text, ' ');
  std::vector<int> n;
  if (w[0] == "begin" && w.size() == 3 && ParseInts(w, 1, 2, n)) {
    line.kind = WorkerLine::Kind::kBegin;
    line.item = n[0];
    line.count = n[1];
  } else if (w[0] == "candidate" && w.size() == 3 && ParseInts(w, 1, 2, n)) {
    line.kind = WorkerLine::Kind::kCandidate;
    line.item = n[0];
    line.candidate = n[1];
  } else if (w[0] == "fault" && w.size() >= 4 && ParseInts(w, 1, 2, n)) {
    line.kind = WorkerLine::Kind::kFault;
    line.item = n[0];
    line.candidate = n[1];
    line.params = std::string(w[3]);
    line.reason = absl::StrJoin(w.begin() + 4, w.end(), " ");
  } else if (w[0] == "done" && w.size() == 7 && ParseInts(w, 1, 3, n) &&
             absl::SimpleAtod(w[4], &line.best_us) && absl::SimpleAtod(w[5], &line.default_us)) {
    line.kind = WorkerLine::Kind::kDone;
    line.item = n[0];
    line.count = n[1];
    line.valid = n[2];
    line.params = std::string(w[6]);
  }
  return line;
}

absl::Status RunWorker(const TuningWork& work, const WorkerRequest& request,
                       const WorkerSetup& setup, std::FILE* out) {
  const device::Device& device = *setup.device;
  TP_ASSIGN_OR_RETURN(std::unique_ptr<kernels::StepLauncher> launcher,
                      kernels::StepLauncher::Create(device, {}));
  TP_ASSIGN_OR_RETURN(std::unique_ptr<TacticStore> store, TacticStore::Open(setup.store_path));
  RegionTuner region_tuner(*launcher, *setup.target);
  auto print = [out](const std::string& line) {
    std::fprintf(out, "%s\n", line.c_str());
    std::fflush(out);
  };
  for (int index : request.items) {
    if (index < 0 || index >= static_cast<int>(work.items().size())) {
      return absl::InvalidArgumentError(absl::StrCat("no item ", index));
    }
    const TuningItem& item = work.items()[static_cast<size_t>(index)];
    const kernels::BoundRegion region = work.Region(item);
    const kernels::KernelFamily& family = *item.family;
    absl::StatusOr<std::vector<kernels::Tactic>> listed =
        region_tuner.Candidates(family, region, setup.max_candidates);
    if (!listed.ok()) {
      print(absl::StrCat(item.label, ": no library configurations (",
                         OneLine(listed.status().message()),
                         "); measuring the family's own candidates"));
      listed = EnumerateCandidates(family, region, *setup.target, setup.max_candidates);
    }
    const std::vector<kernels::Tactic>& all = *listed;
    print(absl::StrCat("begin ", index, " ", all.size()));
    // Candidates that faulted an earlier worker are recorded, not run again.
    std::vector<kernels::Tactic> run;
    std::vector<int> run_index;
    std::vector<CandidateMeasurement> faulted;
    TuneOptions options;
    for (size_t c = 0; c < all.size(); ++c) {
      const CandidateRef candidate{index, static_cast<int>(c)};
      if (auto it = request.skip.find(candidate); it != request.skip.end()) {
        faulted.push_back(
            {all[c], CandidateStatus::kFault,
             absl::StrCat("faulted the GPU: the worker measuring it died: ", it->second), 0});
        continue;
      }
      if (request.inject_fault == candidate) options.inject_fault = static_cast<int>(run.size());
      run.push_back(all[c]);
      run_index.push_back(static_cast<int>(c));
    }
    region_tuner.Precompile(family, region, run);
    options.repeats = setup.repeats;
    options.rotate_bytes = 2 * device.properties().l2_bytes;
    options.graph_replay = work.IsDecode(item);
    int current = -1;  // the candidate running, an index into `all`
    absl::StatusOr<std::vector<CandidateMeasurement>> measured =
        region_tuner.Tune(region, family, run, options, [&](int i) {
          current = run_index[static_cast<size_t>(i)];
          print(absl::StrCat("candidate ", index, " ", current));
        });
    if (!measured.ok()) {
      if (current >= 0) {
        print(absl::StrCat("fault ", index, " ", current, " ",
                           all[static_cast<size_t>(current)].ParamsString(), " ",
                           OneLine(measured.status().message())));
      }
      return measured.status();
    }
    RegionMeasurement m;
    m.key = item.key;
    m.environment = *setup.environment;
    m.candidates = *std::move(measured);
    m.candidates.insert(m.candidates.end(), faulted.begin(), faulted.end());
    ChooseWinner(m, !run.empty() && run_index[0] == 0);
    int valid = 0;
    for (const CandidateMeasurement& c : m.candidates) {
      if (c.status == CandidateStatus::kOk) ++valid;
    }
    TP_RETURN_IF_ERROR(store->Record(m));
    print(absl::StrFormat("done %d %d %d %.4f %.4f %s", index, m.candidates.size(), valid,
                          m.winner_us, m.default_us,
                          m.winner ? m.winner->ParamsString() : std::string("-")));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<WorkerDeath>> SpawnWorker(
    const std::string& binary, const std::vector<std::string>& argv,
    const std::function<void(const WorkerLine&)>& on_line, double candidate_timeout_s) {
  std::vector<std::string> args = argv;
  std::vector<char*> pointers;
  for (std::string& s : args) pointers.push_back(s.data());
  pointers.push_back(nullptr);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe failed: ", std::strerror(errno)));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, binary.c_str(), &actions, nullptr, pointers.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    return absl::InternalError(
        absl::StrCat("cannot start the worker ", binary, ": ", std::strerror(rc)));
  }
  using Clock = std::chrono::steady_clock;
  std::optional<CandidateRef> current;
  Clock::time_point since;  // when `current` printed its "candidate" line or anything since
  auto handle = [&](absl::string_view text) {
    const WorkerLine line = ParseWorkerLine(text);
    if (line.kind == WorkerLine::Kind::kCandidate)
      current = CandidateRef{line.item, line.candidate};
    if (line.kind == WorkerLine::Kind::kDone) current.reset();
    since = Clock::now();
    on_line(line);
  };
  std::string pending;  // bytes read past the last whole line
  bool killed = false;
  char buffer[4096];
  for (;;) {
    int wait_ms = -1;
    if (current.has_value() && candidate_timeout_s > 0) {
      const double left =
          candidate_timeout_s - std::chrono::duration<double>(Clock::now() - since).count();
      wait_ms = static_cast<int>(std::clamp(std::ceil(left * 1e3), 0.0, 1e9));
    }
    pollfd p = {fds[0], POLLIN, 0};
    const int ready = poll(&p, 1, wait_ms);
    if (ready < 0) {
      if (errno == EINTR) continue;
      break;  // the pipe cannot be waited on: read no more
    }
    if (ready == 0) {
      // The candidate has run candidate_timeout_s without a line: it hangs.
      kill(pid, SIGKILL);
      killed = true;
      break;
    }
    const ssize_t n = read(fds[0], buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the end of its output (or an error reading it)
    pending.append(buffer, static_cast<size_t>(n));
    for (size_t end = pending.find('\n'); end != std::string::npos; end = pending.find('\n')) {
      handle(absl::string_view(pending).substr(0, end));
      pending.erase(0, end + 1);
    }
  }
  if (!pending.empty() && !killed) handle(pending);  // a last line without its newline
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (killed) {
    return WorkerDeath{*current,
                       absl::StrCat("no progress for ", candidate_timeout_s, " s: killed")};
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return std::optional<WorkerDeath>();
  const std::string how = WIFEXITED(status) ? absl::StrCat("exit ", WEXITSTATUS(status))
                                            : absl::StrCat("signal ", WTERMSIG(status), " (",
                                                           strsignal(WTERMSIG(status)), ")");
  if (!current.has_value()) {
    return absl::InternalError(absl::StrCat("the worker stopped (", how, ") outside a candidate"));
  }
  return WorkerDeath{*current, how};
}

}  // namespace tileplan::tuner
