// Golden tests of the planner passes: tests/planner/testdata/<pass>.tpir, one file per
// registered pass (docs/planner.md, "Golden tests").
//
// A file holds cases separated by lines reading exactly "// -----". Each case is an IR graph
// in text form plus directive comments:
//   // CHECK: text       the printed result contains `text`, after the previous CHECK's match
//   // CHECK-NOT: text   `text` does not occur between the neighbouring CHECK matches
//   // ERROR: text       running the passes fails with a message containing `text`
//   // UNCHANGED         the passes report no change and print the input back unchanged
//   // PASSES: a,b       run these passes instead of the file's pass
//   // OPTIONS: k=v ...  pass options: phase=prefill|decode tokens=N batch=N smax=N
//                                    norm_linear_max_rows=N norm_moe=0|1
// Every case states an expectation (CHECK, ERROR or UNCHANGED); ERROR excludes the others.
// A successful result must also verify and print / parse / print identically. Each case is
// its own test, named <pass>_<case number>.
#include <algorithm>
#include <fstream>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "planner/pass.h"
#include "regions/parser.h"
#include "regions/printer.h"
#include "regions/verifier.h"
#include "tests/testing/paths.h"

namespace tileplan::planner {
namespace {

struct Directive {
  std::string kind;  // "CHECK" or "CHECK-NOT"
  std::string text;
  int line = 0;  // in the file, 1-based
};

struct GoldenCase {
  std::string pass;  // the file's pass
  std::string file;
  int number = 0;      // 1-based
  int first_line = 0;  // of the case in the file
  std::string text;
  // What loading found wrong with the case (a malformed directive, a missing file); the
  // test reports it instead of running.
  std::string load_error;
  std::vector<std::string> passes;
  std::string options;
  std::vector<Directive> checks;
  std::string error;
  bool unchanged = false;
};

// How gtest shows a case in failure messages.
void PrintTo(const GoldenCase& c, std::ostream* os) {
  *os << c.file << ":" << c.first_line << " (case " << c.number << ")";
}

// The directory is looked up, not the file: a pass without a golden file is a load error.
std::string TestDataPath(absl::string_view pass) {
  return (testing::SourcePath("tests/planner/testdata") / absl::StrCat(pass, ".tpir")).string();
}

// Records the directive on `line` in `c`; ordinary comments and IR lines are ignored.
void ReadDirective(absl::string_view line, int line_number, GoldenCase& c) {
  absl::string_view body = absl::StripAsciiWhitespace(line);
  if (!absl::ConsumePrefix(&body, "//")) return;
  body = absl::StripLeadingAsciiWhitespace(body);
  const size_t colon = body.find(':');
  absl::string_view word = body.substr(0, colon);
  const bool directive_like = !word.empty() && std::all_of(word.begin(), word.end(), [](char ch) {
    return absl::ascii_isupper(ch) || ch == '-';
  });
  if (body == "UNCHANGED") {
    c.unchanged = true;
    return;
  }
  if (!directive_like || colon == absl::string_view::npos) return;
  const std::string value(absl::StripAsciiWhitespace(body.substr(colon + 1)));
  if (word == "CHECK" || word == "CHECK-NOT") {
    c.checks.push_back(Directive{std::string(word), value, line_number});
  } else if (word == "ERROR") {
    c.error = value;
  } else if (word == "PASSES") {
    c.passes = absl::StrSplit(value, ',', absl::SkipEmpty());
  } else if (word == "OPTIONS") {
    c.options = value;
  } else {
    c.load_error = absl::StrCat("line ", line_number, ": unknown directive '", word, "'");
  }
  if (value.empty() && c.load_error.empty()) {
    c.load_error = absl::StrCat("line ", line_number, ": directive ", word, " has no text");
  }
}

std::vector<GoldenCase> LoadFile(const std::string& pass) {
  const std::string path = TestDataPath(pass);
  std::ifstream in(path);
  if (!in) {
    GoldenCase c;
    c.pass = pass;
    c.file = path;
    c.number = 0;
    c.load_error = absl::StrCat("cannot open ", path, " (every pass needs a golden file)");
    return {c};
  }
  std::vector<GoldenCase> cases;
  GoldenCase current;
  auto start = [&](int line) {
    current = GoldenCase();
    current.pass = pass;
    current.file = path;
    current.number = static_cast<int>(cases.size()) + 1;
    current.first_line = line;
  };
  start(1);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (absl::StripAsciiWhitespace(line) == "// -----") {
      cases.push_back(current);
      start(n + 1);
      continue;
    }
    current.text += line + "\n";
    ReadDirective(line, n, current);
  }
  cases.push_back(current);
  for (GoldenCase& c : cases) {
    if (!c.load_error.empty()) continue;
    if (c.checks.empty() && c.error.empty() && !c.unchanged) {
      c.load_error = "the case states no CHECK, ERROR or UNCHANGED";
    } else if (!c.error.empty() && (!c.checks.empty() || c.unchanged)) {
      c.load_error = "ERROR excludes CHECK and UNCHANGED";
    }
    if (c.passes.empty()) c.passes = {c.pass};
  }
  return cases;
}

std::vector<GoldenCase> LoadAllCases() {
  std::vector<GoldenCase> all;
  for (const std::string& pass : GlobalPassRegistry().Names()) {
    for (GoldenCase& c : LoadFile(pass)) all.push_back(std::move(c));
  }
  return all;
}

absl::StatusOr<PassOptions> ParseOptions(absl::string_view text) {
  PassOptions options;
  for (absl::string_view item : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    std::pair<std::string, std::string> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
    int64_t n = 0;
    const bool number = absl::SimpleAtoi(kv.second, &n);
    if (kv.first == "phase") {
      absl::StatusOr<ir::Phase> phase = ir::ParsePhase(kv.second);
      if (!phase.ok()) return phase.status();
      options.phase = *phase;
    } else if (kv.first == "tokens" && number) {
      options.tokens = n;
    } else if (kv.first == "batch" && number) {
      options.batch = n;
    } else if (kv.first == "smax" && number) {
      options.cache_capacity = n;
    } else if (kv.first == "norm_linear_max_rows" && number) {
      options.norm_linear_max_rows = n;
    } else if (kv.first == "norm_moe" && number && (n == 0 || n == 1)) {
      options.norm_moe = n == 1;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("bad option '", item, "'"));
    }
  }
  return options;
}

