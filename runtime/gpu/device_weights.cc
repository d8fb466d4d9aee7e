#include "runtime/gpu/device_weights.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/align.h"
#include "base/status_macros.h"
#include "base/text.h"
#include "device/cuda_status.h"
#include "kernels/core/template_launch.h"
#include "models/lowering.h"

namespace tileplan::runtime::gpu {
namespace {

constexpr int64_t kAlignment = 256;
constexpr int64_t kStagingBytes = 64 << 20;

absl::StatusOr<std::vector<int64_t>> StaticShape(const std::string& name,
                                                 const ir::TensorType& type) {
  std::vector<int64_t> shape;
  for (const ir::Dim& d : type.dims) {
    if (!d.is_static()) {
      return absl::InvalidArgumentError(absl::StrCat("weight %", name, " has the symbolic shape ",
                                                     type.ToString(), "; weights are static"));
    }
    shape.push_back(d.extent());
  }
  return shape;
}

int64_t Product(const std::vector<int64_t>& v, size_t from = 0) {
  int64_t p = 1;
  for (size_t i = from; i < v.size(); ++i) p *= v[i];
  return p;
}

// The ir dtype a safetensors floating-point dtype holds, if any.
std::optional<ir::DType> FloatDType(models::StDType d) {
  switch (d) {
    case models::StDType::kF32:
      return ir::DType::kF32;
    case models::StDType::kBF16:
      return ir::DType::kBF16;
    case models::StDType::kF16:
      return ir::DType::kF16;
    default:
      return std::nullopt;
  }
}

// A pinned host buffer, freed on destruction.
class PinnedBuffer {
 public:
  static absl::StatusOr<PinnedBuffer> Allocate(int64_t bytes) {
    void* p = nullptr;
    TP_CUDA_RETURN_IF_ERROR(cudaMallocHost(&p, static_cast<size_t>(bytes)));
    return PinnedBuffer(p);
  }
  PinnedBuffer(PinnedBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  ~PinnedBuffer() {
    if (p_ != nullptr) cudaFreeHost(p_);
  }
  std::byte* data() const { return static_cast<std::byte*>(p_); }

 private:
  explicit PinnedBuffer(void* p) : p_(p) {}
  void* p_;
};

// Copies `n` elements of dtype `from` at `data` to the device at base + dst as dtype `to`,
// through `staging` in chunks of `chunk` elements; returns the byte offset after them.
absl::StatusOr<int64_t> CopyRun(const std::byte* data, int64_t n, ir::DType from, ir::DType to,
                                int64_t chunk, PinnedBuffer& staging, std::byte* base,
                                int64_t dst) {
  const int64_t es = ir::DTypeSize(to), from_size = ir::DTypeSize(from);
  for (int64_t i = 0; i < n; i += chunk) {
    const int64_t m = std::min(chunk, n - i);
    const std::byte* src = data + i * from_size;
    if (from == to) {
      std::memcpy(staging.data(), src, static_cast<size_t>(m * es));
    } else {
      const std::vector<float> values =
          kernels::DecodeFloats(from, absl::string_view(reinterpret_cast<const char*>(src),
                                                        static_cast<size_t>(m * from_size)));
      const std::string encoded = kernels::EncodeFloats(to, values);
      std::memcpy(staging.data(), encoded.data(), encoded.size());
    }
    TP_CUDA_RETURN_IF_ERROR(cudaMemcpy(base + dst, staging.data(), static_cast<size_t>(m * es),
                                       cudaMemcpyHostToDevice));
    dst += m * es;
  }
  return dst;
}

}  // namespace

absl::StatusOr<WeightLayout> WeightLayout::ForGraphs(const std::vector<const ir::Graph*>& graphs) {
  std::map<std::string, WeightSlot> by_name;
  for (const ir::Graph* graph : graphs) {
    for (ir::ValueId id : graph->weights()) {
      const ir::Value& v = graph->value(id);
      TP_RETURN_IF_ERROR(StaticShape(v.name, v.type).status());
      std::vector<std::string> parts = v.checkpoint_tensors;
      if (parts.empty()) parts = {v.name};
      auto [it, inserted] = by_name.try_emplace(v.name);
      if (inserted) {
        it->second.name = v.name;
        it->second.type = v.type;
        it->second.checkpoint_tensors = std::move(parts);
        it->second.checkpoint_slices = v.checkpoint_slices;
      } else if (!(it->second.type == v.type) || it->second.checkpoint_tensors != parts ||
                 it->second.checkpoint_slices != v.checkpoint_slices) {
        return absl::InvalidArgumentError(absl::StrCat(
            "weight %", v.name, " is ", v.type.ToString(), " of [", absl::StrJoin(parts, ", "),
            "] in one graph and ", it->second.type.ToString(), " of [",
            absl::StrJoin(it->second.checkpoint_tensors, ", "), "] in another"));
      }
    }
  }
  WeightLayout layout;
  for (auto& [name, slot] : by_name) {
    slot.bytes = ir::DTypeSize(slot.type.dtype) * Product(*StaticShape(name, slot.type));
    slot.offset = layout.total_bytes_;
    layout.total_bytes_ = AlignUp(layout.total_bytes_ + slot.bytes, kAlignment);
    layout.slots_.push_back(std::move(slot));
  }
  return layout;
}

const WeightSlot* WeightLayout::Find(absl::string_view name) const {
  auto it = std::lower_bound(slots_.begin(), slots_.end(), name,
                             [](const WeightSlot& s, absl::string_view n) { return s.name < n; });
  return it != slots_.end() && it->name == name ? &*it : nullptr;
}

absl::StatusOr<void*> DeviceWeights::Address(absl::string_view name) const {
  const WeightSlot* slot = layout_.Find(name);
  if (slot == nullptr) {
    return absl::NotFoundError(absl::StrCat("no weight %", name, " on the device"));
  }
  return static_cast<std::byte*>(buffer_.data()) + slot->offset;
}

absl::Status DeviceWeights::CheckCheckpoint(const WeightLayout& layout,
                                            const models::Checkpoint& checkpoint) {
  // Check every tensor first, so nothing is allocated or copied for a checkpoint that does
  // not fit the layout.
  std::set<std::string, std::less<>> bound, bound_whole;
  for (const WeightSlot& slot : layout.slots()) {
    const std::vector<int64_t> shape = *StaticShape(slot.name, slot.type);
    int64_t rows = 0;
    for (size_t k = 0; k < slot.checkpoint_tensors.size(); ++k) {
      const std::string& part = slot.checkpoint_tensors[k];
      const models::TensorView* t = checkpoint.Find(part);
      if (t == nullptr) {
        return absl::NotFoundError(absl::StrCat("checkpoint ", checkpoint.dir().string(),
                                                " has no tensor ", QuoteUntrusted(part),
                                                " (weight %", slot.name, ")"));
      }
      // A tensor is bound whole once; slices may read it again (docs/ir.md, "Sliced weights").
      const ir::TensorSlice slice = slot.slice(k);
      if (slice.whole() && !bound_whole.insert(part).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("checkpoint tensor ", QuoteUntrusted(part), " is bound twice"));
      }
      bound.insert(part);
      const std::optional<std::vector<int64_t>> sliced = models::SlicedShape(t->shape, slice);
      if (!sliced.has_value()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "weight %", slot.name, " binds elements [", slice.start, ", ", slice.start + slice.size,
            ") of dim ", slice.dim, " of checkpoint tensor ", QuoteUntrusted(part),
            ", which has shape [", absl::StrJoin(t->shape, ","), "]"));
      }
      const std::vector<int64_t>& part_shape = *sliced;
      if (!FloatDType(t->dtype)) {
        return absl::InvalidArgumentError(absl::StrCat("checkpoint tensor ", QuoteUntrusted(part),
                                                       " is ", models::StDTypeName(t->dtype),
                                                       "; weights must be F32, BF16 or F16"));
      }
      const int64_t part_rows =
          models::PackedPartRows(part_shape, shape, slot.checkpoint_tensors.size());
      if (part_rows < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "checkpoint tensor ", QuoteUntrusted(part), " has shape [",
            absl::StrJoin(t->shape, ","), "]",
            slice.whole() ? "" : absl::StrCat(" (sliced: [", absl::StrJoin(part_shape, ","), "])"),
            ", which does not fit weight %", slot.name, " ", slot.type.ToString()));
      }
      rows += shape.empty() ? 1 : part_rows;
    }
    if (!shape.empty() && rows != shape[0]) {
      return absl::InvalidArgumentError(absl::StrCat("the parts of weight %", slot.name, " have ",
                                                     rows, " rows; the weight has ", shape[0]));
    }
  }
  for (const absl::string_view name : checkpoint.TensorNames()) {
    if (!bound.contains(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint tensor ", QuoteUntrusted(name), " is not a weight of the plan"));
    }
  }

  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DeviceWeights>> DeviceWeights::Load(
    const device::Device& device, WeightLayout layout, const models::Checkpoint& checkpoint) {
  TP_RETURN_IF_ERROR(CheckCheckpoint(layout, checkpoint));
  TP_ASSIGN_OR_RETURN(device::DeviceBuffer buffer,
                      device::DeviceBuffer::Allocate(device, layout.total_bytes()));
  TP_ASSIGN_OR_RETURN(PinnedBuffer staging, PinnedBuffer::Allocate(kStagingBytes));
  std::byte* const base = static_cast<std::byte*>(buffer.data());
  for (const WeightSlot& slot : layout.slots()) {
    int64_t dst = slot.offset;
    const int64_t es = ir::DTypeSize(slot.type.dtype);
    for (size_t k = 0; k < slot.checkpoint_tensors.size(); ++k) {
      const models::TensorView& t = *checkpoint.Find(slot.checkpoint_tensors[k]);
      const ir::DType from = *FloatDType(t.dtype);
      const int64_t from_size = ir::DTypeSize(from);
      const int64_t chunk = kStagingBytes / std::max(es, from_size);
      for (const models::ElementRun& run : models::SliceRuns(t.shape, slot.slice(k))) {
        TP_ASSIGN_OR_RETURN(dst, CopyRun(t.data + run.first * from_size, run.count, from,
                                         slot.type.dtype, chunk, staging, base, dst));
      }
    }
  }
  return std::unique_ptr<DeviceWeights>(new DeviceWeights(std::move(layout), std::move(buffer)));
}

absl::StatusOr<std::unique_ptr<DeviceWeights>> DeviceWeights::Random(const device::Device& device,
                                                                     WeightLayout layout,
                                                                     kernels::KernelLoader& loader,
                                                                     uint64_t seed) {
  TP_ASSIGN_OR_RETURN(device::DeviceBuffer buffer,
                      device::DeviceBuffer::Allocate(device, layout.total_bytes()));
  std::byte* const base = static_cast<std::byte*>(buffer.data());
  uint64_t index = 0;
  for (const WeightSlot& slot : layout.slots()) {
    const std::vector<int64_t> shape = *StaticShape(slot.name, slot.type);
    const int64_t n = Product(shape);
    float scale = 0.1f, offset = 0.0f;
    if (shape.size() >= 2) {
      const bool table = slot.name.find("embed") != std::string::npos;
      // Uniform on [-a, a) has standard deviation a / sqrt(3).
      const double std_dev = table ? 1.0 : 1.0 / std::sqrt(static_cast<double>(Product(shape, 1)));
      scale = static_cast<float>(std_dev * std::sqrt(3.0));
    } else if (slot.name.find("norm") != std::string::npos) {
      offset = 1.0f;
    }
    TP_RETURN_IF_ERROR(loader.FillUniform(base + slot.offset, slot.type.dtype, n,
                                          seed * 1000003ull + index++, scale, offset,
                                          /*stream=*/nullptr));
  }
  TP_RETURN_IF_ERROR(device.Synchronize());
  return std::unique_ptr<DeviceWeights>(new DeviceWeights(std::move(layout), std::move(buffer)));
}

}  // namespace tileplan::runtime::gpu
