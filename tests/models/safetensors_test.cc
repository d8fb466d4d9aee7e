#include "models/safetensors.h"

#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/json.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/models/safetensors_builder.h"

namespace tileplan::models {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::tileplan::testing::BF16Bytes;
using ::tileplan::testing::BuildSafetensors;
using ::tileplan::testing::F16Bits;
using ::tileplan::testing::F32Bytes;
using ::tileplan::testing::ImageFromHeader;
using ::tileplan::testing::MakeTempDir;
using ::tileplan::testing::TestTensor;
using ::tileplan::testing::WriteFile;

absl::StatusOr<std::unique_ptr<SafetensorsFile>> Parse(const std::string& image) {
  return SafetensorsFile::FromBuffer(reinterpret_cast<const std::byte*>(image.data()), image.size(),
                                     "test.safetensors");
}

std::string ParseError(const std::string& image) {
  auto file = Parse(image);
  EXPECT_FALSE(file.ok()) << "accepted image of " << image.size() << " bytes";
  if (file.ok()) return "";
  EXPECT_THAT(file.status().message(), HasSubstr("test.safetensors")) << "error names the file";
  return std::string(file.status().message());
}

// An image whose header is one tensor entry `entry` (JSON text) named "w", over `data_bytes`
// zero bytes of data.
std::string OneEntry(absl::string_view entry, size_t data_bytes = 16) {
  return ImageFromHeader(absl::StrCat("{\"w\":", entry, "}"), std::string(data_bytes, '\0'));
}

std::vector<TestTensor> SampleTensors() {
  return {
      {"model.embed.weight", "F32", {2, 2}, F32Bytes({1.0f, -2.0f, 0.5f, 3.25f})},
      {"model.norm.weight", "BF16", {3}, BF16Bytes({1.0f, -0.5f, 256.0f})},
      {"lm_head.weight", "F16", {2}, F16Bits({0x3C00, 0xC000})},
  };
}

TEST(StDTypeTest, NamesAndSizesRoundTrip) {
  const std::vector<std::pair<std::string, int64_t>> expected = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"I64", 8}, {"U64", 8},     {"F64", 8}};
  for (const auto& [name, size] : expected) {
    absl::StatusOr<StDType> dtype = ParseStDType(name);
    ASSERT_TRUE(dtype.ok()) << name;
    EXPECT_EQ(StDTypeName(*dtype), name);
    EXPECT_EQ(StDTypeSize(*dtype), size) << name;
  }
  EXPECT_FALSE(ParseStDType("bf16").ok());
  EXPECT_FALSE(ParseStDType("F128").ok());
}

TEST(SafetensorsTest, ParsesValidImage) {
  const std::string image = BuildSafetensors(SampleTensors(), {{"format", "pt"}});
  auto file = Parse(image);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->label(), "test.safetensors");
  std::vector<std::string> names;
  for (const auto& [name, view] : (*file)->tensors()) names.push_back(name);
  EXPECT_THAT(names, ElementsAre("lm_head.weight", "model.embed.weight", "model.norm.weight"));
  EXPECT_EQ((*file)->metadata().at("format"), "pt");

  const TensorView* embed = (*file)->Find("model.embed.weight");
  ASSERT_NE(embed, nullptr);
  EXPECT_EQ(embed->name, "model.embed.weight");
  EXPECT_EQ(embed->dtype, StDType::kF32);
  EXPECT_THAT(embed->shape, ElementsAre(2, 2));
  EXPECT_EQ(embed->nbytes, 16u);
  EXPECT_EQ(embed->num_elements(), 4);
  const std::byte* base = reinterpret_cast<const std::byte*>(image.data());
  EXPECT_GE(embed->data, base);
  EXPECT_LE(embed->data + embed->nbytes, base + image.size());
  absl::StatusOr<std::vector<float>> values = ToFloat32(*embed);
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_THAT(*values, ElementsAre(1.0f, -2.0f, 0.5f, 3.25f));

  values = ToFloat32(*(*file)->Find("model.norm.weight"));
  ASSERT_TRUE(values.ok());
  EXPECT_THAT(*values, ElementsAre(1.0f, -0.5f, 256.0f));
  values = ToFloat32(*(*file)->Find("lm_head.weight"));
  ASSERT_TRUE(values.ok());
  EXPECT_THAT(*values, ElementsAre(1.0f, -2.0f));
  EXPECT_EQ((*file)->Find("missing"), nullptr);
}

TEST(SafetensorsTest, OpensFileFromDisk) {
  const std::filesystem::path dir = MakeTempDir("disk");
  const std::filesystem::path path = dir / "weights.safetensors";
  WriteFile(path, BuildSafetensors(SampleTensors()));
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->label(), path.string());
  EXPECT_EQ((*file)->tensors().size(), 3u);
  EXPECT_TRUE((*file)->metadata().empty());
  absl::StatusOr<std::vector<float>> values = ToFloat32(*(*file)->Find("model.embed.weight"));
  ASSERT_TRUE(values.ok());
  EXPECT_THAT(*values, ElementsAre(1.0f, -2.0f, 0.5f, 3.25f));
}

