#include "tuner/tactic_store.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/status_macros.h"
#include "kernels/families/registry.h"
#include "regions/ir.h"
#include "tuner/store_lookups.h"
#include "tuner/tactic_store_text.h"

namespace tileplan::tuner {
namespace {

using planner::TacticKey;
using sqlite::Blob;
using sqlite::Database;
using sqlite::Statement;
using sqlite::Transaction;

constexpr absl::Duration kBusyTimeout = absl::Seconds(10);

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

// The columns of an environment row after its id, in proto::StoredEnvironment's order.
constexpr char kEnvironmentColumns[] =
    "fingerprint, gpu, sm, sm_count, l2_bytes, bandwidth_gbps, driver_version, "
    "cuda_runtime_version, nvrtc_version, cublaslt_version, schema_version, created";
// The first columns of a candidates or winners row: the planner::TacticKey, with the
// environment as the id of its row.
constexpr char kKeyColumns[] =
    "environment_id, region_signature, shape_bucket, phase, family, family_version";

// The value of `key` in the meta table; nullopt when absent.
absl::StatusOr<std::optional<std::string>> MetaValue(Database& db, absl::string_view key) {
  TP_ASSIGN_OR_RETURN(Statement s, db.Prepare("SELECT value FROM meta WHERE key = ?"));
  TP_RETURN_IF_ERROR(s.Bind(key));
  TP_ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return std::nullopt;
  return s.Text(0);
}

// Empty when `tables` and the meta table are this build's schema; else what is wrong.
absl::StatusOr<std::string> SchemaProblem(Database& db, const std::set<std::string>& tables) {
  if (!tables.contains("meta")) {
    return absl::StrCat("is an SQLite database without the tactic store's meta table (tables: ",
                        absl::StrJoin(tables, ", "), ")");
  }
  TP_ASSIGN_OR_RETURN(std::optional<std::string> schema, MetaValue(db, "schema"));
  if (schema != kTacticStoreSchemaName) {
    return absl::StrCat("is an SQLite database of schema '", schema.value_or(""), "', not ",
                        kTacticStoreSchemaName);
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
absl::Status CreateSchemaIfEmpty(Database& db) {
  Transaction txn(db);
  TP_RETURN_IF_ERROR(txn.Begin(Transaction::Mode::kWrite));
  TP_ASSIGN_OR_RETURN(std::set<std::string> tables, db.TableNames());
  if (!tables.empty()) return absl::OkStatus();  // rolls back the empty transaction
  TP_RETURN_IF_ERROR(db.Exec(kCreateSchema));
  TP_ASSIGN_OR_RETURN(Statement s, db.Prepare("INSERT INTO meta VALUES (?, ?)"));
  TP_RETURN_IF_ERROR(s.Bind("schema", kTacticStoreSchemaName));
  TP_RETURN_IF_ERROR(s.Run());
  TP_RETURN_IF_ERROR(s.Bind("schema_version", absl::StrCat(kTacticStoreSchemaVersion)));
  TP_RETURN_IF_ERROR(s.Run());
  return txn.Commit();
}

std::string UtcNow() {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::Now(), absl::UTCTimeZone());
}

// The key's fields of a row whose columns from `first` on are region_signature,
// shape_bucket, phase, family and family_version (kKeyColumns after environment_id). The
// phase's parse error when it does not parse (the key then keeps the default phase).
absl::Status ReadKey(const Statement& row, int first, TacticKey& key) {
  key.region_signature = row.Text(first);
  key.shape_bucket = row.Text(first + 1);
  key.family = row.Text(first + 3);
  key.family_version = static_cast<int32_t>(row.Int(first + 4));
  absl::StatusOr<ir::Phase> phase = ir::ParsePhase(row.Text(first + 2));
  if (!phase.ok()) return phase.status();
  key.phase = *phase;
  return absl::OkStatus();
}

// A stored tactic as the tactic and tactic_proto columns hold it: the canonical parameter
// string and serialization of the tactic it parses to.
struct TacticColumns {
  kernels::Tactic tactic;
  std::string params;
  std::string serialized;
};
absl::StatusOr<TacticColumns> ColumnsOf(const kernels::proto::Tactic& stored) {
  TP_ASSIGN_OR_RETURN(kernels::Tactic tactic, kernels::TacticFromProto(stored));
  std::string params = tactic.ParamsString();
  std::string serialized = kernels::TacticToProto(tactic).SerializeAsString();
  return TacticColumns{std::move(tactic), std::move(params), std::move(serialized)};
}

}  // namespace

absl::StatusOr<std::unique_ptr<TacticStore>> TacticStore::Open(absl::string_view path) {
  return Open(path, Options());
}

absl::StatusOr<std::unique_ptr<TacticStore>> TacticStore::Open(absl::string_view path,
                                                               const Options& options) {
  std::unique_ptr<TacticStore> store(new TacticStore(std::string(path), options));
  TP_RETURN_IF_ERROR(store->Initialize());
  return store;
}

TacticStore::~TacticStore() = default;

absl::Status TacticStore::Initialize() {
  std::error_code ec;
  const bool existed = std::filesystem::exists(path_, ec);
  if (options_.read_only && !existed) {
    return absl::NotFoundError(
        absl::StrCat("tactic store ", path_, " does not exist (opened read-only)"));
  }
  // A read-only open of a file with no write-ahead log beside it (no writer has it open, and
  // every commit is in the file) reads the file alone: SQLite's usual read-only open would
  // create -wal and -shm files and leave them behind.
  const bool has_log = std::filesystem::exists(absl::StrCat(path_, "-wal"), ec);
  immutable_ = options_.read_only && !has_log;
  absl::StatusOr<Database> opened =
      Database::Open(path_,
                     immutable_           ? Database::Mode::kImmutable
                     : options_.read_only ? Database::Mode::kReadOnly
                                          : Database::Mode::kReadWriteCreate,
                     kBusyTimeout);
  if (absl::IsPermissionDenied(opened.status()) && !existed) {
    return absl::PermissionDeniedError(
        absl::StrCat(opened.status().message(),
                     ": a new tactic store is created there, so its directory must be writable"));
  }
  TP_ASSIGN_OR_RETURN(db_, std::move(opened));
  // A log that was there before this open may hold another program's commits: until the file
  // shows the store's schema, closing must not checkpoint, or a foreign write-ahead-logged
  // file would take in its own log when this connection closes. (A log this open creates
  // holds nothing but what it writes, and SQLite removes it on close.)
  if (has_log && !options_.read_only) TP_RETURN_IF_ERROR(db_.SetCheckpointOnClose(false));

  // Read before writing anything: a file that is not ours is never touched.
  // A file another process keeps locked past the busy timeout is an error, not a warning.
  absl::StatusOr<std::set<std::string>> tables = db_.TableNames();
  if (absl::IsPermissionDenied(tables.status()) && !immutable_) {
    // A store in a directory this process cannot write: SQLite can neither create nor use
    // the -shm file a WAL-mode file needs, not even to read. Read the file as it is, without
    // locks or side files (immutable); it is never written.
    absl::StatusOr<Database> immutable =
        Database::Open(path_, Database::Mode::kImmutable, kBusyTimeout);
    if (immutable.ok()) {
      db_ = *std::move(immutable);
      tables = db_.TableNames();
      immutable_ = tables.ok();
    }
  }
  if (absl::IsUnavailable(tables.status())) return tables.status();
  if (!tables.ok()) {
    Disable(absl::StrCat("is not a readable SQLite database (", tables.status().message(), ")"));
    return absl::OkStatus();
  }
  if (tables->empty()) {
    if (options_.read_only || immutable_) {  // an empty file: an empty store
      db_.Close();
      return absl::OkStatus();
    }
    TP_RETURN_IF_ERROR(db_.UseWriteAheadLog());
    TP_RETURN_IF_ERROR(CreateSchemaIfEmpty(db_));
    TP_ASSIGN_OR_RETURN(*tables, db_.TableNames());
  }
  absl::StatusOr<std::string> problem = SchemaProblem(db_, *tables);
  if (absl::IsUnavailable(problem.status())) return problem.status();
  if (!problem.ok() || !problem->empty()) {
    Disable(problem.ok() ? *problem
                         : absl::StrCat("cannot be read (", problem.status().message(), ")"));
    return absl::OkStatus();
  }
  // Every winner is read before anything is written: a file whose schema looks like ours but
  // whose pages do not read is refused untouched, its journal mode included.
  absl::Status loaded = Load();
  if (absl::IsUnavailable(loaded)) return loaded;
  if (!loaded.ok()) {
    Disable(absl::StrCat("cannot be read (", loaded.message(), ")"));
    return absl::OkStatus();
  }
  if (!options_.read_only && !immutable_) {
    TP_RETURN_IF_ERROR(db_.SetCheckpointOnClose(true));  // ours
    TP_RETURN_IF_ERROR(db_.UseWriteAheadLog());
  }
  return absl::OkStatus();
}

void TacticStore::Disable(absl::string_view why) {
  unusable_ = std::string(why);
  warnings_.push_back(absl::StrCat("tactic store ", path_, " ", why,
                                   "; it is treated as empty and will not be written"));
  db_.Close();
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
  if (immutable_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "tactic store ", path_,
        " is not written: it lies where this process cannot write (it is only read); copy it "
        "to a writable directory to tune into it"));
  }
  return absl::OkStatus();
}

