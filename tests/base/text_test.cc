// Untrusted text in messages: escaped, cut, and lists shortened.
#include "base/text.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tileplan {
namespace {

TEST(QuoteUntrustedTest, EscapesWhatATerminalWouldAct) {
  EXPECT_EQ(QuoteUntrusted("model.layers.0.mlp.weight"), "\"model.layers.0.mlp.weight\"");
  EXPECT_EQ(QuoteUntrusted("a\x1b[2Jb\n\"c\""), "\"a\\x1b[2Jb\\n\\\"c\\\"\"");
  EXPECT_EQ(QuoteUntrusted(std::string("nul\0x", 5)), "\"nul\\x00x\"");
}

TEST(QuoteUntrustedTest, LongTextIsCutWithItsLength) {
  const std::string name(3 << 20, 'x');
  const std::string quoted = QuoteUntrusted(name);
  EXPECT_EQ(quoted, "\"" + std::string(120, 'x') + "\"... (3145728 bytes)");
  EXPECT_EQ(QuoteUntrusted("abcdef", 3), "\"abc\"... (6 bytes)");
  EXPECT_EQ(QuoteUntrusted("abc", 3), "\"abc\"");
}

TEST(QuoteListTest, ShowsTheFirstItemsAndCountsTheRest) {
  EXPECT_EQ(QuoteList({}), "");
  EXPECT_EQ(QuoteList({"a", "b"}), "\"a\", \"b\"");
  std::vector<std::string> many;
  for (int i = 0; i < 1000; ++i) many.push_back("t" + std::to_string(i));
  EXPECT_EQ(QuoteList(many, 3), "\"t0\", \"t1\", \"t2\" and 997 more");
}

TEST(ShapeStringTest, ShapesAndRowMajorIndices) {
  EXPECT_EQ(ShapeString({}), "[]");
  EXPECT_EQ(ShapeString({2, 3, 4}), "[2,3,4]");
  EXPECT_EQ(IndexString(0, {2, 3}), "[0,0]");
  EXPECT_EQ(IndexString(5, {2, 3}), "[1,2]");
  EXPECT_EQ(IndexString(7, {384}), "[7]");
  EXPECT_EQ(IndexString(3, {0, 3}), "[0,0]");  // a zero extent reads as index 0
}

}  // namespace
}  // namespace tileplan
