#include "base/files.h"

#include <filesystem>
#include <fstream>
#include <system_error>

#include "absl/strings/str_cat.h"

namespace tileplan {

absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents) {
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
