#include "models/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <optional>
#include <set>
#include <system_error>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/files.h"
#include "base/json.h"
#include "base/status_macros.h"
#include "base/text.h"

namespace tileplan::models {
namespace {

// A header larger than this is refused before it is parsed (the reference implementation uses
// the same bound): real headers are a few hundred kilobytes at most.
constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;
// model.safetensors.index.json files are read whole; real ones are well under a megabyte.
constexpr uintmax_t kMaxIndexBytes = uintmax_t{64} << 20;

constexpr char kSingleFileName[] = "model.safetensors";
constexpr char kIndexFileName[] = "model.safetensors.index.json";

struct DTypeInfo {
  StDType dtype;
  absl::string_view name;
  int64_t size;
};

constexpr DTypeInfo kDTypes[] = {
    {StDType::kBool, "BOOL", 1},      {StDType::kU8, "U8", 1},          {StDType::kI8, "I8", 1},
    {StDType::kF8E4M3, "F8_E4M3", 1}, {StDType::kF8E5M2, "F8_E5M2", 1}, {StDType::kI16, "I16", 2},
    {StDType::kU16, "U16", 2},        {StDType::kF16, "F16", 2},        {StDType::kBF16, "BF16", 2},
    {StDType::kI32, "I32", 4},        {StDType::kU32, "U32", 4},        {StDType::kF32, "F32", 4},
    {StDType::kI64, "I64", 8},        {StDType::kU64, "U64", 8},        {StDType::kF64, "F64", 8},
};

const DTypeInfo& Info(StDType dtype) {
  for (const DTypeInfo& info : kDTypes) {
    if (info.dtype == dtype) return info;
  }
  return kDTypes[0];  // unreachable for valid enumerators
}

// Names from files are quoted, escaped and cut so that odd bytes cannot garble a message.
std::string Quote(absl::string_view name) { return QuoteUntrusted(name); }

absl::Status TensorError(absl::string_view label, absl::string_view tensor,
                         absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(label, ": tensor ", Quote(tensor), ": ", problem));
}

// Non-negative int64 product of `shape`, or nullopt on overflow or a negative extent.
std::optional<int64_t> CheckedProduct(const std::vector<int64_t>& shape) {
  int64_t product = 1;
  for (int64_t extent : shape) {
    if (extent < 0 || __builtin_mul_overflow(product, extent, &product)) return std::nullopt;
  }
  return product;
}

// One header entry, validated against the data section [data, data + data_size).
absl::StatusOr<TensorView> ParseEntry(absl::string_view label, const std::string& name,
                                      const Json& entry, const std::byte* data,
                                      uint64_t data_size) {
  if (!entry.is_object()) {
    return TensorError(
        label, name, absl::StrCat("entry is a ", Json::TypeName(entry.type()), ", not an object"));
  }
  for (const auto& [key, value] : entry.as_object()) {
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      return TensorError(label, name, absl::StrCat("unexpected field ", Quote(key)));
    }
  }
  const Json* dtype = entry.Find("dtype");
  const Json* shape = entry.Find("shape");
  const Json* offsets = entry.Find("data_offsets");
  if (dtype == nullptr) return TensorError(label, name, "missing field \"dtype\"");
  if (shape == nullptr) return TensorError(label, name, "missing field \"shape\"");
  if (offsets == nullptr) return TensorError(label, name, "missing field \"data_offsets\"");

  TensorView view;
  view.name = name;
  if (!dtype->is_string()) return TensorError(label, name, "\"dtype\" is not a string");
  absl::StatusOr<StDType> parsed_dtype = ParseStDType(dtype->as_string());
  if (!parsed_dtype.ok()) {
    return TensorError(label, name, absl::StrCat("\"dtype\": ", parsed_dtype.status().message()));
  }
  view.dtype = *parsed_dtype;

  if (!shape->is_array()) return TensorError(label, name, "\"shape\" is not an array");
  for (const Json& extent : shape->as_array()) {
    if (!extent.is_int() || extent.as_int() < 0) {
      return TensorError(label, name, "\"shape\" has an entry that is not a non-negative integer");
    }
    view.shape.push_back(extent.as_int());
  }

  if (!offsets->is_array() || offsets->as_array().size() != 2) {
    return TensorError(label, name, "\"data_offsets\" is not an array of two integers");
  }
  const Json& begin_json = offsets->as_array()[0];
  const Json& end_json = offsets->as_array()[1];
  if (!begin_json.is_int() || !end_json.is_int() || begin_json.as_int() < 0 ||
      end_json.as_int() < 0) {
    return TensorError(label, name, "\"data_offsets\" entries must be non-negative integers");
  }
  const int64_t begin = begin_json.as_int();
  const int64_t end = end_json.as_int();
  if (begin > end) {
    return TensorError(label, name,
                       absl::StrCat("\"data_offsets\" begin ", begin, " exceeds end ", end));
  }

