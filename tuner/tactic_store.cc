#include "tuner/tactic_store.h"

#include <sqlite3.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <system_error>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/status_macros.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "regions/ir.h"

namespace tileplan::tuner {
namespace {

using google::protobuf::TextFormat;
using planner::TacticKey;

constexpr absl::string_view kSchemaName = "tileplan.tactic_store";
constexpr int kBusyTimeoutMs = 10000;

// docs/tuner.md, "Schema". The key of a measurement is (environment_id, region_signature,
// shape_bucket, phase, family, family_version); `tactic` is Tactic::ParamsString() and
// `tactic_proto` the serialized kernels.proto.Tactic.
constexpr char kCreateSchema[] = R"sql(
CREATE TABLE meta(
  key TEXT PRIMARY KEY,
  value TEXT NOT NULL);
CREATE TABLE environments(
  id INTEGER PRIMARY KEY,
  fingerprint TEXT NOT NULL UNIQUE,
  gpu TEXT NOT NULL,
  sm INTEGER NOT NULL,
  sm_count INTEGER NOT NULL,
  l2_bytes INTEGER NOT NULL,
  bandwidth_gbps REAL NOT NULL,
  driver_version INTEGER NOT NULL,
  cuda_runtime_version INTEGER NOT NULL,
  nvrtc_version TEXT NOT NULL,
  cublaslt_version INTEGER NOT NULL,
  schema_version INTEGER NOT NULL,
  created TEXT NOT NULL);
CREATE TABLE candidates(
  environment_id INTEGER NOT NULL REFERENCES environments(id),
  region_signature TEXT NOT NULL,
  shape_bucket TEXT NOT NULL,
  phase TEXT NOT NULL,
  family TEXT NOT NULL,
  family_version INTEGER NOT NULL,
  tactic TEXT NOT NULL,
  tactic_proto BLOB NOT NULL,
  status TEXT NOT NULL,
  reason TEXT NOT NULL,
  median_us REAL NOT NULL,
  measured_at TEXT NOT NULL,
  PRIMARY KEY(environment_id, region_signature, shape_bucket, phase, family, family_version,
              tactic));
CREATE TABLE winners(
  environment_id INTEGER NOT NULL REFERENCES environments(id),
  region_signature TEXT NOT NULL,
  shape_bucket TEXT NOT NULL,
  phase TEXT NOT NULL,
  family TEXT NOT NULL,
  family_version INTEGER NOT NULL,
  tactic TEXT NOT NULL,
  tactic_proto BLOB NOT NULL,
  median_us REAL NOT NULL,
  default_us REAL NOT NULL,
  PRIMARY KEY(environment_id, region_signature, shape_bucket, phase, family, family_version));
)sql";

constexpr std::pair<CandidateStatus, absl::string_view> kStatusNames[] = {
    {CandidateStatus::kOk, "ok"},
    {CandidateStatus::kCompileError, "compile_error"},
    {CandidateStatus::kLaunchError, "launch_error"},
    {CandidateStatus::kWrongResult, "wrong_result"},
    {CandidateStatus::kOutOfResources, "out_of_resources"},
    {CandidateStatus::kFault, "fault"},
    {CandidateStatus::kInvalid, "invalid"},
};

// ---------------------------------------------------------------------------------------
// SQLite result codes as Status, with the statement and the call site.

absl::Status SqliteStatus(sqlite3* db, int rc, absl::string_view what, const char* file, int line) {
  std::string message = absl::StrCat(what, ": ", db ? sqlite3_errmsg(db) : sqlite3_errstr(rc), " (",
                                     sqlite3_errstr(rc), ", code ", rc, ") at ", file, ":", line);
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return absl::UnavailableError(message);
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return absl::DataLossError(message);
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_AUTH:
    case SQLITE_CANTOPEN:
      return absl::PermissionDeniedError(message);
    case SQLITE_FULL:
      return absl::ResourceExhaustedError(message);
    case SQLITE_CONSTRAINT:
      return absl::FailedPreconditionError(message);
    default:
      return absl::InternalError(message);
  }
}

#define TP_SQLITE_STATUS(db, rc, what) SqliteStatus(db, rc, what, __FILE__, __LINE__)

