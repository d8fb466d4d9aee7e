#include "device/device_buffer.h"

#include <cuda_runtime_api.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "device/cuda_status.h"

namespace tileplan::device {

DeviceBuffer::~DeviceBuffer() { Release(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : device_(std::exchange(other.device_, nullptr)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    Release();
    device_ = std::exchange(other.device_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void DeviceBuffer::Release() {
  if (data_ != nullptr) {
    // A failure to free leaves nothing to recover; the memory goes with the context.
    if (device_->MakeCurrent().ok()) cudaFree(data_);
    data_ = nullptr;
  }
  size_ = 0;
}

absl::StatusOr<DeviceBuffer> DeviceBuffer::Allocate(const Device& device, int64_t bytes) {
  if (bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot allocate a negative size (", bytes, " bytes) on ", device.Label()));
  }
  DeviceBuffer buffer;
  buffer.device_ = &device;
  if (bytes == 0) return buffer;
  TP_RETURN_IF_ERROR(device.MakeCurrent());
  void* data = nullptr;
  const cudaError_t error = cudaMalloc(&data, static_cast<size_t>(bytes));
  if (error == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // reset the last-error state so later calls do not report it
    std::string free_text = "free memory unknown";
    absl::StatusOr<Device::MemoryInfo> info = device.GetMemoryInfo();
    if (info.ok()) {
      free_text = absl::StrCat(info->free_bytes, " bytes free of ", info->total_bytes);
    }
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate ", bytes, " bytes on ", device.Label(), ": ", free_text));
  }
  TP_RETURN_IF_ERROR(CudaErrorToStatus(error, "cudaMalloc", __FILE__, __LINE__));
  buffer.data_ = data;
  buffer.size_ = bytes;
  return buffer;
}

absl::Status DeviceBuffer::CheckRange(int64_t bytes, int64_t offset) const {
  if (bytes < 0 || offset < 0 || offset > size_ || bytes > size_ - offset) {
    return absl::OutOfRangeError(absl::StrCat("bytes [", offset, ", ", offset + bytes,
                                              ") do not fit a device buffer of ", size_, " bytes"));
  }
  return absl::OkStatus();
}

absl::Status DeviceBuffer::CopyFromHost(const void* src, int64_t bytes, int64_t offset) {
  TP_RETURN_IF_ERROR(CheckRange(bytes, offset));
  if (bytes == 0) return absl::OkStatus();
  TP_RETURN_IF_ERROR(device_->MakeCurrent());
  TP_CUDA_RETURN_IF_ERROR(cudaMemcpy(static_cast<char*>(data_) + offset, src,
                                     static_cast<size_t>(bytes), cudaMemcpyHostToDevice));
  return absl::OkStatus();
}

absl::Status DeviceBuffer::CopyToHost(void* dst, int64_t bytes, int64_t offset) const {
  TP_RETURN_IF_ERROR(CheckRange(bytes, offset));
  if (bytes == 0) return absl::OkStatus();
  TP_RETURN_IF_ERROR(device_->MakeCurrent());
  TP_CUDA_RETURN_IF_ERROR(cudaMemcpy(dst, static_cast<const char*>(data_) + offset,
                                     static_cast<size_t>(bytes), cudaMemcpyDeviceToHost));
  return absl::OkStatus();
}

absl::Status DeviceBuffer::Fill(unsigned char value) {
  if (size_ == 0) return absl::OkStatus();
  TP_RETURN_IF_ERROR(device_->MakeCurrent());
  TP_CUDA_RETURN_IF_ERROR(cudaMemset(data_, value, static_cast<size_t>(size_)));
  TP_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  return absl::OkStatus();
}

}  // namespace tileplan::device
