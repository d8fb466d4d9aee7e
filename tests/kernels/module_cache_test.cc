// The on-disk module cache: round trips, misses, invalid entries (torn, foreign, not a regular
// file) read as misses and are rebuilt, concurrent writer processes leave a valid entry, and a
// full disk fails a store cleanly.
#include "kernels/launch/module_cache.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/full_disk.h"

namespace tileplan::kernels {
namespace {

using ::testing::HasSubstr;
using ::testing::Optional;

// A fresh directory per test, under the test's temporary directory.
std::string FreshDirectory(absl::string_view name) {
  const std::string dir =
      absl::StrCat(::testing::TempDir(), "/module_cache_test.", ::getpid(), ".", name);
  std::filesystem::remove_all(dir);
  return dir;
}

std::unique_ptr<ModuleCache> OpenCache(absl::string_view name) {
  absl::StatusOr<std::unique_ptr<ModuleCache>> cache = ModuleCache::Open(FreshDirectory(name));
  EXPECT_TRUE(cache.ok()) << cache.status();
  return cache.ok() ? *std::move(cache) : nullptr;
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(ModuleCacheTest, StoreThenLookupRoundTrips) {
  std::unique_ptr<ModuleCache> cache = OpenCache("roundtrip");
  ASSERT_NE(cache, nullptr);
  const std::string payload("cubin\0bytes\xff", 12);
  EXPECT_EQ(cache->Lookup("key-a"), std::nullopt);
  ASSERT_TRUE(cache->Store("key-a", payload).ok());
  EXPECT_THAT(cache->Lookup("key-a"), Optional(payload));
  EXPECT_EQ(cache->Lookup("key-b"), std::nullopt);
  ASSERT_TRUE(cache->Store("key-a", "replaced").ok());
  EXPECT_THAT(cache->Lookup("key-a"), Optional(std::string("replaced")));
}

TEST(ModuleCacheTest, OpenCreatesNestedDirectories) {
  const std::string dir = absl::StrCat(FreshDirectory("nested"), "/a/b");
  ASSERT_TRUE(ModuleCache::Open(dir).ok());
  EXPECT_TRUE(std::filesystem::is_directory(dir));
}

TEST(ModuleCacheTest, OpenRefusesAFile) {
  const std::string path = FreshDirectory("file");
  WriteFile(path, "not a directory");
  absl::StatusOr<std::unique_ptr<ModuleCache>> cache = ModuleCache::Open(path);
  ASSERT_FALSE(cache.ok());
  EXPECT_EQ(cache.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(cache.status().message()), HasSubstr(path));
}

TEST(ModuleCacheTest, CorruptEntriesAreMissesAndGetRebuilt) {
  std::unique_ptr<ModuleCache> cache = OpenCache("corrupt");
  ASSERT_NE(cache, nullptr);
  ASSERT_TRUE(cache->Store("key", "payload-bytes").ok());
  const std::string path = cache->EntryPath("key");
  const std::string good = ReadFile(path);

  std::vector<std::string> bad = {
      "",                               // empty
      good.substr(0, good.size() - 1),  // torn write
      good + "x",                       // trailing garbage
      "XXXXXXXX" + good.substr(8),      // foreign magic
  };
  std::string flipped = good;
  flipped.back() ^= 0x20;  // payload bit flip: checksum mismatch
  bad.push_back(flipped);
  for (const std::string& bytes : bad) {
    WriteFile(path, bytes);
    EXPECT_EQ(cache->Lookup("key"), std::nullopt) << "entry of " << bytes.size() << " bytes";
  }
  ASSERT_TRUE(cache->Store("key", "payload-bytes").ok());
  EXPECT_THAT(cache->Lookup("key"), Optional(std::string("payload-bytes")));
}

TEST(ModuleCacheTest, AnEntryOfAnotherKeyAtTheSamePathIsAMiss) {
  std::unique_ptr<ModuleCache> cache = OpenCache("collision");
  ASSERT_NE(cache, nullptr);
  ASSERT_TRUE(cache->Store("other-key", "other").ok());
  // Simulate a file-name collision: the entry of "other-key" sits at the path of "key".
  std::filesystem::rename(cache->EntryPath("other-key"), cache->EntryPath("key"));
  EXPECT_EQ(cache->Lookup("key"), std::nullopt);
}

// A FIFO or a directory at an entry's path is a miss that never blocks, and is not replaced.
TEST(ModuleCacheTest, AnEntryThatIsNoRegularFileIsAMiss) {
  std::unique_ptr<ModuleCache> cache = OpenCache("fifo");
  ASSERT_NE(cache, nullptr);
  ASSERT_EQ(::mkfifo(cache->EntryPath("key").c_str(), 0600), 0);
  EXPECT_EQ(cache->Lookup("key"), std::nullopt);
  const absl::Status stored = cache->Store("key", "payload");
  EXPECT_FALSE(stored.ok());
  EXPECT_THAT(stored.message(), HasSubstr("a named pipe (FIFO), not a regular file"));
  EXPECT_TRUE(std::filesystem::is_fifo(cache->EntryPath("key")));
}

// A full disk (a file-size limit in a child process, SIGXFSZ ignored): Store fails naming the
// entry, the old entry still reads, and nothing else is left in the directory.
TEST(ModuleCacheTest, AStoreToAFullDiskFailsAndKeepsTheOldEntry) {
  std::unique_ptr<ModuleCache> cache = OpenCache("full");
  ASSERT_NE(cache, nullptr);
  ASSERT_TRUE(cache->Store("key", "old payload").ok());
  EXPECT_TRUE(testing::RunWithFullDisk(16 << 10, [&] {
    const absl::Status status = cache->Store("key", std::string(1 << 20, 'x'));
    return absl::IsResourceExhausted(status) &&
           absl::StrContains(status.message(),
                             absl::StrCat("module cache: cannot write ", cache->EntryPath("key")));
  }));
  EXPECT_THAT(cache->Lookup("key"), Optional(std::string("old payload")));
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(cache->directory())) {
    ++files;
    EXPECT_EQ(entry.path().string(), cache->EntryPath("key"));
  }
  EXPECT_EQ(files, 1);
}

TEST(ModuleCacheTest, ConcurrentWriterProcessesLeaveAValidEntry) {
  std::unique_ptr<ModuleCache> cache = OpenCache("concurrent");
  ASSERT_NE(cache, nullptr);
  const std::string payload(1 << 20, 'm');  // large enough for writes to interleave
  constexpr int kWriters = 6;
  constexpr int kRounds = 20;
  std::vector<pid_t> children;
  for (int w = 0; w < kWriters; ++w) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      // Child: store and read back repeatedly; exit status 1 on any failure or a torn read.
      int failures = 0;
      for (int round = 0; round < kRounds; ++round) {
        if (!cache->Store("shared-key", payload).ok()) ++failures;
        const std::optional<std::string> got = cache->Lookup("shared-key");
        if (got.has_value() && *got != payload) ++failures;
      }
      ::_exit(failures == 0 ? 0 : 1);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "writer " << pid;
  }
  EXPECT_THAT(cache->Lookup("shared-key"), Optional(payload));
  // No temporary files are left behind.
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(cache->directory())) {
    EXPECT_THAT(entry.path().string(), ::testing::EndsWith(".tpmod"));
    ++files;
  }
  EXPECT_EQ(files, 1);
}