// Runs one or more statements that return no rows.
absl::Status ExecSql(sqlite3* db, const char* sql) {
  const int rc = sqlite3_exec(db, sql, nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return TP_SQLITE_STATUS(db, rc, sql);
  return absl::OkStatus();
}

struct Blob {
  explicit Blob(absl::string_view b) : bytes(b) {}
  absl::string_view bytes;
};

// One prepared statement. Not thread-safe; finalized when destroyed.
class Statement {
 public:
  static absl::StatusOr<Statement> Prepare(sqlite3* db, absl::string_view sql) {
    sqlite3_stmt* stmt = nullptr;
    const int rc = sqlite3_prepare_v2(db, sql.data(), static_cast<int>(sql.size()), &stmt, nullptr);
    if (rc != SQLITE_OK) {
      sqlite3_finalize(stmt);
      return TP_SQLITE_STATUS(db, rc, absl::StrCat("prepare `", sql, "`"));
    }
    return Statement(db, stmt, sql);
  }
  Statement(Statement&& other) noexcept
      : db_(other.db_), stmt_(std::exchange(other.stmt_, nullptr)), sql_(std::move(other.sql_)) {}
  Statement& operator=(Statement&&) = delete;
  ~Statement() { sqlite3_finalize(stmt_); }

  // Resets the statement and binds `args` to parameters 1, 2, ...
  template <typename... Args>
  absl::Status Bind(const Args&... args) {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
    absl::Status status;
    int index = 0;
    ((status.ok() ? (status = BindOne(++index, args), 0) : 0), ...);
    return status;
  }
  // True when a row is ready, false when the statement is done.
  absl::StatusOr<bool> Step() {
    const int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    return TP_SQLITE_STATUS(db_, rc, absl::StrCat("step `", sql_, "`"));
  }
  // Steps a statement that returns no rows to its end.
  absl::Status Run() {
    TP_ASSIGN_OR_RETURN(bool row, Step());
    if (row) return absl::InternalError(absl::StrCat("`", sql_, "` returned a row"));
    return absl::OkStatus();
  }

  int64_t Int(int column) const { return sqlite3_column_int64(stmt_, column); }
  double Double(int column) const { return sqlite3_column_double(stmt_, column); }
  std::string Text(int column) const {
    const unsigned char* text = sqlite3_column_text(stmt_, column);
    return text ? std::string(reinterpret_cast<const char*>(text),
                              sqlite3_column_bytes(stmt_, column))
                : std::string();
  }
  std::string BlobBytes(int column) const {
    const void* data = sqlite3_column_blob(stmt_, column);
    return data ? std::string(static_cast<const char*>(data), sqlite3_column_bytes(stmt_, column))
                : std::string();
  }

 private:
  Statement(sqlite3* db, sqlite3_stmt* stmt, absl::string_view sql)
      : db_(db), stmt_(stmt), sql_(sql) {}

  absl::Status Check(int rc, int index) {
    if (rc == SQLITE_OK) return absl::OkStatus();
    return TP_SQLITE_STATUS(db_, rc, absl::StrCat("bind parameter ", index, " of `", sql_, "`"));
  }
  absl::Status BindOne(int i, int32_t v) { return Check(sqlite3_bind_int64(stmt_, i, v), i); }
  absl::Status BindOne(int i, int64_t v) { return Check(sqlite3_bind_int64(stmt_, i, v), i); }
  absl::Status BindOne(int i, double v) { return Check(sqlite3_bind_double(stmt_, i, v), i); }
  absl::Status BindOne(int i, absl::string_view v) {
    return Check(sqlite3_bind_text64(stmt_, i, v.data(), v.size(), SQLITE_TRANSIENT, SQLITE_UTF8),
                 i);
  }
  absl::Status BindOne(int i, const Blob& v) {
    return Check(sqlite3_bind_blob64(stmt_, i, v.bytes.data(), v.bytes.size(), SQLITE_TRANSIENT),
                 i);
  }

  sqlite3* db_;
  sqlite3_stmt* stmt_;
  std::string sql_;
};

// A transaction that rolls back unless committed.
class Transaction {
 public:
  explicit Transaction(sqlite3* db) : db_(db) {}
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  ~Transaction() {
    if (open_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  // A write transaction takes the file's write lock now (waiting up to the busy timeout),
  // so that it never fails later for a lock a reader upgraded first.
  absl::Status Begin(bool write) {
    TP_RETURN_IF_ERROR(ExecSql(db_, write ? "BEGIN IMMEDIATE" : "BEGIN"));
    open_ = true;
    return absl::OkStatus();
  }
  absl::Status Commit() {
    TP_RETURN_IF_ERROR(ExecSql(db_, "COMMIT"));
    open_ = false;
    return absl::OkStatus();
  }

 private:
  sqlite3* db_;
  bool open_ = false;
};

absl::StatusOr<std::set<std::string>> TableNames(sqlite3* db) {
  TP_ASSIGN_OR_RETURN(
      Statement s, Statement::Prepare(db, "SELECT name FROM sqlite_master WHERE type = 'table'"));
  std::set<std::string> names;
  while (true) {
    TP_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    names.insert(s.Text(0));
  }
  return names;
}

// The value of `key` in the meta table; nullopt when absent.
absl::StatusOr<std::optional<std::string>> MetaValue(sqlite3* db, absl::string_view key) {
  TP_ASSIGN_OR_RETURN(Statement s, Statement::Prepare(db, "SELECT value FROM meta WHERE key = ?"));
  TP_RETURN_IF_ERROR(s.Bind(key));
  TP_ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return std::nullopt;
  return s.Text(0);
}

// Empty when `tables` and the meta table are this build's schema; else what is wrong.
absl::StatusOr<std::string> SchemaProblem(sqlite3* db, const std::set<std::string>& tables) {
  if (!tables.contains("meta")) {
    return absl::StrCat("is an SQLite database without the tactic store's meta table (tables: ",
                        absl::StrJoin(tables, ", "), ")");
  }
  TP_ASSIGN_OR_RETURN(std::optional<std::string> schema, MetaValue(db, "schema"));
  if (schema != kSchemaName) {
    return absl::StrCat("is an SQLite database of schema '", schema.value_or(""), "', not ",
                        kSchemaName);
  }
  TP_ASSIGN_OR_RETURN(std::optional<std::string> version, MetaValue(db, "schema_version"));
  if (version != absl::StrCat(kTacticStoreSchemaVersion)) {
    return absl::StrCat("has schema version ", version.value_or("(none)"),
                        "; this build reads and writes version ", kTacticStoreSchemaVersion);
  }
  for (const char* table : {"environments", "candidates", "winners"}) {
    if (!tables.contains(table)) return absl::StrCat("lacks the table ", table);
  }
  return std::string();
}

// Creates the schema unless another process did so first. REQUIRES: not read-only.
absl::Status CreateSchemaIfEmpty(sqlite3* db) {
  Transaction txn(db);
  TP_RETURN_IF_ERROR(txn.Begin(/*write=*/true));
  TP_ASSIGN_OR_RETURN(std::set<std::string> tables, TableNames(db));
  if (!tables.empty()) return absl::OkStatus();  // rolls back the empty transaction
  TP_RETURN_IF_ERROR(ExecSql(db, kCreateSchema));
  TP_ASSIGN_OR_RETURN(Statement s, Statement::Prepare(db, "INSERT INTO meta VALUES (?, ?)"));
  TP_RETURN_IF_ERROR(s.Bind("schema", kSchemaName));
  TP_RETURN_IF_ERROR(s.Run());
  TP_RETURN_IF_ERROR(s.Bind("schema_version", absl::StrCat(kTacticStoreSchemaVersion)));
  TP_RETURN_IF_ERROR(s.Run());
  return txn.Commit();
}

// Write-ahead logging: readers never block the writer, and a writer waits for another
// (busy timeout) instead of failing. Persistent in the file.
absl::Status UseWriteAheadLog(sqlite3* db) {
  // Changing the journal mode does not wait through the busy handler: while another process
  // holds the file (two processes creating one store) it fails at once with SQLITE_BUSY or
  // leaves the mode unchanged. So retry until the busy timeout.
  const absl::Time deadline = absl::Now() + absl::Milliseconds(kBusyTimeoutMs);
  while (true) {
    absl::StatusOr<std::string> mode = [&]() -> absl::StatusOr<std::string> {
      TP_ASSIGN_OR_RETURN(Statement s, Statement::Prepare(db, "PRAGMA journal_mode = WAL"));
      TP_ASSIGN_OR_RETURN(bool row, s.Step());
      return row ? s.Text(0) : "";
    }();
    if (mode.ok() && *mode == "wal") break;
    if (!mode.ok() && !absl::IsUnavailable(mode.status())) return mode.status();
    if (absl::Now() > deadline) {
      if (!mode.ok()) return mode.status();
      return absl::UnavailableError(
          absl::StrCat("cannot switch to WAL mode (journal mode is '", *mode, "')"));
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  // In WAL mode NORMAL keeps the file consistent; only the last commits may be lost at a
  // power failure.
  return ExecSql(db, "PRAGMA synchronous = NORMAL");
}

std::string UtcNow() {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::Now(), absl::UTCTimeZone());
}

Environment EnvironmentOf(const proto::StoredEnvironment& e) {
  Environment env;
  env.gpu = e.gpu();
  env.sm = e.sm();
  env.sm_count = e.sm_count();
  env.l2_bytes = e.l2_bytes();
  env.bandwidth_gbps = e.bandwidth_gbps();
  env.driver_version = e.driver_version();
  env.cuda_runtime_version = e.cuda_runtime_version();
  env.nvrtc_version = e.nvrtc_version();
  env.cublaslt_version = e.cublaslt_version();
  env.schema_version = e.schema_version();
  return env;
}

proto::StoredEnvironment StoredEnvironmentOf(const Environment& env, absl::string_view created) {
  proto::StoredEnvironment e;
  e.set_fingerprint(env.Fingerprint());
  e.set_gpu(env.gpu);
  e.set_sm(env.sm);
  e.set_sm_count(env.sm_count);
  e.set_l2_bytes(env.l2_bytes);
  e.set_bandwidth_gbps(env.bandwidth_gbps);
  e.set_driver_version(env.driver_version);
  e.set_cuda_runtime_version(env.cuda_runtime_version);
  e.set_nvrtc_version(env.nvrtc_version);
  e.set_cublaslt_version(env.cublaslt_version);
  e.set_schema_version(env.schema_version);
  e.set_created(std::string(created));
  return e;
}

// The planner's key of a stored key. REQUIRES: the phase parses (validated).
TacticKey KeyOf(absl::string_view environment, const proto::StoredKey& k) {
  TacticKey key;
  key.environment = std::string(environment);
  key.region_signature = k.region_signature();
  key.shape_bucket = k.shape_bucket();
  key.phase = ir::ParsePhase(k.phase()).value_or(ir::Phase::kGeneral);
  key.family = k.family();
  key.family_version = k.family_version();
  return key;
}

// Where an entry of an imported file is: the 1-based line of a message and the parse
// locations of its fields. Empty (line 0) for a measurement given to Record.
struct Where {
  const TextFormat::ParseInfoTree* tree = nullptr;
  const google::protobuf::Descriptor* type = nullptr;
  int line = 0;

  Where In(const char* field, int index) const {
    if (tree == nullptr) return *this;
    const google::protobuf::FieldDescriptor* f = type->FindFieldByName(field);
    Where nested;
    nested.tree = tree->GetTreeForNested(f, index);
    nested.type = f->message_type();
    const int l = tree->GetLocation(f, index).line;
    nested.line = l >= 0 ? l + 1 : line;
    if (nested.tree == nullptr) nested.line = line;
    return nested;
  }
  int LineOf(const char* field) const {
    if (tree == nullptr) return line;
    const int l = tree->GetLocation(type->FindFieldByName(field), -1).line;
    return l >= 0 ? l + 1 : line;
  }
};

// Builds InvalidArgument "<origin>:<line>: <message>", or "<origin>: <message>" without a
// line.
absl::Status Invalid(absl::string_view origin, int line, absl::string_view message) {
  if (line > 0) return absl::InvalidArgumentError(absl::StrCat(origin, ":", line, ": ", message));
  return absl::InvalidArgumentError(absl::StrCat(origin, ": ", message));
}

bool ValidTime(double us) { return std::isfinite(us) && us >= 0; }

// The checks Record and Import share (the header's contracts).
absl::Status ValidateKey(const proto::StoredKey& k, const Where& where, absl::string_view origin) {
  if (!ir::ParsePhase(k.phase()).ok()) {
    return Invalid(origin, where.LineOf("phase"), absl::StrCat("unknown phase '", k.phase(), "'"));
  }
  if (k.family().empty()) return Invalid(origin, where.line, "the key has no family");
  std::map<std::string, CandidateStatus> statuses;  // by ParamsString
  for (int i = 0; i < k.candidates_size(); ++i) {
    const proto::StoredCandidate& c = k.candidates(i);
    const Where at = where.In("candidates", i);
    absl::StatusOr<kernels::Tactic> tactic = kernels::TacticFromProto(c.tactic());
    if (!tactic.ok()) return Invalid(origin, at.line, tactic.status().message());
    if (tactic->family != k.family() || tactic->family_version != k.family_version()) {
      return Invalid(origin, at.line,
                     absl::StrCat("candidate ", tactic->ParamsString(), " is of family ",
                                  tactic->family, " v", tactic->family_version, ", the key's is ",
                                  k.family(), " v", k.family_version()));
    }
    absl::StatusOr<CandidateStatus> status = ParseCandidateStatus(c.status());
    if (!status.ok()) return Invalid(origin, at.LineOf("status"), status.status().message());
    if (!ValidTime(c.median_us())) {
      return Invalid(
          origin, at.LineOf("median_us"),
          absl::StrCat("candidate ", tactic->ParamsString(), " has median ", c.median_us(), " us"));
    }
    if (!statuses.emplace(tactic->ParamsString(), *status).second) {
      return Invalid(origin, at.line,
                     absl::StrCat("candidate ", tactic->ParamsString(), " appears twice"));
    }
  }
  if (k.has_winner()) {
    const Where at = where.In("winner", -1);
    absl::StatusOr<kernels::Tactic> tactic = kernels::TacticFromProto(k.winner().tactic());
    if (!tactic.ok()) return Invalid(origin, at.line, tactic.status().message());
    auto it = statuses.find(tactic->ParamsString());
    if (tactic->family != k.family() || tactic->family_version != k.family_version() ||
        it == statuses.end() || it->second != CandidateStatus::kOk) {
      return Invalid(origin, at.line,
                     absl::StrCat("the winner ", tactic->family, " v", tactic->family_version, " ",
                                  tactic->ParamsString(), " is not an \"ok\" candidate"));
    }
    if (!ValidTime(k.winner().median_us()) || !ValidTime(k.winner().default_us())) {
      return Invalid(origin, at.line, "the winner's times must be finite and not negative");
    }
  }
  return absl::OkStatus();
}

using KeyFields = std::tuple<std::string, std::string, std::string, std::string, int32_t>;
KeyFields FieldsOf(const proto::StoredKey& k) {
  return {k.region_signature(), k.shape_bucket(), k.phase(), k.family(), k.family_version()};
}

absl::Status ValidateFile(const proto::TacticStoreFile& file, const Where& where,
                          absl::string_view origin) {
  if (file.schema() != kSchemaName) {
    return Invalid(origin, std::max(1, where.LineOf("schema")),
                   absl::StrCat("schema is '", file.schema(), "', not ", kSchemaName));
  }
  if (file.schema_version() != kTacticStoreSchemaVersion) {
    return Invalid(origin, std::max(1, where.LineOf("schema_version")),
                   absl::StrCat("schema_version is ", file.schema_version(),
                                "; this build reads version ", kTacticStoreSchemaVersion));
  }
  std::set<std::string> fingerprints;
  for (int i = 0; i < file.environments_size(); ++i) {
    const proto::StoredEnvironment& e = file.environments(i);
    const Where at = where.In("environments", i);
    const std::string fingerprint = EnvironmentOf(e).Fingerprint();
    if (e.fingerprint() != fingerprint) {
      return Invalid(
          origin, at.LineOf("fingerprint"),
          absl::StrCat("fingerprint '", e.fingerprint(),
                       "' does not match the environment's fields ('", fingerprint, "')"));
    }
    if (!fingerprints.insert(fingerprint).second) {
      return Invalid(origin, at.line,
                     absl::StrCat("environment '", fingerprint, "' appears twice"));
    }
    std::set<KeyFields> keys;
    for (int j = 0; j < e.keys_size(); ++j) {
      const Where key_at = at.In("keys", j);
      TP_RETURN_IF_ERROR(ValidateKey(e.keys(j), key_at, origin));
      if (!keys.insert(FieldsOf(e.keys(j))).second) {
        return Invalid(
            origin, key_at.line,
            absl::StrCat("key '", KeyOf(fingerprint, e.keys(j)).ToString(), "' appears twice"));
      }
    }
  }
  return absl::OkStatus();
}

// Collects the first error of the text-format parser.
class FirstErrorCollector : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    if (!error_.empty()) return;
    error_ = absl::StrCat(line + 1, ":", column + 1, ": ", message);
  }
  const std::string& error() const { return error_; }

 private:
  std::string error_;
};

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("error reading ", path));
  return contents.str();
}

