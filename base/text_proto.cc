#include "base/text_proto.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"

namespace tileplan {
namespace {

class FirstError : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    if (first_.empty()) first_ = absl::StrCat(line + 1, ":", column + 1, ": ", message);
  }
  const std::string& first() const { return first_; }

 private:
  std::string first_;
};

}  // namespace

absl::Status ParseTextProto(absl::string_view text, absl::string_view label,
                            google::protobuf::Message* message) {
  google::protobuf::TextFormat::Parser parser;
  FirstError errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(std::string(text), message)) {
    return absl::InvalidArgumentError(absl::StrCat(label, ":", errors.first()));
  }
  return absl::OkStatus();
}

}  // namespace tileplan
