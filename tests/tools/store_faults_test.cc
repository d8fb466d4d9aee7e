// The tactic store under faults (docs/reliability.md, "Fault campaign"): writers killed with
// SIGKILL at random points, four writers and an import at once on one file, a full disk and a
// store the process may not write. After each fault the store must open without a warning,
// pass SQLite's integrity check and hold every entry whose write had returned, and a rerun
// must complete. The writers are autotune_regions itself (--import) and
// tests/tuner/tactic_store_writer, which records one key per transaction through the
// TacticStore::Record that autotune_regions' worker calls for each region it tuned (tuning
// proper needs a GPU). The kill points come from a seeded generator: TILEPLAN_FAULT_SEED
// replays a campaign.
#include <fcntl.h>
#include <grp.h>
#include <sqlite3.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/paths.h"
#include "tests/testing/tool_run.h"
#include "tests/tuner/store_testing.h"
#include "tuner/tactic_store.h"

namespace tileplan {
namespace {

using ::testing::HasSubstr;
using tuner::TacticStore;
namespace fs = std::filesystem;

// How a child process runs.
struct ChildOptions {
  std::optional<rlim_t> file_size_limit;  // RLIMIT_FSIZE, with SIGXFSZ ignored (a full disk)
  bool as_nobody = false;                 // setgid/setuid 65534 first (when root)
};

// A started child: its pid and the read end of its stdout; its stderr goes to `log`.
struct Child {
  pid_t pid = -1;
  int out = -1;
  fs::path log;
};

// How a child ended: its exit code (-1 when a signal ended it), what it printed.
struct Ended {
  int exit_code = -1;
  int signal = 0;
  std::string out;
  std::string err;
};

constexpr int kCannotDropPrivileges = 99;

Child Start(const std::vector<std::string>& args, const fs::path& log,
            const ChildOptions& options = {}) {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return {};
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const std::string log_path = log.string();
  const pid_t pid = ::fork();
  if (pid == 0) {
    // Only async-signal-safe calls from here to exec.
    ::dup2(pipe_fds[1], 1);
    const int err = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (err >= 0) ::dup2(err, 2);
    if (options.file_size_limit.has_value()) {
      const struct rlimit limit = {*options.file_size_limit, *options.file_size_limit};
      ::setrlimit(RLIMIT_FSIZE, &limit);
      ::signal(SIGXFSZ, SIG_IGN);
    }
    if (options.as_nobody && ::geteuid() == 0) {
      if (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0) {
        ::_exit(kCannotDropPrivileges);
      }
    }
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(pipe_fds[1]);
  return Child{pid, pipe_fds[0], log};
}

std::string ReadText(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

Ended Wait(Child& child, std::string already_read = {}) {
  Ended e;
  e.out = std::move(already_read);
  char buffer[4096];
  ssize_t n;
  while ((n = ::read(child.out, buffer, sizeof buffer)) > 0) e.out.append(buffer, n);
  ::close(child.out);
  int status = 0;
  ::waitpid(child.pid, &status, 0);
  if (WIFEXITED(status)) e.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) e.signal = WTERMSIG(status);
  e.err = ReadText(child.log);
  return e;
}

// Reads the child's stdout until it has printed `lines` newlines (or closed it), keeping what
// it read in `out` for Wait.
void ReadLines(Child& child, int lines, std::string* out) {
  char c;
  while (lines > 0 && ::read(child.out, &c, 1) == 1) {
    out->push_back(c);
    if (c == '\n') --lines;
  }
}

Ended RunChild(const std::vector<std::string>& args, const fs::path& log,
               const ChildOptions& options = {}) {
  Child child = Start(args, log, options);
  return Wait(child);
}

// SQLite's own verdict on the file ("ok" when sound).
std::string IntegrityCheck(const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr) != SQLITE_OK) {
    sqlite3_close(db);
    return "cannot open";
  }
  std::string result;
  sqlite3_exec(
      db, "PRAGMA integrity_check",
      [](void* out, int, char** values, char**) {
        static_cast<std::string*>(out)->append(values[0] ? values[0] : "NULL");
        return 0;
      },
      &result, nullptr);
  sqlite3_close(db);
  return result;
}

// How many keys of the store start with `prefix`.
int CountKeys(const TacticStore& store, const std::string& prefix) {
  int n = 0;
  for (const planner::TacticKey& key : store.keys()) {
    if (absl::StartsWith(key.region_signature, prefix)) ++n;
  }
  return n;
}

// The signature tactic_store_writer gives its i-th record.
std::string Signature(const std::string& writer, int i) {
  return absl::StrCat("linear(", writer, ", ", i, ")");
}

class StoreFaultsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::ScratchDir("store_faults_test");
    writer_ = testing::BuiltBinary(TACTIC_STORE_WRITER).string();
    autotune_ = testing::BuiltBinary(AUTOTUNE_REGIONS_PATH).string();
  }
  void TearDown() override {
    std::error_code ec;
    fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(dir_, ec);
  }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path Log(const std::string& name) const { return dir_ / (name + ".log"); }

  std::vector<std::string> Writer(const std::string& store, const std::string& name, int count,
                                  bool report = false) const {
    std::vector<std::string> args = {writer_, store, name, absl::StrCat(count)};
    if (report) args.push_back("--report");
    return args;
  }
  std::vector<std::string> Import(const std::string& store, const std::string& file) const {
    return {autotune_, "--tactic-cache", store, "--import", file};
  }

  // An export of `count` records by the writer "import", with that name replaced by `name`
  // (so each import file has keys of its own).
  std::string ImportFile(const std::string& name, int count) {
    const std::string text_path = Path("template.textproto");
    if (!fs::exists(text_path)) {
      const std::string source = Path("template.db");
      EXPECT_EQ(RunChild(Writer(source, "import", count), Log("template")).exit_code, 0);
      EXPECT_EQ(RunChild({autotune_, "--tactic-cache", source, "--export", text_path},
                         Log("template-export"))
                    .exit_code,
                0);
    }
    const std::string text =
        absl::StrReplaceAll(ReadText(text_path), {{"(import, ", "(" + name + ", "}});
    const std::string path = Path(name + ".textproto");
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }

  // Opens the store as a tuner would and checks it: no warning, SQLite's integrity check.
  std::unique_ptr<TacticStore> OpenChecked(const std::string& path) {
    EXPECT_EQ(IntegrityCheck(path), "ok") << path;
    absl::StatusOr<std::unique_ptr<TacticStore>> store = TacticStore::Open(path);
    EXPECT_TRUE(store.ok()) << store.status();
    if (!store.ok()) return nullptr;
    EXPECT_THAT((*store)->warnings(), ::testing::IsEmpty());
    return *std::move(store);
  }

  fs::path dir_;
  std::string writer_;
  std::string autotune_;
};