// Writes `path` through a temporary file and a rename, so that a reader never sees half.
absl::Status WriteWholeFile(const std::string& path, absl::string_view contents) {
  const std::string temporary = absl::StrCat(path, ".tmp");
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) return absl::PermissionDeniedError(absl::StrCat("cannot write ", temporary));
    out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
    out.close();
    if (!out) return absl::DataLossError(absl::StrCat("error writing ", temporary));
  }
  std::error_code ec;
  std::filesystem::rename(temporary, path, ec);
  if (ec) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot rename ", temporary, " to ", path, ": ", ec.message()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::string_view CandidateStatusName(CandidateStatus status) {
  for (const auto& [s, name] : kStatusNames) {
    if (s == status) return name;
  }
  return "invalid";
}

absl::StatusOr<CandidateStatus> ParseCandidateStatus(absl::string_view name) {
  for (const auto& [s, n] : kStatusNames) {
    if (n == name) return s;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown candidate status '", name, "'"));
}

absl::StatusOr<std::unique_ptr<TacticStore>> TacticStore::Open(absl::string_view path) {
  return Open(path, Options());
}

absl::StatusOr<std::unique_ptr<TacticStore>> TacticStore::Open(absl::string_view path,
                                                               const Options& options) {
  std::unique_ptr<TacticStore> store(new TacticStore(std::string(path), options));
  TP_RETURN_IF_ERROR(store->Initialize());
  return store;
}

TacticStore::~TacticStore() { sqlite3_close_v2(db_); }

absl::Status TacticStore::Initialize() {
  std::error_code ec;
  if (options_.read_only && !std::filesystem::exists(path_, ec)) {
    return absl::NotFoundError(
        absl::StrCat("tactic store ", path_, " does not exist (opened read-only)"));
  }
  const int flags =
      options_.read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
  const int rc = sqlite3_open_v2(path_.c_str(), &db_, flags | SQLITE_OPEN_FULLMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    absl::Status status =
        TP_SQLITE_STATUS(db_, rc, absl::StrCat("cannot open tactic store ", path_));
    sqlite3_close_v2(db_);
    db_ = nullptr;
    return status;
  }
  sqlite3_extended_result_codes(db_, 1);
  sqlite3_busy_timeout(db_, kBusyTimeoutMs);

  // Read before writing anything: a file that is not ours is never touched.
  // A file another process keeps locked past the busy timeout is an error, not a warning.
  absl::StatusOr<std::set<std::string>> tables = TableNames(db_);
  if (absl::IsUnavailable(tables.status())) return tables.status();
  if (!tables.ok()) {
    Disable(absl::StrCat("is not a readable SQLite database (", tables.status().message(), ")"));
    return absl::OkStatus();
  }
  if (tables->empty()) {
    if (options_.read_only) {  // an empty file: an empty store
      sqlite3_close_v2(db_);
      db_ = nullptr;
      return absl::OkStatus();
    }
    TP_RETURN_IF_ERROR(UseWriteAheadLog(db_));
    TP_RETURN_IF_ERROR(CreateSchemaIfEmpty(db_));
    TP_ASSIGN_OR_RETURN(*tables, TableNames(db_));
  }
  absl::StatusOr<std::string> problem = SchemaProblem(db_, *tables);
  if (absl::IsUnavailable(problem.status())) return problem.status();
  if (!problem.ok() || !problem->empty()) {
    Disable(problem.ok() ? *problem
                         : absl::StrCat("cannot be read (", problem.status().message(), ")"));
    return absl::OkStatus();
  }
  if (!options_.read_only) TP_RETURN_IF_ERROR(UseWriteAheadLog(db_));
  absl::Status loaded = Load();
  if (absl::IsUnavailable(loaded)) return loaded;
  if (!loaded.ok()) Disable(absl::StrCat("cannot be read (", loaded.message(), ")"));
  return absl::OkStatus();
}

void TacticStore::Disable(absl::string_view why) {
  unusable_ = std::string(why);
  warnings_.push_back(absl::StrCat("tactic store ", path_, " ", why,
                                   "; it is treated as empty and will not be written"));
  sqlite3_close_v2(db_);
  db_ = nullptr;
  absl::MutexLock lock(&mu_);
  winners_.clear();
  environments_.clear();
}

absl::Status TacticStore::CheckWritable() const {
  if (!unusable_.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("tactic store ", path_, " is not written: it ", unusable_));
  }
  if (options_.read_only) {
    return absl::FailedPreconditionError(
        absl::StrCat("tactic store ", path_, " is opened read-only"));
  }
  return absl::OkStatus();
}

