// Parser errors: each names line:column, what was expected and what was found.
#include <string>

#include "gtest/gtest.h"
#include "regions/parser.h"

namespace tileplan::ir {
namespace {

std::string ParseError(absl::string_view text) {
  absl::StatusOr<Graph> g = ParseGraph(text);
  EXPECT_FALSE(g.ok()) << "parsed:\n" << text;
  if (g.ok()) return "";
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(g.status().message());
}

// A graph with one input %x: f32[4] and the given body lines.
std::string Body(absl::string_view lines) {
  return std::string("graph @g {\n  input %x: f32[4]\n") + std::string(lines) + "}\n";
}

TEST(ParserErrorsTest, Header) {
  EXPECT_EQ(ParseError(""), "1:1: expected 'graph', found end of input");
  EXPECT_EQ(ParseError("graf @g {\n}\n"), "1:1: expected 'graph', found identifier 'graf'");
  EXPECT_EQ(ParseError("graph g {\n}\n"),
            "1:7: expected a graph name (@name), found identifier 'g'");
  EXPECT_EQ(ParseError("graph @g {}\n"), "1:11: expected end of line, found '}'");
  EXPECT_EQ(ParseError("graph @ {\n}\n"), "1:8: expected a name ([A-Za-z0-9_.]+) after '@'");
}

TEST(ParserErrorsTest, Structure) {
  EXPECT_EQ(ParseError("graph @g {\n  input %x: f32[4]\n"),
            "3:1: expected 'input', 'weight', 'state', a region (%name: type = kind(...)), "
            "'output' or '}', found end of input");
  EXPECT_EQ(ParseError("graph @g {\n}\nx\n"),
            "3:1: expected end of input after the closing '}', found identifier 'x'");
  EXPECT_EQ(ParseError(Body("  input %y: f32[4] input %z: f32[4]\n")),
            "3:20: expected end of line, found identifier 'input'");
  EXPECT_EQ(ParseError(Body("  $\n")), "3:3: unexpected character '$'");
  EXPECT_EQ(ParseError(Body("  \x01\n")), "3:3: unexpected byte 0x01");
  EXPECT_EQ(ParseError(Body("  input %y f32[4]\n")), "3:12: expected ':', found identifier 'f32'");
}

TEST(ParserErrorsTest, Types) {
  EXPECT_EQ(ParseError(Body("  input %y: f33[4]\n")),
            "3:13: unknown dtype 'f33' (expected f32, bf16, f16 or i32)");
  EXPECT_EQ(ParseError(Body("  input %y: f32[-1]\n")), "3:17: a dim extent must be >= 0");
  EXPECT_EQ(ParseError(Body("  input %y: f32[4 5]\n")),
            "3:19: expected ',' or ']', found integer 5");
  EXPECT_EQ(ParseError(Body("  input %y: f32[4,]\n")),
            "3:19: expected a dim (an extent or a symbol), found ']'");
  EXPECT_EQ(ParseError(Body("  input %y: f32\n")),
            "3:16: expected '[' after the dtype, found end of line");
}

TEST(ParserErrorsTest, Names) {
  EXPECT_EQ(ParseError(Body("  %y: f32[4] = silu(%z)\n")), "3:21: undefined value %z");
  EXPECT_EQ(ParseError(Body("  input %x: f32[4]\n")), "3:9: value %x is already defined at 2:9");
  EXPECT_EQ(ParseError(Body("  %y: f32[4] = silu(%y)\n")), "3:21: undefined value %y");
  EXPECT_EQ(ParseError(Body("  %x: f32[4] = silu(%x)\n")),
            "3:3: value %x is already defined at 2:9");
  EXPECT_EQ(ParseError(Body("  %a: f32[2], %a: f32[2] = split(%x) {sizes = [2, 2]}\n")),
            "3:15: value %a is a result twice");
  EXPECT_EQ(ParseError(Body("  input %z: f32[4]\n  %y: f32[4] view(%z) = silu(%x)\n")),
            "4:19: aliased value %z is not an operand of this region");
  EXPECT_EQ(ParseError(Body("  output %q\n")), "3:10: undefined value %q");
  EXPECT_EQ(ParseError(Body("  %y: f32[4] = silu(%)\n")),
            "3:22: expected a name ([A-Za-z0-9_.]+) after '%'");
}

TEST(ParserErrorsTest, RegionSyntax) {
  EXPECT_EQ(ParseError(Body("  %y: f32[4] silu(%x)\n")),
            "3:14: expected 'inplace(...)', 'view(...)', ',' or '=', found identifier 'silu'");
  EXPECT_EQ(ParseError(Body("  %y: f32[4] = (%x)\n")), "3:16: expected a region kind, found '('");
  EXPECT_EQ(ParseError(Body("  %y: f32[4] = silu(%x\n")),
            "3:23: expected ',' or ')', found end of line");
  EXPECT_EQ(ParseError(Body("  %y: f32[4] = silu(%x) phase(fast)\n")),
            "3:31: expected a phase (general, prefill or decode), found identifier 'fast'");
  EXPECT_EQ(ParseError(Body("  %y: f32[4] = silu(%x) extra\n")),
            "3:25: expected '{' (attributes), 'phase(...)', 'fused(...)' or end of line, found "
            "identifier 'extra'");
  EXPECT_EQ(ParseError(Body("  %y: f32[4] = silu(%x) {a = 1} extra\n")),
            "3:33: expected 'phase(...)', 'fused(...)' or end of line, found identifier 'extra'");
  EXPECT_EQ(ParseError(Body("  %y: f32[4] = silu(%x) phase(decode) {}\n")),
            "3:39: expected 'fused(...)' or end of line, found '{'");
}

TEST(ParserErrorsTest, FusedFrom) {
  EXPECT_EQ(ParseError(Body("  %y: f32[4] = silu(%x) fused(silu) phase(decode)\n")),
            "3:37: expected end of line, found identifier 'phase'");
  EXPECT_EQ(ParseError(Body("  %y: f32[4] = silu(%x) fused()\n")),
            "3:31: expected a region kind, found ')'");
  EXPECT_EQ(ParseError(Body("  %y: f32[4] = silu(%x) fused(silu mul)\n")),
            "3:36: expected ',' or ')', found identifier 'mul'");
  EXPECT_EQ(ParseError(Body("  %y: f32[4] = silu(%x) fused silu\n")),
            "3:31: expected '(' and the fused kinds, found identifier 'silu'");
  EXPECT_EQ(ParseError(Body("  %y: f32[4] = silu(%x) fused(\"silu\")\n")),
            "3:31: expected a region kind, found string \"silu\"");
}

TEST(ParserErrorsTest, Attributes) {
  const std::string prefix = "  %y: f32[4] = op(%x) {";  // the attribute text starts at 3:24
  EXPECT_EQ(ParseError(Body(prefix + "a = 1, a = 2}\n")), "3:31: attribute 'a' is given twice");
  EXPECT_EQ(ParseError(Body(prefix + "sizes = []}\n")),
            "3:32: an empty list needs its element type: write ints[] or floats[]");
  EXPECT_EQ(ParseError(Body(prefix + "a = [1, 2.0]}\n")), "3:32: a float in a list of ints");
  EXPECT_EQ(ParseError(Body(prefix + "a = floats[1.0, 2]}\n")),
            "3:40: an int in a list of floats (write 1.0, not 1)");
  EXPECT_EQ(ParseError(Body(prefix + "a = 9223372036854775808}\n")),
            "3:28: number 9223372036854775808 is out of int64 range");
  EXPECT_EQ(ParseError(Body(prefix + "a = 1e999}\n")), "3:28: number 1e999 is out of double range");
  EXPECT_EQ(ParseError(Body(prefix + "a = -x}\n")), "3:29: expected a digit or 'inf' after '-'");
  EXPECT_EQ(ParseError(Body(prefix + "a = 1.}\n")), "3:30: expected a digit after '.'");
  EXPECT_EQ(ParseError(Body(prefix + "a = 1e}\n")), "3:30: expected a digit in the exponent");
  EXPECT_EQ(ParseError(Body(prefix + "a = maybe}\n")),
            "3:28: expected an attribute value, found identifier 'maybe'");
  EXPECT_EQ(ParseError(Body(prefix + "a = 1\n")), "3:29: expected ',' or '}', found end of line");
  EXPECT_EQ(ParseError(Body(prefix + "a 1}\n")), "3:26: expected '=', found integer 1");
  EXPECT_EQ(ParseError(Body(prefix + "a = ints}\n")),
            "3:32: expected '[' after the list type, found '}'");
}

TEST(ParserErrorsTest, Strings) {
  EXPECT_EQ(ParseError(Body("  weight %w: f32[4] = \"abc\n")),
            "3:23: string literal is not closed on its line");
  EXPECT_EQ(ParseError(Body("  weight %w: f32[4] = \"a\\q\"\n")),
            "3:25: invalid escape in string literal (use \\\" \\\\ \\n \\t or \\xHH)");
  EXPECT_EQ(ParseError(Body("  weight %w: f32[4] = \"a\\x4\"\n")),
            "3:25: invalid escape in string literal (use \\\" \\\\ \\n \\t or \\xHH)");
  EXPECT_EQ(ParseError(Body("  weight %w: f32[4] = \"a\tb\"\n")),
            "3:25: unescaped byte 0x09 in string literal");
  EXPECT_EQ(ParseError(Body("  weight %w: f32[4] = \"\"\n")),
            "3:23: the checkpoint tensor name is empty");
  EXPECT_EQ(ParseError(Body("  weight %w: f32[4]\n")),
            "3:20: expected '=' and the checkpoint tensor name, found end of line");
}

TEST(ParserErrorsTest, PackedWeights) {
  EXPECT_EQ(ParseError(Body("  weight %w: f32[4] = pack(\"a\")\n")),
            "3:23: expected the checkpoint tensor name (a string, slice(...) or concat(...)), "
            "found identifier 'pack'");
  EXPECT_EQ(ParseError(Body("  weight %w: f32[4] = concat()\n")),
            "3:30: expected a checkpoint tensor name (a string), found ')'");
  EXPECT_EQ(ParseError(Body("  weight %w: f32[4] = concat(\"a\", \"\")\n")),
            "3:35: the checkpoint tensor name is empty");
  EXPECT_EQ(ParseError(Body("  weight %w: f32[4] = concat(\"a\" \"b\")\n")),
            "3:34: expected ',' or ')', found string \"b\"");
  EXPECT_EQ(ParseError(Body("  weight %w: f32[4] = concat(\"a\"\n")),
            "3:33: expected ',' or ')', found end of line");
  EXPECT_EQ(ParseError(Body("  weight %w: f32[4] = \"a\", \"b\"\n")),
            "3:26: expected end of line, found ','");
}

TEST(ParserErrorsTest, SlicedWeights) {
  EXPECT_EQ(ParseError(Body("  weight %w: f32[4] = slice(\"a\", 0, 4)\n")),
            "3:38: expected ',' and the slice's size, found ')'");
  EXPECT_EQ(ParseError(Body("  weight %w: f32[4] = slice(\"a\", 0, -1, 4)\n")),
            "3:32: slice(\"a\", 0, -1, 4) needs 0 <= dim, 0 <= start and 0 < size");
  EXPECT_EQ(ParseError(Body("  weight %w: f32[4] = slice(\"a\", 0, 0, 0)\n")),
            "3:32: slice(\"a\", 0, 0, 0) needs 0 <= dim, 0 <= start and 0 < size");
  EXPECT_EQ(ParseError(Body("  weight %w: f32[4] = slice(\"a\", x, 0, 4)\n")),
            "3:34: expected the slice's dim (an int), found identifier 'x'");
  EXPECT_EQ(ParseError(Body("  weight %w: f32[4] = slice(\"a\", 0, 0, 4\n")),
            "3:41: expected ')' after the slice's size, found end of line");
  EXPECT_EQ(ParseError(Body("  weight %w: f32[4] = slice(a)\n")),
            "3:29: expected a checkpoint tensor name (a string), found identifier 'a'");
}

}  // namespace
}  // namespace tileplan::ir
