// ReadRegularFile, CheckRegularFileOrAbsent and WriteFileAtomically (base/files.h): regular
// files are read whole, everything else is refused by its kind before a byte is read, with the
// file named; an atomic write that fails (a full disk) leaves the file and its directory as
// they were.
#include "base/files.h"

#include <sys/stat.h>
#include <unistd.h>


#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/full_disk.h"

namespace tileplan {
namespace {

using ::testing::HasSubstr;

class FilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("tileplan_files_test_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& contents) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << contents;
    return path;
  }

  // The names in the test's directory.
  std::set<std::string> Names() const {
    std::set<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
      names.insert(entry.path().filename().string());
    }
    return names;
  }

  std::filesystem::path dir_;
};

TEST_F(FilesTest, ReadsARegularFileWhole) {
  const std::string contents("a\0b\nc", 5);
  const std::string path = Write("plain", contents);
  absl::StatusOr<std::string> read = ReadRegularFile(path, 5);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, contents);
  // Through a symbolic link, and an empty file.
  std::filesystem::create_symlink(path, dir_ / "link");
  read = ReadRegularFile((dir_ / "link").string(), 5);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, contents);
  read = ReadRegularFile(Write("empty", ""), 0);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, "");
}

TEST_F(FilesTest, RefusesAFileOverTheLimitNamingBothSizes) {
  const std::string path = Write("big", std::string(100, 'x'));
  const absl::StatusOr<std::string> read = ReadRegularFile(path, 99);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(read.status().message(),
              HasSubstr(path + ": file is 100 bytes, over the limit of 99"));
}

TEST_F(FilesTest, MissingFilesAndDanglingLinksAreNotFound) {
  const std::string missing = (dir_ / "missing").string();
  absl::StatusOr<std::string> read = ReadRegularFile(missing, 10);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(read.status().message(), HasSubstr(missing));
  std::filesystem::create_symlink(dir_ / "nowhere", dir_ / "dangling");
  read = ReadRegularFile((dir_ / "dangling").string(), 10);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(CheckRegularFileOrAbsent(missing).ok());
}

// A FIFO would block a reader until a writer came: it is refused by its kind, at once, by both
// functions; so are directories and devices.
TEST_F(FilesTest, RefusesFifosDirectoriesAndDevicesByKind) {
  const std::string fifo = (dir_ / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const auto& [path, kind] :
       {std::pair<std::string, std::string>{fifo, "a named pipe (FIFO)"},
        {dir_.string(), "a directory"},
        {"/dev/zero", "a character device"}}) {
    const absl::StatusOr<std::string> read = ReadRegularFile(path, 1 << 20);
    EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument) << path;
    EXPECT_THAT(read.status().message(), HasSubstr(path + " is " + kind + ", not a regular file"));
    const absl::Status check = CheckRegularFileOrAbsent(path);
    EXPECT_EQ(check.code(), absl::StatusCode::kInvalidArgument) << path;
    EXPECT_THAT(check.message(), HasSubstr(kind));
  }
  EXPECT_TRUE(CheckRegularFileOrAbsent(Write("plain", "x")).ok());
}

// An atomic write's rename would replace whatever `path` names: anything but a regular file
// or nothing is refused first, and neither it nor a temporary is touched.
TEST_F(FilesTest, AtomicWritesRefuseToReplaceWhatIsNoRegularFile) {
  const std::string fifo = (dir_ / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const auto& [path, kind] : {std::pair<std::string, std::string>{fifo, "a named pipe (FIFO)"},
                                   {dir_.string(), "a directory"}}) {
    const absl::Status written = WriteFileAtomically(path, "text");
    EXPECT_EQ(written.code(), absl::StatusCode::kInvalidArgument) << path;
    EXPECT_THAT(written.message(), HasSubstr(path + " is " + kind + ", not a regular file"));
  }
  EXPECT_EQ(Names(), std::set<std::string>{"fifo"});
  EXPECT_TRUE(std::filesystem::is_fifo(fifo));
  const std::string plain = (dir_ / "plain").string();
  ASSERT_TRUE(WriteFileAtomically(plain, "one").ok());
  ASSERT_TRUE(WriteFileAtomically(plain, "two").ok());
  EXPECT_EQ(*ReadRegularFile(plain, 3), "two");
}

// A full disk, made by a file-size limit in a child process (SIGXFSZ ignored, so writes fail
// with EFBIG as they fail with ENOSPC): the write is ResourceExhausted, the old file keeps its
// bytes, and nothing else is left in the directory, both when the file exists and when not.
TEST_F(FilesTest, AnAtomicWriteToAFullDiskLeavesEverythingAsItWas) {
  const std::string old_file = Write("old", "old contents");
  const std::string new_file = (dir_ / "new").string();
  const std::string big(1 << 20, 'x');
  for (const std::string& path : {old_file, new_file}) {
    EXPECT_TRUE(testing::RunWithFullDisk(64 << 10, [&] {
      const absl::Status status = WriteFileAtomically(path, big);
      return absl::IsResourceExhausted(status) &&
             absl::StrContains(status.message(), absl::StrCat("cannot write ", path, ": ")) &&
             absl::StrContains(status.message(), "left as it was");
    })) << path;
    EXPECT_EQ(Names(), std::set<std::string>{"old"}) << path;
  }
  EXPECT_EQ(*ReadRegularFile(old_file, 100), "old contents");
  ASSERT_TRUE(WriteFileAtomically(new_file, "fits").ok());
  EXPECT_EQ(*ReadRegularFile(new_file, 100), "fits");
}

// /proc/self/mem is a regular file whose read at offset 0 fails with EIO: the error is a
// status naming the file and the OS's reason, not an exception.
TEST_F(FilesTest, AReadErrorIsDataLossWithTheReason) {
  if (!std::filesystem::exists("/proc/self/mem")) GTEST_SKIP() << "no /proc/self/mem here";
  const absl::StatusOr<std::string> read = ReadRegularFile("/proc/self/mem", 1 << 20);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(read.status().message(), HasSubstr("cannot read /proc/self/mem: "));
}

}  // namespace
}  // namespace tileplan