absl::Status TacticStore::Load() {
  std::set<std::string> environments;
  std::map<TacticKey, planner::MeasuredTactic> winners;
  {
    TP_ASSIGN_OR_RETURN(Statement s,
                        Statement::Prepare(db_, "SELECT fingerprint FROM environments"));
    while (true) {
      TP_ASSIGN_OR_RETURN(bool row, s.Step());
      if (!row) break;
      environments.insert(s.Text(0));
    }
  }
  TP_ASSIGN_OR_RETURN(
      Statement s,
      Statement::Prepare(db_,
                         "SELECT e.fingerprint, w.region_signature, w.shape_bucket, w.phase, "
                         "w.family, w.family_version, w.tactic_proto, w.median_us "
                         "FROM winners w JOIN environments e ON e.id = w.environment_id"));
  while (true) {
    TP_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    TacticKey key;
    key.environment = s.Text(0);
    key.region_signature = s.Text(1);
    key.shape_bucket = s.Text(2);
    key.family = s.Text(4);
    key.family_version = static_cast<int32_t>(s.Int(5));
    absl::StatusOr<ir::Phase> phase = ir::ParsePhase(s.Text(3));
    kernels::proto::Tactic message;
    absl::StatusOr<kernels::Tactic> tactic = absl::DataLossError("unparsable tactic_proto");
    if (message.ParseFromString(s.BlobBytes(6))) tactic = kernels::TacticFromProto(message);
    if (phase.ok()) key.phase = *phase;
    absl::Status problem =
        !phase.ok()    ? phase.status()
        : !tactic.ok() ? tactic.status()
        : tactic->family != key.family || tactic->family_version != key.family_version
            ? absl::DataLossError("the tactic is of another family")
            : absl::OkStatus();
    if (!problem.ok()) {
      warnings_.push_back(absl::StrCat("tactic store ", path_, ": skipping the winner of '",
                                       key.ToString(), "': ", problem.message()));
      continue;
    }
    winners[std::move(key)] = planner::MeasuredTactic{*std::move(tactic), s.Double(7)};
  }
  absl::MutexLock lock(&mu_);
  winners_ = std::move(winners);
  environments_ = std::move(environments);
  return absl::OkStatus();
}

