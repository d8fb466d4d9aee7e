// Target descriptions: GPUs as data (targets/target.proto, docs/targets.md).
//
// The bundled descriptions live in targets/*.textproto and are embedded in the binary, so
// planning needs neither a GPU nor the source tree. A target is selected by its name
// ("h200"), an alias ("sm_90"), or a path to a .textproto file.
#ifndef TILEPLAN_TARGETS_TARGET_H_
#define TILEPLAN_TARGETS_TARGET_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "targets/target.pb.h"

namespace tileplan::targets {

// Parses and validates one description; `label` names it in error messages. Errors carry
// line:column for syntax errors and the field name for invalid values.
absl::StatusOr<TargetDescription> ParseTarget(absl::string_view textproto, absl::string_view label);

// Bundled target names, sorted.
std::vector<std::string> BundledTargetNames();

// A bundled target by name or alias, else a .textproto file at that path. NotFound lists
// the bundled names and aliases.
absl::StatusOr<TargetDescription> FindTarget(absl::string_view name_alias_or_path);

}  // namespace tileplan::targets

#endif  // TILEPLAN_TARGETS_TARGET_H_