// Fifty SIGKILLs at random points of writers' lives: a third during an autotune_regions
// --import (one transaction: its keys are all there or none), the rest during a writer
// recording 400 keys one transaction each (every key it reported is there, with its winner,
// and at most the one after it). Round 0 kills the process that creates the store. Every
// round checks the whole store; then every writer and import runs again to completion.
TEST_F(StoreFaultsTest, SigkillDuringWritesLosesNoCommittedEntry) {
  uint32_t seed = 20261202;
  if (const char* s = std::getenv("TILEPLAN_FAULT_SEED"); s != nullptr) {
    ASSERT_TRUE(absl::SimpleAtoi(s, &seed)) << s;
  }
  std::mt19937 rng(seed);
  constexpr int kRounds = 50;
  constexpr int kWriterRecords = 400;
  constexpr int kImportRecords = 200;
  const std::string store_path = Path("store.db");

  // How long each kind of write takes here, so that the kill points cover it.
  const std::string calibration = Path("calibration.db");
  auto time_it = [&](const std::vector<std::string>& args, const std::string& log) {
    const auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(RunChild(args, Log(log)).exit_code, 0) << ReadText(Log(log));
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  const double writer_seconds =
      time_it(Writer(calibration, "calibration", kWriterRecords), "calibrate-writer");
  const double import_seconds =
      time_it(Import(Path("calibration-import.db"), ImportFile("calibration", kImportRecords)),
              "calibrate-import");

  std::map<std::string, int> committed;  // writer name -> keys known to be stored
  std::set<std::string> imports;         // import rounds whose keys are stored
  std::vector<std::string> all_imports;
  int killed_mid_write = 0, finished_first = 0, import_landed = 0;
  for (int round = 0; round < kRounds; ++round) {
    const bool import = round % 3 == 2;
    const std::string name = absl::StrCat(import ? "import" : "writer", round);
    // Imports and round 0 are killed at a time drawn over the calibrated span; later writers
    // once they have reported a drawn number of keys (at least two short of all), then within
    // two records' time, so that the kill lands inside a write however fast this machine runs
    // them.
    int reports_first = 0;
    double span = import ? import_seconds : writer_seconds;
    if (!import && round > 0) {
      reports_first = std::uniform_int_distribution<int>(0, kWriterRecords - 2)(rng);
      span = 2 * writer_seconds / kWriterRecords;
    }
    const auto delay = std::chrono::microseconds(
        static_cast<int64_t>(std::uniform_real_distribution<double>(0, 1.1 * span)(rng) * 1e6));
    std::vector<std::string> args;
    if (import) {
      args = Import(store_path, ImportFile(name, kImportRecords));
      all_imports.push_back(name);
    } else {
      args = Writer(store_path, name, kWriterRecords, /*report=*/true);
    }
    Child child = Start(args, Log(name));
    std::string reported_first;
    ReadLines(child, reports_first, &reported_first);
    std::this_thread::sleep_for(delay);
    ::kill(child.pid, SIGKILL);
    const Ended ended = Wait(child, std::move(reported_first));
    if (ended.signal == SIGKILL) {
      ++killed_mid_write;
    } else {
      ++finished_first;
      ASSERT_EQ(ended.exit_code, 0) << name << ": " << ended.err;
    }

    std::unique_ptr<TacticStore> store = OpenChecked(store_path);
    ASSERT_NE(store, nullptr) << "round " << round << " (seed " << seed << ")";
    const int found = CountKeys(*store, absl::StrCat("linear(", name, ", "));
    if (import) {
      EXPECT_TRUE(found == 0 || found == kImportRecords)
          << name << ": " << found << " of an import's keys (seed " << seed << ")";
      if (found == kImportRecords) {
        imports.insert(name);
        ++import_landed;
      }
      if (ended.signal != SIGKILL) {
        EXPECT_EQ(found, kImportRecords) << name;
      }
    } else {
      const std::vector<absl::string_view> lines =
          absl::StrSplit(ended.out, '\n', absl::SkipEmpty());
      const int reported = static_cast<int>(lines.size());
      EXPECT_GE(found, reported) << name << " (seed " << seed << ")";
      EXPECT_LE(found, reported + 1) << name << " (seed " << seed << ")";
      for (int i = 0; i < found; ++i) {
        const tuner::RegionMeasurement m =
            tuner::testing::TestMeasurement(tuner::testing::TestEnvironment(), Signature(name, i));
        const std::optional<planner::MeasuredTactic> hit = store->Lookup(m.key);
        ASSERT_TRUE(hit.has_value()) << Signature(name, i) << " (seed " << seed << ")";
        EXPECT_EQ(hit->tactic, *m.winner);
      }
      committed[name] = found;
    }
    // Nothing earlier was lost.
    int64_t expected = 0;
    for (const auto& [writer, n] : committed) {
      EXPECT_EQ(CountKeys(*store, absl::StrCat("linear(", writer, ", ")), n) << writer;
      expected += n;
    }
    expected += static_cast<int64_t>(imports.size()) * kImportRecords;
    EXPECT_EQ(store->num_winners(), expected)
        << "after round " << round << " (seed " << seed << ")";
  }
  std::cout << "seed " << seed << ": " << kRounds << " kills, " << killed_mid_write
            << " during a write, " << finished_first << " after it ended; " << import_landed
            << " of " << all_imports.size() << " imports landed whole, the rest not at all\n";
  EXPECT_GE(killed_mid_write, kRounds / 2) << "the kill points missed the writes";

  // The rerun: every writer and import again, to completion.
  for (const auto& [name, n] : committed) {
    const Ended e = RunChild(Writer(store_path, name, kWriterRecords), Log(name + "-rerun"));
    EXPECT_EQ(e.exit_code, 0) << name << ": " << e.err;
  }
  for (const std::string& name : all_imports) {
    const Ended e = RunChild(Import(store_path, Path(name + ".textproto")), Log(name + "-rerun"));
    EXPECT_EQ(e.exit_code, 0) << name << ": " << e.err;
  }
  std::unique_ptr<TacticStore> store = OpenChecked(store_path);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->num_winners(), static_cast<int64_t>(committed.size()) * kWriterRecords +
                                      static_cast<int64_t>(all_imports.size()) * kImportRecords);
}

