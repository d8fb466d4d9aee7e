// The SQLite tactic store: records and lookups, environment mismatches, unusable files
// (corrupt, foreign, another schema version) that are reported and never written,
// concurrent writer processes, export/import round trips and freeze mode.
#include "tuner/tactic_store.h"

#include <spawn.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "targets/target.h"
#include "tests/testing/paths.h"
#include "tests/tuner/store_testing.h"
#include "tuner/sqlite.h"

extern char** environ;

namespace tileplan::tuner {
namespace {

using planner::MeasuredTactic;
using planner::TacticKey;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;
using testing::TestEnvironment;
using testing::TestMeasurement;

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

// Runs SQL on `path` directly, as another program would.
void RawSql(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* error = nullptr;
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error);
  EXPECT_EQ(rc, SQLITE_OK) << (error ? error : "");
  sqlite3_free(error);
  sqlite3_close(db);
}

class TacticStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(::testing::TempDir(), "/tactic_store_test.", ::getpid(), ".",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Path(absl::string_view name) const { return absl::StrCat(dir_, "/", name); }

  static std::unique_ptr<TacticStore> MustOpen(const std::string& path,
                                               TacticStore::Options options = {}) {
    absl::StatusOr<std::unique_ptr<TacticStore>> store = TacticStore::Open(path, options);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }

  // A file that is not a usable store opens empty with a warning and is never written.
  static void ExpectUnusableAndUntouched(const std::string& path, absl::string_view warning) {
    const std::string before = ReadBytes(path);
    {
      std::unique_ptr<TacticStore> store = MustOpen(path);
      ASSERT_NE(store, nullptr);
      ASSERT_THAT(store->warnings(), SizeIs(1));
      EXPECT_THAT(store->warnings()[0], HasSubstr(path));
      EXPECT_THAT(store->warnings()[0], HasSubstr(warning));
      EXPECT_EQ(store->num_winners(), 0);
      EXPECT_THAT(store->environments(), IsEmpty());
      const RegionMeasurement m = TestMeasurement(TestEnvironment(), "linear(x)");
      EXPECT_EQ(store->Lookup(m.key), std::nullopt);

      const absl::Status record = store->Record(m);
      EXPECT_EQ(record.code(), absl::StatusCode::kFailedPrecondition) << record;
      EXPECT_THAT(record.message(), HasSubstr(path));
      const absl::Status imported = store->Import(path);
      EXPECT_EQ(imported.code(), absl::StatusCode::kFailedPrecondition) << imported;
      EXPECT_THAT(imported.message(), HasSubstr(path));
      EXPECT_EQ(store->Export(absl::StrCat(path, ".export")).code(),
                absl::StatusCode::kFailedPrecondition);
    }
    EXPECT_EQ(ReadBytes(path), before);
    EXPECT_FALSE(std::filesystem::exists(absl::StrCat(path, "-wal")));
    EXPECT_FALSE(std::filesystem::exists(absl::StrCat(path, "-journal")));
  }

  std::string dir_;
};

TEST_F(TacticStoreTest, NewFileGetsTheSchemaInWalMode) {
  const std::string path = Path("new.db");
  std::unique_ptr<TacticStore> store = MustOpen(path);
  ASSERT_NE(store, nullptr);
  EXPECT_THAT(store->warnings(), IsEmpty());
  EXPECT_EQ(store->num_winners(), 0);
  store.reset();

  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  std::vector<std::string> rows;
  auto collect = [](void* out, int n, char** values, char**) {
    std::string row;
    for (int i = 0; i < n; ++i) row += absl::StrCat(i ? "=" : "", values[i] ? values[i] : "");
    static_cast<std::vector<std::string>*>(out)->push_back(row);
    return 0;
  };
  ASSERT_EQ(sqlite3_exec(db, "SELECT key, value FROM meta ORDER BY key", collect, &rows, nullptr),
            SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "PRAGMA journal_mode", collect, &rows, nullptr), SQLITE_OK);
  sqlite3_close(db);
  EXPECT_THAT(rows, ElementsAre("schema=tileplan.tactic_store", "schema_version=1", "wal"));
}

