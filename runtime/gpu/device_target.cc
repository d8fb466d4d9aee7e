#include "runtime/gpu/device_target.h"

#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "targets/target.h"

namespace tileplan::runtime::gpu {

absl::StatusOr<targets::TargetDescription> TargetForDevice(const device::Device& device) {
  const device::DeviceProperties& props = device.properties();
  std::optional<targets::TargetDescription> same_sm;
  for (const std::string& name : targets::BundledTargetNames()) {
    TP_ASSIGN_OR_RETURN(targets::TargetDescription target, targets::FindTarget(name));
    if (target.sm() != props.sm) continue;
    if (target.gpu() == props.name) return target;
    if (!same_sm) same_sm = std::move(target);
  }
  if (!same_sm) {
    return absl::FailedPreconditionError(
        absl::StrCat("no bundled target describes sm_", props.sm, " (", device.Label(),
                     "); describe the GPU in a .textproto (docs/targets.md) and pass --target"));
  }
  targets::TargetDescription t = *std::move(same_sm);
  t.set_provenance(
      absl::StrCat("the ", t.name(), " target's rates with ", props.name,
                   "'s SM count, L2, shared memory, threads per SM and memory size as the driver "
                   "reports them; ",
                   t.provenance()));
  t.set_name(absl::StrCat(t.name(), "-like"));
  t.set_gpu(props.name);
  t.set_sm_count(props.sm_count);
  t.set_l2_bytes(props.l2_bytes);
  t.set_shared_memory_per_block_bytes(props.shared_memory_per_block_optin_bytes);
  t.set_max_threads_per_sm(props.max_threads_per_sm);
  t.set_memory_bytes(props.total_memory_bytes);
  return t;
}

absl::StatusOr<targets::TargetDescription> ChooseTarget(absl::string_view requested,
                                                        const device::Device* device) {
  if (!requested.empty()) return targets::FindTarget(requested);
  if (device != nullptr) return TargetForDevice(*device);
  return targets::FindTarget("h200");
}

}  // namespace tileplan::runtime::gpu
