#include "tuner/tactic_store_text.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/files.h"
#include "base/status_macros.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "kernels/core/kernel_family.h"
#include "regions/ir.h"
#include "tuner/tactic_store.h"

namespace tileplan::tuner {
namespace {

using google::protobuf::TextFormat;

constexpr std::pair<CandidateStatus, absl::string_view> kStatusNames[] = {
    {CandidateStatus::kOk, "ok"},
    {CandidateStatus::kCompileError, "compile_error"},
    {CandidateStatus::kLaunchError, "launch_error"},
    {CandidateStatus::kWrongResult, "wrong_result"},
    {CandidateStatus::kOutOfResources, "out_of_resources"},
    {CandidateStatus::kFault, "fault"},
    {CandidateStatus::kInvalid, "invalid"},
};

// Where an entry of a parsed file is: the 1-based line of a message and the parse
// locations of its fields. Without a tree (a key given to Record) every line is 0.
struct Where {
  const TextFormat::ParseInfoTree* tree = nullptr;
  const google::protobuf::Descriptor* type = nullptr;
  int line = 0;

  // The `index`th message of the repeated `field` (-1: the singular `field`).
  Where In(const char* field, int index) const {
    if (tree == nullptr) return *this;
    const google::protobuf::FieldDescriptor* f = type->FindFieldByName(field);
    Where nested;
    nested.tree = tree->GetTreeForNested(f, index);
    nested.type = f->message_type();
    nested.line = nested.tree == nullptr ? line : LineAt(f, index);
    return nested;
  }
  // The line of the singular `field`; the message's own where the parser recorded none.
  int LineOf(const char* field) const {
    if (tree == nullptr) return line;
    return LineAt(type->FindFieldByName(field), -1);
  }

