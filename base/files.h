// Whole-file reads that refuse anything but a regular file of bounded size before reading a
// byte, and whole-file writes that never leave a half-written file behind.
#ifndef TILEPLAN_BASE_FILES_H_
#define TILEPLAN_BASE_FILES_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tileplan {

// The whole regular file at `path` (symbolic links followed), of at most `limit` bytes. Refused
// before anything is read, with a message that names the file: a path that does not exist
// (NotFound) or may not be read (PermissionDenied); one that is a directory, a named pipe
// (FIFO), a device or a socket (InvalidArgument naming the kind); a file of more than `limit`
// bytes (InvalidArgument with both sizes). A read that fails is DataLoss with the OS error. It
// never blocks on a FIFO (the type is checked before opening and again on the descriptor, which
// is opened non-blocking), reads at most `limit` + 1 bytes whatever the file does meanwhile, and
// never throws.
absl::StatusOr<std::string> ReadRegularFile(const std::string& path, uint64_t limit);

// OK when `path` names a regular file (symbolic links followed) or nothing at all: a file that
// may be opened or created there. InvalidArgument naming the kind for a directory, FIFO, device
// or socket; PermissionDenied or another error with the OS's reason when the path cannot be
// examined.
absl::Status CheckRegularFileOrAbsent(const std::string& path);

// Writes `contents` to a new file beside `path` and gives it that name: readers see the old
// file or the new one whole. The new file has no name until it is complete (O_TMPFILE; a
// named temporary `path.tmp.PID.N` where the file system lacks it), so a killed process
// leaves nothing behind. A `path` that names anything but a regular file or nothing (a
// device, a FIFO, a directory: the rename would replace it) is refused first
// (CheckRegularFileOrAbsent), writing nothing. On failure `path` is left as it was, no
// temporary remains, and the status names `path`, the OS's reason and, when the disk or the
// file-size limit is full, what to do: ResourceExhausted for ENOSPC, EFBIG and EDQUOT,
// PermissionDenied for EACCES, EPERM and EROFS, DataLoss otherwise.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents);

}  // namespace tileplan

#endif  // TILEPLAN_BASE_FILES_H_