// Matches the CHECK / CHECK-NOT directives against `output` in order; an empty string
// when they all hold, otherwise what failed.
std::string MatchChecks(const GoldenCase& c, const std::string& output) {
  size_t pos = 0;
  std::vector<const Directive*> pending_not;
  auto check_nots = [&](size_t end) -> std::string {
    for (const Directive* d : pending_not) {
      const size_t found = output.find(d->text, pos);
      if (found != std::string::npos && found < end) {
        return absl::StrCat(c.file, ":", d->line, ": CHECK-NOT: '", d->text, "' occurs");
      }
    }
    pending_not.clear();
    return "";
  };
  for (const Directive& d : c.checks) {
    if (d.kind == "CHECK-NOT") {
      pending_not.push_back(&d);
      continue;
    }
    const size_t found = output.find(d.text, pos);
    if (found == std::string::npos) {
      return absl::StrCat(c.file, ":", d.line, ": CHECK: '", d.text, "' not found");
    }
    if (std::string failure = check_nots(found); !failure.empty()) return failure;
    pos = found + d.text.size();
  }
  return check_nots(output.size());
}

class GoldenTest : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(GoldenTest, Case) {
  const GoldenCase& c = GetParam();
  ASSERT_TRUE(c.load_error.empty()) << c.file << " case " << c.number << ": " << c.load_error;
  SCOPED_TRACE(absl::StrCat(c.file, ":", c.first_line, " (case ", c.number, ")"));
  absl::StatusOr<ir::Graph> graph = ir::ParseGraph(c.text);
  ASSERT_TRUE(graph.ok()) << graph.status();
  const std::string input = ir::PrintGraph(*graph);
  absl::StatusOr<PassOptions> options = ParseOptions(c.options);
  ASSERT_TRUE(options.ok()) << options.status();
  PassPipeline pipeline;
  for (const std::string& name : c.passes) {
    absl::Status added = pipeline.Add(name, *options);
    ASSERT_TRUE(added.ok()) << added;
  }
  absl::StatusOr<bool> changed = pipeline.Run(*graph);
  if (!c.error.empty()) {
    ASSERT_FALSE(changed.ok()) << "expected an error containing '" << c.error << "', got\n"
                               << ir::PrintGraph(*graph);
    EXPECT_TRUE(absl::StrContains(changed.status().message(), c.error))
        << "expected an error containing '" << c.error << "', got: " << changed.status();
    // A failing pass leaves its input as it was.
    if (c.passes.size() == 1) {
      EXPECT_EQ(ir::PrintGraph(*graph), input);
    }
    return;
  }
  ASSERT_TRUE(changed.ok()) << changed.status();
  const std::string output = ir::PrintGraph(*graph);
  if (c.unchanged) {
    EXPECT_FALSE(*changed);
    EXPECT_EQ(output, input);
  } else {
    EXPECT_TRUE(*changed) << "the passes reported no change";
  }
  const std::string failure = MatchChecks(c, output);
  EXPECT_TRUE(failure.empty()) << failure << "\noutput:\n" << output;
  absl::StatusOr<ir::Graph> reparsed = ir::ParseGraph(output);
  ASSERT_TRUE(reparsed.ok()) << reparsed.status() << "\n" << output;
  EXPECT_TRUE(ir::Verify(*reparsed).ok());
  EXPECT_EQ(ir::PrintGraph(*reparsed), output);
}

INSTANTIATE_TEST_SUITE_P(Passes, GoldenTest, ::testing::ValuesIn(LoadAllCases()),
                         [](const ::testing::TestParamInfo<GoldenCase>& info) {
                           return absl::StrCat(info.param.pass, "_", info.param.number);
                         });

// Each golden file holds several cases, at least one of them negative (an ERROR or an
// UNCHANGED case where the pattern must not fire).
TEST(GoldenFilesTest, EveryPassHasSeveralCasesAndANegativeOne) {
  for (const std::string& pass : GlobalPassRegistry().Names()) {
    const std::vector<GoldenCase> cases = LoadFile(pass);
    EXPECT_GE(cases.size(), 3u) << TestDataPath(pass);
    bool negative = false;
    for (const GoldenCase& c : cases) negative = negative || c.unchanged || !c.error.empty();
    EXPECT_TRUE(negative) << TestDataPath(pass) << " has no ERROR or UNCHANGED case";
  }
}

}  // namespace
}  // namespace tileplan::planner