absl::Status TacticStore::Load() {
  std::set<std::string> environments;
  std::map<TacticKey, planner::MeasuredTactic> winners;
  {
    TP_ASSIGN_OR_RETURN(Statement s, db_.Prepare("SELECT fingerprint FROM environments"));
    TP_RETURN_IF_ERROR(s.ForEachRow([&](const Statement& row) {
      environments.insert(row.Text(0));
      return absl::OkStatus();
    }));
  }
  TP_ASSIGN_OR_RETURN(
      Statement s,
      db_.Prepare("SELECT e.fingerprint, w.region_signature, w.shape_bucket, w.phase, "
                  "w.family, w.family_version, w.tactic_proto, w.median_us "
                  "FROM winners w JOIN environments e ON e.id = w.environment_id"));
  TP_RETURN_IF_ERROR(s.ForEachRow([&](const Statement& row) {
    TacticKey key;
    key.environment = row.Text(0);
    const absl::Status phase = ReadKey(row, 1, key);
    kernels::proto::Tactic message;
    absl::StatusOr<kernels::Tactic> tactic = absl::DataLossError("unparsable tactic_proto");
    if (message.ParseFromString(row.BlobBytes(6))) tactic = kernels::TacticFromProto(message);
    const double median_us = row.Double(7);
    absl::Status problem = absl::OkStatus();
    if (!phase.ok()) {
      problem = phase;
    } else if (!tactic.ok()) {
      problem = tactic.status();
    } else if (tactic->family != key.family || tactic->family_version != key.family_version) {
      problem = absl::DataLossError("the tactic is of another family");
    } else if (!row.IsNumber(7)) {
      problem = absl::DataLossError(absl::StrCat("its median '", row.Text(7), "' is not a number"));
    } else if (!(std::isfinite(median_us) && median_us >= 0)) {
      problem = absl::DataLossError(absl::StrCat("its median ", median_us, " us is not a time"));
    }
    if (!problem.ok()) {
      warnings_.push_back(absl::StrCat("tactic store ", path_, ": skipping the winner of '",
                                       key.ToString(), "': ", problem.message()));
      return absl::OkStatus();
    }
    winners[std::move(key)] = planner::MeasuredTactic{*std::move(tactic), median_us};
    return absl::OkStatus();
  }));
  absl::MutexLock lock(&mu_);
  winners_ = std::move(winners);
  environments_ = std::move(environments);
  return absl::OkStatus();
}