std::optional<planner::MeasuredTactic> TacticStore::Lookup(const TacticKey& key) const {
  absl::MutexLock lock(&mu_);
  auto it = winners_.find(key);
  if (it != winners_.end()) return it->second;
  if (options_.freeze) misses_.insert(key);
  return std::nullopt;
}

absl::Status TacticStore::Record(const RegionMeasurement& m) {
  const std::string origin = absl::StrCat("Record(", m.key.ToString(), ")");
  const std::string fingerprint = m.environment.Fingerprint();
  if (m.key.environment != fingerprint) {
    return Invalid(
        origin, 0,
        absl::StrCat("the key's environment is not the measurement's ('", fingerprint, "')"));
  }
  const std::string now = UtcNow();
  proto::TacticStoreFile file;
  file.set_schema(std::string(kSchemaName));
  file.set_schema_version(kTacticStoreSchemaVersion);
  proto::StoredEnvironment* e = file.add_environments();
  *e = StoredEnvironmentOf(m.environment, now);
  proto::StoredKey* k = e->add_keys();
  k->set_region_signature(m.key.region_signature);
  k->set_shape_bucket(m.key.shape_bucket);
  k->set_phase(std::string(ir::PhaseName(m.key.phase)));
  k->set_family(m.key.family);
  k->set_family_version(m.key.family_version);
  for (const CandidateMeasurement& c : m.candidates) {
    proto::StoredCandidate* stored = k->add_candidates();
    *stored->mutable_tactic() = kernels::TacticToProto(c.tactic);
    stored->set_status(std::string(CandidateStatusName(c.status)));
    stored->set_reason(c.reason);
    stored->set_median_us(c.median_us);
    stored->set_measured_at(now);
  }
  if (m.winner.has_value()) {
    proto::StoredWinner* w = k->mutable_winner();
    *w->mutable_tactic() = kernels::TacticToProto(*m.winner);
    w->set_median_us(m.winner_us);
    w->set_default_us(m.default_us);
  }
  TP_RETURN_IF_ERROR(ValidateKey(*k, Where(), origin));
  TP_RETURN_IF_ERROR(CheckWritable());
  absl::MutexLock lock(&write_mu_);
  return WriteFile(file);
}