TEST_F(TacticStoreTest, RecordIsLookedUpAndReloaded) {
  const std::string path = Path("store.db");
  const RegionMeasurement m = TestMeasurement(TestEnvironment(), "linear(a)");
  {
    std::unique_ptr<TacticStore> store = MustOpen(path);
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->Record(m).ok());
    std::optional<MeasuredTactic> hit = store->Lookup(m.key);
    ASSERT_TRUE(hit.has_value());
    EXPECT_EQ(hit->tactic, *m.winner);
    EXPECT_EQ(hit->measured_us, 2.5);
  }
  std::unique_ptr<TacticStore> reopened = MustOpen(path);
  ASSERT_NE(reopened, nullptr);
  EXPECT_THAT(reopened->warnings(), IsEmpty());
  EXPECT_EQ(reopened->num_winners(), 1);
  EXPECT_THAT(reopened->environments(), ElementsAre(TestEnvironment().Fingerprint()));
  std::optional<MeasuredTactic> hit = reopened->Lookup(m.key);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->tactic, *m.winner);
  TacticKey other = m.key;
  other.phase = ir::Phase::kPrefill;
  EXPECT_EQ(reopened->Lookup(other), std::nullopt);
}

// A winner whose stored time is not a time (another program wrote -1, infinity or NaN into
// the store) is skipped with a warning, never shown as a measurement; the other winners load.
TEST_F(TacticStoreTest, StoredTimesThatAreNotTimesAreSkipped) {
  for (const char* bad : {"-1", "9e999", "-9e999", "NULL"}) {
    SCOPED_TRACE(bad);
    const std::string path = Path(absl::StrCat("store", bad, ".db"));
    const RegionMeasurement a = TestMeasurement(TestEnvironment(), "linear(a)");
    const RegionMeasurement b = TestMeasurement(TestEnvironment(), "linear(b)");
    {
      std::unique_ptr<TacticStore> store = MustOpen(path);
      ASSERT_NE(store, nullptr);
      ASSERT_TRUE(store->Record(a).ok());
      ASSERT_TRUE(store->Record(b).ok());
    }
    const bool text = std::string(bad) == "NULL";
    if (text) {
      // The column is NOT NULL: the closest another program gets is a value that is no number.
      RawSql(path, "UPDATE winners SET median_us = 'fast' WHERE region_signature = 'linear(a)'");
    } else {
      RawSql(path, absl::StrCat("UPDATE winners SET median_us = ", bad,
                                " WHERE region_signature = 'linear(a)'"));
    }
    std::unique_ptr<TacticStore> reopened = MustOpen(path);
    ASSERT_NE(reopened, nullptr);
    EXPECT_EQ(reopened->Lookup(b.key).has_value(), true);
    EXPECT_EQ(reopened->Lookup(a.key), std::nullopt);
    ASSERT_THAT(reopened->warnings(), SizeIs(1));
    EXPECT_THAT(reopened->warnings()[0], HasSubstr("skipping the winner of"));
    EXPECT_THAT(reopened->warnings()[0],
                HasSubstr(text ? "median 'fast' is not a number" : "us is not a time"));
  }
}

TEST_F(TacticStoreTest, RecordReplacesTheWinnerOfAKey) {
  const std::string path = Path("store.db");
  std::unique_ptr<TacticStore> store = MustOpen(path);
  ASSERT_NE(store, nullptr);
  const RegionMeasurement first = TestMeasurement(TestEnvironment(), "linear(a)", 256);
  const RegionMeasurement second = TestMeasurement(TestEnvironment(), "linear(a)", 128);
  const RegionMeasurement other = TestMeasurement(TestEnvironment(), "linear(b)", 256);
  ASSERT_TRUE(store->Record(first).ok());
  ASSERT_TRUE(store->Record(other).ok());
  ASSERT_TRUE(store->Record(second).ok());
  EXPECT_EQ(store->num_winners(), 2);
  ASSERT_TRUE(store->Lookup(first.key).has_value());
  EXPECT_EQ(store->Lookup(first.key)->tactic, *second.winner);
  EXPECT_EQ(store->Lookup(other.key)->tactic, *other.winner);
  store.reset();

  store = MustOpen(path);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->Lookup(first.key)->tactic, *second.winner);
  // A run in which no candidate was valid leaves the key without a winner.
  ASSERT_TRUE(store->Record(TestMeasurement(TestEnvironment(), "linear(a)", 0)).ok());
  EXPECT_EQ(store->Lookup(first.key), std::nullopt);
  EXPECT_EQ(store->num_winners(), 1);
  store.reset();
  EXPECT_EQ(MustOpen(path)->Lookup(first.key), std::nullopt);
}

