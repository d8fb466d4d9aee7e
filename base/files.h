// Whole-file writes that never leave a half-written file behind.
#ifndef TILEPLAN_BASE_FILES_H_
#define TILEPLAN_BASE_FILES_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace tileplan {

// Writes `contents` to `path` + ".tmp", then renames it to `path`: readers see the old file or
// the new one whole. On failure the temporary is removed, `path` is left as it was, and the
// status (PermissionDenied or DataLoss) names the file and the reason.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents);

}  // namespace tileplan

#endif  // TILEPLAN_BASE_FILES_H_
