#include "device/event_timer.h"

#include "device/cuda_status.h"

namespace tileplan::device {

absl::StatusOr<std::vector<double>> TimeEach(cudaStream_t stream, int count,
                                             absl::FunctionRef<absl::Status(int)> enqueue,
                                             absl::FunctionRef<absl::Status()> finish) {
  std::vector<cudaEvent_t> events(static_cast<size_t>(count) + 1, nullptr);
  absl::Status status;
  for (cudaEvent_t& e : events) status.Update(TP_CUDA_STATUS(cudaEventCreate(&e)));
  if (status.ok()) status.Update(TP_CUDA_STATUS(cudaEventRecord(events[0], stream)));
  for (int i = 0; i < count && status.ok(); ++i) {
    status.Update(enqueue(i));
    status.Update(TP_CUDA_STATUS(cudaEventRecord(events[static_cast<size_t>(i) + 1], stream)));
  }
  if (status.ok()) status.Update(finish());
  std::vector<double> ms;
  for (int i = 0; i < count && status.ok(); ++i) {
    float t = 0;
    status.Update(TP_CUDA_STATUS(cudaEventElapsedTime(&t, events[static_cast<size_t>(i)],
                                                      events[static_cast<size_t>(i) + 1])));
    ms.push_back(t);
  }
  for (cudaEvent_t e : events) {
    if (e != nullptr) cudaEventDestroy(e);
  }
  if (!status.ok()) return status;
  return ms;
}

}  // namespace tileplan::device
