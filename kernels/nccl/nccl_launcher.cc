#include "kernels/nccl/nccl_launcher.h"

#include <cstddef>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "device/cuda_status.h"
#include "regions/shape_rules.h"

namespace tileplan::kernels {
namespace {

absl::StatusOr<ncclDataType_t> NcclType(ir::DType dtype) {
  switch (dtype) {
    case ir::DType::kBF16:
      return ncclBfloat16;
    case ir::DType::kF16:
      return ncclFloat16;
    case ir::DType::kF32:
      return ncclFloat32;
    case ir::DType::kI32:
      return ncclInt32;
  }
  return absl::InvalidArgumentError("unknown dtype");
}

class NcclStep final : public LibraryStep {
 public:
  NcclStep(const device::Communicator& communicator, std::string kind, ncclDataType_t type,
           int64_t element_bytes, int64_t rows, int64_t count, KernelLoader* loader,
           LoadedInstance* bias_kernel)
      : communicator_(communicator),
        kind_(std::move(kind)),
        type_(type),
        element_bytes_(element_bytes),
        rows_(rows),
        count_(count),
        loader_(loader),
        bias_kernel_(bias_kernel) {}

  absl::Status Launch(const RegionBuffers& buffers, cudaStream_t stream) override {
    const device::Nccl& nccl = communicator_.nccl();
    if (buffers.operands.empty() || buffers.results.empty() || buffers.operands[0] == nullptr ||
        buffers.results[0] == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(kind_, ": a buffer is missing"));
    }
    if (kind_ == "all_reduce") {
      TP_RETURN_IF_ERROR(nccl.Check(nccl.all_reduce(buffers.operands[0], buffers.results[0],
                                                    static_cast<size_t>(rows_ * count_), type_,
                                                    ncclSum, communicator_.comm(), stream),
                                    "ncclAllReduce"));
      if (bias_kernel_ == nullptr) return absl::OkStatus();
      // Every rank adds the bias to the same sum: it counts once.
      if (buffers.operands.size() < 2 || buffers.operands[1] == nullptr) {
        return absl::InvalidArgumentError("all_reduce: the bias buffer is missing");
      }
      AddBiasRowsParams p{};
      p.out = buffers.results[0];
      p.bias = buffers.operands[1];
      p.rows = rows_;
      p.n = count_;
      KernelLaunch launch = AddBiasRowsLaunch(p);
      return loader_->Launch(*bias_kernel_, launch, {.stream = stream});
    }
    // all_gather of `rows_` rows of `count_` elements from every rank.
    const int ranks = communicator_.ranks();
    if (rows_ == 1) {
      return nccl.Check(
          nccl.all_gather(buffers.operands[0], buffers.results[0], static_cast<size_t>(count_),
                          type_, communicator_.comm(), stream),
          "ncclAllGather");
    }
    if (buffers.workspace == nullptr) {
      return absl::InvalidArgumentError("all_gather of several rows: the workspace is missing");
    }
    TP_RETURN_IF_ERROR(nccl.Check(
        nccl.all_gather(buffers.operands[0], buffers.workspace, static_cast<size_t>(rows_ * count_),
                        type_, communicator_.comm(), stream),
        "ncclAllGather"));
    const size_t width = static_cast<size_t>(count_ * element_bytes_);
    for (int r = 0; r < ranks; ++r) {
      TP_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(
          static_cast<std::byte*>(buffers.results[0]) + r * width, width * ranks,
          static_cast<const std::byte*>(buffers.workspace) + r * rows_ * width, width, width,
          static_cast<size_t>(rows_), cudaMemcpyDeviceToDevice, stream));
    }
    return absl::OkStatus();
  }

  std::string Describe() const override {
    return absl::StrCat("NCCL ", communicator_.nccl().VersionString(), " ", kind_, " over ",
                        communicator_.ranks(), " ranks: ", rows_, " x ", count_, " elements");
  }

 private:
  const device::Communicator& communicator_;
  std::string kind_;
  ncclDataType_t type_;
  int64_t element_bytes_, rows_, count_;
  KernelLoader* loader_;
  LoadedInstance* bias_kernel_;  // an all_reduce with a bias: add_bias_rows, loaded
};

}  // namespace

absl::StatusOr<std::unique_ptr<LibraryStep>> NcclLauncher::PrepareStep(const BoundRegion& region,
                                                                       const Tactic&) {
  const std::string label = region.Label();
  const std::string& kind = region.kind();
  if (kind != "all_reduce" && kind != "all_gather") {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": the NCCL launcher runs all_reduce and all_gather, not ", kind));
  }
  const bool bias = kind == "all_reduce" && region.num_operands() == 2;
  if (region.num_operands() != 1 && !bias) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": ", kind, " takes one operand",
                                                   kind == "all_reduce" ? " and a bias" : "",
                                                   ", not ", region.num_operands()));
  }
  const int64_t ranks = region.region().attrs.GetIntOr("ranks", 1).value_or(1);
  if (ranks != communicator_.ranks()) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": a collective of ", ranks,
                                                   " ranks, but the communicator has ",
                                                   communicator_.ranks()));
  }
  const Layout& x = region.operand(0);
  const Layout& out = region.result(0);
  if (!x.IsContiguous() || !out.IsContiguous() || x.shape.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": NCCL needs contiguous operand and result"));
  }
  const ir::DType dtype = region.operand_dtype(0);
  absl::StatusOr<ncclDataType_t> type = NcclType(dtype);
  if (!type.ok())
    return absl::InvalidArgumentError(absl::StrCat(label, ": ", type.status().message()));
  const int64_t count = x.shape.back();
  const int64_t rows = count == 0 ? 0 : x.NumElements() / count;
  LoadedInstance* bias_kernel = nullptr;
  if (bias) {
    const Layout& b = region.operand(1);
    const ir::DType bias_dtype = region.operand_dtype(1);
    if (b.shape.size() != 1 || b.shape[0] != count || !b.IsContiguous() ||
        !ir::shape::IsFloat(bias_dtype) || !ir::shape::IsFloat(dtype)) {
      return absl::InvalidArgumentError(absl::StrCat(
          label, ": the bias must be a contiguous float vector of the sum's last dim (", count,
          "), beside a float sum"));
    }
    absl::StatusOr<LoadedInstance*> loaded = loader_.Load(AddBiasRowsInstance(dtype, bias_dtype));
    if (!loaded.ok()) {
      return absl::Status(loaded.status().code(),
                          absl::StrCat(label, ": the bias kernel: ", loaded.status().message()));
    }
    bias_kernel = *loaded;
  }
  return std::make_unique<NcclStep>(communicator_, kind, *type, ir::DTypeSize(dtype), rows, count,
                                    &loader_, bias_kernel);
}

absl::StatusOr<std::vector<Tactic>> NcclLauncher::Configs(const BoundRegion&, const Tactic& base,
                                                          int limit) {
  if (limit < 1) return std::vector<Tactic>{};
  return std::vector<Tactic>{base};
}

}  // namespace tileplan::kernels