absl::Status TacticStore::WriteFile(const proto::TacticStoreFile& file) {
  constexpr absl::string_view kKeyWhere =
      "environment_id = ? AND region_signature = ? AND shape_bucket = ? AND phase = ? AND "
      "family = ? AND family_version = ?";
  Transaction txn(db_);
  TP_RETURN_IF_ERROR(txn.Begin(/*write=*/true));
  TP_ASSIGN_OR_RETURN(
      Statement insert_environment,
      Statement::Prepare(db_,
                         "INSERT OR IGNORE INTO environments (fingerprint, gpu, sm, sm_count, "
                         "l2_bytes, bandwidth_gbps, driver_version, cuda_runtime_version, "
                         "nvrtc_version, cublaslt_version, schema_version, created) "
                         "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"));
  TP_ASSIGN_OR_RETURN(Statement environment_id,
                      Statement::Prepare(db_, "SELECT id FROM environments WHERE fingerprint = ?"));
  TP_ASSIGN_OR_RETURN(
      Statement delete_candidates,
      Statement::Prepare(db_, absl::StrCat("DELETE FROM candidates WHERE ", kKeyWhere)));
  TP_ASSIGN_OR_RETURN(
      Statement delete_winner,
      Statement::Prepare(db_, absl::StrCat("DELETE FROM winners WHERE ", kKeyWhere)));
  TP_ASSIGN_OR_RETURN(
      Statement insert_candidate,
      Statement::Prepare(db_,
                         "INSERT INTO candidates (environment_id, region_signature, "
                         "shape_bucket, phase, family, family_version, tactic, tactic_proto, "
                         "status, reason, median_us, measured_at) "
                         "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"));
  TP_ASSIGN_OR_RETURN(
      Statement insert_winner,
      Statement::Prepare(db_,
                         "INSERT INTO winners (environment_id, region_signature, shape_bucket, "
                         "phase, family, family_version, tactic, tactic_proto, median_us, "
                         "default_us) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"));

  // What the memory becomes once the transaction commits.
  std::vector<std::pair<TacticKey, std::optional<planner::MeasuredTactic>>> updates;
  for (const proto::StoredEnvironment& e : file.environments()) {
    TP_RETURN_IF_ERROR(insert_environment.Bind(
        e.fingerprint(), e.gpu(), e.sm(), e.sm_count(), e.l2_bytes(), e.bandwidth_gbps(),
        e.driver_version(), e.cuda_runtime_version(), e.nvrtc_version(), e.cublaslt_version(),
        e.schema_version(), e.created()));
    TP_RETURN_IF_ERROR(insert_environment.Run());
    TP_RETURN_IF_ERROR(environment_id.Bind(e.fingerprint()));
    TP_ASSIGN_OR_RETURN(bool found, environment_id.Step());
    if (!found) return absl::InternalError(absl::StrCat("environment ", e.fingerprint(), " lost"));
    const int64_t id = environment_id.Int(0);
    for (const proto::StoredKey& k : e.keys()) {
      for (Statement* s : {&delete_candidates, &delete_winner}) {
        TP_RETURN_IF_ERROR(s->Bind(id, k.region_signature(), k.shape_bucket(), k.phase(),
                                   k.family(), k.family_version()));
        TP_RETURN_IF_ERROR(s->Run());
      }
      for (const proto::StoredCandidate& c : k.candidates()) {
        TP_ASSIGN_OR_RETURN(kernels::Tactic tactic, kernels::TacticFromProto(c.tactic()));
        TP_RETURN_IF_ERROR(insert_candidate.Bind(
            id, k.region_signature(), k.shape_bucket(), k.phase(), k.family(), k.family_version(),
            tactic.ParamsString(), Blob(kernels::TacticToProto(tactic).SerializeAsString()),
            c.status(), c.reason(), c.median_us(), c.measured_at()));
        TP_RETURN_IF_ERROR(insert_candidate.Run());
      }
      std::optional<planner::MeasuredTactic> winner;
      if (k.has_winner()) {
        TP_ASSIGN_OR_RETURN(kernels::Tactic tactic, kernels::TacticFromProto(k.winner().tactic()));
        TP_RETURN_IF_ERROR(insert_winner.Bind(
            id, k.region_signature(), k.shape_bucket(), k.phase(), k.family(), k.family_version(),
            tactic.ParamsString(), Blob(kernels::TacticToProto(tactic).SerializeAsString()),
            k.winner().median_us(), k.winner().default_us()));
        TP_RETURN_IF_ERROR(insert_winner.Run());
        winner = planner::MeasuredTactic{std::move(tactic), k.winner().median_us()};
      }
      updates.emplace_back(KeyOf(e.fingerprint(), k), std::move(winner));
    }
  }
  TP_RETURN_IF_ERROR(txn.Commit());

  absl::MutexLock lock(&mu_);
  for (const proto::StoredEnvironment& e : file.environments()) {
    environments_.insert(e.fingerprint());
  }
  for (auto& [key, winner] : updates) {
    if (winner.has_value()) {
      winners_[key] = *std::move(winner);
    } else {
      winners_.erase(key);
    }
  }
  return absl::OkStatus();
}

