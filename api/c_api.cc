// The C API (include/tileplan/tileplan.h) over the planner and the GPU runtime: C++ stays
// behind the header, and every exception a library call could throw (allocation) is turned
// into a status.
#include "tileplan/tileplan.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "device/device.h"
#include "models/safetensors.h"
#include "planner/plan_builder.h"
#include "planner/plan_text.h"
#include "planner/tactic_cache.h"
#include "runtime/gpu/device_target.h"
#include "runtime/gpu/gpu_runtime.h"
#include "runtime/gpu/program.h"
#include "tools/tool_support.h"
#include "tuner/environment.h"
#include "tuner/tactic_store.h"

struct tileplan_status {
  tileplan_code code;
  std::string message;
};

struct tileplan_plan {
  tileplan::planner::proto::ExecutionPlan plan;
};

struct tileplan_runtime {
  std::unique_ptr<tileplan::device::Device> device;  // outlives the runtime
  std::unique_ptr<tileplan::runtime::gpu::GpuRuntime> runtime;
};

namespace tileplan {
namespace {

constexpr char kVersion[] = TILEPLAN_VERSION_STRING;

tileplan_status* ToC(const absl::Status& s) {
  if (s.ok()) return nullptr;
  return new (std::nothrow)
      tileplan_status{static_cast<tileplan_code>(s.code()), std::string(s.message())};
}

// Runs `body` (returning absl::Status) with every exception turned into INTERNAL or
// RESOURCE_EXHAUSTED, so none crosses the C boundary.
template <typename Body>
tileplan_status* Guarded(Body body) {
  try {
    return ToC(body());
  } catch (const std::bad_alloc&) {
    return ToC(absl::ResourceExhaustedError("out of host memory"));
  } catch (const std::exception& e) {
    return ToC(absl::InternalError(absl::StrCat("unexpected exception: ", e.what())));
  } catch (...) {
    return ToC(absl::InternalError("unexpected exception"));
  }
}

// The tools' default buckets (--prefill, --decode), so that default plans match.
std::vector<int64_t> List(const int64_t* values, size_t n) {
  if (values == nullptr || n == 0) return {128, 512, 2048};
  return std::vector<int64_t>(values, values + n);
}

// A size-versioned parameter struct as this library reads it: the fields the caller's
// struct_size covers, `init`'s defaults for the ones it predates.
template <typename Options>
Options WithDefaults(const Options& given, void (*init)(Options*)) {
  Options v;
  init(&v);
  std::memcpy(&v, &given, std::min(given.struct_size, sizeof(v)));
  v.struct_size = sizeof(v);
  return v;
}

absl::Status CreatePlan(const tileplan_plan_options& o, tileplan_plan** out) {
  if (o.struct_size < offsetof(tileplan_plan_options, model) + sizeof(o.model)) {
    return absl::InvalidArgumentError(absl::StrCat("options.struct_size ", o.struct_size,
                                                   " does not cover the model field "
                                                   "(call tileplan_plan_options_init)"));
  }
  if (o.model == nullptr || o.model[0] == '\0') {
    return absl::InvalidArgumentError("options.model is required");
  }
  const tileplan_plan_options v = WithDefaults(o, tileplan_plan_options_init);
  if (v.batch < 0 || v.max_context < 0) {
    return absl::InvalidArgumentError("options.batch and options.max_context must not be negative");
  }
  const int64_t ranks = v.tensor_parallel > 0 ? v.tensor_parallel : 1;
  if (v.tensor_parallel < 0 || v.rank < 0 || v.rank >= ranks) {
    return absl::InvalidArgumentError(
        absl::StrCat("options.tensor_parallel (", v.tensor_parallel, ") and options.rank (", v.rank,
                     "): need tensor_parallel >= 0 and 0 <= rank < ranks"));
  }
  if (v.freeze && (v.tactic_cache == nullptr || v.tactic_cache[0] == '\0')) {
    return absl::InvalidArgumentError("options.freeze needs options.tactic_cache");
  }
  const std::vector<int64_t> prefill = List(v.prefill_tokens, v.num_prefill_tokens);
  const std::vector<int64_t> decode = List(v.decode_contexts, v.num_decode_contexts);
  for (int64_t x : prefill) {
    if (x <= 0) return absl::InvalidArgumentError(absl::StrCat("prefill_tokens has ", x));
  }
  for (int64_t x : decode) {
    if (x <= 0) return absl::InvalidArgumentError(absl::StrCat("decode_contexts has ", x));
  }
  absl::StatusOr<tools::ModelArgument> model = tools::LoadModelArgument(v.model);
  if (!model.ok()) return model.status();

  const std::string requested = v.target == nullptr ? "" : v.target;
  absl::StatusOr<std::unique_ptr<device::Device>> device =
      requested.empty() ? device::Device::Open(0) : absl::NotFoundError("not asked");
  absl::StatusOr<targets::TargetDescription> target =
      runtime::gpu::ChooseTarget(requested, device.ok() ? device->get() : nullptr);
  if (!target.ok()) return target.status();

  planner::PlanOptions options = tools::BenchmarkPlanOptions(
      prefill, decode, v.batch > 0 ? v.batch : 1, v.prefill_last_token_logits != 0, v.max_context);
  options.model_name = model->name;
  options.tensor_parallel = ranks;
  options.rank = v.rank;
  std::unique_ptr<tuner::TacticStore> store;
  if (v.tactic_cache != nullptr && v.tactic_cache[0] != '\0') {
    tuner::TacticStore::Options store_options;
    store_options.read_only = true;
    store_options.freeze = v.freeze != 0;
    absl::StatusOr<std::unique_ptr<tuner::TacticStore>> opened =
        tuner::TacticStore::Open(v.tactic_cache, store_options);
    if (!opened.ok()) return opened.status();
    store = *std::move(opened);
    absl::StatusOr<tuner::Environment> environment =
        tuner::PlanningEnvironment(*target, device.ok() ? device->get() : nullptr);
    if (!environment.ok()) return environment.status();
    options.environment = environment->Fingerprint();
  }
  absl::StatusOr<planner::proto::ExecutionPlan> plan =
      planner::BuildExecutionPlan(model->config, *target, options, store.get());
  if (!plan.ok()) return plan.status();
  if (store != nullptr) TP_RETURN_IF_ERROR(store->CheckFrozen());
  *out = new tileplan_plan{*std::move(plan)};
  return absl::OkStatus();
}

// The planner's form of a C format; InvalidArgument for a value the enum does not have.
absl::StatusOr<planner::PlanFormat> FormatOf(tileplan_plan_format format) {
  switch (format) {
    case TILEPLAN_PLAN_TABLE:
      return planner::PlanFormat::kTable;
    case TILEPLAN_PLAN_TEXTPROTO:
      return planner::PlanFormat::kTextProto;
    case TILEPLAN_PLAN_JSON:
      return planner::PlanFormat::kJson;
    case TILEPLAN_PLAN_BINARY:
      return planner::PlanFormat::kBinary;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown plan format ", static_cast<int>(format)));
  }
}

absl::StatusOr<std::string> Serialized(const tileplan_plan* plan, tileplan_plan_format format) {
  if (plan == nullptr) return absl::InvalidArgumentError("plan is NULL");
  TP_ASSIGN_OR_RETURN(const planner::PlanFormat f, FormatOf(format));
  return planner::FormatPlan(plan->plan, f);
}

absl::Status DeserializePlan(const void* data, size_t size, tileplan_plan_format format,
                             tileplan_plan** out) {
  if ((data == nullptr && size > 0) || out == nullptr) {
    return absl::InvalidArgumentError("tileplan_plan_deserialize: data and plan must not be NULL");
  }
  TP_ASSIGN_OR_RETURN(const planner::PlanFormat f, FormatOf(format));
  if (f == planner::PlanFormat::kTable) {
    return absl::InvalidArgumentError(
        "a plan's table cannot be read back (it leaves things out): pass TEXTPROTO, JSON or "
        "BINARY");
  }
  TP_ASSIGN_OR_RETURN(
      planner::proto::ExecutionPlan plan,
      planner::ParsePlan(absl::string_view(static_cast<const char*>(data), size), f));
  TP_RETURN_IF_ERROR(runtime::gpu::LayOutPlan(plan).status());
  *out = new tileplan_plan{std::move(plan)};
  return absl::OkStatus();
}

const planner::proto::Phase* PhaseOf(const tileplan_plan* plan, int phase) {
  if (plan == nullptr || phase < 0 || phase >= plan->plan.phases_size()) return nullptr;
  return &plan->plan.phases(phase);
}

absl::Status CreateRuntime(const tileplan_plan& plan, const tileplan_runtime_options& o,
                           tileplan_runtime** out) {
  if (o.struct_size < sizeof(o.struct_size)) {
    return absl::InvalidArgumentError(
        "options.struct_size is 0 (call tileplan_runtime_options_init)");
  }
  const tileplan_runtime_options v = WithDefaults(o, tileplan_runtime_options_init);
  std::unique_ptr<models::Checkpoint> checkpoint;
  if (v.checkpoint != nullptr && v.checkpoint[0] != '\0') {
    std::filesystem::path dir = v.checkpoint;
    if (dir.filename() == "config.json") dir = dir.parent_path();
    absl::StatusOr<std::unique_ptr<models::Checkpoint>> opened = models::Checkpoint::Open(dir);
    if (!opened.ok()) return opened.status();
    checkpoint = *std::move(opened);
  }
  absl::StatusOr<std::unique_ptr<device::Device>> device = device::Device::Open(v.device);
  if (!device.ok()) return device.status();
  runtime::gpu::GpuOptions options;
  options.cuda_graphs = v.host_launches == 0;
  if (v.seed != 0) options.seed = v.seed;
  absl::StatusOr<std::unique_ptr<runtime::gpu::GpuRuntime>> rt =
      runtime::gpu::GpuRuntime::Create(**device, plan.plan, checkpoint.get(), options);
  if (!rt.ok()) return rt.status();
  *out = new tileplan_runtime{*std::move(device), *std::move(rt)};
  return absl::OkStatus();
}

absl::Status NeedRuntime(const tileplan_runtime* runtime, const char* call) {
  if (runtime == nullptr)
    return absl::InvalidArgumentError(absl::StrCat(call, ": runtime is NULL"));
  return absl::OkStatus();
}

}  // namespace
}  // namespace tileplan