  const std::optional<int64_t> elements = CheckedProduct(view.shape);
  int64_t expected_bytes = 0;
  if (!elements.has_value() ||
      __builtin_mul_overflow(*elements, StDTypeSize(view.dtype), &expected_bytes)) {
    return TensorError(label, name, "\"shape\" size in bytes overflows int64");
  }
  if (expected_bytes != end - begin) {
    return TensorError(
        label, name,
        absl::StrCat("shape [", absl::StrJoin(view.shape, ","), "] of ", StDTypeName(view.dtype),
                     " needs ", expected_bytes, " bytes but \"data_offsets\" span ", end - begin));
  }
  if (static_cast<uint64_t>(end) > data_size) {
    return TensorError(label, name,
                       absl::StrCat("\"data_offsets\" [", begin, ", ", end,
                                    "] run past the data section of ", data_size, " bytes"));
  }
  view.data = data + begin;
  view.nbytes = static_cast<size_t>(end - begin);
  return view;
}

absl::Status ParseMetadata(absl::string_view label, const Json& json,
                           std::map<std::string, std::string>& metadata) {
  if (!json.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": \"__metadata__\" is not an object of strings"));
  }
  for (const auto& [key, value] : json.as_object()) {
    if (!value.is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(label, ": \"__metadata__\" entry ", Quote(key), " is not a string"));
    }
    metadata.emplace(key, value.as_string());
  }
  return absl::OkStatus();
}

// Fills `tensors` and `metadata` from a complete safetensors image.
absl::Status ParseImage(const std::byte* bytes, size_t size, absl::string_view label,
                        std::map<std::string, TensorView>& tensors,
                        std::map<std::string, std::string>& metadata) {
  if (size < 8) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": file is ", size, " bytes, shorter than the 8-byte header length"));
  }
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | static_cast<uint8_t>(bytes[i]);
  if (header_size > kMaxHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": header length ", header_size,
                                                   " exceeds the limit of ", kMaxHeaderBytes));
  }
  if (header_size > size - 8) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": header length ", header_size,
                                                   " runs past the end of the file (", size,
                                                   " bytes)"));
  }
  const absl::string_view header_text(reinterpret_cast<const char*>(bytes + 8), header_size);
  absl::StatusOr<Json> header = Json::Parse(header_text);
  if (!header.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": header is not valid JSON: ", header.status().message()));
  }
  if (!header->is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        label, ": header is a JSON ", Json::TypeName(header->type()), ", not an object"));
  }

  const std::byte* data = bytes + 8 + header_size;
  const uint64_t data_size = size - 8 - header_size;
  for (const auto& [name, entry] : header->as_object()) {
    if (name == "__metadata__") {
      TP_RETURN_IF_ERROR(ParseMetadata(label, entry, metadata));
      continue;
    }
    TP_ASSIGN_OR_RETURN(TensorView view, ParseEntry(label, name, entry, data, data_size));
    tensors.emplace(name, std::move(view));
  }

  // Non-empty ranges sorted by start must not overlap; empty tensors occupy no bytes.
  std::vector<const TensorView*> ranges;
  for (const auto& [name, view] : tensors) {
    if (view.nbytes > 0) ranges.push_back(&view);
  }
  std::sort(ranges.begin(), ranges.end(), [](const TensorView* a, const TensorView* b) {
    return std::tie(a->data, a->nbytes, a->name) < std::tie(b->data, b->nbytes, b->name);
  });
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i]->data < ranges[i - 1]->data + ranges[i - 1]->nbytes) {
      return TensorError(
          label, ranges[i]->name,
          absl::StrCat("\"data_offsets\" overlap those of tensor ", Quote(ranges[i - 1]->name)));
    }
  }
  return absl::OkStatus();
}

// Closes a file descriptor on scope exit.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() { ::close(fd_); }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;

 private:
  int fd_;
};