std::optional<planner::MeasuredTactic> TacticStore::Lookup(const TacticKey& key) const {
  absl::MutexLock lock(&mu_);
  auto it = winners_.find(key);
  if (it != winners_.end()) return it->second;
  // A key of a family with nothing to measure (a view) is never tuned, so it is no miss.
  if (options_.freeze) {
    const kernels::KernelFamily* family = kernels::GlobalKernelRegistry().Find(key.family);
    if (family == nullptr || HasTacticsToMeasure(*family)) misses_.insert(key);
  }
  return std::nullopt;
}

absl::Status TacticStore::Record(const RegionMeasurement& m) {
  const std::string origin = absl::StrCat("Record(", m.key.ToString(), ")");
  const std::string fingerprint = m.environment.Fingerprint();
  if (m.key.environment != fingerprint) {
    return absl::InvalidArgumentError(absl::StrCat(
        origin, ": the key's environment is not the measurement's ('", fingerprint, "')"));
  }
  const std::string now = UtcNow();
  proto::TacticStoreFile file = NewTacticStoreFile();
  proto::StoredEnvironment* e = file.add_environments();
  *e = StoredEnvironmentOf(m.environment, now);
  proto::StoredKey* k = e->add_keys();
  *k = StoredKeyOf(m.key);
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
  TP_RETURN_IF_ERROR(ValidateStoredKey(*k, origin));
  TP_RETURN_IF_ERROR(CheckWritable());
  absl::MutexLock lock(&write_mu_);
  return WriteFile(file);
}

