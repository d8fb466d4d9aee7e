#include "tuner/sqlite.h"

#include <sqlite3.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/files.h"
#include "base/status_macros.h"

namespace tileplan::tuner::sqlite {
namespace {

// SQLite's own words for `rc` (after `what`, when given: the file an open was for), with the
// result code; the status code as the header's table maps it. The SQL that failed is not
// part of it: it says nothing to a person reading the message.
absl::Status SqliteStatus(sqlite3* db, int rc, absl::string_view what) {
  const std::string words = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  std::string message = absl::StrCat(what, what.empty() ? "" : ": ", words);
  if (words != sqlite3_errstr(rc)) absl::StrAppend(&message, " (", sqlite3_errstr(rc), ")");
  // For a failed read, write or open, the OS's reason ("No space left on device").
  const int primary = rc & 0xff;
  int error = 0;
  if (db != nullptr && (primary == SQLITE_IOERR || primary == SQLITE_FULL ||
                        primary == SQLITE_CANTOPEN || primary == SQLITE_READONLY)) {
    error = sqlite3_system_errno(db);
    if (error != 0) {
      absl::StrAppend(&message, ": ", std::strerror(error));
    } else if (rc == SQLITE_IOERR_WRITE || rc == SQLITE_IOERR_FSYNC || rc == SQLITE_FULL) {
      // SQLite keeps the errno of opens and reads, not always of writes.
      absl::StrAppend(&message, ": the file system refused a write (a full disk, a file-size ",
                      "limit or a failing device)");
    }
  }
  absl::StrAppend(&message, " (SQLite code ", rc, ")");
  if (error == ENOSPC || error == EFBIG || error == EDQUOT) {
    return absl::ResourceExhaustedError(message);
  }
  switch (primary) {
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

}  // namespace

Statement::Statement(Statement&& other) noexcept
    : db_(other.db_), stmt_(std::exchange(other.stmt_, nullptr)), sql_(std::move(other.sql_)) {}

Statement::~Statement() { sqlite3_finalize(stmt_); }

void Statement::Reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

absl::StatusOr<bool> Statement::Step() {
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return SqliteStatus(db_, rc, "");
}

absl::Status Statement::Run() {
  TP_ASSIGN_OR_RETURN(bool row, Step());
  if (row) return absl::InternalError(absl::StrCat("`", sql_, "` returned a row"));
  return absl::OkStatus();
}

absl::Status Statement::ForEachRow(absl::FunctionRef<absl::Status(const Statement&)> row) {
  while (true) {
    TP_ASSIGN_OR_RETURN(bool ready, Step());
    if (!ready) return absl::OkStatus();
    TP_RETURN_IF_ERROR(row(*this));
  }
}

int64_t Statement::Int(int column) const { return sqlite3_column_int64(stmt_, column); }

double Statement::Double(int column) const { return sqlite3_column_double(stmt_, column); }

bool Statement::IsNumber(int column) const {
  const int type = sqlite3_column_type(stmt_, column);
  return type == SQLITE_INTEGER || type == SQLITE_FLOAT;
}

std::string Statement::Text(int column) const {
  const unsigned char* text = sqlite3_column_text(stmt_, column);
  return text ? std::string(reinterpret_cast<const char*>(text),
                            sqlite3_column_bytes(stmt_, column))
              : std::string();
}

std::string Statement::BlobBytes(int column) const {
  const void* data = sqlite3_column_blob(stmt_, column);
  return data ? std::string(static_cast<const char*>(data), sqlite3_column_bytes(stmt_, column))
              : std::string();
}

absl::Status Statement::Check(int rc, int index) const {
  if (rc == SQLITE_OK) return absl::OkStatus();
  return SqliteStatus(db_, rc, absl::StrCat("binding parameter ", index));
}

absl::Status Statement::BindOne(int index, int64_t value) {
  return Check(sqlite3_bind_int64(stmt_, index, value), index);
}

absl::Status Statement::BindOne(int index, double value) {
  return Check(sqlite3_bind_double(stmt_, index, value), index);
}

absl::Status Statement::BindOne(int index, absl::string_view value) {
  return Check(sqlite3_bind_text64(stmt_, index, value.data(), value.size(), SQLITE_TRANSIENT,
                                   SQLITE_UTF8),
               index);
}

absl::Status Statement::BindOne(int index, const Blob& value) {
  return Check(sqlite3_bind_blob64(stmt_, index, value.bytes.data(), value.bytes.size(),
                                   SQLITE_TRANSIENT),
               index);
}

absl::StatusOr<Database> Database::Open(const std::string& path, Mode mode,
                                        absl::Duration busy_timeout) {
  // A FIFO would block SQLite's open, a device would be read as a database: only a regular
  // file, or nothing that a writable open may create, is opened.
  TP_RETURN_IF_ERROR(CheckRegularFileOrAbsent(path));
  const int flags = mode == Mode::kReadWriteCreate ? SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE
                                                   : SQLITE_OPEN_READONLY;
  // An immutable open names the file as a URI with immutable=1: SQLite then neither locks it
  // nor reads or creates its -wal and -shm files.
  std::string name = path;
  if (mode == Mode::kImmutable) {
    name = "file:";
    for (const char c : path) {
      if (c == '%' || c == '?' || c == '#') {
        absl::StrAppend(&name, absl::StrFormat("%%%02X", static_cast<unsigned char>(c)));
      } else {
        name.push_back(c);
      }
    }
    absl::StrAppend(&name, "?immutable=1");
  }
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(
      name.c_str(), &db,
      flags | SQLITE_OPEN_FULLMUTEX | (mode == Mode::kImmutable ? SQLITE_OPEN_URI : 0), nullptr);
  if (rc != SQLITE_OK) {
    absl::Status status = SqliteStatus(db, rc, absl::StrCat("cannot open ", path));
    sqlite3_close_v2(db);
    return status;
  }
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(db, static_cast<int>(absl::ToInt64Milliseconds(busy_timeout)));
  return Database(db, busy_timeout);
}

Database::Database(Database&& other) noexcept
    : db_(std::exchange(other.db_, nullptr)), busy_timeout_(other.busy_timeout_) {}

Database& Database::operator=(Database&& other) noexcept {
  if (this != &other) {
    Close();
    db_ = std::exchange(other.db_, nullptr);
    busy_timeout_ = other.busy_timeout_;
  }
  return *this;
}

void Database::Close() {
  sqlite3_close_v2(db_);
  db_ = nullptr;
}

absl::Status Database::Exec(const std::string& sql) {
  const int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return SqliteStatus(db_, rc, "");
  return absl::OkStatus();
}

absl::StatusOr<Statement> Database::Prepare(absl::string_view sql) {
  sqlite3_stmt* stmt = nullptr;
  const int rc = sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &stmt, nullptr);
  if (rc != SQLITE_OK) {
    sqlite3_finalize(stmt);
    return SqliteStatus(db_, rc, "");
  }
  return Statement(db_, stmt, sql);
}

absl::StatusOr<std::set<std::string>> Database::TableNames() {
  TP_ASSIGN_OR_RETURN(Statement s, Prepare("SELECT name FROM sqlite_master WHERE type = 'table'"));
  std::set<std::string> names;
  TP_RETURN_IF_ERROR(s.ForEachRow([&](const Statement& row) {
    names.insert(row.Text(0));
    return absl::OkStatus();
  }));
  return names;
}

absl::Status Database::SetCheckpointOnClose(bool checkpoint) {
  int now = 0;
  const int rc = sqlite3_db_config(db_, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, checkpoint ? 0 : 1, &now);
  if (rc != SQLITE_OK) return SqliteStatus(db_, rc, "cannot set checkpoint on close");
  return absl::OkStatus();
}

absl::Status Database::UseWriteAheadLog() {
  // Changing the journal mode does not wait through the busy handler: while another
  // connection holds the file (two processes creating one store) it fails at once with
  // SQLITE_BUSY or leaves the mode unchanged. So retry until the busy timeout.
  const absl::Time deadline = absl::Now() + busy_timeout_;
  while (true) {
    absl::StatusOr<std::string> mode = [&]() -> absl::StatusOr<std::string> {
      TP_ASSIGN_OR_RETURN(Statement s, Prepare("PRAGMA journal_mode = WAL"));
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
  return Exec("PRAGMA synchronous = NORMAL");
}

Transaction::~Transaction() {
  if (open_) db_.Exec("ROLLBACK").IgnoreError();
}

absl::Status Transaction::Begin(Mode mode) {
  TP_RETURN_IF_ERROR(db_.Exec(mode == Mode::kWrite ? "BEGIN IMMEDIATE" : "BEGIN"));
  open_ = true;
  return absl::OkStatus();
}

absl::Status Transaction::Commit() {
  TP_RETURN_IF_ERROR(db_.Exec("COMMIT"));
  open_ = false;
  return absl::OkStatus();
}

}  // namespace tileplan::tuner::sqlite