TEST(SafetensorsTest, OpenReportsMissingAndNonRegularFiles) {
  const std::filesystem::path dir = MakeTempDir("missing");
  auto missing = SafetensorsFile::Open(dir / "nope.safetensors");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("nope.safetensors"));
  auto directory = SafetensorsFile::Open(dir);
  ASSERT_FALSE(directory.ok());
  EXPECT_THAT(directory.status().message(), HasSubstr("not a regular file"));
  const std::filesystem::path fifo = dir / "fifo.safetensors";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto pipe = SafetensorsFile::Open(fifo);
  ASSERT_FALSE(pipe.ok());
  EXPECT_THAT(pipe.status().message(), HasSubstr("not a regular file"));
}

TEST(SafetensorsTest, EmptyAndScalarTensorsAreFine) {
  const std::string image = BuildSafetensors({
      {"empty", "F32", {0, 4}, ""},
      {"scalar", "F32", {}, F32Bytes({7.0f})},
      {"also_empty", "BF16", {3, 0}, ""},
  });
  auto file = Parse(image);
  ASSERT_TRUE(file.ok()) << file.status();
  const TensorView* empty = (*file)->Find("empty");
  EXPECT_EQ(empty->nbytes, 0u);
  EXPECT_EQ(empty->num_elements(), 0);
  absl::StatusOr<std::vector<float>> values = ToFloat32(*empty);
  ASSERT_TRUE(values.ok());
  EXPECT_TRUE(values->empty());
  const TensorView* scalar = (*file)->Find("scalar");
  EXPECT_EQ(scalar->num_elements(), 1);
  EXPECT_THAT(*ToFloat32(*scalar), ElementsAre(7.0f));

  // An empty tensor placed inside another tensor's range occupies no bytes: no overlap.
  auto inside = Parse(ImageFromHeader(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                      R"("b":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})",
                                      std::string(8, '\0')));
  EXPECT_TRUE(inside.ok()) << inside.status();
}

TEST(SafetensorsTest, RejectsTruncatedFile) {
  for (size_t size = 0; size < 8; ++size) {
    EXPECT_THAT(ParseError(std::string(size, '\0')), HasSubstr("shorter than the 8-byte header"));
  }
  const std::filesystem::path dir = MakeTempDir("truncated");
  for (size_t size : {0, 5}) {
    const std::filesystem::path path = dir / absl::StrCat("short", size, ".safetensors");
    WriteFile(path, std::string(size, 'x'));
    auto file = SafetensorsFile::Open(path);
    ASSERT_FALSE(file.ok());
    EXPECT_THAT(file.status().message(), HasSubstr("shorter than the 8-byte header"));
    EXPECT_THAT(file.status().message(), HasSubstr(path.string()));
  }
  // A valid file cut anywhere inside its header or data is rejected.
  const std::string image = BuildSafetensors(SampleTensors());
  for (size_t size = 8; size < image.size(); ++size) {
    EXPECT_FALSE(Parse(image.substr(0, size)).ok()) << size;
  }
}

TEST(SafetensorsTest, RejectsHeaderLengthBeyondFile) {
  std::string image = BuildSafetensors(SampleTensors());
  const uint64_t past_end = image.size() - 8 + 1;
  for (int i = 0; i < 8; ++i) image[i] = static_cast<char>((past_end >> (8 * i)) & 0xFF);
  EXPECT_THAT(ParseError(image), HasSubstr(absl::StrCat("header length ", past_end,
                                                        " runs past the end of the file")));

  std::string absurd = image;
  absurd[5] = 1;  // 2^40 + ...
  EXPECT_THAT(ParseError(absurd), HasSubstr("exceeds the limit"));
  std::string all_ones = image;
  for (int i = 0; i < 8; ++i) all_ones[i] = static_cast<char>(0xFF);
  EXPECT_THAT(ParseError(all_ones), HasSubstr("exceeds the limit"));
}