TEST_F(TacticStoreTest, AnotherEnvironmentMissesAndLeavesEntriesAlone) {
  const std::string path = Path("store.db");
  std::unique_ptr<TacticStore> store = MustOpen(path);
  ASSERT_NE(store, nullptr);
  const RegionMeasurement old_driver = TestMeasurement(TestEnvironment(12080), "linear(a)", 256);
  ASSERT_TRUE(store->Record(old_driver).ok());

  // The same key measured under another driver.
  const RegionMeasurement new_driver = TestMeasurement(TestEnvironment(13000), "linear(a)", 128);
  EXPECT_EQ(store->Lookup(new_driver.key), std::nullopt);
  ASSERT_TRUE(store->Record(new_driver).ok());
  EXPECT_EQ(store->Lookup(new_driver.key)->tactic, *new_driver.winner);
  EXPECT_EQ(store->Lookup(old_driver.key)->tactic, *old_driver.winner);
  store.reset();

  store = MustOpen(path);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->num_winners(), 2);
  EXPECT_THAT(store->environments(), ElementsAre(TestEnvironment(12080).Fingerprint(),
                                                 TestEnvironment(13000).Fingerprint()));
  EXPECT_EQ(store->Lookup(old_driver.key)->tactic, *old_driver.winner);
  EXPECT_EQ(store->Lookup(new_driver.key)->tactic, *new_driver.winner);
  // A target's environment (no driver known) never matches a measured one.
  absl::StatusOr<targets::TargetDescription> target = targets::FindTarget("h200");
  ASSERT_TRUE(target.ok());
  TacticKey planned = new_driver.key;
  planned.environment = FromTarget(*target).Fingerprint();
  EXPECT_EQ(store->Lookup(planned), std::nullopt);
}

TEST_F(TacticStoreTest, RecordRejectsInconsistentMeasurements) {
  std::unique_ptr<TacticStore> store = MustOpen(Path("store.db"));
  ASSERT_NE(store, nullptr);
  RegionMeasurement wrong_environment = TestMeasurement(TestEnvironment(), "linear(a)");
  wrong_environment.key.environment = "h200/sm_90/132sm";
  EXPECT_EQ(store->Record(wrong_environment).code(), absl::StatusCode::kInvalidArgument);

  RegionMeasurement failed_winner = TestMeasurement(TestEnvironment(), "linear(a)");
  failed_winner.winner->params["threads"] = 512;  // the launch error
  const absl::Status status = store->Record(failed_winner);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("is not an \"ok\" candidate"));

  RegionMeasurement other_family = TestMeasurement(TestEnvironment(), "linear(a)");
  other_family.candidates[0].tactic.family = "cublaslt_gemm";
  EXPECT_EQ(store->Record(other_family).code(), absl::StatusCode::kInvalidArgument);

  RegionMeasurement twice = TestMeasurement(TestEnvironment(), "linear(a)");
  twice.candidates.push_back(twice.candidates[0]);
  EXPECT_EQ(store->Record(twice).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->num_winners(), 0);
}

TEST_F(TacticStoreTest, AnotherSchemaVersionIsReadAsEmptyAndNotWritten) {
  const std::string path = Path("v2.db");
  ASSERT_TRUE(MustOpen(path)->Record(TestMeasurement(TestEnvironment(), "linear(x)")).ok());
  RawSql(path, "UPDATE meta SET value = '2' WHERE key = 'schema_version'");
  ExpectUnusableAndUntouched(path, "has schema version 2");
}

TEST_F(TacticStoreTest, RandomBytesAreReadAsEmptyAndNotWritten) {
  const std::string path = Path("random.db");
  std::mt19937 rng(7);
  std::string bytes(8192, '\0');
  for (char& c : bytes) c = static_cast<char>(rng());
  WriteBytes(path, bytes);
  ExpectUnusableAndUntouched(path, "is not a readable SQLite database");
  // SQLite's words and code, not the statement that met them.
  std::unique_ptr<TacticStore> store = MustOpen(path);
  ASSERT_NE(store, nullptr);
  ASSERT_THAT(store->warnings(), SizeIs(1));
  EXPECT_THAT(store->warnings()[0], HasSubstr("file is not a database (SQLite code 26)"));
  EXPECT_THAT(store->warnings()[0], ::testing::Not(HasSubstr("SELECT")));
}

