// Times SafetensorsFile::Open on synthetic files whose headers are at the 100 MiB limit, each
// opened in a child process of its own so that its peak memory is its own (docs/models.md):
//
//   safetensors_bench [--runs N] [--dir DIR] [SHAPE...]
//
// SHAPE is one of entries-sorted (1.37 million tensor entries in name order, as writers sort
// them), entries-shuffled (the same in a random order), metadata (4 million "__metadata__"
// strings), numbers (one "data_offsets" of 50 million numbers) and string (one 95 MiB
// metadata string); all of them by default. Prints one line per shape: the header's size, the
// median time of N opens (3 by default), the most memory one took, and what Open said.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "models/safetensors.h"

namespace tileplan {
namespace {

constexpr int64_t kEntries = 1'370'000;

// The header (JSON text) of one shape, and how many data bytes follow it.
bool MakeHeader(const std::string& shape, std::string& header, int64_t& data_bytes) {
  header.clear();
  data_bytes = 2;
  if (shape == "entries-sorted" || shape == "entries-shuffled") {
    std::vector<std::string> names;
    names.reserve(kEntries);
    for (int64_t i = 0; i < kEntries; ++i)
      names.push_back(absl::StrCat("l", i / 1000, ".e", i % 1000, ".w"));
    std::sort(names.begin(), names.end());
    if (shape == "entries-shuffled") std::shuffle(names.begin(), names.end(), std::mt19937(1203));
    header = "{";
    for (int64_t i = 0; i < kEntries; ++i) {
      absl::StrAppend(&header, i == 0 ? "" : ",", "\"", names[i],
                      "\":{\"dtype\":\"BF16\",\"shape\":[1],\"data_offsets\":[", 2 * i, ",",
                      2 * i + 2, "]}");
    }
    header += "}";
    data_bytes = 2 * kEntries;
  } else if (shape == "metadata") {
    header = "{\"__metadata__\":{";
    for (int64_t i = 0; i < 4'000'000; ++i) {
      absl::StrAppend(&header, i == 0 ? "" : ",", "\"k", i, "\":\"v\"");
    }
    header += "},\"a\":{\"dtype\":\"BF16\",\"shape\":[1],\"data_offsets\":[0,2]}}";
  } else if (shape == "numbers") {
    header = "{\"a\":{\"dtype\":\"BF16\",\"shape\":[1],\"data_offsets\":[1";
    header.reserve(100'000'100);
    for (int64_t i = 1; i < 50'000'000; ++i) header += ",1";
    header += "]}}";
  } else if (shape == "string") {
    header = "{\"__metadata__\":{\"k\":\"";
    header.append(size_t{95} << 20, 'x');
    header += "\"},\"a\":{\"dtype\":\"BF16\",\"shape\":[1],\"data_offsets\":[0,2]}}";
  } else {
    return false;
  }
  return true;
}

void WriteImage(const std::filesystem::path& path, const std::string& header, int64_t data_bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  const uint64_t size = header.size();
  char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<char>((size >> (8 * i)) & 0xFF);
  out.write(length, 8);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  const std::string zeros(static_cast<size_t>(data_bytes), '\0');
  out.write(zeros.data(), static_cast<std::streamsize>(zeros.size()));
}

// Opens `path` in a child process: the seconds Open took (written by the child to a pipe),
// the child's peak memory in bytes, and Open's verdict.
struct Opened {
  double seconds = 0;
  int64_t peak_bytes = 0;
  std::string verdict;
};

// The child: opens `path` and writes "SECONDS VERDICT" to `fd`.
int OpenAndReport(const char* path, int fd) {
  const auto start = std::chrono::steady_clock::now();
  auto file = models::SafetensorsFile::Open(path);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string verdict = file.ok()
                                  ? absl::StrCat("ok, ", (*file)->tensors().size(), " tensors")
                                  : std::string(file.status().message().substr(0, 100));
  const std::string line = absl::StrCat(seconds, " ", verdict);
  return ::write(fd, line.data(), line.size()) < 0 ? 2 : 0;
}

// Runs this program again (a fresh address space, so the peak is Open's alone) to open `path`.
Opened OpenInChild(const std::filesystem::path& path) {
  int fds[2];
  if (::pipe(fds) != 0) std::abort();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    const std::string fd = std::to_string(fds[1]);
    ::execl("/proc/self/exe", "safetensors_bench", "--open", path.c_str(), fd.c_str(), nullptr);
    std::_Exit(127);
  }
  ::close(fds[1]);
  std::string line;
  char buffer[256];
  for (ssize_t n; (n = ::read(fds[0], buffer, sizeof(buffer))) > 0;) line.append(buffer, n);
  ::close(fds[0]);
  int status = 0;
  struct rusage usage {};
  ::wait4(pid, &status, 0, &usage);
  Opened opened;
  const size_t space = line.find(' ');
  if (space == std::string::npos || !absl::SimpleAtod(line.substr(0, space), &opened.seconds)) {
    opened.verdict = "the child failed";
    return opened;
  }
  opened.verdict = line.substr(space + 1);
  opened.peak_bytes = static_cast<int64_t>(usage.ru_maxrss) * 1024;
  return opened;
}

int Run(int argc, char** argv) {
  if (argc == 4 && std::string(argv[1]) == "--open") {
    return OpenAndReport(argv[2], std::atoi(argv[3]));
  }
  int runs = 3;
  std::filesystem::path dir = std::filesystem::temp_directory_path();
  std::vector<std::string> shapes;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--runs" && i + 1 < argc && absl::SimpleAtoi(argv[i + 1], &runs) && runs > 0) {
      ++i;
    } else if (arg == "--dir" && i + 1 < argc) {
      dir = argv[++i];
    } else if (!arg.empty() && arg[0] != '-') {
      shapes.push_back(arg);
    } else {
      std::fprintf(stderr, "usage: safetensors_bench [--runs N] [--dir DIR] [SHAPE...]\n");
      return 2;
    }
  }
  if (shapes.empty()) {
    shapes = {"entries-sorted", "entries-shuffled", "metadata", "numbers", "string"};
  }
  std::printf(
      "| header | size | Open, median of %d | peak memory | result |\n|---|---|---|---|---|\n",
      runs);
  for (const std::string& shape : shapes) {
    std::string header;
    int64_t data_bytes = 0;
    if (!MakeHeader(shape, header, data_bytes)) {
      std::fprintf(stderr, "safetensors_bench: no shape \"%s\"\n", shape.c_str());
      return 2;
    }
    const std::filesystem::path path = dir / absl::StrCat("safetensors_bench.", ::getpid());
    WriteImage(path, header, data_bytes);
    const double mib = static_cast<double>(header.size()) / (1 << 20);
    header = std::string();
    std::vector<double> seconds;
    int64_t peak = 0;
    std::string verdict;
    for (int run = 0; run < runs; ++run) {
      const Opened opened = OpenInChild(path);
      seconds.push_back(opened.seconds);
      peak = std::max(peak, opened.peak_bytes);
      verdict = opened.verdict;
    }
    std::filesystem::remove(path);
    std::sort(seconds.begin(), seconds.end());
    std::printf("| %s | %.1f MiB | %.2f s | %.2f GB | %s |\n", shape.c_str(), mib,
                seconds[seconds.size() / 2], static_cast<double>(peak) / 1e9, verdict.c_str());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace tileplan

int main(int argc, char** argv) { return tileplan::Run(argc, argv); }
