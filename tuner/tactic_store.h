// The tuner's persistent tactic store: an SQLite file of measured candidates and winners,
// keyed by planner::TacticKey, whose environment is tuner::Environment::Fingerprint()
// (docs/tuner.md). The planner consults it through planner::TacticCache.
//
// Open loads every winner into memory; Lookup answers from there, so no SQL runs while
// planning or generating. Record and Import write through to the file (one transaction per
// call) and update the memory. Several processes may write one file: the file is in WAL
// mode and a writer waits up to 10 s for another's transaction. A store only sees other
// processes' writes when it is opened again.
//
// A file that cannot be our store (not SQLite, corrupt, SQLite without our schema, or
// another schema version) is never written: the store reports why in warnings(), answers
// every lookup with a miss and refuses every write with FailedPrecondition naming the file.
#ifndef TILEPLAN_TUNER_TACTIC_STORE_H_
#define TILEPLAN_TUNER_TACTIC_STORE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "kernels/core/kernel_family.h"
#include "planner/tactic_cache.h"
#include "tuner/environment.h"
#include "tuner/sqlite.h"
#include "tuner/tactic_store.pb.h"

namespace tileplan::tuner {

enum class CandidateStatus {
  kOk,
  kCompileError,
  kLaunchError,
  kWrongResult,
  kOutOfResources,
  kFault,
  kInvalid,
};
// "ok", "compile_error", "launch_error", "wrong_result", "out_of_resources", "fault",
// "invalid": the text stored in the file and its export.
absl::string_view CandidateStatusName(CandidateStatus status);
// InvalidArgument for any other text.
absl::StatusOr<CandidateStatus> ParseCandidateStatus(absl::string_view name);

struct CandidateMeasurement {
  kernels::Tactic tactic;
  CandidateStatus status = CandidateStatus::kOk;
  std::string reason;    // why it failed; empty for kOk
  double median_us = 0;  // the median time of the step; 0 unless kOk
};

// Everything one tuning run measured for one key.
struct RegionMeasurement {
  planner::TacticKey key;  // key.environment == environment.Fingerprint()
  Environment environment;
  std::vector<CandidateMeasurement> candidates;
  std::optional<kernels::Tactic> winner;  // one of the kOk candidates; nullopt when none is
  double winner_us = 0;                   // the winner's median
  double default_us = 0;                  // the cost model's pick, measured in the same run
};

class TacticStore final : public planner::TacticCache {
 public:
  struct Options {
    // Open the file read-only: every write is refused (FailedPrecondition). A file that
    // does not exist is then NotFound instead of created.
    bool read_only = false;
    // Record every key Lookup misses (misses()), so that a caller that must not fall back
    // to the cost model can turn them into an error. Keys of families with nothing to measure
    // (views, which autotune_regions never tunes) are not misses.
    bool freeze = false;
  };

  // Opens or creates the store at `path` (a new or empty file gets the schema). Errors only
  // for a file that cannot be opened at all (a missing directory, no permission, a missing
  // file with read_only) or that another process keeps locked past the busy timeout
  // (Unavailable); a file that is not a usable store opens as an empty, read-only store
  // with a warning (see above).
  static absl::StatusOr<std::unique_ptr<TacticStore>> Open(absl::string_view path);
  static absl::StatusOr<std::unique_ptr<TacticStore>> Open(absl::string_view path,
                                                           const Options& options);
  ~TacticStore() override;
  TacticStore(const TacticStore&) = delete;
  TacticStore& operator=(const TacticStore&) = delete;

  // The winner stored for exactly `key`, from memory. A key of an environment the store has
  // never seen is a miss like any other. Thread-safe.
  std::optional<planner::MeasuredTactic> Lookup(const planner::TacticKey& key) const override;