extern "C" {

tileplan_code tileplan_status_code(const tileplan_status* status) {
  return status == nullptr ? TILEPLAN_OK : status->code;
}

const char* tileplan_status_message(const tileplan_status* status) {
  return status == nullptr ? "" : status->message.c_str();
}

void tileplan_status_free(tileplan_status* status) { delete status; }

const char* tileplan_version(void) { return tileplan::kVersion; }

int tileplan_api_version(void) { return TILEPLAN_API_VERSION; }

void tileplan_free(void* memory) { std::free(memory); }

void tileplan_plan_options_init(tileplan_plan_options* options) {
  if (options == nullptr) return;
  std::memset(options, 0, sizeof(*options));
  options->struct_size = sizeof(*options);
}

tileplan_status* tileplan_plan_create(const tileplan_plan_options* options, tileplan_plan** plan) {
  return tileplan::Guarded([&] {
    if (options == nullptr || plan == nullptr) {
      return absl::InvalidArgumentError("tileplan_plan_create: options and plan must not be NULL");
    }
    return tileplan::CreatePlan(*options, plan);
  });
}

tileplan_status* tileplan_plan_deserialize(const void* data, size_t size,
                                           tileplan_plan_format format, tileplan_plan** plan) {
  return tileplan::Guarded([&] { return tileplan::DeserializePlan(data, size, format, plan); });
}

void tileplan_plan_free(tileplan_plan* plan) { delete plan; }

tileplan_status* tileplan_plan_serialize(const tileplan_plan* plan, tileplan_plan_format format,
                                         char** data, size_t* size) {
  return tileplan::Guarded([&]() -> absl::Status {
    if (data == nullptr || size == nullptr) {
      return absl::InvalidArgumentError("tileplan_plan_serialize: data and size must not be NULL");
    }
    absl::StatusOr<std::string> bytes = tileplan::Serialized(plan, format);
    if (!bytes.ok()) return bytes.status();
    char* out = static_cast<char*>(std::malloc(bytes->size() + 1));
    if (out == nullptr) return absl::ResourceExhaustedError("out of host memory");
    std::memcpy(out, bytes->data(), bytes->size());
    out[bytes->size()] = '\0';
    *data = out;
    *size = bytes->size();
    return absl::OkStatus();
  });
}

tileplan_status* tileplan_plan_serialize_into(const tileplan_plan* plan,
                                              tileplan_plan_format format, void* buffer,
                                              size_t capacity, size_t* size) {
  return tileplan::Guarded([&]() -> absl::Status {
    if (size == nullptr || (buffer == nullptr && capacity > 0)) {
      return absl::InvalidArgumentError(
          "tileplan_plan_serialize_into: size must not be NULL, nor buffer with a capacity");
    }
    absl::StatusOr<std::string> bytes = tileplan::Serialized(plan, format);
    if (!bytes.ok()) return bytes.status();
    *size = bytes->size();
    if (bytes->size() > capacity) {
      return absl::OutOfRangeError(
          absl::StrCat("the plan needs ", bytes->size(), " bytes; the buffer holds ", capacity));
    }
    std::memcpy(buffer, bytes->data(), bytes->size());
    return absl::OkStatus();
  });
}

int tileplan_plan_num_phases(const tileplan_plan* plan) {
  return plan == nullptr ? 0 : plan->plan.phases_size();
}

const char* tileplan_plan_phase_name(const tileplan_plan* plan, int phase) {
  const tileplan::planner::proto::Phase* p = tileplan::PhaseOf(plan, phase);
  return p == nullptr ? "" : p->name().c_str();
}

int64_t tileplan_plan_phase_launches(const tileplan_plan* plan, int phase) {
  const tileplan::planner::proto::Phase* p = tileplan::PhaseOf(plan, phase);
  return p == nullptr ? 0 : p->launches();
}

double tileplan_plan_phase_estimated_us(const tileplan_plan* plan, int phase) {
  const tileplan::planner::proto::Phase* p = tileplan::PhaseOf(plan, phase);
  return p == nullptr ? 0 : p->estimated_us();
}

int tileplan_device_count(void) {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
}

void tileplan_runtime_options_init(tileplan_runtime_options* options) {
  if (options == nullptr) return;
  std::memset(options, 0, sizeof(*options));
  options->struct_size = sizeof(*options);
  options->seed = 1;
}

tileplan_status* tileplan_runtime_create(const tileplan_plan* plan,
                                         const tileplan_runtime_options* options,
                                         tileplan_runtime** runtime) {
  return tileplan::Guarded([&]() -> absl::Status {
    if (plan == nullptr || options == nullptr || runtime == nullptr) {
      return absl::InvalidArgumentError(
          "tileplan_runtime_create: plan, options and runtime must not be NULL");
    }
    return tileplan::CreateRuntime(*plan, *options, runtime);
  });
}

void tileplan_runtime_free(tileplan_runtime* runtime) { delete runtime; }

int64_t tileplan_runtime_vocab_size(const tileplan_runtime* runtime) {
  return runtime == nullptr ? 0 : runtime->runtime->vocab_size();
}

int64_t tileplan_runtime_max_context(const tileplan_runtime* runtime) {
  return runtime == nullptr ? 0 : runtime->runtime->max_context();
}

int64_t tileplan_runtime_prefill_batch(const tileplan_runtime* runtime) {
  return runtime == nullptr ? 0 : runtime->runtime->prefill_batch();
}

tileplan_status* tileplan_runtime_prefill(tileplan_runtime* runtime, tileplan_stream stream,
                                          const int32_t* tokens, int64_t batch, int64_t num_tokens,
                                          float* logits) {
  return tileplan::Guarded([&]() -> absl::Status {
    TP_RETURN_IF_ERROR(tileplan::NeedRuntime(runtime, "tileplan_runtime_prefill"));
    return runtime->runtime->EnqueuePrefill(stream, tokens, batch, num_tokens, logits);
  });
}

tileplan_status* tileplan_runtime_decode(tileplan_runtime* runtime, tileplan_stream stream,
                                         const int32_t* tokens, const int32_t* positions,
                                         int64_t batch, float* logits) {
  return tileplan::Guarded([&]() -> absl::Status {
    TP_RETURN_IF_ERROR(tileplan::NeedRuntime(runtime, "tileplan_runtime_decode"));
    return runtime->runtime->EnqueueDecode(stream, tokens, positions, batch, logits);
  });
}

tileplan_status* tileplan_runtime_generate(tileplan_runtime* runtime, tileplan_stream stream,
                                           const int32_t* prompts, int64_t batch,
                                           int64_t num_tokens, int64_t new_tokens,
                                           int32_t* tokens_out) {
  return tileplan::Guarded([&]() -> absl::Status {
    TP_RETURN_IF_ERROR(tileplan::NeedRuntime(runtime, "tileplan_runtime_generate"));
    if (new_tokens < 1 || new_tokens > (int64_t{1} << 30)) {
      return absl::InvalidArgumentError(
          absl::StrCat("tileplan_runtime_generate: new_tokens is ", new_tokens));
    }
    return runtime->runtime->EnqueueGenerate(stream, prompts, batch, num_tokens,
                                             static_cast<int>(new_tokens), tokens_out);
  });
}

tileplan_status* tileplan_runtime_synchronize(tileplan_runtime* runtime, tileplan_stream stream) {
  return tileplan::Guarded([&]() -> absl::Status {
    TP_RETURN_IF_ERROR(tileplan::NeedRuntime(runtime, "tileplan_runtime_synchronize"));
    return runtime->runtime->Synchronize(stream);
  });
}

}  // extern "C"