TEST(SafetensorsTest, RejectsHeaderThatIsNotAJsonObject) {
  EXPECT_THAT(ParseError(ImageFromHeader("{\"w\": ", "")), HasSubstr("header is not valid JSON"));
  EXPECT_THAT(ParseError(ImageFromHeader("{} trailing", "")),
              HasSubstr("header is not valid JSON"));
  EXPECT_THAT(ParseError(ImageFromHeader("[1, 2]", "")), HasSubstr("header is a JSON array"));
  EXPECT_THAT(ParseError(ImageFromHeader("", "")), HasSubstr("header is not valid JSON"));
  EXPECT_THAT(ParseError(ImageFromHeader("{\"\xFF\": 1}", "")), HasSubstr("invalid UTF-8"));
  // Duplicate tensor names are duplicate JSON keys.
  EXPECT_THAT(ParseError(ImageFromHeader(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                                         R"("w":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                                         "ab")),
              HasSubstr("duplicate object key \"w\""));
  // The empty object is a valid (if useless) file.
  EXPECT_TRUE(Parse(ImageFromHeader("{}", "")).ok());
}

TEST(SafetensorsTest, RejectsMalformedEntries) {
  EXPECT_THAT(ParseError(OneEntry("1")), HasSubstr("tensor \"w\": entry is a number"));
  EXPECT_THAT(ParseError(OneEntry("[]")),
              HasSubstr("tensor \"w\": entry is an array, not an object"));
  EXPECT_THAT(ParseError(OneEntry(R"({"shape":[4],"data_offsets":[0,16]})")),
              HasSubstr("tensor \"w\": missing field \"dtype\""));
  EXPECT_THAT(ParseError(OneEntry(R"({"dtype":"F32","data_offsets":[0,16]})")),
              HasSubstr("missing field \"shape\""));
  EXPECT_THAT(ParseError(OneEntry(R"({"dtype":"F32","shape":[4]})")),
              HasSubstr("missing field \"data_offsets\""));
  EXPECT_THAT(ParseError(OneEntry(R"({"dtype":"F32","shape":[4],"data_offsets":[0,16],"x":1})")),
              HasSubstr("tensor \"w\": unexpected field \"x\""));
}

// The header is read as JSON events into the entries (no JSON tree): repeated keys at every
// level, values of the wrong type nested in any depth, and a shape of more dims than any tensor
// has are refused, each naming the tensor.
TEST(SafetensorsTest, ReadsTheHeaderAsEvents) {
  EXPECT_THAT(
      ParseError(OneEntry(R"({"dtype":"F32","dtype":"F32","shape":[4],"data_offsets":[0,16]})")),
      HasSubstr("header is not valid JSON: duplicate object key \"dtype\""));
  EXPECT_THAT(ParseError(ImageFromHeader(R"({"__metadata__":{"a":"x","a":"y"}})", "")),
              HasSubstr("duplicate object key \"a\""));
  EXPECT_THAT(ParseError(ImageFromHeader(R"({"__metadata__":{},"__metadata__":{}})", "")),
              HasSubstr("duplicate object key \"__metadata__\""));
  EXPECT_THAT(ParseError(OneEntry(R"({"dtype":{"a":[1]},"shape":[4],"data_offsets":[0,16]})")),
              HasSubstr("tensor \"w\": \"dtype\" is not a string"));
  EXPECT_THAT(ParseError(OneEntry(R"({"dtype":"F32","shape":[4],"data_offsets":[[0],{"x":16}]})")),
              HasSubstr("\"data_offsets\" entries must be non-negative integers"));
  EXPECT_THAT(ParseError(OneEntry(R"({"dtype":"F32","shape":[4],"data_offsets":[0,16,[1,2]]})")),
              HasSubstr("\"data_offsets\" is not an array of two integers"));
  std::string dims = "[1";
  for (int i = 1; i < 65; ++i) dims += ",1";
  EXPECT_THAT(
      ParseError(OneEntry(
          absl::StrCat(R"({"dtype":"F32","shape":)", dims, R"(],"data_offsets":[0,4]})"), 4)),
      HasSubstr("tensor \"w\": \"shape\" has more than 64 dims"));
  // An absurdly long "data_offsets" is refused as it is read (the parse stops there, before
  // the bad dtype that a short one lets ViewOf name first).
  std::string offsets = "[0";
  for (int i = 1; i < 100; ++i) offsets += ",1";
  EXPECT_THAT(ParseError(OneEntry(
                  absl::StrCat(R"({"shape":[4],"data_offsets":)", offsets, R"(],"dtype":"F99"})"))),
              HasSubstr("tensor \"w\": \"data_offsets\" is not an array of two integers"));
  EXPECT_THAT(ParseError(OneEntry(R"({"shape":[4],"data_offsets":[0,16,1],"dtype":"F99"})")),
              HasSubstr("tensor \"w\": \"dtype\""));
  // 64 dims are fine.
  dims = "[1";
  for (int i = 1; i < 64; ++i) dims += ",1";
  EXPECT_TRUE(Parse(ImageFromHeader(absl::StrCat(R"({"w":{"dtype":"F32","shape":)", dims,
                                                 R"(],"data_offsets":[0,4]}})"),
                                    std::string(4, '\0')))
                  .ok());
}

TEST(SafetensorsTest, RejectsUnknownDType) {
  EXPECT_THAT(ParseError(OneEntry(R"({"dtype":"F128","shape":[1],"data_offsets":[0,16]})")),
              HasSubstr("tensor \"w\": \"dtype\": unknown safetensors dtype \"F128\""));
  EXPECT_THAT(ParseError(OneEntry(R"({"dtype":4,"shape":[1],"data_offsets":[0,4]})")),
              HasSubstr("\"dtype\" is not a string"));
}

TEST(SafetensorsTest, RejectsBadShapes) {
  EXPECT_THAT(ParseError(OneEntry(R"({"dtype":"F32","shape":4,"data_offsets":[0,16]})")),
              HasSubstr("\"shape\" is not an array"));
  for (const char* shape :
       {"[-1]", "[1.5]", "[\"4\"]", "[null]", "[9223372036854775808]", "[[4]]"}) {
    EXPECT_THAT(ParseError(OneEntry(absl::StrCat(R"({"dtype":"F32","shape":)", shape,
                                                 R"(,"data_offsets":[0,16]})"))),
                HasSubstr("tensor \"w\": \"shape\" has an entry that is not a non-negative"))
        << shape;
  }
}

TEST(SafetensorsTest, RejectsShapesThatOverflow) {
  for (const char* shape : {"[4294967296,4294967296]", "[4611686018427387904,2]",
                            "[2305843009213693952]", "[9223372036854775807,2,0]"}) {
    // The last one has a zero extent but overflows before it is reached: still refused, since
    // the checked product is taken left to right.
    std::string message = ParseError(
        OneEntry(absl::StrCat(R"({"dtype":"F32","shape":)", shape, R"(,"data_offsets":[0,16]})")));
    EXPECT_THAT(message, HasSubstr("tensor \"w\": \"shape\" size in bytes overflows int64"))
        << shape;
  }
}

TEST(SafetensorsTest, RejectsBadDataOffsets) {
  for (const char* offsets : {"16", "[0]", "[0,8,16]", "\"0,16\""}) {
    EXPECT_THAT(ParseError(OneEntry(
                    absl::StrCat(R"({"dtype":"F32","shape":[4],"data_offsets":)", offsets, "}"))),
                HasSubstr("\"data_offsets\" is not an array of two integers"))
        << offsets;
  }
  for (const char* offsets : {"[-1,15]", "[0,16.0]", "[0,null]", "[0,18446744073709551616]"}) {
    EXPECT_THAT(ParseError(OneEntry(
                    absl::StrCat(R"({"dtype":"F32","shape":[4],"data_offsets":)", offsets, "}"))),
                HasSubstr("\"data_offsets\" entries must be non-negative integers"))
        << offsets;
  }
  EXPECT_THAT(ParseError(OneEntry(R"({"dtype":"F32","shape":[0],"data_offsets":[8,4]})")),
              HasSubstr("begin 8 exceeds end 4"));
}

TEST(SafetensorsTest, RejectsDTypeSizeMismatch) {
  EXPECT_THAT(
      ParseError(OneEntry(R"({"dtype":"F32","shape":[2],"data_offsets":[0,4]})")),
      HasSubstr("tensor \"w\": shape [2] of F32 needs 8 bytes but \"data_offsets\" span 4"));
  EXPECT_THAT(ParseError(OneEntry(R"({"dtype":"BF16","shape":[2,2],"data_offsets":[0,16]})")),
              HasSubstr("needs 8 bytes"));
}

TEST(SafetensorsTest, RejectsOffsetsOutsideData) {
  EXPECT_THAT(ParseError(OneEntry(R"({"dtype":"F32","shape":[4],"data_offsets":[4,20]})", 16)),
              HasSubstr("tensor \"w\": \"data_offsets\" [4, 20] run past the data section of 16"));
  EXPECT_THAT(ParseError(OneEntry(R"({"dtype":"F32","shape":[0],"data_offsets":[17,17]})", 16)),
              HasSubstr("run past the data section"));
  EXPECT_THAT(
      ParseError(OneEntry(
          R"({"dtype":"U8","shape":[1],"data_offsets":[9223372036854775806,9223372036854775807]})",
          16)),
      HasSubstr("run past the data section"));
}

TEST(SafetensorsTest, RejectsOverlappingRanges) {
  EXPECT_THAT(
      ParseError(ImageFromHeader(R"({"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]},)"
                                 R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                                 std::string(12, '\0'))),
      HasSubstr("tensor \"b\": \"data_offsets\" overlap those of tensor \"a\""));
  // Identical ranges overlap too.
  EXPECT_THAT(ParseError(ImageFromHeader(R"({"x":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                                         R"("y":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})",
                                         std::string(4, '\0'))),
              HasSubstr("tensor \"y\": \"data_offsets\" overlap those of tensor \"x\""));
  // Adjacent ranges do not.
  EXPECT_TRUE(Parse(ImageFromHeader(R"({"x":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                                    R"("y":{"dtype":"I32","shape":[1],"data_offsets":[4,8]}})",
                                    std::string(8, '\0')))
                  .ok());
}