// A store read where SQLite could not create a WAL file's -shm (a read-only directory) is read
// as immutable: the file alone, with no locks, and nothing created beside it. (A read-only
// directory cannot be made for a test run as root; the immutable open itself is checked here,
// on a name with the characters a URI escapes.)
TEST_F(TacticStoreTest, ImmutableOpenReadsTheFileAloneAndCreatesNothing) {
  const std::string path = Path("odd?name%#.db");
  const RegionMeasurement m = TestMeasurement(TestEnvironment(), "linear(a)");
  {
    std::unique_ptr<TacticStore> store = MustOpen(path);
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->Record(m).ok());
  }
  ASSERT_FALSE(std::filesystem::exists(path + "-wal"));  // checkpointed on the last close
  absl::StatusOr<sqlite::Database> db =
      sqlite::Database::Open(path, sqlite::Database::Mode::kImmutable, absl::Seconds(1));
  ASSERT_TRUE(db.ok()) << db.status();
  absl::StatusOr<std::set<std::string>> tables = db->TableNames();
  ASSERT_TRUE(tables.ok()) << tables.status();
  EXPECT_TRUE(tables->count("winners"));
  EXPECT_FALSE(std::filesystem::exists(path + "-wal"));
  EXPECT_FALSE(std::filesystem::exists(path + "-shm"));
  // Writing through it fails.
  EXPECT_FALSE(db->Exec("CREATE TABLE t(x)").ok());
}

TEST_F(TacticStoreTest, CorruptSqliteIsReadAsEmptyAndNotWritten) {
  // An SQLite header followed by garbage.
  const std::string path = Path("corrupt.db");
  std::mt19937 rng(11);
  std::string bytes(8192, '\0');
  for (char& c : bytes) c = static_cast<char>(rng());
  bytes.replace(0, 16, std::string("SQLite format 3\0", 16));
  WriteBytes(path, bytes);
  ExpectUnusableAndUntouched(path, "SQLite database");
}

TEST_F(TacticStoreTest, ForeignSqliteIsReadAsEmptyAndNotWritten) {
  const std::string path = Path("foreign.db");
  RawSql(path, "CREATE TABLE people(name TEXT); INSERT INTO people VALUES ('ada');");
  ExpectUnusableAndUntouched(path, "without the tactic store's meta table (tables: people)");
}

// A foreign write-ahead-logged file whose last commits are still in its log (the program that
// wrote it closed without a checkpoint): opening it as a store reads the log, finds no store,
// and closes without copying the log into the file; file and log keep their bytes.
// Found by store_open_fuzzer (tests/fuzz): a store file whose schema reads as ours but whose
// winners' pages do not (and whose header asks for another journal format) is refused before
// anything is written; its journal mode was once switched first, changing the header.
TEST_F(TacticStoreTest, StoreWithUnreadableWinnersIsRefusedUntouched) {
  const std::string path = Path("malformed.db");
  std::filesystem::copy_file(
      tileplan::testing::SourcePath("tests/tuner/testdata/store_malformed_winners.db"), path);
  ExpectUnusableAndUntouched(path, "cannot be read (database disk image is malformed");
}

TEST_F(TacticStoreTest, ForeignLoggedSqliteKeepsItsLogOnClose) {
  const std::string path = Path("foreign_wal.db");
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, nullptr), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db,
                           "PRAGMA journal_mode = WAL; CREATE TABLE people(name TEXT); "
                           "INSERT INTO people VALUES ('ada');",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
  }
  ASSERT_TRUE(std::filesystem::exists(path + "-wal"));
  const std::string file = ReadBytes(path), log = ReadBytes(path + "-wal");
  ASSERT_FALSE(log.empty());
  {
    std::unique_ptr<TacticStore> store = MustOpen(path);
    ASSERT_NE(store, nullptr);
    ASSERT_THAT(store->warnings(), SizeIs(1));
    EXPECT_THAT(store->warnings()[0], HasSubstr("(tables: people)"));
    EXPECT_THAT(store->warnings()[0], HasSubstr("will not be written"));
  }
  EXPECT_EQ(ReadBytes(path), file);
  EXPECT_EQ(ReadBytes(path + "-wal"), log);
}

