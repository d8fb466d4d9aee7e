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

// A shape of more dims than this is refused as soon as it is read, so that an absurd header
// cannot make the reader hold millions of extents (real tensors have a handful).
constexpr size_t kMaxShapeDims = 64;
// Elements of "data_offsets" read before the entry is refused without reading on.
constexpr int64_t kMaxOffsetsRead = 64;

// What a header entry's fields held, as HeaderReader saw them: each field absent, of the
// right type, or of a wrong one. ViewOf judges them in the order its checks are written.
struct RawEntry {
  enum class Field { kAbsent, kOk, kWrongType };
  Field dtype = Field::kAbsent, shape = Field::kAbsent, offsets = Field::kAbsent;
  std::string dtype_name;
  std::vector<int64_t> extents;
  bool bad_extent = false;   // an extent that is not a non-negative integer
  int64_t offset_count = 0;  // elements of "data_offsets"
  bool bad_offset = false;   // one of its first two is not a non-negative integer
  int64_t offset_values[2] = {0, 0};
};

// One header entry, validated against the data section [data, data + data_size).
absl::StatusOr<TensorView> ViewOf(absl::string_view label, const std::string& name,
                                  const RawEntry& entry, const std::byte* data,
                                  uint64_t data_size) {
  using Field = RawEntry::Field;
  if (entry.dtype == Field::kAbsent) return TensorError(label, name, "missing field \"dtype\"");
  if (entry.shape == Field::kAbsent) return TensorError(label, name, "missing field \"shape\"");
  if (entry.offsets == Field::kAbsent) {
    return TensorError(label, name, "missing field \"data_offsets\"");
  }

  TensorView view;
  view.name = name;
  if (entry.dtype != Field::kOk) return TensorError(label, name, "\"dtype\" is not a string");
  absl::StatusOr<StDType> parsed_dtype = ParseStDType(entry.dtype_name);
  if (!parsed_dtype.ok()) {
    return TensorError(label, name, absl::StrCat("\"dtype\": ", parsed_dtype.status().message()));
  }
  view.dtype = *parsed_dtype;

  if (entry.shape != Field::kOk) return TensorError(label, name, "\"shape\" is not an array");
  if (entry.bad_extent) {
    return TensorError(label, name, "\"shape\" has an entry that is not a non-negative integer");
  }
  view.shape = entry.extents;

  if (entry.offsets != Field::kOk || entry.offset_count != 2) {
    return TensorError(label, name, "\"data_offsets\" is not an array of two integers");
  }
  if (entry.bad_offset) {
    return TensorError(label, name, "\"data_offsets\" entries must be non-negative integers");
  }
  const int64_t begin = entry.offset_values[0];
  const int64_t end = entry.offset_values[1];
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

// Fills the file's map of tensors as a header is read. A std::map takes a name greater than
// all it holds at its end in constant time, while inserting names in no order walks the tree
// for each, a cache miss at most of its levels when a header holds a million names. Writers
// sort the names (within a dtype), and those go in at once; the others wait, and go in sorted
// once the header is read, each beside the one before.
class TensorMapBuilder {
 public:
  explicit TensorMapBuilder(std::map<std::string, TensorView>& map) : map_(map) {}

  void Add(TensorView view) {
    if (map_.empty() || map_.rbegin()->first < view.name) {
      map_.emplace_hint(map_.end(), view.name, std::move(view));
    } else {
      pending_.push_back(std::move(view));
    }
  }

  // Adds the tensors that waited; returns a name that repeats, if any.
  std::optional<std::string> Finish() {
    std::sort(pending_.begin(), pending_.end(),
              [](const TensorView& a, const TensorView& b) { return a.name < b.name; });
    for (TensorView& view : pending_) {
      // try_emplace leaves `view` as it was when the name is there already.
      if (!map_.try_emplace(view.name, std::move(view)).second) return view.name;
    }
    pending_ = std::vector<TensorView>();
    return std::nullopt;
  }

 private:
  std::map<std::string, TensorView>& map_;
  std::vector<TensorView> pending_;
};

// Reads a safetensors header from its JSON events without building the JSON tree: each entry's
// fields are kept as a RawEntry and become a TensorView when the entry closes, so memory
// follows what is kept (names, shapes, metadata strings), not the count of values in the text.
// A problem is reported when the member holding it closes (a field no entry may have, a key
// repeated in its object and a shape of too many dims as soon as they are read), so in
// document order; error() holds it, and the handler stops the parse with a placeholder status.
// It checks repeated keys itself (its maps hold the keys anyway), so the parse need not
// remember them (JsonEventOptions::unique_keys false).
class HeaderReader final : public JsonEvents {
 public:
  HeaderReader(absl::string_view label, const std::byte* data, uint64_t data_size,
               std::map<std::string, TensorView>& tensors,
               std::map<std::string, std::string>& metadata)
      : label_(label), data_(data), data_size_(data_size), tensors_(tensors), metadata_(metadata) {}

  const absl::Status& error() const { return error_; }

  // The tensors read.
  TensorMapBuilder& tensors() { return tensors_; }

  absl::Status Null() override { return Scalar("null"); }
  absl::Status Bool(bool) override { return Scalar("bool"); }
  absl::Status Number(bool is_int, int64_t as_int, double) override {
    if (skip_ == 0 && state_ == State::kShape) {
      if (!is_int || as_int < 0) {
        entry_.bad_extent = true;
        return absl::OkStatus();
      }
      if (entry_.extents.size() == kMaxShapeDims) {
        return Fail(TensorError(label_, name_,
                                absl::StrCat("\"shape\" has more than ", kMaxShapeDims, " dims")));
      }
      entry_.extents.push_back(as_int);
      return absl::OkStatus();
    }
    if (skip_ == 0 && state_ == State::kOffsets) {
      if (entry_.offset_count < 2) {
        if (!is_int || as_int < 0) {
          entry_.bad_offset = true;
        } else {
          entry_.offset_values[entry_.offset_count] = as_int;
        }
      }
      return CountOffset();
    }
    return Scalar("number");
  }
  absl::Status String(std::string&& value) override {
    if (skip_ == 0 && state_ == State::kMetadata) {
      if (!metadata_.emplace(key_, std::move(value)).second) return Duplicate(key_);
      return absl::OkStatus();
    }
    if (skip_ == 0 && state_ == State::kEntry && key_ == "dtype") {
      entry_.dtype = RawEntry::Field::kOk;
      entry_.dtype_name = std::move(value);
      return absl::OkStatus();
    }
    return Scalar("string");
  }
  absl::Status StartObject() override { return Open(true); }
  absl::Status StartArray() override { return Open(false); }
  absl::Status Key(std::string&& key) override {
    if (skip_ > 0) return absl::OkStatus();
    if (state_ == State::kTop) {
      if (key == "__metadata__" && std::exchange(seen_metadata_, true)) return Duplicate(key);
      name_ = std::move(key);
      return absl::OkStatus();
    }
    if (state_ == State::kEntry) {
      using Field = RawEntry::Field;
      const Field* field = key == "dtype"          ? &entry_.dtype
                           : key == "shape"        ? &entry_.shape
                           : key == "data_offsets" ? &entry_.offsets
                                                   : nullptr;
      if (field == nullptr) {
        return Fail(TensorError(label_, name_, absl::StrCat("unexpected field ", Quote(key))));
      }
      if (*field != Field::kAbsent) return Duplicate(key);
    }
    key_ = std::move(key);
    return absl::OkStatus();
  }
  absl::Status EndObject() override { return Close(); }
  absl::Status EndArray() override { return Close(); }

 private:
  // Where the next event lands: before the header's object, in it (a member's value comes
  // next), in "__metadata__", in a tensor entry, in its "shape" or "data_offsets", after it.
  enum class State { kStart, kTop, kMetadata, kEntry, kShape, kOffsets, kDone };

  // A scalar value of JSON type `type` (not one the state takes as it is).
  absl::Status Scalar(absl::string_view type) {
    if (skip_ > 0) return absl::OkStatus();
    switch (state_) {
      case State::kStart:
        return Fail(absl::InvalidArgumentError(
            absl::StrCat(label_, ": header is a JSON ", type, ", not an object")));
      case State::kTop:
        if (name_ == "__metadata__") return MetadataNotAnObject();
        return Fail(TensorError(
            label_, name_,
            absl::StrCat("entry is ", type == "array" ? "an " : "a ", type, ", not an object")));
      case State::kMetadata:
        return MetadataEntryNotAString();
      case State::kEntry:
        MarkWrongType();
        return absl::OkStatus();
      case State::kShape:
        entry_.bad_extent = true;
        return absl::OkStatus();
      case State::kOffsets:
        if (entry_.offset_count < 2) entry_.bad_offset = true;
        return CountOffset();
      case State::kDone:
        break;
    }
    return absl::OkStatus();
  }

  // An object (`object`) or array begins.
  absl::Status Open(bool object) {
    if (skip_ > 0) {
      ++skip_;
      return absl::OkStatus();
    }
    switch (state_) {
      case State::kStart:
        if (!object) return Scalar("array");
        state_ = State::kTop;
        return absl::OkStatus();
      case State::kTop:
        if (name_ == "__metadata__") {
          if (!object) return MetadataNotAnObject();
          state_ = State::kMetadata;
          return absl::OkStatus();
        }
        if (!object) return Scalar("array");
        entry_ = RawEntry();
        state_ = State::kEntry;
        return absl::OkStatus();
      case State::kMetadata:
        return MetadataEntryNotAString();
      case State::kEntry:
        if (!object && key_ == "shape") {
          entry_.shape = RawEntry::Field::kOk;
          state_ = State::kShape;
        } else if (!object && key_ == "data_offsets") {
          entry_.offsets = RawEntry::Field::kOk;
          state_ = State::kOffsets;
        } else {
          MarkWrongType();
          skip_ = 1;
        }
        return absl::OkStatus();
      case State::kShape:  // a nested value is an extent of the wrong type
        entry_.bad_extent = true;
        skip_ = 1;
        return absl::OkStatus();
      case State::kOffsets:
        if (entry_.offset_count < 2) entry_.bad_offset = true;
        skip_ = 1;
        return CountOffset();
      case State::kDone:
        break;
    }
    return absl::OkStatus();
  }

  absl::Status Close() {
    if (skip_ > 0) {
      --skip_;
      return absl::OkStatus();
    }
    switch (state_) {
      case State::kTop:
        state_ = State::kDone;
        return absl::OkStatus();
      case State::kMetadata:
        state_ = State::kTop;
        return absl::OkStatus();
      case State::kEntry: {
        state_ = State::kTop;
        absl::StatusOr<TensorView> view = ViewOf(label_, name_, entry_, data_, data_size_);
        if (!view.ok()) return Fail(view.status());
        tensors_.Add(*std::move(view));
        return absl::OkStatus();
      }
      case State::kShape:
      case State::kOffsets:
        state_ = State::kEntry;
        return absl::OkStatus();
      case State::kStart:
      case State::kDone:
        break;
    }
    return absl::OkStatus();
  }

  // One more element of "data_offsets". Two are right; an array far longer is refused as it is
  // read, so that one does not keep the parse going for nothing.
  absl::Status CountOffset() {
    if (++entry_.offset_count > kMaxOffsetsRead) {
      return Fail(TensorError(label_, name_, "\"data_offsets\" is not an array of two integers"));
    }
    return absl::OkStatus();
  }

  // The current entry field holds a value of another type than it needs.
  void MarkWrongType() {
    if (key_ == "dtype") entry_.dtype = RawEntry::Field::kWrongType;
    if (key_ == "shape") entry_.shape = RawEntry::Field::kWrongType;
    if (key_ == "data_offsets") entry_.offsets = RawEntry::Field::kWrongType;
  }

  absl::Status MetadataNotAnObject() {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat(label_, ": \"__metadata__\" is not an object of strings")));
  }
  absl::Status Duplicate(absl::string_view key) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat(label_, ": header is not valid JSON: duplicate object key ", Quote(key))));
  }
  absl::Status MetadataEntryNotAString() {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat(label_, ": \"__metadata__\" entry ", Quote(key_), " is not a string")));
  }

  absl::Status Fail(absl::Status error) {
    error_ = std::move(error);
    return absl::CancelledError("stopped by the header reader");
  }

  absl::string_view label_;
  const std::byte* data_;
  uint64_t data_size_;
  TensorMapBuilder tensors_;
  std::map<std::string, std::string>& metadata_;
  State state_ = State::kStart;
  int skip_ = 0;      // depth inside a value whose contents are not read
  std::string name_;  // the member of the header's object being read
  std::string key_;   // the key being read in an entry or in "__metadata__"
  bool seen_metadata_ = false;
  RawEntry entry_;
  absl::Status error_;
};

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
  HeaderReader reader(label, bytes + 8 + header_size, size - 8 - header_size, tensors, metadata);
  const absl::Status parsed = ParseJsonEvents(header_text, reader, {.unique_keys = false});
  if (!reader.error().ok()) return reader.error();
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": header is not valid JSON: ", parsed.message()));
  }
  if (std::optional<std::string> repeated = reader.tensors().Finish()) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": header is not valid JSON: duplicate object key ", Quote(*repeated)));
  }

  // Non-empty ranges sorted by start must not overlap; empty tensors occupy no bytes. The
  // ranges are sorted as values, names compared only between ranges that start and end alike.
  struct Range {
    const std::byte* data;
    size_t nbytes;
    const TensorView* view;
  };
  std::vector<Range> ranges;
  for (const auto& [name, view] : tensors) {
    if (view.nbytes > 0) ranges.push_back({view.data, view.nbytes, &view});
  }
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
    if (a.data != b.data) return a.data < b.data;
    if (a.nbytes != b.nbytes) return a.nbytes < b.nbytes;
    return a.view->name < b.view->name;
  });
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].data < ranges[i - 1].data + ranges[i - 1].nbytes) {
      return TensorError(label, ranges[i].view->name,
                         absl::StrCat("\"data_offsets\" overlap those of tensor ",
                                      Quote(ranges[i - 1].view->name)));
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

// Reads model.safetensors.index.json from its JSON events, keeping only the weight map:
// "metadata" must be an object (its contents are not read), "weight_map" a non-empty object
// of plain shard file names, and nothing else may be there. A problem is reported when the
// member holding it is read, in document order; error() holds it, and the handler stops the
// parse with a placeholder status. It checks repeated keys itself, as HeaderReader does.
class IndexReader final : public JsonEvents {
 public:
  explicit IndexReader(absl::string_view label) : label_(label) {}

  const absl::Status& error() const { return error_; }
  // Whether the document was an object with a "weight_map" member.
  bool has_weight_map() const { return has_weight_map_; }
  // tensor -> shard, as the index states it.
  std::map<std::string, std::string>& assigned() { return assigned_; }

  absl::Status Null() override { return Scalar(); }
  absl::Status Bool(bool) override { return Scalar(); }
  absl::Status Number(bool, int64_t, double) override { return Scalar(); }
  absl::Status String(std::string&& value) override {
    if (skip_ > 0 || state_ != State::kWeightMap) return Scalar();
    if (!IsPlainFileName(value)) {
      return Fail(absl::StrCat("shard ", Quote(value), " of tensor ", Quote(key_),
                               " is not a plain file name"));
    }
    if (!assigned_.emplace(key_, std::move(value)).second) return Duplicate(key_);
    return absl::OkStatus();
  }
  absl::Status StartObject() override { return Open(true); }
  absl::Status StartArray() override { return Open(false); }
  absl::Status Key(std::string&& key) override {
    if (skip_ > 0) return absl::OkStatus();
    if (state_ == State::kTop) {
      if (key != "metadata" && key != "weight_map") {
        return Fail(absl::StrCat("unexpected field ", Quote(key)));
      }
      if (!seen_.insert(key).second) return Duplicate(key);
    }
    key_ = std::move(key);
    return absl::OkStatus();
  }
  absl::Status EndObject() override { return Close(); }
  absl::Status EndArray() override { return Close(); }

 private:
  enum class State { kStart, kTop, kWeightMap, kDone };

  absl::Status Scalar() {
    if (skip_ > 0) return absl::OkStatus();
    switch (state_) {
      case State::kStart:
        return Fail("not a JSON object");
      case State::kTop:
        return MemberOfWrongType();
      case State::kWeightMap:
        return WeightMapEntryNotAString();
      case State::kDone:
        break;
    }
    return absl::OkStatus();
  }

  absl::Status Open(bool object) {
    if (skip_ > 0) {
      ++skip_;
      return absl::OkStatus();
    }
    switch (state_) {
      case State::kStart:
        if (!object) return Fail("not a JSON object");
        state_ = State::kTop;
        return absl::OkStatus();
      case State::kTop:
        if (!object) return MemberOfWrongType();
        if (key_ == "metadata") {
          skip_ = 1;
        } else {
          has_weight_map_ = true;
          state_ = State::kWeightMap;
        }
        return absl::OkStatus();
      case State::kWeightMap:
        return WeightMapEntryNotAString();
      case State::kDone:
        break;
    }
    return absl::OkStatus();
  }

  absl::Status Close() {
    if (skip_ > 0) {
      --skip_;
      return absl::OkStatus();
    }
    if (state_ == State::kWeightMap) {
      if (assigned_.empty()) return Fail("\"weight_map\" is not a non-empty object");
      state_ = State::kTop;
    } else if (state_ == State::kTop) {
      state_ = State::kDone;
    }
    return absl::OkStatus();
  }

  // A member of the index's object whose value is not an object.
  absl::Status MemberOfWrongType() {
    return Fail(key_ == "metadata" ? "\"metadata\" is not an object"
                                   : "\"weight_map\" is not a non-empty object");
  }
  absl::Status Duplicate(absl::string_view key) {
    return Fail(absl::StrCat("not valid JSON: duplicate object key ", Quote(key)));
  }
  absl::Status WeightMapEntryNotAString() {
    return Fail(absl::StrCat("\"weight_map\" entry for tensor ", Quote(key_), " is not a string"));
  }

  absl::Status Fail(absl::string_view problem) {
    error_ = absl::InvalidArgumentError(absl::StrCat(label_, ": ", problem));
    return absl::CancelledError("stopped by the index reader");
  }

  absl::string_view label_;
  State state_ = State::kStart;
  int skip_ = 0;     // depth inside "metadata"
  std::string key_;  // the member or weight-map key being read
  bool has_weight_map_ = false;
  std::set<std::string> seen_;  // the index object's members
  std::map<std::string, std::string> assigned_;
  absl::Status error_;
};

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
  const std::filesystem::path index_path = dir / kIndexFileName;
  // A link that leads nowhere is named as such, not taken for a missing file.
  for (const std::filesystem::path& path : {single, index_path}) {
    if (std::filesystem::is_symlink(std::filesystem::symlink_status(path, error)) &&
        !std::filesystem::exists(path, error)) {
      const std::filesystem::path target = std::filesystem::read_symlink(path, error);
      return absl::NotFoundError(absl::StrCat(path.string(), " is a symbolic link to ",
                                              Quote(target.string()),
                                              ", which does not exist (a checkpoint moved or only "
                                              "partly downloaded?)"));
    }
  }
  if (std::filesystem::exists(single, error)) {
    TP_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file, SafetensorsFile::Open(single));
    for (const auto& [name, view] : file->tensors()) checkpoint->index_.emplace(view.name, &view);
    checkpoint->files_.push_back(std::move(file));
    return checkpoint;
  }

  if (!std::filesystem::exists(index_path, error)) {
    return absl::NotFoundError(
        absl::StrCat(dir.string(), ": has neither ", kSingleFileName, " nor ", kIndexFileName));
  }
  const std::string label = index_path.string();
  TP_ASSIGN_OR_RETURN(const std::string text, ReadRegularFile(index_path.string(), kMaxIndexBytes));
  IndexReader reader(label);
  const absl::Status parsed = ParseJsonEvents(text, reader, {.unique_keys = false});
  if (!reader.error().ok()) return reader.error();
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": not valid JSON: ", parsed.message()));
  }
  if (!reader.has_weight_map()) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": missing field \"weight_map\""));
  }
  // tensor -> shard as the index states it; shards opened in name order.
  const std::map<std::string, std::string>& assigned = reader.assigned();
  std::set<std::string> shard_names;
  for (const auto& [tensor, shard] : assigned) shard_names.insert(shard);
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
    checkpoint->index_.emplace(view->name, view);
  }
  return checkpoint;
}

const TensorView* Checkpoint::Find(absl::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

std::vector<absl::string_view> Checkpoint::TensorNames() const {
  std::vector<absl::string_view> names;
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
