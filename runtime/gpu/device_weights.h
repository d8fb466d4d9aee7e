// A model's weights on the device: every weight of a plan's phase graphs in one allocation,
// each at a 256-byte-aligned offset.
//
// From a checkpoint, each weight's checkpoint tensors are streamed from the memory-mapped
// files through a pinned staging buffer, converted to the weight's dtype when the checkpoint
// stores another floating-point dtype, and packed (QKV, gate/up: parts concatenated along
// dim 0) in the same pass, so no packed copy ever exists on the host; a part that is a slice
// of its tensor (a tensor-parallel rank's share, docs/ir.md "Sliced weights") streams only the
// slice's elements. Random weights are generated on the device (for benchmarks at real size
// without a checkpoint).
#ifndef TILEPLAN_RUNTIME_GPU_DEVICE_WEIGHTS_H_
#define TILEPLAN_RUNTIME_GPU_DEVICE_WEIGHTS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "device/device.h"
#include "device/device_buffer.h"
#include "kernels/launch/kernel_loader.h"
#include "models/safetensors.h"
#include "regions/ir.h"

namespace tileplan::runtime::gpu {

// One weight of the layout.
struct WeightSlot {
  std::string name;  // the graph's weight name (without '%')
  ir::TensorType type;
  std::vector<std::string> checkpoint_tensors;  // in concatenation order
  // Empty when every part is whole; otherwise the slice of each part (ir::Value).
  std::vector<ir::TensorSlice> checkpoint_slices;
  ir::TensorSlice slice(size_t k) const {
    return checkpoint_slices.empty() ? ir::TensorSlice::Whole() : checkpoint_slices[k];
  }
  int64_t offset = 0;  // bytes into the allocation
  int64_t bytes = 0;
};

// Where every weight of a set of graphs goes. Graphs of one model may declare the same
// weight; they must agree on its type and its checkpoint tensors.
class WeightLayout {
 public:
  // InvalidArgument naming the weight when two graphs disagree, or a weight has a symbolic
  // shape.
  static absl::StatusOr<WeightLayout> ForGraphs(const std::vector<const ir::Graph*>& graphs);

  const std::vector<WeightSlot>& slots() const { return slots_; }  // sorted by name
  const WeightSlot* Find(absl::string_view name) const;            // nullptr when absent
  int64_t total_bytes() const { return total_bytes_; }

 private:
  std::vector<WeightSlot> slots_;
  int64_t total_bytes_ = 0;
};

class DeviceWeights {
 public:
  // Allocates the layout on `device` and fills it from `checkpoint`, which must hold exactly
  // the weights' checkpoint tensors with their shapes (the rules of models::BindCheckpoint:
  // every tensor bound, whole once or by slices inside it, packed parts with the weight's
  // trailing dims, dim-0 extents summing to the weight's). A floating-point tensor of another dtype
  // (f32, f16, bf16) is converted, rounding to nearest even. Errors name the tensor;
  // ResourceExhausted gives the sizes asked and available. The checks Load makes before it
  // allocates anything: every checkpoint tensor of every weight present with a fitting float dtype
  // and shape, none bound twice, none left over.
  static absl::Status CheckCheckpoint(const WeightLayout& layout,
                                      const models::Checkpoint& checkpoint);

  static absl::StatusOr<std::unique_ptr<DeviceWeights>> Load(const device::Device& device,
                                                             WeightLayout layout,
                                                             const models::Checkpoint& checkpoint);

  // Allocates the layout and fills it on the device from `seed`: matrices uniform with
  // standard deviation 1/sqrt(columns) (embedding tables: 1), vectors of norm weights
  // 1 ± 0.1 and other vectors (biases) ± 0.1. Deterministic for a seed.
  static absl::StatusOr<std::unique_ptr<DeviceWeights>> Random(const device::Device& device,
                                                               WeightLayout layout,
                                                               kernels::KernelLoader& loader,
                                                               uint64_t seed);

  const WeightLayout& layout() const { return layout_; }
  // The device address of weight `name`; NotFound naming it when the layout has none.
  absl::StatusOr<void*> Address(absl::string_view name) const;
  int64_t bytes() const { return layout_.total_bytes(); }

 private:
  DeviceWeights(WeightLayout layout, device::DeviceBuffer buffer)
      : layout_(std::move(layout)), buffer_(std::move(buffer)) {}

  WeightLayout layout_;
  device::DeviceBuffer buffer_;
};

}  // namespace tileplan::runtime::gpu

#endif  // TILEPLAN_RUNTIME_GPU_DEVICE_WEIGHTS_H_