 private:
  int LineAt(const google::protobuf::FieldDescriptor* field, int index) const {
    const int parsed = tree->GetLocation(field, index).line;  // 0-based; -1 when unknown
    return parsed >= 0 ? parsed + 1 : line;
  }
};

// InvalidArgument "<origin>:<line>: <message>", or "<origin>: <message>" without a line.
absl::Status Invalid(absl::string_view origin, int line, absl::string_view message) {
  if (line > 0) return absl::InvalidArgumentError(absl::StrCat(origin, ":", line, ": ", message));
  return absl::InvalidArgumentError(absl::StrCat(origin, ": ", message));
}

bool ValidTime(double us) { return std::isfinite(us) && us >= 0; }

absl::Status ValidateKey(const proto::StoredKey& k, const Where& where, absl::string_view origin) {
  if (k.region_signature().empty()) {
    return Invalid(origin, std::max(where.line, where.LineOf("region_signature")),
                   "the key has no region_signature");
  }
  if (k.shape_bucket().empty()) {
    return Invalid(origin, std::max(where.line, where.LineOf("shape_bucket")),
                   "the key has no shape_bucket");
  }
  if (!ir::ParsePhase(k.phase()).ok()) {
    return Invalid(origin, where.LineOf("phase"), absl::StrCat("unknown phase '", k.phase(), "'"));
  }
  if (k.family().empty()) return Invalid(origin, where.line, "the key has no family");
  std::map<std::string, CandidateStatus> statuses;  // by ParamsString
  for (int i = 0; i < k.candidates_size(); ++i) {
    const proto::StoredCandidate& c = k.candidates(i);
    const Where at = where.In("candidates", i);
    absl::StatusOr<kernels::Tactic> tactic = kernels::TacticFromProto(c.tactic());
    if (!tactic.ok()) return Invalid(origin, at.line, tactic.status().message());
    if (tactic->family != k.family() || tactic->family_version != k.family_version()) {
      return Invalid(origin, at.line,
                     absl::StrCat("candidate ", tactic->ParamsString(), " is of family ",
                                  tactic->family, " v", tactic->family_version, ", the key's is ",
                                  k.family(), " v", k.family_version()));
    }
    absl::StatusOr<CandidateStatus> status = ParseCandidateStatus(c.status());
    if (!status.ok()) return Invalid(origin, at.LineOf("status"), status.status().message());
    if (!ValidTime(c.median_us())) {
      return Invalid(
          origin, at.LineOf("median_us"),
          absl::StrCat("candidate ", tactic->ParamsString(), " has median ", c.median_us(), " us"));
    }
    if (!IsUtcTimestamp(c.measured_at())) {
      return Invalid(
          origin, std::max(at.line, at.LineOf("measured_at")),
          absl::StrCat("candidate ", tactic->ParamsString(), " has measured_at '", c.measured_at(),
                       "', not a UTC time such as ", "2026-11-30T07:26:00Z"));
    }
    if (!statuses.emplace(tactic->ParamsString(), *status).second) {
      return Invalid(origin, at.line,
                     absl::StrCat("candidate ", tactic->ParamsString(), " appears twice"));
    }
  }
  if (k.has_winner()) {
    const Where at = where.In("winner", -1);
    absl::StatusOr<kernels::Tactic> tactic = kernels::TacticFromProto(k.winner().tactic());
    if (!tactic.ok()) return Invalid(origin, at.line, tactic.status().message());
    auto it = statuses.find(tactic->ParamsString());
    if (tactic->family != k.family() || tactic->family_version != k.family_version() ||
        it == statuses.end() || it->second != CandidateStatus::kOk) {
      return Invalid(origin, at.line,
                     absl::StrCat("the winner ", tactic->family, " v", tactic->family_version, " ",
                                  tactic->ParamsString(), " is not an \"ok\" candidate"));
    }
    if (!ValidTime(k.winner().median_us()) || !ValidTime(k.winner().default_us())) {
      return Invalid(origin, at.line, "the winner's times must be finite and not negative");
    }
  }
  return absl::OkStatus();
}

using KeyFields = std::tuple<std::string, std::string, std::string, std::string, int32_t>;
KeyFields FieldsOf(const proto::StoredKey& k) {
  return {k.region_signature(), k.shape_bucket(), k.phase(), k.family(), k.family_version()};
}

absl::Status ValidateFile(const proto::TacticStoreFile& file, const Where& where,
                          absl::string_view origin) {
  if (file.schema() != kTacticStoreSchemaName) {
    return Invalid(origin, std::max(1, where.LineOf("schema")),
                   absl::StrCat("schema is '", file.schema(), "', not ", kTacticStoreSchemaName));
  }
  if (file.schema_version() != kTacticStoreSchemaVersion) {
    return Invalid(origin, std::max(1, where.LineOf("schema_version")),
                   absl::StrCat("schema_version is ", file.schema_version(),
                                "; this build reads version ", kTacticStoreSchemaVersion));
  }
  std::set<std::string> fingerprints;
  for (int i = 0; i < file.environments_size(); ++i) {
    const proto::StoredEnvironment& e = file.environments(i);
    const Where at = where.In("environments", i);
    const std::string fingerprint = EnvironmentOf(e).Fingerprint();
    if (e.fingerprint() != fingerprint) {
      return Invalid(
          origin, at.LineOf("fingerprint"),
          absl::StrCat("fingerprint '", e.fingerprint(),
                       "' does not match the environment's fields ('", fingerprint, "')"));
    }
    if (!fingerprints.insert(fingerprint).second) {
      return Invalid(origin, at.line,
                     absl::StrCat("environment '", fingerprint, "' appears twice"));
    }
    if (!IsUtcTimestamp(e.created())) {
      return Invalid(origin, std::max(at.line, at.LineOf("created")),
                     absl::StrCat("environment '", fingerprint, "' has created '", e.created(),
                                  "', not a UTC time such as 2026-11-30T07:26:00Z"));
    }
    std::set<KeyFields> keys;
    for (int j = 0; j < e.keys_size(); ++j) {
      const Where key_at = at.In("keys", j);
      TP_RETURN_IF_ERROR(ValidateKey(e.keys(j), key_at, origin));
      if (!keys.insert(FieldsOf(e.keys(j))).second) {
        return Invalid(
            origin, key_at.line,
            absl::StrCat("key '", KeyOf(fingerprint, e.keys(j)).ToString(), "' appears twice"));
      }
    }
  }
  return absl::OkStatus();
}

// Collects the first error of the text-format parser.
class FirstErrorCollector : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    if (!error_.empty()) return;
    error_ = absl::StrCat(line + 1, ":", column + 1, ": ", message);
  }
  const std::string& error() const { return error_; }

 private:
  std::string error_;
};

// An export of every measurement of several models is tens of megabytes.
constexpr uint64_t kMaxImportBytes = uint64_t{256} << 20;

}  // namespace

absl::string_view CandidateStatusName(CandidateStatus status) {
  for (const auto& [s, name] : kStatusNames) {
    if (s == status) return name;
  }
  return "invalid";
}

