// The device layer's host-side behaviour: vendor codes become Status with expression and
// location, and opening a device reports a clear reason when there is none (this test runs
// on machines with and without a GPU).
#include <cuda_runtime_api.h>
#include <nvrtc.h>

#include "device/cuda_status.h"
#include "device/device.h"
#include "device/device_buffer.h"
#include "device/tensor_map.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tileplan::device {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

absl::Status FailingCudaCall() {
  TP_CUDA_RETURN_IF_ERROR(cudaErrorInvalidValue);
  return absl::OkStatus();
}

absl::Status FailingNvrtcCall() {
  TP_NVRTC_RETURN_IF_ERROR(NVRTC_ERROR_COMPILATION);
  return absl::OkStatus();
}

TEST(CudaStatusTest, SuccessIsOk) {
  EXPECT_TRUE(CudaErrorToStatus(cudaSuccess, "f()", "x.cc", 1).ok());
  EXPECT_TRUE(NvrtcResultToStatus(NVRTC_SUCCESS, "g()", "x.cc", 1).ok());
}

TEST(CudaStatusTest, MacroNamesExpressionAndLocation) {
  const absl::Status status = FailingCudaCall();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("cudaErrorInvalidValue failed at "));
  EXPECT_THAT(std::string(status.message()), HasSubstr("device_test.cc:"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("(invalid argument)"));
}

TEST(CudaStatusTest, CodesMapToCategories) {
  EXPECT_EQ(CudaErrorToStatus(cudaErrorMemoryAllocation, "m", "f", 2).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(CudaErrorToStatus(cudaErrorNoDevice, "m", "f", 2).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(CudaErrorToStatus(cudaErrorInsufficientDriver, "m", "f", 2).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(CudaErrorToStatus(cudaErrorLaunchFailure, "m", "f", 2).code(),
            absl::StatusCode::kInternal);
  const absl::Status status = CudaErrorToStatus(cudaErrorIllegalAddress, "launch(k)", "a.cc", 7);
  EXPECT_THAT(std::string(status.message()),
              StartsWith("launch(k) failed at a.cc:7: cudaErrorIllegalAddress ("));
}

TEST(CudaStatusTest, NvrtcMacroNamesExpressionAndLocation) {
  const absl::Status status = FailingNvrtcCall();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("NVRTC_ERROR_COMPILATION failed at "));
  EXPECT_THAT(std::string(status.message()), HasSubstr("device_test.cc:"));
  EXPECT_EQ(NvrtcResultToStatus(NVRTC_ERROR_OUT_OF_MEMORY, "c", "f", 3).code(),
            absl::StatusCode::kInternal);
}

// Without a GPU or driver, Open says so; with one, it describes an sm_80+ device.
TEST(DeviceTest, OpenReportsNoDeviceOrDescribesOne) {
  absl::StatusOr<std::unique_ptr<Device>> device = Device::Open(0);
  if (!device.ok()) {
    EXPECT_EQ(device.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(device.status().message()), StartsWith("no CUDA device: "));
    EXPECT_GT(device.status().message().size(), std::string("no CUDA device: ").size());
    return;
  }
  EXPECT_GE((*device)->sm(), kMinSm);
  EXPECT_GT((*device)->properties().sm_count, 0);
  EXPECT_THAT((*device)->Label(), StartsWith("device 0 ("));
}

TEST(DeviceTest, OrdinalOutOfRangeIsRefused) {
  absl::StatusOr<std::unique_ptr<Device>> device = Device::Open(4096);
  ASSERT_FALSE(device.ok());
  // With no device at all the missing device is the better reason.
  EXPECT_THAT(std::string(device.status().message()),
              ::testing::AnyOf(StartsWith("no CUDA device: "), HasSubstr("out of range")));
}

// What the TMA unit cannot address is refused by field before the driver is asked; a valid
// map encodes where the driver has the entry point (FailedPrecondition where it has none).
// Encoding needs a current context, as every launch has: the device's, where there is one.
TEST(TensorMapTest, RefusesWhatTmaCannotAddressAndEncodesTheRest) {
  absl::StatusOr<std::unique_ptr<Device>> device = Device::Open(0);
  if (device.ok()) ASSERT_TRUE((*device)->MakeCurrent().ok());
  alignas(64) unsigned char out[128] = {};
  const TensorMap2D good = {.address = reinterpret_cast<const void*>(0x100000),
                            .inner = 1024,
                            .rows = 512,
                            .row_stride_bytes = 2048,
                            .box_inner = 64,
                            .box_rows = 128};
  TensorMap2D bad = good;
  bad.address = reinterpret_cast<const void*>(0x100008);
  EXPECT_THAT(std::string(EncodeTensorMap(bad, out).message()), HasSubstr("address"));
  bad = good;
  bad.row_stride_bytes = 2056;
  EXPECT_THAT(std::string(EncodeTensorMap(bad, out).message()), HasSubstr("row_stride_bytes"));
  bad = good;
  bad.row_stride_bytes = 1024;  // shorter than a row
  EXPECT_THAT(std::string(EncodeTensorMap(bad, out).message()), HasSubstr("row_stride_bytes"));
  bad = good;
  bad.box_inner = 128;  // 256 bytes: wider than the 128-byte swizzle
  EXPECT_THAT(std::string(EncodeTensorMap(bad, out).message()), HasSubstr("box_inner"));
  bad = good;
  bad.box_rows = 512;
  EXPECT_THAT(std::string(EncodeTensorMap(bad, out).message()), HasSubstr("box_rows"));
  const absl::Status encoded = EncodeTensorMap(good, out);
  if (!encoded.ok()) {
    EXPECT_EQ(encoded.code(), absl::StatusCode::kFailedPrecondition) << encoded;
    return;
  }
  bool written = false;
  for (unsigned char b : out) written |= b != 0;
  EXPECT_TRUE(written);
}

TEST(DeviceBufferTest, EmptyBufferHasNoStorage) {
  DeviceBuffer empty;
  EXPECT_EQ(empty.data(), nullptr);
  EXPECT_EQ(empty.size(), 0);
  DeviceBuffer moved = std::move(empty);
  EXPECT_EQ(moved.size(), 0);
  char byte = 0;
  EXPECT_EQ(moved.CopyToHost(&byte, 1).code(), absl::StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace tileplan::device
