// The target description of an opened device, so that tools plan for the GPU they run on.
#ifndef TILEPLAN_RUNTIME_GPU_DEVICE_TARGET_H_
#define TILEPLAN_RUNTIME_GPU_DEVICE_TARGET_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "device/device.h"
#include "targets/target.pb.h"

namespace tileplan::runtime::gpu {

// The bundled target whose `gpu` is the device's name; else the first bundled target of the
// device's sm with the device's own SM count, L2, shared memory and memory size, named after
// the device (its rates stay the bundled target's, and its provenance says so).
// FailedPrecondition when no bundled target has the device's sm (pass a target file).
absl::StatusOr<targets::TargetDescription> TargetForDevice(const device::Device& device);

// The target a tool plans for: `requested` (a bundled name, alias or .textproto path) when
// given, else the device's (TargetForDevice), else, with no device, the bundled h200.
absl::StatusOr<targets::TargetDescription> ChooseTarget(absl::string_view requested,
                                                        const device::Device* device);

}  // namespace tileplan::runtime::gpu

#endif  // TILEPLAN_RUNTIME_GPU_DEVICE_TARGET_H_