// Four writers and an autotune_regions --import on one new store at once: every process
// succeeds (each waits its turn) and every key is stored.
TEST_F(StoreFaultsTest, FourConcurrentWritersAndAnImportKeepEveryRecord) {
  const std::string store_path = Path("shared.db");
  constexpr int kRecords = 250;
  const std::string import_file = ImportFile("imported", 300);
  std::vector<Child> children;
  for (int w = 0; w < 4; ++w) {
    const std::string name = absl::StrCat("tuner", w);
    children.push_back(Start(Writer(store_path, name, kRecords), Log(name)));
  }
  children.push_back(Start(Import(store_path, import_file), Log("import")));
  for (Child& child : children) {
    const Ended e = Wait(child);
    EXPECT_EQ(e.exit_code, 0) << child.log << ": " << e.err;
  }
  std::unique_ptr<TacticStore> store = OpenChecked(store_path);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->num_winners(), 4 * kRecords + 300);
  for (int w = 0; w < 4; ++w) {
    EXPECT_EQ(CountKeys(*store, absl::StrCat("linear(tuner", w, ", ")), kRecords);
  }
}

// A full disk (a file-size limit just above the store, SIGXFSZ ignored so that writes fail
// with EFBIG as they would with ENOSPC): an import, a writer and an export each fail with a
// message that names the file and says what to do; the store keeps every entry it had (and
// the writer's entries whose Record returned), and the export leaves no file.
TEST_F(StoreFaultsTest, AFullDiskIsAClearErrorAndTheStoreIsIntact) {
  const std::string store_path = Path("store.db");
  ASSERT_EQ(RunChild(Writer(store_path, "before", 100), Log("before")).exit_code, 0);
  const rlim_t limit = fs::file_size(store_path) + 16384;
  const ChildOptions full{limit};

  const Ended import =
      RunChild(Import(store_path, ImportFile("imported", 1000)), Log("import"), full);
  EXPECT_EQ(import.exit_code, 2) << import.err;
  EXPECT_THAT(import.err, HasSubstr(absl::StrCat("tactic store ", store_path,
                                                 ": nothing of this write was stored: ")));
  EXPECT_THAT(import.err, HasSubstr("the entries stored before are intact"));

  const Ended writer = RunChild(Writer(store_path, "during", 1000, true), Log("writer"), full);
  EXPECT_EQ(writer.exit_code, 1) << writer.err;
  EXPECT_THAT(writer.err, HasSubstr("nothing of this write was stored"));
  const int reported = static_cast<int>(
      std::vector<absl::string_view>(absl::StrSplit(writer.out, '\n', absl::SkipEmpty())).size());
  EXPECT_LT(reported, 1000);

  const std::string exported = Path("export.textproto");
  const Ended export_run = RunChild({autotune_, "--tactic-cache", store_path, "--export", exported},
                                    Log("exporting"), ChildOptions{4096});
  EXPECT_EQ(export_run.exit_code, 2) << export_run.err;
  EXPECT_THAT(export_run.err,
              HasSubstr(absl::StrCat("cannot write ", exported, ": File too large")));
  EXPECT_THAT(export_run.err, HasSubstr("free space or raise the file-size limit"));

  std::unique_ptr<TacticStore> store = OpenChecked(store_path);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(CountKeys(*store, "linear(before, "), 100);
  EXPECT_EQ(CountKeys(*store, "linear(imported, "), 0);
  EXPECT_EQ(CountKeys(*store, "linear(during, "), reported);
  EXPECT_EQ(store->num_winners(), 100 + reported);
  store.reset();
  for (const auto& entry : fs::directory_iterator(dir_)) {
    const std::string name = entry.path().filename().string();
    EXPECT_FALSE(absl::StartsWith(name, "export.textproto")) << name;
  }
}

