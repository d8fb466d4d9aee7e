// Safetensors checkpoints: one file, or shards listed by model.safetensors.index.json.
//
// Files are memory-mapped read-only and every header field is validated before any tensor
// is exposed: 8-byte little-endian header length within the file; header is strict JSON
// (base/json.h); every entry has a known dtype name, a shape of non-negative integers and
// data_offsets [begin, end] with begin <= end; shape product × dtype size equals end - begin
// without integer overflow; ranges lie inside the data section and do not overlap. The
// optional "__metadata__" entry must map strings to strings.
//
// Lifetime: TensorView::data points into the mapping owned by the SafetensorsFile (or the
// Checkpoint holding it); it is valid while that object lives. Data is little-endian and not
// necessarily aligned. The mapping is private and read-only; a file truncated by another process
// while mapped is outside this contract (the kernel reports it as SIGBUS on access).
#ifndef TILEPLAN_MODELS_SAFETENSORS_H_
#define TILEPLAN_MODELS_SAFETENSORS_H_

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tileplan::models {

// Every dtype name the safetensors format defines.
enum class StDType {
  kBool, kU8, kI8, kF8E4M3, kF8E5M2, kI16, kU16, kF16, kBF16, kI32, kU32, kF32, kI64, kU64, kF64
};
absl::StatusOr<StDType> ParseStDType(absl::string_view name);  // "BF16" -> kBF16
absl::string_view StDTypeName(StDType dtype);
int64_t StDTypeSize(StDType dtype);

struct TensorView {
  std::string name;
  StDType dtype = StDType::kF32;
  std::vector<int64_t> shape;
  const std::byte* data = nullptr;
  size_t nbytes = 0;
  // Product of `shape` (1 for a scalar); -1 if it overflows int64 or an extent is negative,
  // which only a hand-built view can have.
  int64_t num_elements() const;
};

class SafetensorsFile {
 public:
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::filesystem::path& path);
  // Parses an in-memory image (tests, fuzzing). `bytes` must outlive the object.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> FromBuffer(const std::byte* bytes,
                                                                     size_t size,
                                                                     std::string label);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& label() const { return label_; }  // path or label, for messages
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }  // sorted
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const TensorView* Find(absl::string_view name) const;

 private:
  SafetensorsFile() = default;
  std::string label_;
  void* mapping_ = nullptr;  // owned mmap, or nullptr for FromBuffer
  size_t mapping_size_ = 0;
  std::map<std::string, TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
};

// A checkpoint directory: model.safetensors, or model.safetensors.index.json + shards
// ("weight_map": tensor -> shard file). Every shard named is opened; a tensor listed in the
// index must be in the shard it names; a shard tensor missing from the index, or a tensor in
// two shards, is an error. Shard names must be plain file names inside the directory (no '/',
// '\\' or ".."). When both model.safetensors and the index exist, model.safetensors is used, as
// transformers does.
class Checkpoint {
 public:
  static absl::StatusOr<std::unique_ptr<Checkpoint>> Open(const std::filesystem::path& dir);

  const TensorView* Find(absl::string_view name) const;
  // Sorted; the names live as long as the checkpoint.
  std::vector<absl::string_view> TensorNames() const;
  const std::filesystem::path& dir() const { return dir_; }

 private:
  Checkpoint() = default;
  std::filesystem::path dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  // Tensor name (the view's own) -> its view in files_.
  std::map<absl::string_view, const TensorView*> index_;
};

// Upcasts F32, BF16 or F16 data to float32; other dtypes are an InvalidArgument error
// naming the tensor.
absl::StatusOr<std::vector<float>> ToFloat32(const TensorView& tensor);

}  // namespace tileplan::models

#endif  // TILEPLAN_MODELS_SAFETENSORS_H_
