#include "kernels/launch/module_cache.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/files.h"

namespace tileplan::kernels {
namespace {

constexpr char kMagic[8] = {'T', 'P', 'M', 'O', 'D', 'C', '0', '1'};
constexpr size_t kHeaderBytes = 8 + 4 + 8 + 8;

void PutLittleEndian(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

uint64_t GetLittleEndian(absl::string_view in, size_t at, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) {
    value |= static_cast<uint64_t>(static_cast<unsigned char>(in[at + i])) << (8 * i);
  }
  return value;
}

uint64_t Checksum(absl::string_view key, absl::string_view payload) {
  return Fnv1a64(payload, Fnv1a64(key));
}

// A cached module is one cubin of a few megabytes at most.
constexpr uint64_t kMaxEntryBytes = uint64_t{256} << 20;

// Reads a whole entry; nullopt when it is not a regular file of a bounded size or cannot be
// read (the entry is then compiled again).
std::optional<std::string> ReadFile(const std::string& path) {
  absl::StatusOr<std::string> data = ReadRegularFile(path, kMaxEntryBytes);
  if (!data.ok()) return std::nullopt;
  return *std::move(data);
}

}  // namespace

uint64_t Fnv1a64(absl::string_view data, uint64_t hash) {
  for (char c : data) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ull;
  }
  return hash;
}

absl::StatusOr<std::unique_ptr<ModuleCache>> ModuleCache::Open(std::string directory) {
  if (directory.empty()) {
    return absl::InvalidArgumentError("module cache directory is empty");
  }
  std::error_code ec;
  std::filesystem::create_directories(directory, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create module cache directory ", directory, ": ", ec.message()));
  }
  if (!std::filesystem::is_directory(directory, ec) ||
      ::access(directory.c_str(), W_OK | X_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("module cache directory ", directory, " is not a writable directory"));
  }
  return std::unique_ptr<ModuleCache>(new ModuleCache(std::move(directory)));
}

absl::StatusOr<std::string> ModuleCache::DefaultDirectory() {
  const char* explicit_dir = std::getenv("TILEPLAN_CACHE_DIR");
  if (explicit_dir != nullptr && explicit_dir[0] != '\0') return std::string(explicit_dir);
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg != nullptr && xdg[0] != '\0') return absl::StrCat(xdg, "/tileplan");
  const char* home = std::getenv("HOME");
  if (home != nullptr && home[0] != '\0') return absl::StrCat(home, "/.cache/tileplan");
  return absl::FailedPreconditionError(
      "no module cache directory: none of TILEPLAN_CACHE_DIR, XDG_CACHE_HOME, HOME is set");
}

std::string ModuleCache::EntryPath(absl::string_view key) const {
  return absl::StrFormat("%s/%016x.tpmod", directory_, Fnv1a64(key));
}

std::optional<std::string> ModuleCache::Lookup(absl::string_view key) const {
  const std::optional<std::string> file = ReadFile(EntryPath(key));
  if (!file.has_value() || file->size() < kHeaderBytes) return std::nullopt;
  const absl::string_view data(*file);
  if (data.substr(0, 8) != absl::string_view(kMagic, 8)) return std::nullopt;
  const uint64_t key_bytes = GetLittleEndian(data, 8, 4);
  const uint64_t payload_bytes = GetLittleEndian(data, 12, 8);
  const uint64_t checksum = GetLittleEndian(data, 20, 8);
  if (key_bytes != key.size() || data.size() - kHeaderBytes < key_bytes ||
      data.size() - kHeaderBytes - key_bytes != payload_bytes) {
    return std::nullopt;
  }
  const absl::string_view stored_key = data.substr(kHeaderBytes, key_bytes);
  const absl::string_view payload = data.substr(kHeaderBytes + key_bytes);
  if (stored_key != key || Checksum(stored_key, payload) != checksum) return std::nullopt;
  return std::string(payload);
}

absl::Status ModuleCache::Store(absl::string_view key, absl::string_view payload) const {
  std::string entry(kMagic, 8);
  PutLittleEndian(entry, key.size(), 4);
  PutLittleEndian(entry, payload.size(), 8);
  PutLittleEndian(entry, Checksum(key, payload), 8);
  absl::StrAppend(&entry, key, payload);
  const absl::Status status = WriteFileAtomically(EntryPath(key), entry);
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat("module cache: ", status.message()));
}

}  // namespace tileplan::kernels
