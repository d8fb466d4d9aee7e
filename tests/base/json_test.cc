#include "base/json.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/text.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/json_readers.h"

namespace tileplan {
namespace {

using ::testing::HasSubstr;

Json ParseOk(absl::string_view text) {
  absl::StatusOr<Json> json = Json::Parse(text);
  EXPECT_TRUE(json.ok()) << text << ": " << json.status();
  return json.ok() ? *std::move(json) : Json();
}

std::string ParseError(absl::string_view text) {
  absl::StatusOr<Json> json = Json::Parse(text);
  EXPECT_FALSE(json.ok()) << "accepted: " << text;
  return json.ok() ? std::string() : std::string(json.status().message());
}

TEST(JsonTest, Scalars) {
  EXPECT_TRUE(ParseOk("null").is_null());
  EXPECT_TRUE(ParseOk("true").as_bool());
  EXPECT_FALSE(ParseOk(" false ").as_bool());
  EXPECT_EQ(ParseOk("\"abc\"").as_string(), "abc");
  EXPECT_EQ(ParseOk("42").as_int(), 42);
  EXPECT_DOUBLE_EQ(ParseOk("-2.5e3").as_double(), -2500.0);
  EXPECT_DOUBLE_EQ(ParseOk("0.125").as_double(), 0.125);
  EXPECT_DOUBLE_EQ(ParseOk("1E2").as_double(), 100.0);
  EXPECT_DOUBLE_EQ(ParseOk("1e-2").as_double(), 0.01);
  EXPECT_DOUBLE_EQ(ParseOk("1e+2").as_double(), 100.0);
}

TEST(JsonTest, ObjectKeepsDocumentOrderAndFinds) {
  Json json = ParseOk(" {\"b\": [1, 2, {\"c\": null}], \"a\": {}, \"e\": []}\r\n\t");
  ASSERT_TRUE(json.is_object());
  const Json::Object& members = json.as_object();
  ASSERT_EQ(members.size(), 3u);
  EXPECT_EQ(members[0].first, "b");
  EXPECT_EQ(members[1].first, "a");
  EXPECT_EQ(members[2].first, "e");
  const Json* b = json.Find("b");
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(b->is_array());
  ASSERT_EQ(b->as_array().size(), 3u);
  EXPECT_EQ(b->as_array()[1].as_int(), 2);
  EXPECT_TRUE(b->as_array()[2].Find("c")->is_null());
  EXPECT_TRUE(json.Find("a")->is_object());
  EXPECT_TRUE(json.Find("e")->as_array().empty());
  EXPECT_EQ(json.Find("missing"), nullptr);
  EXPECT_EQ(b->Find("b"), nullptr);  // not an object
}

TEST(JsonTest, StringEscapesAndUnicode) {
  EXPECT_EQ(ParseOk(R"("\"\\\/\b\f\n\r\t")").as_string(), "\"\\/\b\f\n\r\t");
  EXPECT_EQ(ParseOk(R"("\u0041\u00e9\u20AC")").as_string(), "A\xC3\xA9\xE2\x82\xAC");
  // Surrogate pair U+1F600.
  EXPECT_EQ(ParseOk(R"("\uD83D\uDE00")").as_string(), "\xF0\x9F\x98\x80");
  EXPECT_EQ(ParseOk(R"("\u0000")").as_string(), std::string(1, '\0'));
  // Raw multi-byte UTF-8, including the largest code point.
  EXPECT_EQ(ParseOk("\"\xC3\xA9\xE2\x82\xAC\xF4\x8F\xBF\xBF\x7F\"").as_string(),
            "\xC3\xA9\xE2\x82\xAC\xF4\x8F\xBF\xBF\x7F");
}

TEST(JsonTest, RejectsStructuralErrors) {
  EXPECT_THAT(ParseError(""), HasSubstr("unexpected end of input"));
  EXPECT_THAT(ParseError("   "), HasSubstr("unexpected end of input"));
  EXPECT_THAT(ParseError("[1,]"), HasSubstr("at byte 3"));
  EXPECT_THAT(ParseError("{\"a\":1,}"), HasSubstr("expected a string key"));
  EXPECT_THAT(ParseError("[1 2]"), HasSubstr("expected ',' or ']'"));
  EXPECT_THAT(ParseError("{\"a\" 1}"), HasSubstr("expected ':'"));
  EXPECT_THAT(ParseError("{\"a\":1 \"b\":2}"), HasSubstr("expected ',' or '}'"));
  EXPECT_THAT(ParseError("{a:1}"), HasSubstr("expected a string key"));
  EXPECT_THAT(ParseError("{'a':1}"), HasSubstr("expected a string key"));
  EXPECT_THAT(ParseError("['a']"), HasSubstr("unexpected character"));
  EXPECT_THAT(ParseError("[1"), HasSubstr("unterminated array"));
  EXPECT_THAT(ParseError("{\"a\":1"), HasSubstr("unterminated object"));
  EXPECT_THAT(ParseError("\"abc"), HasSubstr("unterminated string"));
  EXPECT_THAT(ParseError("1 2"), HasSubstr("unexpected data after the top-level value at byte 2"));
  EXPECT_THAT(ParseError("{}x"), HasSubstr("at byte 2"));
  EXPECT_THAT(ParseError("tru"), HasSubstr("invalid literal"));
  EXPECT_THAT(ParseError("nul"), HasSubstr("invalid literal"));
  EXPECT_THAT(ParseError("True"), HasSubstr("unexpected character"));
  EXPECT_THAT(ParseError("\xEF\xBB\xBF{}"),
              HasSubstr("JSON: the text starts with a UTF-8 byte order mark (EF BB BF), which "
                        "JSON text must not (RFC 8259); save the file without it at byte 0"));
  EXPECT_THAT(ParseError(absl::string_view("[1]\0", 4)), HasSubstr("at byte 3"));
}

// A token out of place is placed at its first byte; bytes that form no token at the start of a
// literal that broke off, or where they go wrong.
TEST(JsonTest, ErrorsPlaceTheTokenAtFault) {
  EXPECT_THAT(ParseError("[1 true]"), HasSubstr("expected ',' or ']' in array at byte 3"));
  EXPECT_THAT(ParseError("[1 23]"), HasSubstr("expected ',' or ']' in array at byte 3"));
  EXPECT_THAT(ParseError("[1 tru]"), HasSubstr("expected ',' or ']' in array at byte 3"));
  EXPECT_THAT(ParseError("[truex]"), HasSubstr("expected ',' or ']' in array at byte 5"));
  EXPECT_THAT(ParseError("{\"a\":1 \"b\":2}"),
              HasSubstr("expected ',' or '}' in object at byte 7"));
  EXPECT_THAT(ParseError("{\"a\" false}"), HasSubstr("expected ':' after object key at byte 5"));
  EXPECT_THAT(ParseError("{null:1}"), HasSubstr("expected a string key in object at byte 1"));
  EXPECT_THAT(ParseError("1 false"),
              HasSubstr("unexpected data after the top-level value at byte 2"));
  EXPECT_THAT(ParseError("1 \"s\""),
              HasSubstr("unexpected data after the top-level value at byte 2"));
  EXPECT_THAT(ParseError("1 nul"),
              HasSubstr("unexpected data after the top-level value at byte 2"));
  EXPECT_THAT(ParseError("tru"), HasSubstr("invalid literal at byte 0"));
  EXPECT_THAT(ParseError("[fals]"), HasSubstr("invalid literal at byte 1"));
  EXPECT_THAT(ParseError("{\"a\":nx}"), HasSubstr("invalid literal at byte 5"));
  EXPECT_THAT(ParseError("[1, ]"), HasSubstr("unexpected character, expected a value at byte 4"));
  EXPECT_THAT(ParseError("[1,"), HasSubstr("unexpected end of input, expected a value at byte 3"));
}

// A NUL byte ends nothing: it is data like any other byte outside a string.
TEST(JsonTest, RejectsNulBytesOutsideStrings) {
  EXPECT_THAT(ParseError(absl::string_view("1\0 2", 4)),
              HasSubstr("unexpected data after the top-level value at byte 1"));
  EXPECT_THAT(ParseError(absl::string_view("{}\0", 3)),
              HasSubstr("unexpected data after the top-level value at byte 2"));
  EXPECT_THAT(ParseError(absl::string_view("\0", 1)),
              HasSubstr("unexpected character, expected a value at byte 0"));
  EXPECT_THAT(ParseError(absl::string_view("[\0]", 3)),
              HasSubstr("unexpected character, expected a value at byte 1"));
  EXPECT_THAT(ParseError(absl::string_view("[1\0]", 4)),
              HasSubstr("expected ',' or ']' in array at byte 2"));
  EXPECT_THAT(ParseError(absl::string_view("{\"a\"\0:1}", 8)),
              HasSubstr("expected ':' after object key at byte 4"));
}

TEST(JsonTest, RejectsAByteOrderMarkAlone) {
  EXPECT_THAT(ParseError("\xEF\xBB\xBF"), HasSubstr("at byte 0"));
  EXPECT_THAT(ParseError("\xEF"), HasSubstr("at byte 0"));
}

TEST(JsonTest, RejectsCommentsAndNonFiniteNumbers) {
  EXPECT_THAT(ParseError("// c\n1"), HasSubstr("unexpected character"));
  EXPECT_THAT(ParseError("[1 /* c */]"), HasSubstr("expected ',' or ']'"));
  EXPECT_THAT(ParseError("NaN"), HasSubstr("unexpected character"));
  EXPECT_THAT(ParseError("Infinity"), HasSubstr("unexpected character"));
  EXPECT_THAT(ParseError("-Infinity"), HasSubstr("invalid number"));
  EXPECT_THAT(ParseError("1e400"), HasSubstr("out of the double range"));
  EXPECT_THAT(ParseError("-123456789e999999999999999999"), HasSubstr("out of the double range"));
}

TEST(JsonTest, RejectsMalformedNumbers) {
  EXPECT_THAT(ParseError("01"), HasSubstr("leading zero"));
  EXPECT_THAT(ParseError("-01"), HasSubstr("leading zero"));
  EXPECT_THAT(ParseError("00"), HasSubstr("leading zero"));
  EXPECT_THAT(ParseError("+1"), HasSubstr("unexpected character"));
  EXPECT_THAT(ParseError(".5"), HasSubstr("unexpected character"));
  EXPECT_THAT(ParseError("1."), HasSubstr("expected a digit"));
  EXPECT_THAT(ParseError("1.e3"), HasSubstr("expected a digit"));
  EXPECT_THAT(ParseError("1e"), HasSubstr("expected a digit"));
  EXPECT_THAT(ParseError("1e+"), HasSubstr("expected a digit"));
  EXPECT_THAT(ParseError("-"), HasSubstr("expected a digit"));
  EXPECT_THAT(ParseError("0x10"), HasSubstr("unexpected data"));
}

TEST(JsonTest, RejectsLeadingZerosInsideValues) {
  EXPECT_THAT(ParseError("[01]"), HasSubstr("leading zero at byte 1"));
  EXPECT_THAT(ParseError("{\"a\":-01}"), HasSubstr("leading zero at byte 5"));
  EXPECT_THAT(ParseError("[1, 00]"), HasSubstr("leading zero at byte 4"));
  // A digit after 0 is a leading zero; a sign after it is just more data.
  EXPECT_THAT(ParseError("0-1"), HasSubstr("unexpected data after the top-level value at byte 1"));
  EXPECT_THAT(ParseError("[10-1]"), HasSubstr("expected ',' or ']' in array at byte 3"));
}

TEST(JsonTest, RejectsBadStrings) {
  EXPECT_THAT(ParseError("\"a\nb\""), HasSubstr("control character in string at byte 2"));
  EXPECT_THAT(ParseError("\"\x01\""), HasSubstr("control character"));
  EXPECT_THAT(ParseError(absl::string_view("\"\0\"", 3)), HasSubstr("control character"));
  EXPECT_THAT(ParseError(R"("\x")"), HasSubstr("invalid escape at byte 1"));
  EXPECT_THAT(ParseError(R"("\u12G4")"), HasSubstr("invalid hex digit"));
  EXPECT_THAT(ParseError(R"(["\u12", 1])"), HasSubstr("invalid hex digit in \\u escape at byte 6"));
  EXPECT_THAT(ParseError("\"\\u12"), HasSubstr("truncated"));
  EXPECT_THAT(ParseError(R"("\uDE00")"), HasSubstr("lone low surrogate"));
  EXPECT_THAT(ParseError(R"("\uD83D")"), HasSubstr("lone high surrogate"));
  EXPECT_THAT(ParseError(R"("\uD83Dx")"), HasSubstr("lone high surrogate"));
  EXPECT_THAT(ParseError(R"("\uD83D\u0041")"), HasSubstr("lone high surrogate"));
  EXPECT_THAT(ParseError(R"("\uD83D\uD83D")"), HasSubstr("lone high surrogate"));
}

TEST(JsonTest, RejectsABackslashAtTheEnd) {
  EXPECT_THAT(ParseError("\"abc\\"), HasSubstr("unterminated string at byte 5"));
}

TEST(JsonTest, RejectsInvalidUtf8) {
  for (const char* bad : {
           "\"\x80\"",              // stray continuation byte
           "\"\xC0\x80\"",          // overlong NUL
           "\"\xC1\xBF\"",          // overlong
           "\"\xE0\x80\x80\"",      // overlong three-byte
           "\"\xED\xA0\x80\"",      // encoded surrogate
           "\"\xF0\x80\x80\x80\"",  // overlong four-byte
           "\"\xF4\x90\x80\x80\"",  // above U+10FFFF
           "\"\xF5\x80\x80\x80\"",  // invalid lead
           "\"\xFF\"",              // invalid byte
           "\"\xC3\"",              // truncated
           "\"\xE2\x82\"",          // truncated
           "\"\xE2\x28\xA1\"",      // bad continuation
       }) {
    EXPECT_THAT(ParseError(bad), HasSubstr("invalid UTF-8 in string at byte 1")) << bad;
  }
  EXPECT_THAT(ParseError("\"\xC3"), HasSubstr("invalid UTF-8"));  // truncated at end of input
}

TEST(JsonTest, KeysAreStringsLikeAnyOther) {
  EXPECT_THAT(ParseError("{\"\xC3\":1}"), HasSubstr("invalid UTF-8 in string at byte 2"));
  EXPECT_THAT(ParseError("{\"ok\":1,\"\xE2\x82\":2}"),
              HasSubstr("invalid UTF-8 in string at byte 9"));
  EXPECT_THAT(ParseError("{\"\xED\xA0\x80\":1}"), HasSubstr("invalid UTF-8 in string at byte 2"));
  EXPECT_THAT(ParseError("{\"a\tb\":1}"), HasSubstr("control character in string at byte 3"));
  EXPECT_THAT(ParseError(R"({"\uDC00":1})"), HasSubstr("lone low surrogate"));
  EXPECT_THAT(ParseError(R"({"\q":1})"), HasSubstr("invalid escape at byte 2"));
  Json json = ParseOk(R"({"\u00e9\n":1})");
  EXPECT_NE(json.Find("\xC3\xA9\n"), nullptr);
}

TEST(JsonTest, RejectsDuplicateKeysWithOffset) {
  EXPECT_THAT(ParseError(R"({"a":1,"a":2})"), HasSubstr("duplicate object key \"a\" at byte 7"));
  // The first repeat in document order is reported.
  EXPECT_THAT(ParseError(R"({"b":1,"a":1,"a":2,"b":2})"),
              HasSubstr("duplicate object key \"a\" at byte 13"));
  EXPECT_THAT(ParseError(R"({"x":{"k":1,"k":1}})"), HasSubstr("\"k\""));
  // Same key in different objects is fine.
  ParseOk(R"({"a":{"a":1},"b":{"a":2}})");
  // Keys that differ only after escape decoding are duplicates.
  EXPECT_THAT(ParseError(R"({"A":1,"\u0041":2})"), HasSubstr("duplicate object key"));
}

TEST(JsonTest, DuplicateKeyOffsetsSkipEscapedQuotes) {
  EXPECT_THAT(ParseError(R"({"a\"":1,"a\"":2})"), HasSubstr("at byte 9"));
  EXPECT_THAT(ParseError(R"({"\\":1,"\\":2})"), HasSubstr("at byte 8"));
  EXPECT_THAT(ParseError(R"({"\\\"":1,"\\\"":2})"), HasSubstr("at byte 10"));
  // Raw and escaped spellings of one code point are one key.
  EXPECT_THAT(ParseError("{\"\xC3\xA9\":1,\"\\u00e9\":2}"),
              HasSubstr("duplicate object key \"\\xc3\\xa9\" at byte 8"));
}

TEST(JsonTest, IntegersAreExactInInt64) {
  Json max = ParseOk("9223372036854775807");
  ASSERT_TRUE(max.is_int());
  EXPECT_EQ(max.as_int(), std::numeric_limits<int64_t>::max());
  Json min = ParseOk("-9223372036854775808");
  ASSERT_TRUE(min.is_int());
  EXPECT_EQ(min.as_int(), std::numeric_limits<int64_t>::min());
  // Adjacent values that doubles cannot tell apart stay distinct.
  EXPECT_EQ(ParseOk("9007199254740993").as_int(), int64_t{9007199254740993});

  Json zero = ParseOk("-0");
  ASSERT_TRUE(zero.is_int());
  EXPECT_EQ(zero.as_int(), 0);
}

TEST(JsonTest, NegativeZeroKeepsItsSignAsADouble) {
  EXPECT_TRUE(std::signbit(ParseOk("-0").as_double()));
  EXPECT_FALSE(std::signbit(ParseOk("0").as_double()));
}

TEST(JsonTest, IntegersBeyondInt64AreStillNumbers) {
  Json above = ParseOk("9223372036854775808");
  EXPECT_TRUE(above.is_number());
  EXPECT_FALSE(above.is_int());
  EXPECT_DOUBLE_EQ(above.as_double(), 9223372036854775808.0);
  Json below = ParseOk("-9223372036854775809");
  EXPECT_TRUE(below.is_number());
  EXPECT_FALSE(below.is_int());
  EXPECT_DOUBLE_EQ(below.as_double(), -9223372036854775808.0);
  Json huge = ParseOk("123456789012345678901234567890");
  EXPECT_FALSE(huge.is_int());
  EXPECT_DOUBLE_EQ(huge.as_double(), 1.2345678901234568e29);
}

TEST(JsonTest, IntegersBeyondUint64AndDouble) {
  Json uint64_max = ParseOk("18446744073709551615");
  EXPECT_FALSE(uint64_max.is_int());
  EXPECT_DOUBLE_EQ(uint64_max.as_double(), 18446744073709551615.0);
  Json above_uint64 = ParseOk("18446744073709551616");
  EXPECT_FALSE(above_uint64.is_int());
  EXPECT_DOUBLE_EQ(above_uint64.as_double(), 18446744073709551616.0);
  // Too large for a double, written without an exponent.
  const std::string digits = "1" + std::string(400, '0');
  EXPECT_THAT(ParseError(digits), HasSubstr("number out of the double range at byte 0"));
  EXPECT_THAT(ParseError(absl::StrCat("[1, -", digits, "]")),
              HasSubstr("number out of the double range at byte 4"));
}

TEST(JsonTest, FractionsAndExponentsAreNotInts) {
  EXPECT_FALSE(ParseOk("1.0").is_int());
  EXPECT_FALSE(ParseOk("1e2").is_int());
  EXPECT_TRUE(ParseOk("1.0").is_number());
  EXPECT_FALSE(ParseOk("\"1\"").is_int());
  EXPECT_FALSE(ParseOk("true").is_int());
}

TEST(JsonTest, UnderflowBecomesZero) {
  Json tiny = ParseOk("1e-400");
  EXPECT_EQ(tiny.as_double(), 0.0);
  Json negative_tiny = ParseOk("-0.0000001e-400");
  EXPECT_EQ(negative_tiny.as_double(), 0.0);
  EXPECT_TRUE(std::signbit(negative_tiny.as_double()));
  EXPECT_DOUBLE_EQ(ParseOk("4.9e-324").as_double(), 4.9e-324);
}

std::string Nested(int depth, char open, char close, absl::string_view inner) {
  std::string text;
  for (int i = 0; i < depth; ++i) text += open == '{' ? "{\"k\":" : std::string(1, open);
  absl::StrAppend(&text, inner);
  for (int i = 0; i < depth; ++i) text += close;
  return text;
}

TEST(JsonTest, NestingUpToTheLimitIsAccepted) {
  Json arrays = ParseOk(Nested(Json::kMaxDepth, '[', ']', "1"));
  const Json* cursor = &arrays;
  for (int i = 0; i < Json::kMaxDepth; ++i) {
    ASSERT_TRUE(cursor->is_array());
    cursor = &cursor->as_array()[0];
  }
  EXPECT_EQ(cursor->as_int(), 1);
  ParseOk(Nested(Json::kMaxDepth, '{', '}', "null"));
}

TEST(JsonTest, NestingBeyondTheLimitIsRejected) {
  EXPECT_THAT(ParseError(Nested(Json::kMaxDepth + 1, '[', ']', "1")),
              HasSubstr(absl::StrCat("nesting deeper than the limit at byte ", Json::kMaxDepth)));
  EXPECT_THAT(ParseError(Nested(Json::kMaxDepth + 1, '{', '}', "1")), HasSubstr("nesting"));
  // Far deeper than any stack would allow with unbounded recursion.
  EXPECT_THAT(ParseError(std::string(1'000'000, '[')), HasSubstr("nesting"));
}

TEST(JsonTest, NestingDepthCountsOnlyTheOpenValues) {
  // Two siblings, each reaching the limit exactly.
  const std::string siblings = absl::StrCat("[", Nested(Json::kMaxDepth - 1, '{', '}', "1"), ",",
                                            Nested(Json::kMaxDepth - 1, '[', ']', "2"), "]");
  Json json = ParseOk(siblings);
  ASSERT_TRUE(json.is_array());
  EXPECT_EQ(json.as_array().size(), 2u);
  // One level more in the second, with an object.
  const std::string deeper = absl::StrCat("[", Nested(Json::kMaxDepth - 1, '{', '}', "1"), ",",
                                          Nested(Json::kMaxDepth - 1, '[', ']', "{}"), "]");
  EXPECT_THAT(ParseError(deeper), HasSubstr(absl::StrCat("nesting deeper than the limit at byte ",
                                                         deeper.rfind("{}"))));
}

TEST(JsonTest, TypeNames) {
  EXPECT_EQ(Json::TypeName(ParseOk("null").type()), "null");
  EXPECT_EQ(Json::TypeName(ParseOk("true").type()), "bool");
  EXPECT_EQ(Json::TypeName(ParseOk("1").type()), "number");
  EXPECT_EQ(Json::TypeName(ParseOk("\"s\"").type()), "string");
  EXPECT_EQ(Json::TypeName(ParseOk("[]").type()), "array");
  EXPECT_EQ(Json::TypeName(ParseOk("{}").type()), "object");
}

// One to four random edits of `base`: a byte replaced by any byte or by one of the grammar's
// characters, a run of up to 8 bytes erased, or a grammar character inserted.
std::string Mutated(const std::string& base, std::mt19937& rng) {
  static const std::string kAlphabet = "{}[]\",:\\u0123456789.eE+-tfn \x80\xC3\xED\xF4\xFF";
  std::string text = base;
  const int edits = 1 + static_cast<int>(rng() % 4);
  for (int e = 0; e < edits && !text.empty(); ++e) {
    const size_t pos = rng() % text.size();
    switch (rng() % 4) {
      case 0:
        text[pos] = static_cast<char>(rng() & 0xFF);
        break;
      case 1:
        text[pos] = kAlphabet[rng() % kAlphabet.size()];
        break;
      case 2:
        text.erase(pos, 1 + rng() % 8);
        break;
      case 3:
        text.insert(pos, 1, kAlphabet[rng() % kAlphabet.size()]);
        break;
    }
  }
  return text;
}

// Random byte edits of a valid document: the parser must return (either way) without crashing,
// and every error must carry a byte offset.
TEST(JsonTest, RandomMutationsNeverCrash) {
  const std::string base = R"({"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 12],
    "s": "\u00e9\uD83D\uDE00 \" \\", "n": [-0.5e-3, 1E+10, 9223372036854775807, true, false,
    null], "nested": {"a": [[[]]], "b": {}}, "utf8": ")"
                           "\xC3\xA9\xE2\x82\xAC\"}";
  ASSERT_TRUE(Json::Parse(base).ok());
  std::mt19937 rng(20240611);
  int accepted = 0;
  for (int iteration = 0; iteration < 20000; ++iteration) {
    const std::string text = Mutated(base, rng);
    absl::StatusOr<Json> json = Json::Parse(text);
    if (json.ok()) {
      ++accepted;
    } else {
      EXPECT_THAT(json.status().message(), HasSubstr("at byte ")) << text;
    }
  }
  EXPECT_GT(accepted, 0);
}

// Records the events as text: "{", "k:a", "s:x", "n:1" (an int), "d:1.5", "b:true", "null",
// "[", "]", "}".
class EventLog final : public JsonEvents {
 public:
  std::vector<std::string> log;
  // Stops the parse with this status at the first string equal to `stop_at`.
  std::string stop_at;

