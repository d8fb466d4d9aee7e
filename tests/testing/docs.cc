#include "tests/testing/docs.h"

#include <fstream>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/testing/paths.h"

namespace tileplan::testing {
namespace {

// The level of a Markdown heading line ("## x": 2), or 0 for any other line.
size_t HeadingLevel(absl::string_view line) {
  const size_t hashes = line.find_first_not_of('#');
  return hashes != 0 && hashes != absl::string_view::npos && line[hashes] == ' ' ? hashes : 0;
}

}  // namespace

std::vector<std::string> DocumentedNames(absl::string_view doc, absl::string_view heading,
                                         absl::string_view item_prefix) {
  std::ifstream in(SourcePath(doc));
  EXPECT_TRUE(in) << "cannot read " << doc;
  std::vector<std::string> names;
  const size_t level = HeadingLevel(heading);
  bool found = false, in_section = false;
  for (std::string line; std::getline(in, line);) {
    const size_t line_level = HeadingLevel(line);
    if (line_level != 0 && line_level <= level) in_section = line == heading;
    found = found || in_section;
    if (in_section && absl::StartsWith(line, item_prefix)) {
      const size_t start = item_prefix.size();
      names.push_back(line.substr(start, line.find('`', start) - start));
    }
  }
  EXPECT_TRUE(found) << doc << " has no heading '" << heading << "'";
  return names;
}

}  // namespace tileplan::testing
