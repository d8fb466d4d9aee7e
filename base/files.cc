#include "base/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
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

namespace {

// Writes all of `contents` to `fd`; the errno of the first failed write, or 0.
int WriteAll(int fd, absl::string_view contents) {
  size_t done = 0;
  while (done < contents.size()) {
    const ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    done += static_cast<size_t>(n);
  }
  return 0;
}

// The status of a write that failed with `error`, saying that `path` is as it was.
absl::Status WriteError(const std::string& path, absl::string_view doing, int error) {
  std::string message = absl::StrCat("cannot write ", path, ": ", doing, std::strerror(error));
  if (error == ENOSPC || error == EFBIG || error == EDQUOT) {
    absl::StrAppend(&message, " (free space or raise the file-size limit, then run again)");
  }
  absl::StrAppend(&message, "; ", path, " is left as it was");
  if (error == EACCES || error == EPERM || error == EROFS) {
    return absl::PermissionDeniedError(message);
  }
  if (error == ENOSPC || error == EFBIG || error == EDQUOT) {
    return absl::ResourceExhaustedError(message);
  }
  return absl::DataLossError(message);
}

}  // namespace

absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents) {
  if (absl::Status target = CheckRegularFileOrAbsent(path); !target.ok()) return target;
  std::string directory = std::filesystem::path(path).parent_path().string();
  if (directory.empty()) directory = ".";
  static std::atomic<uint64_t> counter{0};
  const std::string temporary = absl::StrCat(path, ".tmp.", ::getpid(), ".", counter.fetch_add(1));

  // The new contents go to a file with no name (O_TMPFILE) where the file system allows it, so
  // that a process killed before the end leaves nothing behind; elsewhere (or without /proc)
  // to the named temporary, which every failure removes.
  for (const bool anonymous : {true, false}) {
    const int fd = anonymous
                       ? ::open(directory.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644)
                       : ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
      if (anonymous) continue;
      return WriteError(path, "cannot create a file beside it: ", errno);
    }
    int error = WriteAll(fd, contents);
    if (error == 0 && ::fsync(fd) != 0) error = errno;
    if (error != 0) {
      ::close(fd);
      if (!anonymous) ::unlink(temporary.c_str());
      return WriteError(path, "", error);
    }
    if (anonymous) {
      // Name the file: straight at `path` when nothing is there (linkat never replaces), else
      // at the temporary, which is renamed over `path` below.
      const std::string self = absl::StrCat("/proc/self/fd/", fd);
      bool linked =
          ::linkat(AT_FDCWD, self.c_str(), AT_FDCWD, path.c_str(), AT_SYMLINK_FOLLOW) == 0;
      if (linked) {
        ::close(fd);
        return absl::OkStatus();
      }
      error = errno;
      if (error == EEXIST) {
        linked =
            ::linkat(AT_FDCWD, self.c_str(), AT_FDCWD, temporary.c_str(), AT_SYMLINK_FOLLOW) == 0;
        error = linked ? 0 : errno;
      }
      ::close(fd);
      if (error == ENOENT) continue;  // no /proc: write it again under the temporary's name
      if (!linked) return WriteError(path, "cannot link the new file: ", error);
    } else if (::close(fd) != 0) {
      error = errno;
      ::unlink(temporary.c_str());
      return WriteError(path, "", error);
    }
    if (::rename(temporary.c_str(), path.c_str()) != 0) {
      error = errno;
      ::unlink(temporary.c_str());
      return WriteError(path, "cannot replace it: ", error);
    }
    return absl::OkStatus();
  }
  return absl::InternalError("unreachable");
}

}  // namespace tileplan
