// SourcePath's order of places (an explicit $TILEPLAN_SOURCE_DIR, the tree above the current
// directory, the build's tree) and its failure, and BuiltBinary's preference for a binary
// next to the test.
#include "tests/testing/paths.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest-spi.h"
#include "gtest/gtest.h"

namespace tileplan::testing {
namespace {

namespace fs = std::filesystem;

void Touch(const fs::path& path) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << "x";
}

// Each test runs in a scratch directory, with TILEPLAN_SOURCE_DIR unset; the variable and
// the current directory are restored afterwards.
class PathsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const char* env = std::getenv("TILEPLAN_SOURCE_DIR")) saved_env_ = env;
    unsetenv("TILEPLAN_SOURCE_DIR");
    saved_cwd_ = fs::current_path();
    scratch_ = fs::path(::testing::TempDir()) /
               absl::StrCat("paths_test.", getpid(), ".",
                            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(scratch_);
    fs::create_directories(scratch_);
    scratch_ = fs::canonical(scratch_);
  }
  void TearDown() override {
    fs::current_path(saved_cwd_);
    if (saved_env_.has_value()) {
      setenv("TILEPLAN_SOURCE_DIR", saved_env_->c_str(), 1);
    } else {
      unsetenv("TILEPLAN_SOURCE_DIR");
    }
    fs::remove_all(scratch_);
  }

  // A directory that looks like a source root, holding `file`.
  fs::path MakeTree(const std::string& name, const std::string& file) {
    const fs::path root = scratch_ / name;
    fs::create_directories(root / "tests/data");
    Touch(root / "docs/ARCHITECTURE.md");
    Touch(root / file);
    return root;
  }

  fs::path scratch_;

 private:
  std::optional<std::string> saved_env_;
  fs::path saved_cwd_;
};

TEST_F(PathsTest, EnvironmentVariableIsHonoured) {
  const fs::path tree = scratch_ / "named";
  Touch(tree / "tests/data/only_here.txt");
  setenv("TILEPLAN_SOURCE_DIR", tree.c_str(), 1);
  EXPECT_EQ(SourcePath("tests/data/only_here.txt"), tree / "tests/data/only_here.txt");
}

TEST_F(PathsTest, EnvironmentVariableIsTheOnlyPlaceTried) {
  // The build's tree holds docs/ARCHITECTURE.md; the named one does not.
  const fs::path tree = scratch_ / "named";
  fs::create_directories(tree);
  setenv("TILEPLAN_SOURCE_DIR", tree.c_str(), 1);
  EXPECT_NONFATAL_FAILURE(
      EXPECT_EQ(SourcePath("docs/ARCHITECTURE.md"), tree / "docs/ARCHITECTURE.md"),
      absl::StrCat("$TILEPLAN_SOURCE_DIR ", tree.string(), " has no docs/ARCHITECTURE.md"));
}

TEST_F(PathsTest, UnsetVariableFindsTheTreeAboveTheCurrentDirectory) {
  const fs::path tree = MakeTree("checkout", "tests/data/fixture/config.json");
  fs::create_directories(tree / "build/tests/tools");
  fs::current_path(tree / "build/tests/tools");
  EXPECT_EQ(SourcePath("tests/data/fixture"), tree / "tests/data/fixture");
  // Before the build's tree, which holds the file too.
  EXPECT_EQ(SourcePath("docs/ARCHITECTURE.md"), tree / "docs/ARCHITECTURE.md");
}

TEST_F(PathsTest, TreeAboveTheCurrentDirectoryWithoutTheFileIsPassedOver) {
  // The build's tree holds the file; the one above the current directory does not.
  MakeTree("old_checkout", "tests/data/other.txt");
  fs::current_path(scratch_ / "old_checkout");
  const fs::path manifest = SourcePath("tests/data/MANIFEST.json");
  EXPECT_TRUE(fs::is_regular_file(manifest)) << manifest;
}

TEST_F(PathsTest, MissingFileFailsNamingEveryPlaceTried) {
  fs::current_path(scratch_);
  EXPECT_NONFATAL_FAILURE(SourcePath("tests/data/no-such-fixture"),
                          "cannot find 'tests/data/no-such-fixture' in a tileplan source tree");
  EXPECT_NONFATAL_FAILURE(
      SourcePath("tests/data/no-such-fixture"),
      absl::StrCat("the current directory ", scratch_.string(), ": no source tree at or above it"));
  EXPECT_NONFATAL_FAILURE(SourcePath("tests/data/no-such-fixture"),
                          "the source tree of the build, ");
}

TEST_F(PathsTest, BuiltBinaryPrefersOneNextToTheTest) {
  const fs::path self = fs::read_symlink("/proc/self/exe");
  EXPECT_EQ(BuiltBinary(scratch_ / "build" / self.filename()), self);
  const fs::path absent = scratch_ / "build/no_such_tool";
  EXPECT_EQ(BuiltBinary(absent), absent);
}

}  // namespace
}  // namespace tileplan::testing