TEST_F(TacticStoreTest, ReadOnlyStoreAnswersAndRefusesWrites) {
  const std::string path = Path("store.db");
  const RegionMeasurement m = TestMeasurement(TestEnvironment(), "linear(a)");
  ASSERT_TRUE(MustOpen(path)->Record(m).ok());
  std::unique_ptr<TacticStore> store = MustOpen(path, {.read_only = true});
  ASSERT_NE(store, nullptr);
  EXPECT_THAT(store->warnings(), IsEmpty());
  EXPECT_TRUE(store->Lookup(m.key).has_value());
  const absl::Status status = store->Record(m);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("read-only"));
  ASSERT_TRUE(store->Export(Path("read_only.textproto")).ok());
  EXPECT_THAT(ReadBytes(Path("read_only.textproto")), HasSubstr("linear(a)"));
  // A read-only open leaves nothing beside the file (SQLite's usual one would leave its
  // -wal and -shm files).
  store.reset();
  EXPECT_FALSE(std::filesystem::exists(path + "-wal"));
  EXPECT_FALSE(std::filesystem::exists(path + "-shm"));
  // While a writer holds the file (its log beside it), a read-only open sees its commits.
  {
    std::unique_ptr<TacticStore> writer = MustOpen(path);
    ASSERT_NE(writer, nullptr);
    const RegionMeasurement later = TestMeasurement(TestEnvironment(), "linear(b)");
    ASSERT_TRUE(writer->Record(later).ok());
    ASSERT_TRUE(std::filesystem::exists(path + "-wal"));
    std::unique_ptr<TacticStore> reader = MustOpen(path, {.read_only = true});
    ASSERT_NE(reader, nullptr);
    EXPECT_TRUE(reader->Lookup(later.key).has_value());
  }

  absl::StatusOr<std::unique_ptr<TacticStore>> missing =
      TacticStore::Open(Path("missing.db"), {.read_only = true});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(std::filesystem::exists(Path("missing.db")));
}

