// The tactic store's export format (tuner/tactic_store.proto; docs/tuner.md, "Export and
// import"): conversions between the store's types and the format's messages, the checks an
// entry must pass before it is stored, and the text file TacticStore::Export writes and
// TacticStore::Import reads.
#ifndef TILEPLAN_TUNER_TACTIC_STORE_TEXT_H_
#define TILEPLAN_TUNER_TACTIC_STORE_TEXT_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "planner/tactic_cache.h"
#include "tuner/environment.h"
#include "tuner/tactic_store.pb.h"

namespace tileplan::tuner {

// The schema name of an exported file and of the store's meta table.
inline constexpr absl::string_view kTacticStoreSchemaName = "tileplan.tactic_store";

// A file of this build's schema name and version, with no environments.
proto::TacticStoreFile NewTacticStoreFile();

Environment EnvironmentOf(const proto::StoredEnvironment& stored);
// With `created` (UTC, "2026-11-30T07:26:00Z") and no keys.
proto::StoredEnvironment StoredEnvironmentOf(const Environment& environment,
                                             absl::string_view created);
// The planner's key of a key stored under `environment`. REQUIRES: its phase parses (an
// entry that passed ValidateStoredKey).
planner::TacticKey KeyOf(absl::string_view environment, const proto::StoredKey& stored);
// The key's fields, with no candidates and no winner; its environment is the enclosing
// StoredEnvironment's.
proto::StoredKey StoredKeyOf(const planner::TacticKey& key);

// Whether `text` is a UTC time as the store writes them: "2026-11-30T07:26:00Z", every field
// in range.
bool IsUtcTimestamp(absl::string_view text);

// The checks every stored key passes (TacticStore::Record's contract): a region signature, a
// shape bucket, a known phase, a family, candidates of the key's family and version that
// parse, each once, with known statuses, finite, non-negative times and a UTC measured_at,
// and a winner that is one of the "ok" ones. InvalidArgument "<origin>: <what is wrong>".
absl::Status ValidateStoredKey(const proto::StoredKey& key, absl::string_view origin);

// Writes `file` as text to `path`, after two comment lines naming the proto file and
// message, entries in the order given. The text goes to `path`.tmp, renamed to `path`, so
// that a reader never sees half a file.
absl::Status WriteTacticStoreText(const proto::TacticStoreFile& file, const std::string& path);

// Reads a file WriteTacticStoreText wrote. InvalidArgument "<path>:<line>: ..." naming the
// line of the offending entry for text that does not parse or an entry that is not valid:
// another schema or schema version, a fingerprint that does not match its environment's
// fields, an environment whose created is not a UTC time, an environment or a key twice in
// the file, or a key ValidateStoredKey rejects.
// NotFound when the file cannot be read.
absl::StatusOr<proto::TacticStoreFile> ReadTacticStoreText(const std::string& path);

}  // namespace tileplan::tuner

#endif  // TILEPLAN_TUNER_TACTIC_STORE_TEXT_H_