// A store the process may not write (its file read-only, run as another user when root, as
// permissions do not bind root): an import and a writer are refused naming the store, and the
// file keeps every byte, with nothing created beside it.
TEST_F(StoreFaultsTest, AReadOnlyStoreIsAClearErrorAndLeftUntouched) {
  const std::string store_path = Path("store.db");
  ASSERT_EQ(RunChild(Writer(store_path, "before", 50), Log("before")).exit_code, 0);
  const std::string bytes = ReadText(store_path);
  const std::string import_file = ImportFile("imported", 10);
  fs::permissions(store_path,
                  fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
  // The directory too, for a process that is not root; root's child runs as nobody, who
  // cannot write either.
  fs::permissions(dir_, fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read |
                            fs::perms::group_exec | fs::perms::others_read |
                            fs::perms::others_exec);
  const ChildOptions read_only{std::nullopt, /*as_nobody=*/true};
  const fs::path logs = fs::path(testing::ScratchDir("store_faults_test_logs"));
  fs::permissions(logs, fs::perms::all);

  const Ended import = RunChild(Import(store_path, import_file), logs / "import.log", read_only);
  if (import.exit_code == kCannotDropPrivileges) {
    GTEST_SKIP() << "running as root without the right to become another user, so no file "
                    "is read-only to this test";
  }
  EXPECT_EQ(import.exit_code, 2) << import.err;
  EXPECT_THAT(import.err, HasSubstr(store_path));
  const Ended writer = RunChild(Writer(store_path, "during", 10), logs / "writer.log", read_only);
  EXPECT_EQ(writer.exit_code, 1) << writer.err;
  EXPECT_THAT(writer.err, HasSubstr(store_path));
  std::cout << "import: " << import.err << "writer: " << writer.err;

  EXPECT_EQ(ReadText(store_path), bytes);
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir_)) {
    names.insert(entry.path().filename().string());
  }
  EXPECT_EQ(
      names.count("store.db-wal") + names.count("store.db-shm") + names.count("store.db-journal"),
      0u);
  fs::remove_all(logs);
}

}  // namespace
}  // namespace tileplan
