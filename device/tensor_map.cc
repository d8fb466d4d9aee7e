#include "device/tensor_map.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <cstring>

#include "absl/strings/str_cat.h"

namespace tileplan::device {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 EncodeFunction() {
  static PFN_cuTensorMapEncodeTiled_v12000 function = [] {
    void* entry = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &entry, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      return static_cast<PFN_cuTensorMapEncodeTiled_v12000>(nullptr);
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(entry);
  }();
  return function;
}

}  // namespace

absl::Status EncodeTensorMap(const TensorMap2D& map, void* out) {
  auto bad = [&](const char* field, int64_t value, const char* why) {
    return absl::InvalidArgumentError(absl::StrCat("tensor map: ", field, " ", value, " ", why));
  };
  if (reinterpret_cast<uintptr_t>(map.address) % 16 != 0) {
    return bad("address", static_cast<int64_t>(reinterpret_cast<uintptr_t>(map.address)),
               "is not 16-byte aligned");
  }
  if (map.row_stride_bytes % 16 != 0 || map.row_stride_bytes < map.inner * 2) {
    return bad("row_stride_bytes", map.row_stride_bytes,
               "is not a multiple of 16 holding a whole row");
  }
  if (map.inner <= 0 || map.rows <= 0) return bad("inner x rows", map.inner * map.rows, "is empty");
  if (map.box_inner <= 0 || map.box_inner * 2 > 128 || map.box_inner * 2 % 16 != 0) {
    return bad("box_inner", map.box_inner, "is not 8 to 64 elements in steps of 8");
  }
  if (map.box_rows <= 0 || map.box_rows > 256)
    return bad("box_rows", map.box_rows, "is not 1 to 256");
  PFN_cuTensorMapEncodeTiled_v12000 encode = EncodeFunction();
  if (encode == nullptr) {
    return absl::FailedPreconditionError(
        "tensor map: the CUDA driver has no cuTensorMapEncodeTiled (TMA needs CUDA 12 and sm_90)");
  }
  CUtensorMap tensor_map;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(map.inner),
                              static_cast<cuuint64_t>(map.rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(map.row_stride_bytes)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(map.box_inner),
                             static_cast<cuuint32_t>(map.box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult result = encode(
      &tensor_map, map.f16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2,
      const_cast<void*>(map.address), dims, strides, box, element_strides,
      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (result != CUDA_SUCCESS) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor map: cuTensorMapEncodeTiled refused ", map.rows, " x ", map.inner,
                     " elements (row stride ", map.row_stride_bytes, " bytes, box ", map.box_rows,
                     " x ", map.box_inner, "): CUresult ", static_cast<int>(result)));
  }
  std::memcpy(out, &tensor_map, sizeof(tensor_map));
  return absl::OkStatus();
}

}  // namespace tileplan::device