  // Replaces, in one transaction, everything stored for measurement.key: its candidates
  // become measurement.candidates and its winner measurement.winner (or none). The
  // environment is added when new; entries of other keys and environments are untouched.
  // InvalidArgument when the key's environment is not measurement.environment's
  // fingerprint, a candidate belongs to another family or version or appears twice, or the
  // winner is not one of the kOk candidates; FailedPrecondition (naming the file) for a
  // read-only or unusable store; Unavailable when another writer holds the file for more
  // than the busy timeout. Thread-safe.
  absl::Status Record(const RegionMeasurement& measurement);

  // Writes the whole store as text (tuner/tactic_store.proto, TacticStoreFile; sorted) to
  // `path`, replacing it (WriteFileAtomically). InvalidArgument, writing nothing, when `path`
  // is the store's own file or names anything but a regular file or nothing; FailedPrecondition
  // for an unusable store.
  absl::Status Export(absl::string_view path) const;
  // Adds every environment and key of an exported file, in one transaction; a key already
  // stored is replaced as by Record. InvalidArgument naming the file and line for text that
  // does not parse or an entry that is not valid (a fingerprint that does not match its
  // fields, an unknown phase or status, a winner that is not an "ok" candidate, a key
  // twice); nothing is written then.
  absl::Status Import(absl::string_view path);
  // The same for a file already read (ReadTacticStoreText), so that a caller can refuse a bad
  // file before it opens, or creates, the store.
  absl::Status Import(const proto::TacticStoreFile& file);

  int64_t num_winners() const;
  // The key of every stored winner, sorted (what a plan's lookups can hit).
  std::vector<planner::TacticKey> keys() const;
  // The fingerprint of every environment stored, sorted.
  std::vector<std::string> environments() const;
  // What Open found wrong: why the file is not usable, or stored rows it skipped. Empty for
  // a healthy store. Set by Open; not changed afterwards.
  const std::vector<std::string>& warnings() const { return warnings_; }
  // With Options::freeze: every key Lookup has missed, sorted, each once. Thread-safe.
  std::vector<planner::TacticKey> misses() const;
  // With Options::freeze and a miss: FailedPrecondition "frozen tactic store PATH: N lookups
  // found no measured tactic, e.g. KEY" (what every caller that plans with --freeze reports);
  // else OK. Thread-safe.
  absl::Status CheckFrozen() const;
  const std::string& path() const { return path_; }

 private:
  TacticStore(std::string path, Options options) : path_(std::move(path)), options_(options) {}

  absl::Status Initialize();
  // Marks the store unusable: warns with `why`, closes the file and forgets what was loaded.
  void Disable(absl::string_view why);
  absl::Status CheckWritable() const;
  absl::Status Load();
  // REQUIRES: write_mu_ held; `file` validated. Writes every environment and key of `file`
  // in one transaction (a stored key is replaced); on success updates the memory. A failure
  // names the store, says that nothing of the write was kept and, for a full disk, a
  // read-only file or a busy store, what to do.
  absl::Status WriteFile(const proto::TacticStoreFile& file);
  absl::Status WriteTransaction(const proto::TacticStoreFile& file);

  const std::string path_;
  const Options options_;
  // Closed when the store is unusable or a read-only empty file. Mutable: Export reads
  // through it.
  mutable sqlite::Database db_;
  std::string unusable_;  // why the file is not written; empty when it is usable
  // The file is read as it is, alone (Database::Mode::kImmutable): opened read-only with no
  // write-ahead log beside it, or lying where this process cannot write. Never written.
  bool immutable_ = false;
  std::vector<std::string> warnings_;

  // Serializes Record, Import and Export on db_ within this process.
  mutable absl::Mutex write_mu_;
  mutable absl::Mutex mu_;
  std::map<planner::TacticKey, planner::MeasuredTactic> winners_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> environments_ ABSL_GUARDED_BY(mu_);
  mutable std::set<planner::TacticKey> misses_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tileplan::tuner

#endif  // TILEPLAN_TUNER_TACTIC_STORE_H_