TEST(SafetensorsTest, RejectsBadMetadata) {
  EXPECT_THAT(ParseError(ImageFromHeader(R"({"__metadata__":[]})", "")),
              HasSubstr("\"__metadata__\" is not an object of strings"));
  EXPECT_THAT(ParseError(ImageFromHeader(R"({"__metadata__":{"format":"pt","n":1}})", "")),
              HasSubstr("\"__metadata__\" entry \"n\" is not a string"));
}

TEST(ToFloat32Test, ConvertsHalfPrecisionExactly) {
  const std::vector<uint16_t> bits = {0x0000, 0x8000, 0x0001, 0x03FF, 0x0400, 0x3C00,
                                      0xC000, 0x7BFF, 0x3555, 0x7C00, 0xFC00, 0x8001};
  const std::string bytes = F16Bits(bits);
  TensorView view{"h",
                  StDType::kF16,
                  {static_cast<int64_t>(bits.size())},
                  reinterpret_cast<const std::byte*>(bytes.data()),
                  bytes.size()};
  absl::StatusOr<std::vector<float>> values = ToFloat32(view);
  ASSERT_TRUE(values.ok()) << values.status();
  const std::vector<float>& v = *values;
  EXPECT_EQ(v[0], 0.0f);
  EXPECT_FALSE(std::signbit(v[0]));
  EXPECT_EQ(v[1], 0.0f);
  EXPECT_TRUE(std::signbit(v[1]));
  EXPECT_EQ(v[2], std::ldexp(1.0f, -24));     // smallest subnormal
  EXPECT_EQ(v[3], std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_EQ(v[4], std::ldexp(1.0f, -14));     // smallest normal
  EXPECT_EQ(v[5], 1.0f);
  EXPECT_EQ(v[6], -2.0f);
  EXPECT_EQ(v[7], 65504.0f);                           // largest finite
  EXPECT_EQ(v[8], 0x555 * std::ldexp(1.0f, -10 - 2));  // 0.333251953125
  EXPECT_EQ(v[9], std::numeric_limits<float>::infinity());
  EXPECT_EQ(v[10], -std::numeric_limits<float>::infinity());
  EXPECT_EQ(v[11], -std::ldexp(1.0f, -24));
}

TEST(ToFloat32Test, HalfNaNsStayNaN) {
  const std::string bytes = F16Bits({0x7E00, 0x7C01, 0xFFFF});
  TensorView view{
      "nan", StDType::kF16, {3}, reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()};
  absl::StatusOr<std::vector<float>> values = ToFloat32(view);
  ASSERT_TRUE(values.ok());
  for (float f : *values) EXPECT_TRUE(std::isnan(f));
}

TEST(ToFloat32Test, ConvertsBFloat16) {
  const std::string bytes = F16Bits({0x3F80, 0xC040, 0x7F80, 0x0001, 0x8000});
  TensorView view{
      "b", StDType::kBF16, {5}, reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()};
  absl::StatusOr<std::vector<float>> values = ToFloat32(view);
  ASSERT_TRUE(values.ok());
  EXPECT_EQ((*values)[0], 1.0f);
  EXPECT_EQ((*values)[1], -3.0f);
  EXPECT_EQ((*values)[2], std::numeric_limits<float>::infinity());
  EXPECT_EQ((*values)[3], std::ldexp(1.0f, -133));  // bf16 subnormal
  EXPECT_TRUE(std::signbit((*values)[4]));
}

TEST(ToFloat32Test, ReadsUnalignedData) {
  const std::string bytes = "x" + F32Bytes({1.5f, -4.0f});
  TensorView view{"u", StDType::kF32, {2}, reinterpret_cast<const std::byte*>(bytes.data()) + 1, 8};
  EXPECT_THAT(*ToFloat32(view), ElementsAre(1.5f, -4.0f));
}

TEST(ToFloat32Test, RefusesOtherDTypesAndInconsistentViews) {
  const std::string bytes(8, '\0');
  TensorView ints{"ids", StDType::kI32, {2}, reinterpret_cast<const std::byte*>(bytes.data()), 8};
  absl::StatusOr<std::vector<float>> values = ToFloat32(ints);
  ASSERT_FALSE(values.ok());
  EXPECT_THAT(values.status().message(), HasSubstr("tensor \"ids\": dtype I32 cannot be"));

  TensorView short_view{
      "s", StDType::kF32, {3}, reinterpret_cast<const std::byte*>(bytes.data()), 8};
  values = ToFloat32(short_view);
  ASSERT_FALSE(values.ok());
  EXPECT_THAT(values.status().message(), HasSubstr("tensor \"s\": 8 bytes of data"));

  TensorView overflowing{"o", StDType::kF32, {int64_t{1} << 62, 4}, nullptr, 0};
  EXPECT_EQ(overflowing.num_elements(), -1);
  EXPECT_FALSE(ToFloat32(overflowing).ok());
  TensorView null_data{"n", StDType::kF32, {1}, nullptr, 4};
  EXPECT_FALSE(ToFloat32(null_data).ok());
}

// Every byte edit of a valid image is either rejected or yields views inside the image that
// convert without reading past them (ASan checks the reads).
TEST(SafetensorsTest, RandomMutationsNeverCrash) {
  const std::string base = BuildSafetensors(
      {
          {"a", "F32", {2, 2}, F32Bytes({1, 2, 3, 4})},
          {"b", "BF16", {3}, BF16Bytes({1, 2, 3})},
          {"c", "F16", {1}, F16Bits({0x3C00})},
          {"d", "I64", {1}, std::string(8, '\x01')},
          {"e", "F32", {0}, ""},
      },
      {{"format", "pt"}});
  const std::string alphabet = "0123456789[]{},:\"-eE. FBUI";
  std::mt19937 rng(7);
  int accepted = 0;
  for (int iteration = 0; iteration < 20000; ++iteration) {
    std::string image = base;
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits && !image.empty(); ++e) {
      const size_t pos = rng() % image.size();
      switch (rng() % 4) {
        case 0:
          image[pos] = static_cast<char>(rng() & 0xFF);
          break;
        case 1:
          image[pos] = alphabet[rng() % alphabet.size()];
          break;
        case 2:
          image.erase(pos, 1 + rng() % 4);
          break;
        case 3:
          image[rng() % 8] = static_cast<char>(rng() & 0xFF);
          break;  // header length
      }
    }
    // Copy into an exactly sized heap buffer so that any over-read is caught.
    std::vector<std::byte> buffer(image.size());
    if (!image.empty()) std::memcpy(buffer.data(), image.data(), image.size());
    auto file = SafetensorsFile::FromBuffer(buffer.data(), buffer.size(), "mutant");
    if (!file.ok()) {
      EXPECT_THAT(file.status().message(), HasSubstr("mutant"));
      continue;
    }
    ++accepted;
    for (const auto& [name, view] : (*file)->tensors()) {
      EXPECT_GE(view.data, buffer.data());
      EXPECT_LE(view.data + view.nbytes, buffer.data() + buffer.size());
      if (view.dtype == StDType::kF32 || view.dtype == StDType::kBF16 ||
          view.dtype == StDType::kF16) {
        EXPECT_TRUE(ToFloat32(view).ok()) << name;
      }
    }
  }
  EXPECT_GT(accepted, 0);
}

