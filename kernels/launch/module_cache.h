// On-disk cache of compiled modules, shared by every process of a user.
//
// An entry is one file named <16 hex digits of FNV-1a-64(key)>.tpmod in the cache
// directory, laid out as (integers little-endian):
//   magic "TPMODC01" (8 bytes) | key length u32 | payload length u64 |
//   FNV-1a-64 of key and payload u64 | key | payload
// The full key is stored, so a hash collision reads as a miss. Writers write the entry with
// WriteFileAtomically (base/files.h: a file with no name until it is whole, then linked or
// renamed over the entry), so readers see a whole old entry, a whole new one, or none, and a
// writer killed midway leaves nothing; concurrent writers of one key all write equal bytes.
// Readers validate magic, key, lengths and checksum and treat anything else (a torn or
// foreign file, anything but a regular file) as a miss, which the next Store overwrites (a
// FIFO or directory at an entry's path is not replaced: Store fails and the module is used
// uncached).
#ifndef TILEPLAN_KERNELS_LAUNCH_MODULE_CACHE_H_
#define TILEPLAN_KERNELS_LAUNCH_MODULE_CACHE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tileplan::kernels {

// FNV-1a, 64 bits: the cache's file names and checksums (stable across builds and hosts).
uint64_t Fnv1a64(absl::string_view data, uint64_t hash = 0xcbf29ce484222325ull);

class ModuleCache {
 public:
  // Opens `directory`, creating it (and its parents) when missing. FailedPrecondition naming
  // the path when it cannot be created or is not a writable directory.
  static absl::StatusOr<std::unique_ptr<ModuleCache>> Open(std::string directory);

  // $TILEPLAN_CACHE_DIR when set and non-empty, else $XDG_CACHE_HOME/tileplan, else
  // $HOME/.cache/tileplan; FailedPrecondition when none of them is set.
  static absl::StatusOr<std::string> DefaultDirectory();

  const std::string& directory() const { return directory_; }
  std::string EntryPath(absl::string_view key) const;

  // The payload stored under `key`, or nullopt on a miss or an invalid entry.
  std::optional<std::string> Lookup(absl::string_view key) const;
  // Stores (or replaces) the entry for `key`. Errors name the path and the OS's reason
  // (ResourceExhausted for a full disk); the entry is then as it was.
  absl::Status Store(absl::string_view key, absl::string_view payload) const;

 private:
  explicit ModuleCache(std::string directory) : directory_(std::move(directory)) {}

  std::string directory_;
};

}  // namespace tileplan::kernels

#endif  // TILEPLAN_KERNELS_LAUNCH_MODULE_CACHE_H_