absl::Status TacticStore::Export(absl::string_view path) const {
  if (!unusable_.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("tactic store ", path_, " cannot be exported: it ", unusable_));
  }
  proto::TacticStoreFile file;
  file.set_schema(std::string(kSchemaName));
  file.set_schema_version(kTacticStoreSchemaVersion);
  if (db_ != nullptr) {
    absl::MutexLock write_lock(&write_mu_);
    Transaction txn(db_);  // one snapshot of the file
    TP_RETURN_IF_ERROR(txn.Begin(/*write=*/false));

    std::map<int64_t, proto::StoredEnvironment> environments;
    {
      TP_ASSIGN_OR_RETURN(
          Statement s,
          Statement::Prepare(db_,
                             "SELECT id, fingerprint, gpu, sm, sm_count, l2_bytes, "
                             "bandwidth_gbps, driver_version, cuda_runtime_version, "
                             "nvrtc_version, cublaslt_version, schema_version, created "
                             "FROM environments"));
      while (true) {
        TP_ASSIGN_OR_RETURN(bool row, s.Step());
        if (!row) break;
        proto::StoredEnvironment& e = environments[s.Int(0)];
        e.set_fingerprint(s.Text(1));
        e.set_gpu(s.Text(2));
        e.set_sm(static_cast<int32_t>(s.Int(3)));
        e.set_sm_count(static_cast<int32_t>(s.Int(4)));
        e.set_l2_bytes(s.Int(5));
        e.set_bandwidth_gbps(s.Double(6));
        e.set_driver_version(static_cast<int32_t>(s.Int(7)));
        e.set_cuda_runtime_version(static_cast<int32_t>(s.Int(8)));
        e.set_nvrtc_version(s.Text(9));
        e.set_cublaslt_version(s.Int(10));
        e.set_schema_version(static_cast<int32_t>(s.Int(11)));
        e.set_created(s.Text(12));
      }
    }

    // Keys grouped by environment id, in TacticKey order (environment left empty).
    std::map<std::pair<int64_t, TacticKey>, proto::StoredKey> keys;
    auto key_of = [&](const Statement& s) -> absl::StatusOr<proto::StoredKey*> {
      TacticKey key;
      key.region_signature = s.Text(1);
      key.shape_bucket = s.Text(2);
      TP_ASSIGN_OR_RETURN(key.phase, ir::ParsePhase(s.Text(3)));
      key.family = s.Text(4);
      key.family_version = static_cast<int32_t>(s.Int(5));
      proto::StoredKey& k = keys[{s.Int(0), key}];
      k.set_region_signature(key.region_signature);
      k.set_shape_bucket(key.shape_bucket);
      k.set_phase(std::string(ir::PhaseName(key.phase)));
      k.set_family(key.family);
      k.set_family_version(key.family_version);
      return &k;
    };
    auto tactic_of = [&](const Statement& s, int column,
                         kernels::proto::Tactic* tactic) -> absl::Status {
      if (!tactic->ParseFromString(s.BlobBytes(column))) {
        return absl::DataLossError(absl::StrCat(
            "tactic store ", path_, ": unparsable tactic_proto of ", s.Text(4), " ", s.Text(6)));
      }
      return absl::OkStatus();
    };
    {
      TP_ASSIGN_OR_RETURN(
          Statement s,
          Statement::Prepare(db_,
                             "SELECT environment_id, region_signature, shape_bucket, phase, "
                             "family, family_version, tactic, tactic_proto, status, reason, "
                             "median_us, measured_at FROM candidates ORDER BY tactic"));
      while (true) {
        TP_ASSIGN_OR_RETURN(bool row, s.Step());
        if (!row) break;
        TP_ASSIGN_OR_RETURN(proto::StoredKey * k, key_of(s));
        proto::StoredCandidate* c = k->add_candidates();
        TP_RETURN_IF_ERROR(tactic_of(s, 7, c->mutable_tactic()));
        c->set_status(s.Text(8));
        c->set_reason(s.Text(9));
        c->set_median_us(s.Double(10));
        c->set_measured_at(s.Text(11));
      }
    }
    {
      TP_ASSIGN_OR_RETURN(
          Statement s,
          Statement::Prepare(db_,
                             "SELECT environment_id, region_signature, shape_bucket, phase, "
                             "family, family_version, tactic, tactic_proto, median_us, "
                             "default_us FROM winners"));
      while (true) {
        TP_ASSIGN_OR_RETURN(bool row, s.Step());
        if (!row) break;
        TP_ASSIGN_OR_RETURN(proto::StoredKey * k, key_of(s));
        proto::StoredWinner* w = k->mutable_winner();
        TP_RETURN_IF_ERROR(tactic_of(s, 7, w->mutable_tactic()));
        w->set_median_us(s.Double(8));
        w->set_default_us(s.Double(9));
      }
    }
    TP_RETURN_IF_ERROR(txn.Commit());

    for (auto& [id_and_key, k] : keys) {
      auto it = environments.find(id_and_key.first);
      if (it == environments.end()) {
        return absl::DataLossError(absl::StrCat("tactic store ", path_,
                                                ": entries of environment id ", id_and_key.first,
                                                ", which is not stored"));
      }
      *it->second.add_keys() = std::move(k);
    }
    std::vector<proto::StoredEnvironment*> sorted;
    for (auto& [id, e] : environments) sorted.push_back(&e);
    std::sort(sorted.begin(), sorted.end(),
              [](const auto* a, const auto* b) { return a->fingerprint() < b->fingerprint(); });
    for (proto::StoredEnvironment* e : sorted) *file.add_environments() = std::move(*e);
  }

  std::string text;
  if (!TextFormat::PrintToString(file, &text)) {
    return absl::InternalError("cannot print the tactic store as text");
  }
  return WriteWholeFile(std::string(path),
                        absl::StrCat("# proto-file: tuner/tactic_store.proto\n"
                                     "# proto-message: tileplan.tuner.proto.TacticStoreFile\n",
                                     text));
}

