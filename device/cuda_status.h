// Vendor status codes become absl::Status at the boundary, carrying the failing expression
// and its source location:
//
//   TP_CUDA_RETURN_IF_ERROR(cudaMemcpy(...));   // cudaError_t
//   TP_NVRTC_RETURN_IF_ERROR(nvrtcCreateProgram(...));   // nvrtcResult
//
// Messages read "<expression> failed at <file>:<line>: <name> (<description>)".
#ifndef TILEPLAN_DEVICE_CUDA_STATUS_H_
#define TILEPLAN_DEVICE_CUDA_STATUS_H_

#include <cuda_runtime_api.h>
#include <nvrtc.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace tileplan::device {

// OK for cudaSuccess. Out-of-memory maps to ResourceExhausted, a missing driver or device
// to FailedPrecondition, invalid arguments to InvalidArgument, everything else to Internal.
absl::Status CudaErrorToStatus(cudaError_t error, absl::string_view expression,
                               absl::string_view file, int line);

// OK for NVRTC_SUCCESS; a compilation error maps to InvalidArgument, everything else to
// Internal. Header-only so that code which does not use NVRTC need not link it.
inline absl::Status NvrtcResultToStatus(nvrtcResult result, absl::string_view expression,
                                        absl::string_view file, int line) {
  if (result == NVRTC_SUCCESS) return absl::OkStatus();
  std::string message =
      absl::StrCat(expression, " failed at ", file, ":", line, ": ", nvrtcGetErrorString(result));
  if (result == NVRTC_ERROR_COMPILATION || result == NVRTC_ERROR_INVALID_OPTION ||
      result == NVRTC_ERROR_INVALID_INPUT || result == NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID) {
    return absl::InvalidArgumentError(message);
  }
  return absl::InternalError(message);
}

}  // namespace tileplan::device

#define TP_CUDA_STATUS(expr) \
  ::tileplan::device::CudaErrorToStatus((expr), #expr, __FILE__, __LINE__)
#define TP_NVRTC_STATUS(expr) \
  ::tileplan::device::NvrtcResultToStatus((expr), #expr, __FILE__, __LINE__)

// Evaluates a CUDA runtime call; returns its Status from the enclosing function on error.
#define TP_CUDA_RETURN_IF_ERROR(expr)                      \
  do {                                                     \
    ::absl::Status tp_cuda_status_ = TP_CUDA_STATUS(expr); \
    if (!tp_cuda_status_.ok()) return tp_cuda_status_;     \
  } while (false)

// Evaluates an NVRTC call; returns its Status from the enclosing function on error.
#define TP_NVRTC_RETURN_IF_ERROR(expr)                       \
  do {                                                       \
    ::absl::Status tp_nvrtc_status_ = TP_NVRTC_STATUS(expr); \
    if (!tp_nvrtc_status_.ok()) return tp_nvrtc_status_;     \
  } while (false)

#endif  // TILEPLAN_DEVICE_CUDA_STATUS_H_