// --- Checkpoints --------------------------------------------------------------------------------

std::string IndexJson(const std::vector<std::pair<std::string, std::string>>& weight_map) {
  std::string entries;
  for (const auto& [tensor, shard] : weight_map) {
    absl::StrAppend(&entries, entries.empty() ? "" : ",", "\"", tensor, "\":\"", shard, "\"");
  }
  return absl::StrCat(R"({"metadata":{"total_size":28},"weight_map":{)", entries, "}}");
}

// Two shards: a.weight and b.weight in shard 1, c.weight in shard 2.
std::filesystem::path WriteShardedCheckpoint(
    absl::string_view name, const std::vector<std::pair<std::string, std::string>>& weight_map) {
  const std::filesystem::path dir = MakeTempDir(name);
  WriteFile(dir / "model-00001-of-00002.safetensors",
            BuildSafetensors({{"a.weight", "F32", {2}, F32Bytes({1, 2})},
                              {"b.weight", "F32", {1}, F32Bytes({3})}}));
  WriteFile(dir / "model-00002-of-00002.safetensors",
            BuildSafetensors({{"c.weight", "BF16", {2}, BF16Bytes({4, 5})}}));
  WriteFile(dir / "model.safetensors.index.json", IndexJson(weight_map));
  return dir;
}

