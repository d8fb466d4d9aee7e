#include "tests/testing/paths.h"

#include <cstdlib>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"

namespace tileplan::testing {
namespace {

namespace fs = std::filesystem;

bool LooksLikeSourceRoot(const fs::path& dir) {
  std::error_code ec;
  return fs::is_directory(dir / "tests/data", ec) &&
         fs::is_regular_file(dir / "docs/ARCHITECTURE.md", ec);
}

// The nearest directory at or above `dir` (absolute) that looks like the source root;
// empty when there is none.
fs::path RootAtOrAbove(fs::path dir) {
  while (true) {
    if (LooksLikeSourceRoot(dir)) return dir;
    if (!dir.has_relative_path()) return {};
    dir = dir.parent_path();
  }
}

fs::path RunningBinary() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path() : exe;
}

}  // namespace

fs::path SourcePath(absl::string_view relative, std::source_location caller) {
  const fs::path rel(std::string{relative});
  std::vector<std::string> tried;
  fs::path first_tree;
  auto holds = [&](const fs::path& root, absl::string_view what) {
    if (first_tree.empty()) first_tree = root;
    std::error_code ec;
    if (fs::exists(root / rel, ec)) return true;
    tried.push_back(absl::StrCat(what, " ", root.string(), " has no ", rel.string()));
    return false;
  };
  // Searches the nearest source root at or above `start`.
  auto found_above = [&](const fs::path& start, absl::string_view what) {
    if (start.empty()) {
      tried.push_back(absl::StrCat(what, ": unknown"));
      return fs::path();
    }
    const fs::path root = RootAtOrAbove(start);
    if (root.empty()) {
      tried.push_back(absl::StrCat(what, " ", start.string(), ": no source tree at or above it"));
      return fs::path();
    }
    return holds(root, absl::StrCat("the source tree at or above ", what)) ? root / rel : fs::path();
  };

  if (const char* env = std::getenv("TILEPLAN_SOURCE_DIR"); env != nullptr && *env != '\0') {
    if (holds(env, "$TILEPLAN_SOURCE_DIR")) return fs::path(env) / rel;
  } else {
    std::error_code ec;
    if (fs::path path = found_above(fs::current_path(ec), "the current directory");
        !path.empty()) {
      return path;
    }
    if (fs::path path = found_above(RunningBinary().parent_path(), "the test binary");
        !path.empty()) {
      return path;
    }
    if (holds(TILEPLAN_SOURCE_DIR, "the source tree of the build,")) {
      return fs::path(TILEPLAN_SOURCE_DIR) / rel;
    }
  }
  ADD_FAILURE_AT(caller.file_name(), static_cast<int>(caller.line()))
      << "cannot find '" << rel.string() << "' in a tileplan source tree; tried:\n  "
      << absl::StrJoin(tried, "\n  ")
      << "\nRun the test from a checkout, or set TILEPLAN_SOURCE_DIR to one.";
  return first_tree / rel;
}

fs::path BuiltBinary(const fs::path& built) {
  const fs::path exe = RunningBinary();
  if (!exe.empty()) {
    const fs::path beside = exe.parent_path() / built.filename();
    std::error_code ec;
    if (fs::is_regular_file(beside, ec)) return beside;
  }
  return built;
}

}  // namespace tileplan::testing
