// A small SQLite wrapper for the tactic store: a database handle, prepared statements and a
// transaction guard. SQLite's result codes become absl::Status here and nowhere else; each
// message gives sqlite3_errmsg() (after the file, for an open) and, for a failed read, write
// or open, the OS's reason:
//   BUSY, LOCKED                 Unavailable (another connection held the file past the
//                                busy timeout)
//   CORRUPT, NOTADB              DataLoss
//   FULL, or an I/O error of     ResourceExhausted
//   ENOSPC, EFBIG or EDQUOT
//   READONLY, PERM, AUTH,        PermissionDenied
//   CANTOPEN
//   CONSTRAINT                   FailedPrecondition
//   anything else                Internal
// Extended result codes are on, so the code in a message is the exact one.
#ifndef TILEPLAN_TUNER_SQLITE_H_
#define TILEPLAN_TUNER_SQLITE_H_

#include <cstdint>
#include <set>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

struct sqlite3;
struct sqlite3_stmt;

namespace tileplan::tuner::sqlite {

// A parameter bound as a blob (a string_view binds as text).
struct Blob {
  absl::string_view bytes;
};

// One prepared statement of a Database, finalized when destroyed. Not thread-safe; must not
// outlive its Database.
class Statement {
 public:
  Statement(Statement&& other) noexcept;
  Statement& operator=(Statement&&) = delete;
  ~Statement();

  // Resets the statement and binds `args` to parameters 1, 2, ...: integers (int32_t,
  // int64_t), double, absl::string_view (text) and Blob.
  template <typename... Args>
  absl::Status Bind(const Args&... args) {
    Reset();
    absl::Status status;
    int index = 0;
    ((status.ok() ? (status = BindOne(++index, args), 0) : 0), ...);
    return status;
  }
  // True when a row is ready, false when the statement is done.
  absl::StatusOr<bool> Step();
  // Steps a statement that returns no rows to its end; Internal if it returns one.
  absl::Status Run();
  // Steps through every row, calling `row` with this statement on each; stops at the first
  // error, of SQLite or of `row`.
  absl::Status ForEachRow(absl::FunctionRef<absl::Status(const Statement&)> row);

  // The columns of the current row. NULL reads as 0 or empty.
  int64_t Int(int column) const;
  double Double(int column) const;
  // Whether the column holds a number (an integer or a real), not text, a blob or NULL.
  bool IsNumber(int column) const;
  std::string Text(int column) const;
  std::string BlobBytes(int column) const;

 private:
  friend class Database;
  Statement(sqlite3* db, sqlite3_stmt* stmt, absl::string_view sql)
      : db_(db), stmt_(stmt), sql_(sql) {}

  void Reset();
  absl::Status Check(int rc, int index) const;
  absl::Status BindOne(int index, int64_t value);
  absl::Status BindOne(int index, int32_t value) { return BindOne(index, int64_t{value}); }
  absl::Status BindOne(int index, double value);
  absl::Status BindOne(int index, absl::string_view value);
  absl::Status BindOne(int index, const Blob& value);

  sqlite3* db_;
  sqlite3_stmt* stmt_;
  std::string sql_;
};

// A connection to one database file; closed when destroyed or by Close(). Opened with
// SQLite's serialized threading mode, so one Database may be used from several threads
// (each statement still by one at a time).
class Database {
 public:
  // kImmutable: read-only, and the file is taken as unchanging: no locks, and its -wal and
  // -shm files are neither read nor created (for a file no writer holds, or one in a location
  // this process cannot write, where SQLite could not use them).
  enum class Mode { kReadOnly, kReadWriteCreate, kImmutable };

  // Opens `path`; kReadWriteCreate creates a missing file. A path that names anything but a
  // regular file (a directory, FIFO, device or socket) is refused before SQLite sees it
  // (CheckRegularFileOrAbsent). A statement that finds the file locked by another connection
  // waits up to `busy_timeout` before it fails (Unavailable).
  static absl::StatusOr<Database> Open(const std::string& path, Mode mode,
                                       absl::Duration busy_timeout);

  Database() = default;  // closed
  Database(Database&& other) noexcept;
  Database& operator=(Database&& other) noexcept;
  ~Database() { Close(); }

  bool is_open() const { return db_ != nullptr; }
  void Close();

  // REQUIRES for the rest: is_open().
  // Runs one or more statements that return no rows.
  absl::Status Exec(const std::string& sql);
  absl::StatusOr<Statement> Prepare(absl::string_view sql);
  // The names of the tables in the file (sqlite_master); reading them is the first read of
  // a file, so a file that is not SQLite fails here.
  absl::StatusOr<std::set<std::string>> TableNames();
  // Switches the file to write-ahead logging (persistent in the file: readers never block
  // the writer) with synchronous = NORMAL, which keeps the file consistent and may lose only
  // the last commits at a power failure. Unavailable when another connection keeps the file
  // busy past the busy timeout.
  absl::Status UseWriteAheadLog();
  // Whether closing the last connection to a write-ahead-logged file copies the log into the
  // file (SQLite's default). A file not yet known to be ours is opened with it off, so that
  // merely reading a foreign file's log and closing never changes the file.
  absl::Status SetCheckpointOnClose(bool checkpoint);

 private:
  Database(sqlite3* db, absl::Duration busy_timeout) : db_(db), busy_timeout_(busy_timeout) {}

  sqlite3* db_ = nullptr;
  absl::Duration busy_timeout_;
};

// A transaction that rolls back when destroyed uncommitted.
class Transaction {
 public:
  enum class Mode {
    kRead,
    // Takes the file's write lock at Begin (waiting up to the busy timeout), so that the
    // transaction never fails later for a lock another connection upgraded first.
    kWrite,
  };

  explicit Transaction(Database& db) : db_(db) {}
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  ~Transaction();

  absl::Status Begin(Mode mode);
  absl::Status Commit();

 private:
  Database& db_;
  bool open_ = false;
};

}  // namespace tileplan::tuner::sqlite

#endif  // TILEPLAN_TUNER_SQLITE_H_
