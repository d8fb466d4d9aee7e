// The passes group of tools/common_flags.h.
#include <iostream>

#include "absl/flags/flag.h"
#include "tools/common_flags.h"

ABSL_FLAG(bool, print_after_all, false,
          "print the IR to stderr after every planner pass (docs/planner.md)");
ABSL_FLAG(std::vector<std::string>, print_after, {},
          "print the IR to stderr after the named planner passes (comma-separated)");

namespace tileplan::tools {

planner::PrintOptions PrintOptionsFromFlags() {
  planner::PrintOptions print;
  print.after_all = absl::GetFlag(FLAGS_print_after_all);
  print.after = absl::GetFlag(FLAGS_print_after);
  print.out = &std::cerr;
  return print;
}

}  // namespace tileplan::tools
