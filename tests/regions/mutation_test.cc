// Random edits of valid text must give a located error or a graph that prints, re-parses
// and converts to proto and back; never a crash (run under ASan/UBSan too).
#include <cctype>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "regions/parser.h"
#include "regions/printer.h"
#include "regions/serialization.h"
#include "regions/verifier.h"
#include "tests/regions/graph_testing.h"
#include "tests/regions/random_graph.h"

namespace tileplan::ir {
namespace {

// "L:C: ..." with L, C >= 1.
bool HasLocation(absl::string_view message) {
  size_t i = 0;
  for (int part = 0; part < 2; ++part) {
    const size_t start = i;
    while (i < message.size() && std::isdigit(static_cast<unsigned char>(message[i]))) ++i;
    if (i == start || message[start] == '0' || i >= message.size() || message[i] != ':') {
      return false;
    }
    ++i;
  }
  return true;
}

class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}

  size_t Below(size_t n) { return n == 0 ? 0 : static_cast<size_t>(rng_() % n); }

  char Byte() {
    static constexpr char kGrammar[] = "%@{}()[],:=\" \n\\-.0123456789eEinfaxBTviewplace";
    if (Below(4) == 0) return static_cast<char>(Below(256));
    return kGrammar[Below(sizeof(kGrammar) - 1)];
  }

  void Mutate(std::string& text) {
    const size_t pos = Below(text.size() + 1);
    switch (Below(6)) {
      case 0:
        if (pos < text.size()) text[pos] = Byte();
        break;
      case 1:
        if (pos < text.size()) text.erase(pos, 1);
        break;
      case 2:
        text.insert(pos, 1, Byte());
        break;
      case 3:
        text.erase(pos, std::min<size_t>(Below(12), text.size() - pos));
        break;
      case 4: {
        const size_t from = Below(text.size());
        const std::string span = text.substr(from, Below(40));
        text.insert(pos, span);
        break;
      }
      default: {
        std::vector<std::string> lines;
        size_t start = 0;
        for (size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1) {
          lines.push_back(text.substr(start, nl + 1 - start));
        }
        lines.push_back(text.substr(start));
        const size_t a = Below(lines.size()), b = Below(lines.size());
        if (a != b) std::swap(lines[a], lines[b]);
        text.clear();
        for (const std::string& l : lines) text += l;
      }
    }
  }

 private:
  std::mt19937_64 rng_;
};

void CheckParsesOrFailsCleanly(const std::string& text, int* parsed, int* rejected) {
  absl::StatusOr<Graph> g = ParseGraph(text);
  if (!g.ok()) {
    ++*rejected;
    EXPECT_TRUE(HasLocation(g.status().message())) << g.status();
    return;
  }
  ++*parsed;
  (void)Verify(*g);  // any verdict, but no crash
  const std::string printed = PrintGraph(*g);
  absl::StatusOr<Graph> again = ParseGraph(printed);
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << printed;
  EXPECT_EQ(PrintGraph(*again), printed);
  absl::StatusOr<proto::Graph> message = GraphToProto(*g);
  ASSERT_TRUE(message.ok()) << message.status();
  absl::StatusOr<Graph> back = GraphFromProto(*message);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(PrintGraph(*back), printed);
}

TEST(MutationTest, EditedTextGivesLocatedErrorOrConsistentGraph) {
  std::vector<std::string> seeds = {testing::ReadTestData("tiny_llama.tpir"),
                                    testing::ReadTestData("tiny_moe_mla.tpir")};
  for (uint64_t s = 0; s < 6; ++s) {
    seeds.push_back(PrintGraph(testing::RandomValidGraph(s)));
    seeds.push_back(PrintGraph(testing::RandomAttributeGraph(s)));
  }
  Mutator mutator(20240601);
  int parsed = 0, rejected = 0;
  for (int iter = 0; iter < 6000; ++iter) {
    std::string text = seeds[mutator.Below(seeds.size())];
    const size_t edits = 1 + mutator.Below(3);
    for (size_t e = 0; e < edits; ++e) mutator.Mutate(text);
    CheckParsesOrFailsCleanly(text, &parsed, &rejected);
    if (HasFatalFailure()) return;
  }
  // Both outcomes must actually be exercised.
  EXPECT_GT(parsed, 300);
  EXPECT_GT(rejected, 300);
}

TEST(MutationTest, ArbitraryBytesGiveLocatedErrors) {
  Mutator mutator(7);
  int parsed = 0, rejected = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string text = iter % 2 ? "graph @g {\n" : "";
    const size_t n = mutator.Below(60);
    for (size_t i = 0; i < n; ++i) text.push_back(mutator.Byte());
    CheckParsesOrFailsCleanly(text, &parsed, &rejected);
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(rejected, 2900);
}

}  // namespace
}  // namespace tileplan::ir
