// One CUDA device, reached through the CUDA runtime (cudart_static) only: binaries linking
// this library start on machines without a GPU or driver, and Device::Open reports why
// there is no device instead.
#ifndef TILEPLAN_DEVICE_DEVICE_H_
#define TILEPLAN_DEVICE_DEVICE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tileplan::device {

// The oldest compute capability tileplan runs on (sm_80: cp.async, bf16 mma.sync).
inline constexpr int kMinSm = 80;

struct DeviceProperties {
  int ordinal = 0;
  std::string name;
  int sm = 0;  // major * 10 + minor
  int sm_count = 0;
  int64_t l2_bytes = 0;
  int64_t shared_memory_per_block_optin_bytes = 0;
  int max_threads_per_sm = 0;
  int64_t total_memory_bytes = 0;
  int driver_version = 0;   // e.g. 13000
  int runtime_version = 0;  // e.g. 13000
};

class Device {
 public:
  // Opens device `ordinal` and makes it current for the calling thread.
  // FailedPrecondition "no CUDA device: <reason>" when the runtime finds no usable device or
  // driver; InvalidArgument for an ordinal out of range; FailedPrecondition naming the device
  // and its sm when it is older than sm_80.
  static absl::StatusOr<std::unique_ptr<Device>> Open(int ordinal = 0);

  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const DeviceProperties& properties() const { return properties_; }
  int ordinal() const { return properties_.ordinal; }
  int sm() const { return properties_.sm; }
  // "device 0 (NVIDIA H200, sm_90)"
  std::string Label() const;

  // Makes this device current for the calling thread (the CUDA runtime's current device is
  // per thread); every method below does so first.
  absl::Status MakeCurrent() const;
  absl::Status Synchronize() const;
  struct MemoryInfo {
    int64_t free_bytes = 0;
    int64_t total_bytes = 0;
  };
  absl::StatusOr<MemoryInfo> GetMemoryInfo() const;

 private:
  explicit Device(DeviceProperties properties) : properties_(std::move(properties)) {}

  DeviceProperties properties_;
};

}  // namespace tileplan::device

#endif  // TILEPLAN_DEVICE_DEVICE_H_