TEST_F(TacticStoreTest, FreezeRecordsEveryMiss) {
  const std::string path = Path("store.db");
  const RegionMeasurement stored = TestMeasurement(TestEnvironment(), "linear(a)");
  ASSERT_TRUE(MustOpen(path)->Record(stored).ok());
  const TacticKey b = TestMeasurement(TestEnvironment(), "linear(b)").key;
  const TacticKey c = TestMeasurement(TestEnvironment(12080), "linear(a)").key;

  std::unique_ptr<TacticStore> frozen = MustOpen(path, {.freeze = true});
  ASSERT_NE(frozen, nullptr);
  EXPECT_TRUE(frozen->Lookup(stored.key).has_value());
  EXPECT_EQ(frozen->Lookup(c), std::nullopt);
  EXPECT_EQ(frozen->Lookup(b), std::nullopt);
  EXPECT_EQ(frozen->Lookup(b), std::nullopt);
  EXPECT_THAT(frozen->misses(), ElementsAre(c, b));  // sorted: 12080 before 13000
  const absl::Status check = frozen->CheckFrozen();
  EXPECT_EQ(check.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(check.message(), HasSubstr(absl::StrCat("frozen tactic store ", path,
                                                      ": 2 lookups found no measured tactic, "
                                                      "e.g. ",
                                                      c.ToString())));

  // A view launches nothing and is never tuned: its lookup is no miss.
  TacticKey view = stored.key;
  view.family = "view";
  std::unique_ptr<TacticStore> views = MustOpen(path, {.freeze = true});
  EXPECT_EQ(views->Lookup(view), std::nullopt);
  EXPECT_THAT(views->misses(), IsEmpty());
  EXPECT_TRUE(views->CheckFrozen().ok());

  std::unique_ptr<TacticStore> unfrozen = MustOpen(path);
  EXPECT_EQ(unfrozen->Lookup(b), std::nullopt);
  EXPECT_THAT(unfrozen->misses(), IsEmpty());
  EXPECT_TRUE(unfrozen->CheckFrozen().ok());
}

TEST_F(TacticStoreTest, ConcurrentWriterProcessesKeepEveryRecord) {
  const std::string path = Path("shared.db");
  constexpr int kRecords = 200;
  const std::string tool = tileplan::testing::BuiltBinary(TACTIC_STORE_WRITER).string();
  std::vector<pid_t> children;
  for (const char* writer : {"first", "second"}) {
    const std::string count = absl::StrCat(kRecords);
    std::vector<char*> argv = {const_cast<char*>(tool.c_str()), const_cast<char*>(path.c_str()),
                               const_cast<char*>(writer), const_cast<char*>(count.c_str()),
                               nullptr};
    pid_t pid = 0;
    ASSERT_EQ(posix_spawn(&pid, tool.c_str(), nullptr, nullptr, argv.data(), environ), 0);
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  }
  std::unique_ptr<TacticStore> store = MustOpen(path);
  ASSERT_NE(store, nullptr);
  EXPECT_THAT(store->warnings(), IsEmpty());
  EXPECT_EQ(store->num_winners(), 2 * kRecords);
  for (const char* writer : {"first", "second"}) {
    for (int i = 0; i < kRecords; ++i) {
      const RegionMeasurement m =
          TestMeasurement(TestEnvironment(), absl::StrCat("linear(", writer, ", ", i, ")"));
      EXPECT_TRUE(store->Lookup(m.key).has_value()) << m.key.ToString();
    }
  }
}

// Two environments, a key without a winner and failure reasons with quotes and newlines.
void FillForExport(TacticStore& store) {
  for (int driver : {13000, 12080}) {
    for (const char* signature : {"linear(b)", "linear(a)", "rms_norm(c)"}) {
      ASSERT_TRUE(store.Record(TestMeasurement(TestEnvironment(driver), signature)).ok());
    }
  }
  ASSERT_TRUE(store.Record(TestMeasurement(TestEnvironment(), "argmax(d)", 0)).ok());
  RegionMeasurement prefill = TestMeasurement(TestEnvironment(), "linear(a)", 128);
  prefill.key.phase = ir::Phase::kPrefill;
  prefill.key.shape_bucket = "B=1,Smax=4096,T=64";
  ASSERT_TRUE(store.Record(prefill).ok());
}

TEST_F(TacticStoreTest, ExportImportExportIsIdentical) {
  std::unique_ptr<TacticStore> source = MustOpen(Path("source.db"));
  ASSERT_NE(source, nullptr);
  FillForExport(*source);
  ASSERT_TRUE(source->Export(Path("first.textproto")).ok());

  std::unique_ptr<TacticStore> copy = MustOpen(Path("copy.db"));
  ASSERT_NE(copy, nullptr);
  const absl::Status imported = copy->Import(Path("first.textproto"));
  ASSERT_TRUE(imported.ok()) << imported;
  EXPECT_EQ(copy->num_winners(), source->num_winners());
  EXPECT_EQ(copy->environments(), source->environments());
  ASSERT_TRUE(copy->Export(Path("second.textproto")).ok());
  const std::string first = ReadBytes(Path("first.textproto"));
  EXPECT_EQ(ReadBytes(Path("second.textproto")), first);

  // Sorted: environments by fingerprint, keys by their fields, candidates by tactic.
  EXPECT_LT(first.find("driver=12080"), first.find("driver=13000"));
  const size_t second_environment = first.find("driver=13000");
  EXPECT_LT(first.find("argmax(d)", second_environment),
            first.find("linear(a)", second_environment));
  EXPECT_LT(first.find("linear(b)"), first.find("rms_norm(c)"));
  EXPECT_THAT(first, HasSubstr("status: \"launch_error\""));

  // The imported store answers like the source, in memory and once reopened.
  const RegionMeasurement m = TestMeasurement(TestEnvironment(12080), "rms_norm(c)");
  EXPECT_EQ(copy->Lookup(m.key)->tactic, *m.winner);
  copy.reset();
  copy = MustOpen(Path("copy.db"));
  EXPECT_EQ(copy->Lookup(m.key)->tactic, *m.winner);
  EXPECT_EQ(copy->num_winners(), source->num_winners());
}

// An export never replaces the store it reads nor anything that is not a regular file (the
// rename of the atomic write would): both are refused, writing nothing, and the store stays a
// store that opens with its winners.
TEST_F(TacticStoreTest, ExportNeverReplacesTheStoreOrANonRegularFile) {
  const std::string path = Path("kept.db");
  std::unique_ptr<TacticStore> store = MustOpen(path);
  ASSERT_NE(store, nullptr);
  FillForExport(*store);
  const int64_t winners = store->num_winners();
  absl::Status exported = store->Export(path);
  EXPECT_EQ(exported.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(exported.message(), HasSubstr("would replace the tactic store itself"));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  const std::string fifo = Path("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  exported = store->Export(fifo);
  EXPECT_EQ(exported.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(exported.message(), HasSubstr(fifo + " is a named pipe (FIFO), not a regular file"));
  EXPECT_FALSE(std::filesystem::exists(fifo + ".tmp"));
  EXPECT_TRUE(std::filesystem::is_fifo(fifo));
  store.reset();
  EXPECT_EQ(ReadBytes(path).rfind("SQLite format 3", 0), 0u);
  store = MustOpen(path);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->num_winners(), winners);
}

// A measured cuBLASLt tactic is a raw config (the heuristic's answer read back, any tile):
// stored, looked up, exported with every parameter named, imported and exported again
// unchanged.
TEST_F(TacticStoreTest, RawCublasLtConfigRoundTrips) {
  RegionMeasurement m;
  m.environment = TestEnvironment();
  m.key.environment = m.environment.Fingerprint();
  m.key.region_signature = "linear(bf16[1,512,1024], bf16[4096,1024]) -> (bf16[1,512,4096]) {}";
  m.key.shape_bucket = "B=1,Smax=512,T=512";
  m.key.phase = ir::Phase::kPrefill;
  m.key.family = "cublaslt_gemm";
  m.key.family_version = 2;
  const kernels::Tactic def{"cublaslt_gemm",
                            2,
                            {{"reduction_scheme", 0},
                             {"split_k", 1},
                             {"stages", 4},
                             {"swizzle", 0},
                             {"tile_m", 128},
                             {"tile_n", 256}}};
  kernels::Tactic raw = def;
  raw.params = {{"algo_id", 66},       {"cluster_shape_id", 3}, {"custom_option", 1},
                {"inner_shape_id", 0}, {"reduction_scheme", 0}, {"split_k", 1},
                {"stages", 0},         {"stages_id", 35},       {"swizzle", 1},
                {"tile_id", 31},       {"tile_m", 128},         {"tile_n", 192}};
  m.candidates = {{def, CandidateStatus::kOk, "", 12.5}, {raw, CandidateStatus::kOk, "", 10.25}};
  m.winner = raw;
  m.winner_us = 10.25;
  m.default_us = 12.5;
  std::unique_ptr<TacticStore> source = MustOpen(Path("source.db"));
  ASSERT_NE(source, nullptr);
  const absl::Status recorded = source->Record(m);
  ASSERT_TRUE(recorded.ok()) << recorded;
  ASSERT_TRUE(source->Lookup(m.key).has_value());
  EXPECT_EQ(source->Lookup(m.key)->tactic, raw);
  source.reset();
  source = MustOpen(Path("source.db"));
  ASSERT_NE(source, nullptr);
  ASSERT_TRUE(source->Lookup(m.key).has_value());
  EXPECT_EQ(source->Lookup(m.key)->tactic, raw);

  ASSERT_TRUE(source->Export(Path("first.textproto")).ok());
  const std::string text = ReadBytes(Path("first.textproto"));
  for (const char* param :
       {"algo_id", "cluster_shape_id", "custom_option", "inner_shape_id", "stages_id", "tile_id"}) {
    EXPECT_THAT(text, HasSubstr(absl::StrCat("name: \"", param, "\"")));
  }
  EXPECT_THAT(text, HasSubstr("name: \"tile_id\"\n          value: 31"));
  std::unique_ptr<TacticStore> copy = MustOpen(Path("copy.db"));
  ASSERT_NE(copy, nullptr);
  const absl::Status imported = copy->Import(Path("first.textproto"));
  ASSERT_TRUE(imported.ok()) << imported;
  ASSERT_TRUE(copy->Lookup(m.key).has_value());
  EXPECT_EQ(copy->Lookup(m.key)->tactic, raw);
  ASSERT_TRUE(copy->Export(Path("second.textproto")).ok());
  EXPECT_EQ(ReadBytes(Path("second.textproto")), text);
}

TEST_F(TacticStoreTest, MalformedImportNamesTheLineAndWritesNothing) {
  std::unique_ptr<TacticStore> source = MustOpen(Path("source.db"));
  ASSERT_NE(source, nullptr);
  FillForExport(*source);
  ASSERT_TRUE(source->Export(Path("good.textproto")).ok());
  const std::string good = ReadBytes(Path("good.textproto"));

  std::unique_ptr<TacticStore> target = MustOpen(Path("target.db"));
  ASSERT_NE(target, nullptr);
  ASSERT_TRUE(target->Record(TestMeasurement(TestEnvironment(), "linear(z)")).ok());
  ASSERT_TRUE(target->Export(Path("before.textproto")).ok());

  auto line_of = [](const std::string& text, size_t offset) {
    return 1 + std::count(text.begin(), text.begin() + offset, '\n');
  };
  // A syntax error.
  {
    std::string bad = good;
    const size_t at = bad.find("shape_bucket:");
    bad.replace(at, 13, "shape_bucket ");
    WriteBytes(Path("syntax.textproto"), bad);
    const absl::Status status = target->Import(Path("syntax.textproto"));
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(status.message(),
                HasSubstr(absl::StrCat(Path("syntax.textproto"), ":", line_of(bad, at), ":")));
  }
  // A valid first environment, then a winner that failed in the last key of the file.
  {
    std::string bad = good;
    const size_t winner = bad.rfind("winner {");
    const size_t threads = bad.find("value: 256", winner);
    ASSERT_NE(threads, std::string::npos);
    bad.replace(threads, 10, "value: 512");
    WriteBytes(Path("winner.textproto"), bad);
    const absl::Status status = target->Import(Path("winner.textproto"));
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(status.message(), HasSubstr(absl::StrCat(Path("winner.textproto"), ":",
                                                         line_of(bad, winner), ": the winner")));
  }
  // Values no store writes: a measured_at that is not a UTC time, an empty region signature,
  // an environment created "yesterday".
  for (const auto& [field, value, message] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"measured_at", "yesterday", "has measured_at 'yesterday', not a UTC time"},
           {"measured_at", "2026-13-01T00:00:00Z", "has measured_at '2026-13-01T00:00:00Z'"},
           {"region_signature", "", "the key has no region_signature"},
           {"created", "yesterday", "has created 'yesterday', not a UTC time"}}) {
    SCOPED_TRACE(field + " " + value);
    // The first `field: "..."` of the good file with `value` inside the quotes.
    std::string bad = good;
    const size_t at = bad.find(field + ": \"");
    ASSERT_NE(at, std::string::npos);
    const size_t open = at + field.size() + 3;
    bad.replace(open, bad.find('"', open) - open, value);
    const std::string path = Path(field + ".textproto");
    WriteBytes(path, bad);
    const absl::Status status = target->Import(path);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(status.message(), HasSubstr(absl::StrCat(path, ":")));
    EXPECT_THAT(status.message(), HasSubstr(message));
  }
  // A fingerprint that does not match its fields.
  {
    std::string bad = good;
    const size_t driver = bad.find("driver_version: 12080");
    ASSERT_NE(driver, std::string::npos);
    bad.replace(driver, 21, "driver_version: 12090");
    WriteBytes(Path("fingerprint.textproto"), bad);
    const absl::Status status = target->Import(Path("fingerprint.textproto"));
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(status.message(), HasSubstr("does not match the environment's fields"));
  }
  EXPECT_EQ(target->num_winners(), 1);
  target.reset();
  target = MustOpen(Path("target.db"));
  ASSERT_TRUE(target->Export(Path("after.textproto")).ok());
  EXPECT_EQ(ReadBytes(Path("after.textproto")), ReadBytes(Path("before.textproto")));
}

}  // namespace
}  // namespace tileplan::tuner
