// CUDA-event timing of work enqueued back to back on one stream: what the benchmark's
// replays, the per-step profile and the tuner's candidate runs all measure.
#ifndef TILEPLAN_DEVICE_EVENT_TIMER_H_
#define TILEPLAN_DEVICE_EVENT_TIMER_H_

#include <vector>

#include <cuda_runtime_api.h>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tileplan::device {

// Records an event on `stream`, then for i = 0 .. count - 1 calls enqueue(i) and records an
// event after it; then calls `finish`, which must wait for the stream (a synchronize, and
// whatever checks of the work's results the caller makes there); then returns the
// milliseconds between consecutive events, one per piece of work. The first error of an
// enqueue, a record or `finish` stops it and is returned; the events are destroyed on every
// path.
absl::StatusOr<std::vector<double>> TimeEach(cudaStream_t stream, int count,
                                             absl::FunctionRef<absl::Status(int)> enqueue,
                                             absl::FunctionRef<absl::Status()> finish);

}  // namespace tileplan::device

#endif  // TILEPLAN_DEVICE_EVENT_TIMER_H_