absl::Status TacticStore::WriteFile(const proto::TacticStoreFile& file) {
  const absl::Status status = WriteTransaction(file);
  if (status.ok()) return status;
  std::string advice;
  if (absl::IsResourceExhausted(status)) {
    advice = "; free disk space (or raise the file-size limit) and run again";
  } else if (absl::IsPermissionDenied(status)) {
    advice = "; make the store and its directory writable, or name another store";
  } else if (absl::IsUnavailable(status)) {
    advice = "; another process held the store past the busy timeout: run again";
  }
  return absl::Status(status.code(),
                      absl::StrCat("tactic store ", path_, ": nothing of this write was stored: ",
                                   status.message(), "; the entries stored before are intact",
                                   advice));
}

absl::Status TacticStore::WriteTransaction(const proto::TacticStoreFile& file) {
  Transaction txn(db_);
  TP_RETURN_IF_ERROR(txn.Begin(Transaction::Mode::kWrite));
  TP_ASSIGN_OR_RETURN(
      Statement insert_environment,
      db_.Prepare(absl::StrCat("INSERT OR IGNORE INTO environments (", kEnvironmentColumns,
                               ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")));
  TP_ASSIGN_OR_RETURN(Statement environment_id,
                      db_.Prepare("SELECT id FROM environments WHERE fingerprint = ?"));
  constexpr absl::string_view kKeyWhere =
      "environment_id = ? AND region_signature = ? AND shape_bucket = ? AND phase = ? AND "
      "family = ? AND family_version = ?";
  TP_ASSIGN_OR_RETURN(Statement delete_candidates,
                      db_.Prepare(absl::StrCat("DELETE FROM candidates WHERE ", kKeyWhere)));
  TP_ASSIGN_OR_RETURN(Statement delete_winner,
                      db_.Prepare(absl::StrCat("DELETE FROM winners WHERE ", kKeyWhere)));
  TP_ASSIGN_OR_RETURN(
      Statement insert_candidate,
      db_.Prepare(absl::StrCat("INSERT INTO candidates (", kKeyColumns,
                               ", tactic, tactic_proto, status, reason, median_us, measured_at) "
                               "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")));
  TP_ASSIGN_OR_RETURN(Statement insert_winner,
                      db_.Prepare(absl::StrCat("INSERT INTO winners (", kKeyColumns,
                                               ", tactic, tactic_proto, median_us, default_us) "
                                               "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")));

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
        TP_ASSIGN_OR_RETURN(TacticColumns tactic, ColumnsOf(c.tactic()));
        TP_RETURN_IF_ERROR(insert_candidate.Bind(
            id, k.region_signature(), k.shape_bucket(), k.phase(), k.family(), k.family_version(),
            tactic.params, Blob{tactic.serialized}, c.status(), c.reason(), c.median_us(),
            c.measured_at()));
        TP_RETURN_IF_ERROR(insert_candidate.Run());
      }
      std::optional<planner::MeasuredTactic> winner;
      if (k.has_winner()) {
        TP_ASSIGN_OR_RETURN(TacticColumns tactic, ColumnsOf(k.winner().tactic()));
        TP_RETURN_IF_ERROR(insert_winner.Bind(
            id, k.region_signature(), k.shape_bucket(), k.phase(), k.family(), k.family_version(),
            tactic.params, Blob{tactic.serialized}, k.winner().median_us(),
            k.winner().default_us()));
        TP_RETURN_IF_ERROR(insert_winner.Run());
        winner = planner::MeasuredTactic{std::move(tactic.tactic), k.winner().median_us()};
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
  std::error_code ec;
  if (std::filesystem::equivalent(std::string(path), path_, ec)) {
    return absl::InvalidArgumentError(absl::StrCat("exporting to ", path, " would replace the ",
                                                   "tactic store itself; name another file"));
  }
  if (!unusable_.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("tactic store ", path_, " cannot be exported: it ", unusable_));
  }
  proto::TacticStoreFile file = NewTacticStoreFile();
  if (db_.is_open()) {
    absl::MutexLock write_lock(&write_mu_);
    Transaction txn(db_);  // one snapshot of the file
    TP_RETURN_IF_ERROR(txn.Begin(Transaction::Mode::kRead));

    std::map<int64_t, proto::StoredEnvironment> environments;
    {
      TP_ASSIGN_OR_RETURN(
          Statement s,
          db_.Prepare(absl::StrCat("SELECT id, ", kEnvironmentColumns, " FROM environments")));
      TP_RETURN_IF_ERROR(s.ForEachRow([&](const Statement& row) {
        proto::StoredEnvironment& e = environments[row.Int(0)];
        e.set_fingerprint(row.Text(1));
        e.set_gpu(row.Text(2));
        e.set_sm(static_cast<int32_t>(row.Int(3)));
        e.set_sm_count(static_cast<int32_t>(row.Int(4)));
        e.set_l2_bytes(row.Int(5));
        e.set_bandwidth_gbps(row.Double(6));
        e.set_driver_version(static_cast<int32_t>(row.Int(7)));
        e.set_cuda_runtime_version(static_cast<int32_t>(row.Int(8)));
        e.set_nvrtc_version(row.Text(9));
        e.set_cublaslt_version(row.Int(10));
        e.set_schema_version(static_cast<int32_t>(row.Int(11)));
        e.set_created(row.Text(12));
        return absl::OkStatus();
      }));
    }

    // Keys grouped by environment id, in TacticKey order (environment left empty).
    std::map<std::pair<int64_t, TacticKey>, proto::StoredKey> keys;
    auto key_of = [&](const Statement& row) -> absl::StatusOr<proto::StoredKey*> {
      TacticKey key;
      TP_RETURN_IF_ERROR(ReadKey(row, 1, key));
      auto [it, added] = keys.try_emplace({row.Int(0), key});
      if (added) it->second = StoredKeyOf(key);
      return &it->second;
    };
    auto tactic_of = [&](const Statement& row, int column,
                         kernels::proto::Tactic* tactic) -> absl::Status {
      if (!tactic->ParseFromString(row.BlobBytes(column))) {
        return absl::DataLossError(absl::StrCat("tactic store ", path_,
                                                ": unparsable tactic_proto of ", row.Text(4), " ",
                                                row.Text(6)));
      }
      return absl::OkStatus();
    };
    {
      TP_ASSIGN_OR_RETURN(
          Statement s,
          db_.Prepare(absl::StrCat("SELECT ", kKeyColumns,
                                   ", tactic, tactic_proto, status, reason, median_us, "
                                   "measured_at FROM candidates ORDER BY tactic")));
      TP_RETURN_IF_ERROR(s.ForEachRow([&](const Statement& row) -> absl::Status {
        TP_ASSIGN_OR_RETURN(proto::StoredKey * k, key_of(row));
        proto::StoredCandidate* c = k->add_candidates();
        TP_RETURN_IF_ERROR(tactic_of(row, 7, c->mutable_tactic()));
        c->set_status(row.Text(8));
        c->set_reason(row.Text(9));
        c->set_median_us(row.Double(10));
        c->set_measured_at(row.Text(11));
        return absl::OkStatus();
      }));
    }
    {
      TP_ASSIGN_OR_RETURN(
          Statement s,
          db_.Prepare(absl::StrCat("SELECT ", kKeyColumns,
                                   ", tactic, tactic_proto, median_us, default_us FROM winners")));
      TP_RETURN_IF_ERROR(s.ForEachRow([&](const Statement& row) -> absl::Status {
        TP_ASSIGN_OR_RETURN(proto::StoredKey * k, key_of(row));
        proto::StoredWinner* w = k->mutable_winner();
        TP_RETURN_IF_ERROR(tactic_of(row, 7, w->mutable_tactic()));
        w->set_median_us(row.Double(8));
        w->set_default_us(row.Double(9));
        return absl::OkStatus();
      }));
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
  return WriteTacticStoreText(file, std::string(path));
}

absl::Status TacticStore::Import(absl::string_view path) {
  TP_RETURN_IF_ERROR(CheckWritable());
  TP_ASSIGN_OR_RETURN(proto::TacticStoreFile file, ReadTacticStoreText(std::string(path)));
  return Import(file);
}

absl::Status TacticStore::Import(const proto::TacticStoreFile& file) {
  TP_RETURN_IF_ERROR(CheckWritable());
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

absl::Status TacticStore::CheckFrozen() const {
  absl::MutexLock lock(&mu_);
  if (!options_.freeze || misses_.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("frozen tactic store ", path_, ": ", misses_.size(),
                   " lookups found no measured tactic, e.g. ", misses_.begin()->ToString()));
}

}  // namespace tileplan::tuner