TEST(ModuleCacheTest, DefaultDirectoryFollowsTheEnvironment) {
  const char* names[3] = {"TILEPLAN_CACHE_DIR", "XDG_CACHE_HOME", "HOME"};
  std::optional<std::string> saved[3];
  for (int i = 0; i < 3; ++i) {
    if (const char* value = std::getenv(names[i])) saved[i] = value;
  }
  ::setenv("TILEPLAN_CACHE_DIR", "/x/explicit", 1);
  ::setenv("XDG_CACHE_HOME", "/x/xdg", 1);
  ::setenv("HOME", "/x/home", 1);
  EXPECT_EQ(ModuleCache::DefaultDirectory().value_or(""), "/x/explicit");
  ::unsetenv("TILEPLAN_CACHE_DIR");
  EXPECT_EQ(ModuleCache::DefaultDirectory().value_or(""), "/x/xdg/tileplan");
  ::setenv("XDG_CACHE_HOME", "", 1);
  EXPECT_EQ(ModuleCache::DefaultDirectory().value_or(""), "/x/home/.cache/tileplan");
  ::unsetenv("HOME");
  ::unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(ModuleCache::DefaultDirectory().status().code(), absl::StatusCode::kFailedPrecondition);
  for (int i = 0; i < 3; ++i) {
    if (saved[i].has_value()) ::setenv(names[i], saved[i]->c_str(), 1);
  }
}

TEST(ModuleCacheTest, Fnv1a64MatchesKnownValues) {
  EXPECT_EQ(Fnv1a64(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(Fnv1a64("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(Fnv1a64("foobar"), 0x85944171f73967e8ull);
}

}  // namespace
}  // namespace tileplan::kernels