  absl::Status Null() override { return Log("null"); }
  absl::Status Bool(bool value) override { return Log(value ? "b:true" : "b:false"); }
  absl::Status Number(bool is_int, int64_t as_int, double as_double) override {
    return Log(is_int ? absl::StrCat("n:", as_int) : absl::StrCat("d:", as_double));
  }
  absl::Status String(std::string&& value) override {
    if (!stop_at.empty() && value == stop_at) {
      return absl::FailedPreconditionError(absl::StrCat("stopped at ", value));
    }
    return Log("s:" + value);
  }
  absl::Status StartObject() override { return Log("{"); }
  absl::Status Key(std::string&& key) override { return Log("k:" + key); }
  absl::Status EndObject() override { return Log("}"); }
  absl::Status StartArray() override { return Log("["); }
  absl::Status EndArray() override { return Log("]"); }

 private:
  absl::Status Log(std::string event) {
    log.push_back(std::move(event));
    return absl::OkStatus();
  }
};

TEST(JsonEventsTest, HandsEveryValueOverInDocumentOrder) {
  EventLog events;
  ASSERT_TRUE(
      ParseJsonEvents(R"({"a": [1, -2, 1.5, "x"], "b": {"c": null, "d": true}})", events).ok());
  EXPECT_THAT(events.log,
              ::testing::ElementsAre("{", "k:a", "[", "n:1", "n:-2", "d:1.5", "s:x", "]", "k:b",
                                     "{", "k:c", "null", "k:d", "b:true", "}", "}"));
}

// The strictness and wording are Json::Parse's; a handler's error comes back unchanged.
TEST(JsonEventsTest, RefusesWhatParseRefusesAndPassesTheHandlersErrorOn) {
  for (const char* text : {R"({"a": 1, "a": 2})", "[1,]", "\xEF\xBB\xBF[]", "[1] 2"}) {
    EventLog events;
    const absl::Status status = ParseJsonEvents(text, events);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_EQ(status.message(), Json::Parse(text).status().message()) << text;
  }
  EventLog events;
  events.stop_at = "here";
  const absl::Status status = ParseJsonEvents(R"(["x", "here", "y"])", events);
  EXPECT_EQ(status, absl::FailedPreconditionError("stopped at here"));
  EXPECT_THAT(events.log, ::testing::ElementsAre("[", "s:x"));
}

// Reads a text with ParseJsonEvents and keeps which reader gave the events, and the status.
struct RecordingReader {
  JsonReader reader = JsonReader::kAuto;
  absl::Status status;
  bool Read(absl::string_view text, JsonReader choice = JsonReader::kFast) {
    testing::RecordedJsonEvents events;
    status = ParseJsonEvents(text, events, {.reader = choice, .reader_used = &reader});
    return status.ok();
  }
};

// simdjson's reader and the reference agree, event for event and error for error, on every
// corner of the grammar (tests/testing/json_readers.h), with repeated keys refused or not, and
// with simdjson's reader taking the text whole or in runs of 1 to 8 bytes (cut at every comma
// between the top-level value's members, or every few).
void ExpectReadersAgree(absl::string_view text) {
  for (const bool unique_keys : {true, false}) {
    for (const size_t run_bytes : {size_t{1} << 20, size_t{1}, size_t{3}, size_t{8}}) {
      EXPECT_EQ(testing::CompareJsonReaders(text, unique_keys, run_bytes), "")
          << QuoteUntrusted(text) << " unique_keys=" << unique_keys << " run_bytes=" << run_bytes;
    }
  }
}

TEST(JsonReadersTest, AgreeOnTheCornersOfTheGrammar) {
  const auto expect_agree = [](const std::vector<std::string>& texts) {
    for (const std::string& text : texts) ExpectReadersAgree(text);
  };
  // clang-format off
  // Numbers: the sign of zero, the edges of int64 and uint64, underflow and overflow.
  expect_agree({"0", "-0", "[-0]", "[-0,1]", "-0.0", "-0e0", "[-0.5]", "[\"-0\"]", "1e-400",
                "-1e-400", "1e400", "-1e400", "1.7976931348623157e308", "1.7976931348623159e308",
                "4.9e-324", "2.4e-324", "0.1", "9223372036854775807", "9223372036854775808",
                "-9223372036854775808", "-9223372036854775809", "18446744073709551615",
                "18446744073709551616", "123456789012345678901234567890",
                "1.00000000000000011102230246251565404236316680908203125", "01", "-", "1.", ".5",
                "1e", "1e+", "+1", "0x10", "1E2", "[1.5e-3, 2E+10]", "NaN", "Infinity",
                "-Infinity"});
  // Strings: escapes, surrogates, control characters, UTF-8.
  expect_agree({R"("\u00e9\uD83D\uDE00 \" \\ \/ \b\f\n\r\t")", R"("\ud800")", R"("\udc00")",
                R"("\ud800\u0041")", R"("\uD83D\uDE00")", R"("\u0000")", R"("\x")", R"("\u12")",
                R"("\u12G4")", "\"a\x01\"", "\"a\x1f\"", "\"a\x7f\"", "\"\x80\"", "\"\xC0\x80\"",
                "\"\xED\xA0\x80\"", "\"\xF4\x90\x80\x80\"",
                "\"\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\"", "\"\xE2\x82\"", "\"abc", "\""});
  // Structure.
  expect_agree({"[1,]", R"({"a":1,})", R"({"a" 1})", "[1 2]", "[1] 2", "[1] x", "{} ",
                " \t\r\n{}\n", "", " ", "[", "]", "{", "}", R"({"a":})", R"({:1})", R"({1:1})",
                "[,]", "[[]]]", "[[]", std::string("{}\0", 3), std::string("[\0]", 3),
                "\xEF\xBB\xBF{}", "\xEF[]"});
  // Cuts between the top-level members: stray commas, a sign of zero or an error after the
  // first run (the reference reads on from there).
  expect_agree({"[1,,2]", "[1,2,]", "[,1]", R"({"a":1,,"b":2})", R"({,"a":1})",
                R"({"a":1,"b":2,})", "[1,2] ,", "[1,2,-0]", "[1,2,-0,3]", "[1,2,[-0],4]",
                "[1,2,3,x]", "[1,2,3", R"({"a":1,"b")", "[1, 2 , 3 ]  ",
                R"([1,"a,b",{"c":[1,2],"d":"]"},"\\",",2])", R"({"a":1,"b":{"x":1,"x":2}})",
                R"({"a":1,"b":2,"a":3})"});
  // Repeated keys, in the same object and in different ones.
  expect_agree({R"({"a":1,"a":2})", R"({"a":{"a":1},"b":{"a":2}})", R"({"a":1,"\u0061":2})",
                R"([{"k":1},{"k":1}])"});
  // Literals, and whole documents.
  expect_agree({"true", "false", "null", "tru", "nul", "nulll", "True", "[true,false,null]",
                "truex",
                R"({"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 12],)"
                R"( "__metadata__": {"format": "pt"}})",
                R"({"metadata": {"total_size": 10},)"
                R"( "weight_map": {"a.weight": "model-00001.safetensors"}})"});
  // clang-format on
  // Nesting at the limit and one beyond, in arrays and objects.
  for (const int depth : {Json::kMaxDepth - 1, Json::kMaxDepth, Json::kMaxDepth + 1}) {
    ExpectReadersAgree(std::string(depth, '[') + std::string(depth, ']'));
    std::string objects;
    for (int i = 0; i < depth; ++i) objects += "{\"a\":";
    objects += "1" + std::string(depth, '}');
    ExpectReadersAgree(objects);
  }
}

