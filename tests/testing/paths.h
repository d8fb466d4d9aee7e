// Where a test finds the source tree's files and the other binaries of the build, at run
// time: a test binary copied elsewhere (docs/gpu.md stages stripped binaries onto a GPU
// machine whose checkout lives at another path) runs from that checkout's root and finds
// its data there.
#ifndef TILEPLAN_TESTS_TESTING_PATHS_H_
#define TILEPLAN_TESTS_TESTING_PATHS_H_

#include <filesystem>
#include <source_location>

#include "absl/strings/string_view.h"

namespace tileplan::testing {

// `relative` (e.g. "tests/data/qwen3-tiny") in the tileplan source tree. The tree is
//   - $TILEPLAN_SOURCE_DIR when it is set and not empty, and then no other: a tree named
//     explicitly is never silently replaced by another;
//   - else the first of these that holds `relative`: the nearest directory at or above the
//     current directory that looks like the source root (holds tests/data and
//     docs/ARCHITECTURE.md), the same above the running binary (/proc/self/exe), and the
//     source tree the binary was built from.
// When none holds `relative`, a gtest failure at the caller names it and every place tried,
// and the result is `relative` under the first tree tried (or `relative` alone), so that the
// caller's own error names a path as well.
std::filesystem::path SourcePath(
    absl::string_view relative, std::source_location caller = std::source_location::current());

// A binary of the build, by its path in the build tree (a target's $<TARGET_FILE>): the
// file of the same name next to the running test binary when there is one (a staged folder
// of binaries), else `built`.
std::filesystem::path BuiltBinary(const std::filesystem::path& built);

}  // namespace tileplan::testing

#endif  // TILEPLAN_TESTS_TESTING_PATHS_H_