absl::Status ErrnoError(int error, absl::string_view what) {
  const std::string message = absl::StrCat(what, ": ", std::strerror(error));
  return error == ENOENT ? absl::NotFoundError(message) : absl::InvalidArgumentError(message);
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exponent = (h >> 10) & 0x1F;
  const uint32_t mantissa = h & 0x3FF;
  uint32_t bits;
  if (exponent == 0x1F) {
    bits = sign | 0x7F800000u | (mantissa << 13);  // inf, or NaN keeping its payload
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else {
    // Zero or subnormal: mantissa × 2^-24, exact in float.
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign != 0 ? -magnitude : magnitude;
  }
  float out;
  std::memcpy(&out, &bits, sizeof(out));
  return out;
}

// A shard name from the index must name a file directly inside the checkpoint directory.
bool IsPlainFileName(absl::string_view name) {
  return !name.empty() && name.find('/') == absl::string_view::npos &&
         name.find('\\') == absl::string_view::npos && name.find("..") == absl::string_view::npos &&
         name.find('\0') == absl::string_view::npos && name != ".";
}

}  // namespace

absl::StatusOr<StDType> ParseStDType(absl::string_view name) {
  for (const DTypeInfo& info : kDTypes) {
    if (info.name == name) return info.dtype;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown safetensors dtype ", Quote(name)));
}

absl::string_view StDTypeName(StDType dtype) { return Info(dtype).name; }

int64_t StDTypeSize(StDType dtype) { return Info(dtype).size; }

int64_t TensorView::num_elements() const { return CheckedProduct(shape).value_or(-1); }

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(
    const std::filesystem::path& path) {
  const std::string label = path.string();
  // O_NONBLOCK keeps a FIFO at `path` from blocking the open; it is refused below.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return ErrnoError(errno, absl::StrCat(label, ": cannot open"));
  FdCloser closer(fd);
  struct stat st;
  if (::fstat(fd, &st) != 0) return ErrnoError(errno, absl::StrCat(label, ": cannot stat"));
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": not a regular file"));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < 8) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": file is ", size, " bytes, shorter than the 8-byte header length"));
  }
  void* mapping = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (mapping == MAP_FAILED) return ErrnoError(errno, absl::StrCat(label, ": cannot mmap"));

  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->label_ = label;
  file->mapping_ = mapping;
  file->mapping_size_ = size;
  TP_RETURN_IF_ERROR(ParseImage(static_cast<const std::byte*>(mapping), size, file->label_,
                                file->tensors_, file->metadata_));
  return file;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::FromBuffer(const std::byte* bytes,
                                                                             size_t size,
                                                                             std::string label) {
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->label_ = std::move(label);
  TP_RETURN_IF_ERROR(ParseImage(bytes, size, file->label_, file->tensors_, file->metadata_));
  return file;
}

SafetensorsFile::~SafetensorsFile() {
  if (mapping_ != nullptr) ::munmap(mapping_, mapping_size_);
}

const TensorView* SafetensorsFile::Find(absl::string_view name) const {
  auto it = tensors_.find(std::string(name));
  return it == tensors_.end() ? nullptr : &it->second;
}

