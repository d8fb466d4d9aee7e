#include "tests/models/safetensors_builder.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"

namespace tileplan::testing {
namespace {

void AppendLittleEndian(uint64_t value, int bytes, std::string& out) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
}

}  // namespace

std::string F32Bytes(const std::vector<float>& values) {
  std::string out;
  for (float v : values) {
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    AppendLittleEndian(bits, 4, out);
  }
  return out;
}

std::string BF16Bytes(const std::vector<float>& values) {
  std::string out;
  for (float v : values) {
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    AppendLittleEndian(bits >> 16, 2, out);
  }
  return out;
}

std::string F16Bits(const std::vector<uint16_t>& bits) {
  std::string out;
  for (uint16_t b : bits) AppendLittleEndian(b, 2, out);
  return out;
}

std::string BuildSafetensors(const std::vector<TestTensor>& tensors,
                             const std::map<std::string, std::string>& metadata) {
  std::string header = "{";
  std::string data;
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [key, value] : metadata) {
      absl::StrAppend(&header, first ? "" : ",", "\"", key, "\":\"", value, "\"");
      first = false;
    }
    header += "}";
  }
  for (const TestTensor& t : tensors) {
    if (header.size() > 1) header += ",";
    absl::StrAppend(&header, "\"", t.name, "\":{\"dtype\":\"", t.dtype, "\",\"shape\":[",
                    absl::StrJoin(t.shape, ","), "],\"data_offsets\":[", data.size(), ",",
                    data.size() + t.bytes.size(), "]}");
    data += t.bytes;
  }
  header += "}";
  while (header.size() % 8 != 0) header += ' ';
  return ImageFromHeader(header, data);
}

std::string ImageFromHeader(absl::string_view header, absl::string_view data) {
  std::string image;
  AppendLittleEndian(header.size(), 8, image);
  absl::StrAppend(&image, header, data);
  return image;
}

void WriteFile(const std::filesystem::path& path, absl::string_view bytes) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out.good()) {
    std::cerr << "cannot write " << path << "\n";
    std::abort();
  }
}

std::filesystem::path MakeTempDir(absl::string_view name) {
  static int counter = 0;
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) /
                              absl::StrCat("tileplan_", info != nullptr ? info->name() : "test",
                                           "_", name, "_", ::getpid(), "_", counter++);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace tileplan::testing
