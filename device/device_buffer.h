// An owned allocation of device memory (cudaMalloc), freed on destruction.
#ifndef TILEPLAN_DEVICE_DEVICE_BUFFER_H_
#define TILEPLAN_DEVICE_DEVICE_BUFFER_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "device/device.h"

namespace tileplan::device {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;  // empty: data() is null, size() is 0
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // `bytes` of device memory on `device` (which must outlive the buffer), aligned to at
  // least 256 bytes. ResourceExhausted "cannot allocate N bytes on device 0 (...): F bytes
  // free of T" when the device is out of memory; InvalidArgument for negative sizes.
  // Zero bytes give an empty buffer.
  static absl::StatusOr<DeviceBuffer> Allocate(const Device& device, int64_t bytes);

  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  int64_t size() const { return size_; }

  // Synchronous copies of [offset, offset + bytes) of the buffer; OutOfRange when the range
  // does not fit.
  absl::Status CopyFromHost(const void* src, int64_t bytes, int64_t offset = 0);
  absl::Status CopyToHost(void* dst, int64_t bytes, int64_t offset = 0) const;
  // Sets every byte to `value` (synchronous).
  absl::Status Fill(unsigned char value);

 private:
  absl::Status CheckRange(int64_t bytes, int64_t offset) const;
  void Release();

  const Device* device_ = nullptr;
  void* data_ = nullptr;
  int64_t size_ = 0;
};

}  // namespace tileplan::device

#endif  // TILEPLAN_DEVICE_DEVICE_BUFFER_H_
