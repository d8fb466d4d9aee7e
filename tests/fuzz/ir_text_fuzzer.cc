// libFuzzer target: IR text from arbitrary bytes. A graph that parses and verifies must print
// to text that parses back to the same print.
#include <cstddef>
#include <cstdint>
#include <string>

#include "regions/parser.h"
#include "regions/printer.h"
#include "regions/verifier.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto graph = tileplan::ir::ParseGraph(tileplan::fuzz::AsText(data, size));
  if (!graph.ok() || !tileplan::ir::Verify(*graph).ok()) return 0;
  const std::string printed = tileplan::ir::PrintGraph(*graph);
  auto again = tileplan::ir::ParseGraph(printed);
  if (!again.ok()) tileplan::fuzz::Broken("a printed graph does not parse");
  if (tileplan::ir::PrintGraph(*again) != printed) {
    tileplan::fuzz::Broken("a printed graph prints differently after a parse");
  }
  return 0;
}