absl::StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::Open(const std::filesystem::path& dir) {
  std::error_code error;
  if (!std::filesystem::is_directory(dir, error)) {
    return absl::NotFoundError(absl::StrCat(dir.string(), ": not a directory"));
  }
  std::unique_ptr<Checkpoint> checkpoint(new Checkpoint());
  checkpoint->dir_ = dir;

  const std::filesystem::path single = dir / kSingleFileName;
  if (std::filesystem::exists(single, error)) {
    TP_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file, SafetensorsFile::Open(single));
    for (const auto& [name, view] : file->tensors()) checkpoint->index_.emplace(name, &view);
    checkpoint->files_.push_back(std::move(file));
    return checkpoint;
  }

  const std::filesystem::path index_path = dir / kIndexFileName;
  if (!std::filesystem::exists(index_path, error)) {
    return absl::NotFoundError(
        absl::StrCat(dir.string(), ": has neither ", kSingleFileName, " nor ", kIndexFileName));
  }
  const std::string label = index_path.string();
  TP_ASSIGN_OR_RETURN(const std::string text, ReadRegularFile(index_path.string(), kMaxIndexBytes));
  absl::StatusOr<Json> index = Json::Parse(text);
  if (!index.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": not valid JSON: ", index.status().message()));
  }
  if (!index->is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": not a JSON object"));
  }
  for (const auto& [key, value] : index->as_object()) {
    if (key == "metadata") {
      if (!value.is_object()) {
        return absl::InvalidArgumentError(absl::StrCat(label, ": \"metadata\" is not an object"));
      }
    } else if (key != "weight_map") {
      return absl::InvalidArgumentError(absl::StrCat(label, ": unexpected field ", Quote(key)));
    }
  }
  const Json* weight_map = index->Find("weight_map");
  if (weight_map == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": missing field \"weight_map\""));
  }
  if (!weight_map->is_object() || weight_map->as_object().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": \"weight_map\" is not a non-empty object"));
  }

  // tensor -> shard as the index states it; shards opened in name order.
  std::map<std::string, std::string> assigned;
  std::set<std::string> shard_names;
  for (const auto& [tensor, shard] : weight_map->as_object()) {
    if (!shard.is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(label, ": \"weight_map\" entry for tensor ",
                                                     Quote(tensor), " is not a string"));
    }
    if (!IsPlainFileName(shard.as_string())) {
      return absl::InvalidArgumentError(absl::StrCat(label, ": shard ", Quote(shard.as_string()),
                                                     " of tensor ", Quote(tensor),
                                                     " is not a plain file name"));
    }
    assigned.emplace(tensor, shard.as_string());
    shard_names.insert(shard.as_string());
  }
  std::map<std::string, const SafetensorsFile*> shards;
  for (const std::string& shard_name : shard_names) {
    TP_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file,
                        SafetensorsFile::Open(dir / shard_name));
    shards.emplace(shard_name, file.get());
    checkpoint->files_.push_back(std::move(file));
  }

  std::map<std::string, std::string> found_in;  // tensor -> first shard holding it
  for (const auto& [shard_name, file] : shards) {
    for (const auto& [tensor, view] : file->tensors()) {
      auto [it, inserted] = found_in.emplace(tensor, shard_name);
      if (!inserted) {
        return absl::InvalidArgumentError(absl::StrCat(label, ": tensor ", Quote(tensor),
                                                       " is in two shards: ", Quote(it->second),
                                                       " and ", Quote(shard_name)));
      }
      if (assigned.find(tensor) == assigned.end()) {
        return absl::InvalidArgumentError(absl::StrCat(label, ": tensor ", Quote(tensor),
                                                       " of shard ", Quote(shard_name),
                                                       " is not listed in \"weight_map\""));
      }
    }
  }
  for (const auto& [tensor, shard_name] : assigned) {
    const TensorView* view = shards.at(shard_name)->Find(tensor);
    if (view == nullptr) {
      auto it = found_in.find(tensor);
      return absl::InvalidArgumentError(absl::StrCat(
          label, ": tensor ", Quote(tensor), " is listed for shard ", Quote(shard_name),
          it == found_in.end() ? absl::StrCat(" but no shard holds it")
                               : absl::StrCat(" but is in shard ", Quote(it->second))));
    }
    checkpoint->index_.emplace(tensor, view);
  }
  return checkpoint;
}

const TensorView* Checkpoint::Find(absl::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

std::vector<std::string> Checkpoint::TensorNames() const {
  std::vector<std::string> names;
  names.reserve(index_.size());
  for (const auto& [name, view] : index_) names.push_back(name);
  return names;
}

absl::StatusOr<std::vector<float>> ToFloat32(const TensorView& tensor) {
  if (tensor.dtype != StDType::kF32 && tensor.dtype != StDType::kBF16 &&
      tensor.dtype != StDType::kF16) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", Quote(tensor.name), ": dtype ",
                                                   StDTypeName(tensor.dtype),
                                                   " cannot be converted to float32"));
  }
  const int64_t elements = tensor.num_elements();
  const int64_t element_size = StDTypeSize(tensor.dtype);
  int64_t expected_bytes = 0;
  if (elements < 0 || __builtin_mul_overflow(elements, element_size, &expected_bytes) ||
      static_cast<uint64_t>(expected_bytes) != tensor.nbytes ||
      (tensor.nbytes > 0 && tensor.data == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor ", Quote(tensor.name), ": ", tensor.nbytes, " bytes of data do not hold shape [",
        absl::StrJoin(tensor.shape, ","), "] of ", StDTypeName(tensor.dtype)));
  }
  // Safetensors data is little-endian, as is every host tileplan targets; elements may be
  // unaligned, so they are copied out byte-wise.
  std::vector<float> out(static_cast<size_t>(elements));
  const std::byte* data = tensor.data;
  if (tensor.dtype == StDType::kF32) {
    if (!out.empty()) std::memcpy(out.data(), data, tensor.nbytes);
    return out;
  }
  for (size_t i = 0; i < out.size(); ++i) {
    uint16_t half;
    std::memcpy(&half, data + 2 * i, 2);
    if (tensor.dtype == StDType::kBF16) {
      const uint32_t bits = static_cast<uint32_t>(half) << 16;
      std::memcpy(&out[i], &bits, 4);
    } else {
      out[i] = HalfToFloat(half);
    }
  }
  return out;
}

}  // namespace tileplan::models
