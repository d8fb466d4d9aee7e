#include "base/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "absl/strings/str_cat.h"

namespace tileplan {
namespace {

// What a file of mode `mode` is, for messages; empty for a regular file.
const char* KindOf(mode_t mode) {
  if (S_ISREG(mode)) return "";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a named pipe (FIFO)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

absl::Status NotRegular(const std::string& path, mode_t mode) {
  return absl::InvalidArgumentError(
      absl::StrCat(path, " is ", KindOf(mode), ", not a regular file"));
}

// The status of a failed stat() or open() of `path` (errno set by it).
absl::Status OpenError(const std::string& path, int error) {
  const std::string reason = std::strerror(error);
  switch (error) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(absl::StrCat(path, ": ", reason));
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(absl::StrCat("cannot read ", path, ": ", reason));
    default:
      return absl::InvalidArgumentError(absl::StrCat("cannot open ", path, ": ", reason));
  }
}

absl::Status TooLarge(const std::string& path, uint64_t size, uint64_t limit) {
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": file is ", size, " bytes, over the limit of ", limit));
}

}  // namespace

absl::StatusOr<std::string> ReadRegularFile(const std::string& path, uint64_t limit) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return OpenError(path, errno);
  if (!S_ISREG(st.st_mode)) return NotRegular(path, st.st_mode);
  if (static_cast<uint64_t>(st.st_size) > limit) {
    return TooLarge(path, static_cast<uint64_t>(st.st_size), limit);
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return OpenError(path, errno);
  // The path may have been replaced between the two looks: the descriptor decides.
  if (::fstat(fd, &st) != 0) {
    const int error = errno;
    ::close(fd);
    return absl::DataLossError(absl::StrCat("cannot read ", path, ": ", std::strerror(error)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return NotRegular(path, st.st_mode);
  }
  std::string data;
  data.reserve(static_cast<size_t>(st.st_size));
  char buffer[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      ::close(fd);
      return absl::DataLossError(absl::StrCat("cannot read ", path, ": ", std::strerror(error)));
    }
    if (n == 0) break;
    if (data.size() + static_cast<uint64_t>(n) > limit) {
      ::close(fd);
      return absl::InvalidArgumentError(
          absl::StrCat(path, " grew past the limit of ", limit, " bytes while it was read"));
    }
    data.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return data;
}

absl::Status CheckRegularFileOrAbsent(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    const int error = errno;
    if (error == ENOENT) return absl::OkStatus();
    return OpenError(path, error);
  }
  return S_ISREG(st.st_mode) ? absl::OkStatus() : NotRegular(path, st.st_mode);
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents) {
  if (absl::Status target = CheckRegularFileOrAbsent(path); !target.ok()) return target;
  const std::string temporary = absl::StrCat(path, ".tmp");
  std::error_code ec;
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) return absl::PermissionDeniedError(absl::StrCat("cannot write ", temporary));
    out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
    out.close();
    if (!out) {
      std::filesystem::remove(temporary, ec);
      return absl::DataLossError(absl::StrCat("error writing ", temporary));
    }
  }
  std::filesystem::rename(temporary, path, ec);
  if (ec) {
    const std::string reason = ec.message();
    std::filesystem::remove(temporary, ec);
    return absl::PermissionDeniedError(
        absl::StrCat("cannot rename ", temporary, " to ", path, ": ", reason));
  }
  return absl::OkStatus();
}

}  // namespace tileplan