absl::StatusOr<CandidateStatus> ParseCandidateStatus(absl::string_view name) {
  for (const auto& [s, n] : kStatusNames) {
    if (n == name) return s;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown candidate status '", name, "'"));
}

proto::TacticStoreFile NewTacticStoreFile() {
  proto::TacticStoreFile file;
  file.set_schema(std::string(kTacticStoreSchemaName));
  file.set_schema_version(kTacticStoreSchemaVersion);
  return file;
}

Environment EnvironmentOf(const proto::StoredEnvironment& stored) {
  Environment env;
  env.gpu = stored.gpu();
  env.sm = stored.sm();
  env.sm_count = stored.sm_count();
  env.l2_bytes = stored.l2_bytes();
  env.bandwidth_gbps = stored.bandwidth_gbps();
  env.driver_version = stored.driver_version();
  env.cuda_runtime_version = stored.cuda_runtime_version();
  env.nvrtc_version = stored.nvrtc_version();
  env.cublaslt_version = stored.cublaslt_version();
  env.schema_version = stored.schema_version();
  return env;
}

proto::StoredEnvironment StoredEnvironmentOf(const Environment& environment,
                                             absl::string_view created) {
  proto::StoredEnvironment e;
  e.set_fingerprint(environment.Fingerprint());
  e.set_gpu(environment.gpu);
  e.set_sm(environment.sm);
  e.set_sm_count(environment.sm_count);
  e.set_l2_bytes(environment.l2_bytes);
  e.set_bandwidth_gbps(environment.bandwidth_gbps);
  e.set_driver_version(environment.driver_version);
  e.set_cuda_runtime_version(environment.cuda_runtime_version);
  e.set_nvrtc_version(environment.nvrtc_version);
  e.set_cublaslt_version(environment.cublaslt_version);
  e.set_schema_version(environment.schema_version);
  e.set_created(std::string(created));
  return e;
}

planner::TacticKey KeyOf(absl::string_view environment, const proto::StoredKey& stored) {
  planner::TacticKey key;
  key.environment = std::string(environment);
  key.region_signature = stored.region_signature();
  key.shape_bucket = stored.shape_bucket();
  key.phase = ir::ParsePhase(stored.phase()).value_or(ir::Phase::kGeneral);
  key.family = stored.family();
  key.family_version = stored.family_version();
  return key;
}

proto::StoredKey StoredKeyOf(const planner::TacticKey& key) {
  proto::StoredKey k;
  k.set_region_signature(key.region_signature);
  k.set_shape_bucket(key.shape_bucket);
  k.set_phase(std::string(ir::PhaseName(key.phase)));
  k.set_family(key.family);
  k.set_family_version(key.family_version);
  return k;
}

bool IsUtcTimestamp(absl::string_view text) {
  constexpr absl::string_view kFormat = "%Y-%m-%dT%H:%M:%SZ";
  absl::Time t;
  std::string error;
  if (text.size() != 20 || !absl::ParseTime(kFormat, text, absl::UTCTimeZone(), &t, &error)) {
    return false;
  }
  // Fields out of range (month 13, second 61) parse normalized; a timestamp prints back as
  // itself.
  return absl::FormatTime(kFormat, t, absl::UTCTimeZone()) == text;
}

absl::Status ValidateStoredKey(const proto::StoredKey& key, absl::string_view origin) {
  return ValidateKey(key, Where(), origin);
}

absl::Status WriteTacticStoreText(const proto::TacticStoreFile& file, const std::string& path) {
  std::string text;
  if (!TextFormat::PrintToString(file, &text)) {
    return absl::InternalError("cannot print the tactic store as text");
  }
  return WriteFileAtomically(path,
                             absl::StrCat("# proto-file: tuner/tactic_store.proto\n"
                                          "# proto-message: tileplan.tuner.proto.TacticStoreFile\n",
                                          text));
}

absl::StatusOr<proto::TacticStoreFile> ReadTacticStoreText(const std::string& path) {
  TP_ASSIGN_OR_RETURN(std::string text, ReadRegularFile(path, kMaxImportBytes));
  proto::TacticStoreFile file;
  TextFormat::Parser parser;
  FirstErrorCollector errors;
  TextFormat::ParseInfoTree tree;
  parser.RecordErrorsTo(&errors);
  parser.WriteLocationsTo(&tree);
  if (!parser.ParseFromString(text, &file)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ":", errors.error()));
  }
  Where where;
  where.tree = &tree;
  where.type = proto::TacticStoreFile::descriptor();
  where.line = 1;
  TP_RETURN_IF_ERROR(ValidateFile(file, where, path));
  return file;
}

}  // namespace tileplan::tuner
