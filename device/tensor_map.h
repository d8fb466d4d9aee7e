// TMA tensor maps (CUtensorMap) encoded through the driver's cuTensorMapEncodeTiled, reached
// with cudaGetDriverEntryPointByVersion, so that nothing links libcuda.so (device/module.h).
#ifndef TILEPLAN_DEVICE_TENSOR_MAP_H_
#define TILEPLAN_DEVICE_TENSOR_MAP_H_

#include <cstdint>

#include "absl/status/status.h"

namespace tileplan::device {

// A 2-D tensor of 16-bit elements (bf16 or f16) at `address`: `rows` rows of `inner`
// contiguous elements, `row_stride_bytes` apart; boxes of box_inner x box_rows elements
// with the 128-byte swizzle (box_inner * 2 <= 128), zeros for elements outside the tensor.
struct TensorMap2D {
  const void* address = nullptr;
  bool f16 = false;
  int64_t inner = 0;
  int64_t rows = 0;
  int64_t row_stride_bytes = 0;
  int box_inner = 0;
  int box_rows = 0;
};

// Writes the 128-byte map to `out` (64-byte aligned storage is not required: the bytes are
// copied). InvalidArgument naming the field for what the TMA unit cannot address (an address
// or stride off 16 bytes, a box over 256 elements a side or wider than the swizzle), naming
// the driver's error when it refuses; FailedPrecondition when the driver lacks the entry point.
// REQUIRES: a current CUDA context (Device::MakeCurrent; the driver refuses without one).
absl::Status EncodeTensorMap(const TensorMap2D& map, void* out);

}  // namespace tileplan::device

#endif  // TILEPLAN_DEVICE_TENSOR_MAP_H_