absl::Status TacticStore::Import(absl::string_view path) {
  const std::string origin(path);
  TP_RETURN_IF_ERROR(CheckWritable());
  TP_ASSIGN_OR_RETURN(std::string text, ReadWholeFile(origin));
  proto::TacticStoreFile file;
  TextFormat::Parser parser;
  FirstErrorCollector errors;
  TextFormat::ParseInfoTree tree;
  parser.RecordErrorsTo(&errors);
  parser.WriteLocationsTo(&tree);
  if (!parser.ParseFromString(text, &file)) {
    return absl::InvalidArgumentError(absl::StrCat(origin, ":", errors.error()));
  }
  Where where;
  where.tree = &tree;
  where.type = proto::TacticStoreFile::descriptor();
  where.line = 1;
  TP_RETURN_IF_ERROR(ValidateFile(file, where, origin));
  absl::MutexLock lock(&write_mu_);
  return WriteFile(file);
}

int64_t TacticStore::num_winners() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(winners_.size());
}

std::vector<TacticKey> TacticStore::keys() const {
  absl::MutexLock lock(&mu_);
  std::vector<TacticKey> out;
  out.reserve(winners_.size());
  for (const auto& [key, winner] : winners_) out.push_back(key);
  return out;
}

std::vector<std::string> TacticStore::environments() const {
  absl::MutexLock lock(&mu_);
  return std::vector<std::string>(environments_.begin(), environments_.end());
}

std::vector<TacticKey> TacticStore::misses() const {
  absl::MutexLock lock(&mu_);
  return std::vector<TacticKey>(misses_.begin(), misses_.end());
}

}  // namespace tileplan::tuner