const std::vector<std::pair<std::string, std::string>> kGoodMap = {
    {"a.weight", "model-00001-of-00002.safetensors"},
    {"b.weight", "model-00001-of-00002.safetensors"},
    {"c.weight", "model-00002-of-00002.safetensors"},
};

std::string CheckpointError(const std::filesystem::path& dir) {
  auto checkpoint = Checkpoint::Open(dir);
  EXPECT_FALSE(checkpoint.ok());
  return checkpoint.ok() ? "" : std::string(checkpoint.status().message());
}

TEST(CheckpointTest, OpensSingleFile) {
  const std::filesystem::path dir = MakeTempDir("single");
  WriteFile(dir / "model.safetensors", BuildSafetensors(SampleTensors()));
  auto checkpoint = Checkpoint::Open(dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_EQ((*checkpoint)->dir(), dir);
  EXPECT_THAT((*checkpoint)->TensorNames(),
              ElementsAre("lm_head.weight", "model.embed.weight", "model.norm.weight"));
  const TensorView* norm = (*checkpoint)->Find("model.norm.weight");
  ASSERT_NE(norm, nullptr);
  EXPECT_THAT(*ToFloat32(*norm), ElementsAre(1.0f, -0.5f, 256.0f));
  EXPECT_EQ((*checkpoint)->Find("nope"), nullptr);
}

// A header large enough for simdjson's reader (base/json.h), its names out of order as well
// as in order: every tensor is found where its offsets say, and a name given twice, far apart,
// is refused.
TEST(SafetensorsFileTest, LargeHeadersInAnyOrder) {
  constexpr int kTensors = 3000;
  std::vector<int> order(kTensors);
  for (int i = 0; i < kTensors; ++i) order[i] = (i * 7919) % kTensors;  // a permutation
  for (const bool shuffled : {false, true}) {
    std::string header = "{";
    for (int i = 0; i < kTensors; ++i) {
      const int t = shuffled ? order[i] : i;
      absl::StrAppend(&header, i == 0 ? "" : ",", absl::StrFormat("\"t%05d\"", t),
                      ":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[", 4 * t, ",", 4 * t + 4,
                      "]}");
    }
    ASSERT_GT(header.size(), kJsonFastReaderMinBytes);
    std::string data(4 * kTensors, '\0');
    for (int t = 0; t < kTensors; ++t) std::memcpy(&data[4 * t], &t, 1);
    const std::string image = ImageFromHeader(header + "}", data);  // outlives the file
    auto file = Parse(image);
    ASSERT_TRUE(file.ok()) << file.status();
    ASSERT_EQ((*file)->tensors().size(), static_cast<size_t>(kTensors));
    for (const int t : {0, 1, 1234, kTensors - 1}) {
      const TensorView* view = (*file)->Find(absl::StrFormat("t%05d", t));
      ASSERT_NE(view, nullptr) << t;
      EXPECT_EQ(view->data[0], static_cast<std::byte>(t & 0xFF));
    }
    header += absl::StrFormat(",\"t%05d\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}",
                              shuffled ? order[0] : 17);
    EXPECT_THAT(
        ParseError(ImageFromHeader(header + "}", data)),
        HasSubstr(absl::StrFormat("duplicate object key \"t%05d\"", shuffled ? order[0] : 17)));
  }
}

TEST(CheckpointTest, OpensShardedCheckpoint) {
  const std::filesystem::path dir = WriteShardedCheckpoint("sharded", kGoodMap);
  auto checkpoint = Checkpoint::Open(dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_THAT((*checkpoint)->TensorNames(), ElementsAre("a.weight", "b.weight", "c.weight"));
  EXPECT_THAT(*ToFloat32(*(*checkpoint)->Find("a.weight")), ElementsAre(1.0f, 2.0f));
  EXPECT_THAT(*ToFloat32(*(*checkpoint)->Find("c.weight")), ElementsAre(4.0f, 5.0f));
}

// A checkpoint file that is a link to nothing (a moved cache, a partial download) is named as
// such, for the single file and for the index.
TEST(CheckpointTest, ADanglingLinkIsNamedAsSuch) {
  for (const char* name : {"model.safetensors", "model.safetensors.index.json"}) {
    const std::filesystem::path dir = MakeTempDir(std::string("dangling-") + name);
    std::filesystem::create_symlink("/nonexistent/blob", dir / name);
    auto checkpoint = Checkpoint::Open(dir);
    ASSERT_FALSE(checkpoint.ok()) << name;
    EXPECT_EQ(checkpoint.status().code(), absl::StatusCode::kNotFound);
    EXPECT_THAT(checkpoint.status().message(),
                HasSubstr((dir / name).string() +
                          " is a symbolic link to \"/nonexistent/blob\", which does not exist"));
  }
}

TEST(CheckpointTest, RejectsDirectoryWithoutCheckpoint) {
  const std::filesystem::path dir = MakeTempDir("empty");
  auto checkpoint = Checkpoint::Open(dir);
  ASSERT_FALSE(checkpoint.ok());
  EXPECT_EQ(checkpoint.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(checkpoint.status().message(), HasSubstr("has neither model.safetensors"));
  EXPECT_THAT(CheckpointError(dir / "not_there"), HasSubstr("not a directory"));
}

TEST(CheckpointTest, SingleFileErrorsNameTheFile) {
  const std::filesystem::path dir = MakeTempDir("single_bad");
  WriteFile(dir / "model.safetensors", ImageFromHeader("{", ""));
  EXPECT_THAT(CheckpointError(dir),
              HasSubstr((dir / "model.safetensors").string() + ": header is not valid JSON"));
}

TEST(CheckpointTest, RejectsBadIndexFiles) {
  const std::filesystem::path dir = WriteShardedCheckpoint("bad_index", kGoodMap);
  const std::filesystem::path index = dir / "model.safetensors.index.json";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{", "not valid JSON"},
      {"[]", "not a JSON object"},
      {R"({"metadata":{}})", "missing field \"weight_map\""},
      {R"({"weight_map":[]})", "\"weight_map\" is not a non-empty object"},
      {R"({"weight_map":{}})", "\"weight_map\" is not a non-empty object"},
      {R"({"metadata":[],"weight_map":{"a.weight":"x"}})", "\"metadata\" is not an object"},
      {R"({"weight_map":{"a.weight":"x"},"extra":1})", "unexpected field \"extra\""},
      {R"({"weight_map":{"a.weight":3}})", "entry for tensor \"a.weight\" is not a string"},
      // The index is read as events (no JSON tree); it checks repeated keys itself.
      {R"({"weight_map":{"a.weight":"x","a.weight":"y"}})",
       "not valid JSON: duplicate object key \"a.weight\""},
      {R"({"metadata":{},"weight_map":{"a.weight":"x"},"metadata":{}})",
       "duplicate object key \"metadata\""},
  };
  for (const auto& [text, message] : cases) {
    WriteFile(index, text);
    const std::string error = CheckpointError(dir);
    EXPECT_THAT(error, HasSubstr(message)) << text;
    EXPECT_THAT(error, HasSubstr(index.string())) << text;
  }
}

TEST(CheckpointTest, RejectsShardNamesOutsideTheDirectory) {
  for (const std::string shard :
       {"../model-00001-of-00002.safetensors", "sub/model-00001-of-00002.safetensors",
        "/etc/passwd", "..", ".", "", "a\\\\b.safetensors"}) {
    const std::filesystem::path dir =
        WriteShardedCheckpoint("shard_name", {{"a.weight", shard},
                                              {"b.weight", "model-00001-of-00002.safetensors"},
                                              {"c.weight", "model-00002-of-00002.safetensors"}});
    EXPECT_THAT(CheckpointError(dir), HasSubstr("of tensor \"a.weight\" is not a plain file name"))
        << shard;
  }
}

TEST(CheckpointTest, RejectsMissingShard) {
  const std::filesystem::path dir =
      WriteShardedCheckpoint("missing_shard", {{"a.weight", "model-00001-of-00002.safetensors"},
                                               {"b.weight", "model-00001-of-00002.safetensors"},
                                               {"c.weight", "model-00003-of-00003.safetensors"}});
  auto checkpoint = Checkpoint::Open(dir);
  ASSERT_FALSE(checkpoint.ok());
  EXPECT_EQ(checkpoint.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(checkpoint.status().message(), HasSubstr("model-00003-of-00003.safetensors"));
}

TEST(CheckpointTest, RejectsCorruptShard) {
  const std::filesystem::path dir = WriteShardedCheckpoint("corrupt_shard", kGoodMap);
  WriteFile(dir / "model-00002-of-00002.safetensors", "short");
  EXPECT_THAT(CheckpointError(dir),
              HasSubstr((dir / "model-00002-of-00002.safetensors").string() + ": file is 5 bytes"));
}

TEST(CheckpointTest, RejectsIndexedTensorMissingFromItsShard) {
  std::vector<std::pair<std::string, std::string>> map = kGoodMap;
  map.emplace_back("d.weight", "model-00002-of-00002.safetensors");
  EXPECT_THAT(CheckpointError(WriteShardedCheckpoint("missing_tensor", map)),
              HasSubstr("tensor \"d.weight\" is listed for shard "
                        "\"model-00002-of-00002.safetensors\" but no shard holds it"));
}

TEST(CheckpointTest, RejectsTensorInTheWrongShard) {
  EXPECT_THAT(
      CheckpointError(WriteShardedCheckpoint("wrong_shard",
                                             {{"a.weight", "model-00001-of-00002.safetensors"},
                                              {"b.weight", "model-00002-of-00002.safetensors"},
                                              {"c.weight", "model-00002-of-00002.safetensors"}})),
      HasSubstr("tensor \"b.weight\" is listed for shard \"model-00002-of-00002.safetensors\" but "
                "is in shard \"model-00001-of-00002.safetensors\""));
}

TEST(CheckpointTest, RejectsShardTensorNotInIndex) {
  EXPECT_THAT(
      CheckpointError(
          WriteShardedCheckpoint("unlisted", {{"a.weight", "model-00001-of-00002.safetensors"},
                                              {"c.weight", "model-00002-of-00002.safetensors"}})),
      HasSubstr("tensor \"b.weight\" of shard \"model-00001-of-00002.safetensors\" is not listed "
                "in \"weight_map\""));
}

TEST(CheckpointTest, RejectsTensorInTwoShards) {
  const std::filesystem::path dir = WriteShardedCheckpoint("two_shards", kGoodMap);
  WriteFile(dir / "model-00002-of-00002.safetensors",
            BuildSafetensors({{"a.weight", "F32", {2}, F32Bytes({1, 2})},
                              {"c.weight", "BF16", {2}, BF16Bytes({4, 5})}}));
  EXPECT_THAT(
      CheckpointError(dir),
      HasSubstr("tensor \"a.weight\" is in two shards: \"model-00001-of-00002.safetensors\" "
                "and \"model-00002-of-00002.safetensors\""));
}

}  // namespace
}  // namespace tileplan::models
