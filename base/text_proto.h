// Protocol-buffer text format with the position of the first syntax error.
#ifndef TILEPLAN_BASE_TEXT_PROTO_H_
#define TILEPLAN_BASE_TEXT_PROTO_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"

namespace tileplan {

// Parses `text` into `message` (cleared first). InvalidArgument "<label>:<line>:<column>:
// <what>" at the first syntax error, lines and columns from 1.
absl::Status ParseTextProto(absl::string_view text, absl::string_view label,
                            google::protobuf::Message* message);

}  // namespace tileplan

#endif  // TILEPLAN_BASE_TEXT_PROTO_H_