// Byte edits of a valid document (Mutated): the readers agree
// on every one, and simdjson's gives the events of most that are valid.
TEST(JsonReadersTest, AgreeOnMutatedDocuments) {
  const std::string base = R"({"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 12],
    "s": "\u00e9\uD83D\uDE00 \" \\", "n": [-0.5e-3, 1E+10, 9223372036854775807, true, false,
    null, -1, 0], "nested": {"a": [[[]]], "b": {}}, "k": 1, "utf8": ")"
                           "\xC3\xA9\xE2\x82\xAC\"}";
  std::mt19937 rng(20261203);
  int fast_valid = 0, reference_valid = 0;
  for (int iteration = 0; iteration < 5000; ++iteration) {
    const std::string text = Mutated(base, rng);
    ASSERT_EQ(testing::CompareJsonReaders(text, /*unique_keys=*/iteration % 2 == 0,
                                          /*run_bytes=*/1 + iteration % 40),
              "")
        << QuoteUntrusted(text);
    RecordingReader used;
    if (used.Read(text)) {
      ++reference_valid;
      fast_valid += used.reader == JsonReader::kFast;
    }
  }
  EXPECT_GT(reference_valid, 100);
  EXPECT_GT(fast_valid, reference_valid / 2);
}

TEST(JsonReadersTest, LargeTextsAreReadBySimdjsonAndTheSignOfZeroByTheReference) {
  std::string header = "{";
  for (int i = 0; header.size() < kJsonFastReaderMinBytes; ++i) {
    absl::StrAppend(&header, i == 0 ? "" : ",", "\"model.layers.", i,
                    ".weight\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[", 8 * i, ",",
                    8 * i + 8, "]}");
  }
  header += "}";
  RecordingReader used;
  ASSERT_TRUE(used.Read(header, JsonReader::kAuto));
  EXPECT_EQ(used.reader, JsonReader::kFast);
  // Below the size, the reference reads it.
  ASSERT_TRUE(used.Read(R"({"a":1})", JsonReader::kAuto));
  EXPECT_EQ(used.reader, JsonReader::kReference);
  // simdjson's tape keeps no sign of an integer zero, so a text that may hold -0 goes to the
  // reference, which keeps it in the double value.
  header.back() = ',';
  header += "\"z\":[-0]}";
  ASSERT_TRUE(used.Read(header, JsonReader::kAuto));
  EXPECT_EQ(used.reader, JsonReader::kReference);
  // A text simdjson refuses is refused with the reference's words.
  header.back() = ',';
  header += "}";
  EXPECT_FALSE(used.Read(header, JsonReader::kAuto));
  EXPECT_EQ(used.reader, JsonReader::kReference);
  EXPECT_EQ(used.status.message(), Json::Parse(header).status().message());
}

}  // namespace
}  // namespace tileplan
