// A full disk for a test: a child process whose writes past `limit_bytes` fail with EFBIG, as
// they fail with ENOSPC on a full file system (RLIMIT_FSIZE, SIGXFSZ ignored).
#ifndef TILEPLAN_TESTS_TESTING_FULL_DISK_H_
#define TILEPLAN_TESTS_TESTING_FULL_DISK_H_

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include "absl/functional/function_ref.h"

namespace tileplan::testing {

// Runs `body` in a forked child under the limit; true when the child ran it and it returned
// true. The child shares the parent's memory as it was at the fork (copied on write) and
// ends with _exit, so nothing it does reaches the parent but through files.
inline bool RunWithFullDisk(rlim_t limit_bytes, absl::FunctionRef<bool()> body) {
  const pid_t pid = ::fork();
  if (pid < 0) return false;
  if (pid == 0) {
    const struct rlimit limit = {limit_bytes, limit_bytes};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    std::signal(SIGXFSZ, SIG_IGN);
    ::_exit(body() ? 0 : 1);
  }
  int status = 0;
  return ::waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace tileplan::testing

#endif  // TILEPLAN_TESTS_TESTING_FULL_DISK_H_
