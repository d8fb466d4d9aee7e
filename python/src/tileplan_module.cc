// tileplan._tileplan: the Python binding of the C API (include/tileplan/tileplan.h). It holds
// no logic of its own: python/tileplan/__init__.py builds the Python API (tileplan.plan,
// Plan, Model) on these calls. Arrays cross through DLPack (nanobind's ndarray), so torch
// tensors on the GPU and numpy arrays on the host are passed by pointer, never copied.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tileplan/tileplan.h"

namespace nb = nanobind;

namespace {

// tileplan.Error: the status's code and message.
PyObject* error_type = nullptr;

void Check(tileplan_status* s) {
  if (s == nullptr) return;
  const int code = static_cast<int>(tileplan_status_code(s));
  const std::string message = tileplan_status_message(s);
  tileplan_status_free(s);
  nb::object error = nb::borrow(error_type)(code, message);
  PyErr_SetObject(error_type, error.ptr());
  throw nb::python_error();
}

// Runs `call` (a C API call returning a status) without the GIL, then raises its error.
template <typename Call>
void CheckWithoutGil(Call call) {
  tileplan_status* s;
  {
    nb::gil_scoped_release release;
    s = call();
  }
  Check(s);
}

class Plan {
 public:
  explicit Plan(tileplan_plan* plan) : plan_(plan) {}
  ~Plan() { tileplan_plan_free(plan_); }
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;

  nb::bytes Serialize(int format) const {
    char* data = nullptr;
    size_t size = 0;
    Check(tileplan_plan_serialize(plan_, static_cast<tileplan_plan_format>(format), &data, &size));
    nb::bytes out(data, size);
    tileplan_free(data);
    return out;
  }
  int num_phases() const { return tileplan_plan_num_phases(plan_); }
  std::string phase_name(int i) const { return tileplan_plan_phase_name(plan_, i); }
  int64_t phase_launches(int i) const { return tileplan_plan_phase_launches(plan_, i); }
  double phase_estimated_us(int i) const { return tileplan_plan_phase_estimated_us(plan_, i); }
  const tileplan_plan* get() const { return plan_; }

 private:
  tileplan_plan* plan_;
};

Plan* CreatePlan(const std::string& model, const std::optional<std::string>& target,
                 const std::vector<int64_t>& prefill, const std::vector<int64_t>& decode,
                 int64_t batch, int64_t max_context, bool last_token_logits,
                 const std::optional<std::string>& tactic_cache, bool freeze, int64_t tp,
                 int64_t rank) {
  tileplan_plan_options o;
  tileplan_plan_options_init(&o);
  o.model = model.c_str();
  o.target = target ? target->c_str() : nullptr;
  o.prefill_tokens = prefill.data();
  o.num_prefill_tokens = prefill.size();
  o.decode_contexts = decode.data();
  o.num_decode_contexts = decode.size();
  o.batch = batch;
  o.max_context = max_context;
  o.prefill_last_token_logits = last_token_logits ? 1 : 0;
  o.tactic_cache = tactic_cache ? tactic_cache->c_str() : nullptr;
  o.freeze = freeze ? 1 : 0;
  o.tensor_parallel = tp;
  o.rank = rank;
  tileplan_plan* plan = nullptr;
  CheckWithoutGil([&] { return tileplan_plan_create(&o, &plan); });
  return new Plan(plan);
}

Plan* DeserializePlan(nb::bytes data, int format) {
  tileplan_plan* plan = nullptr;
  const char* bytes = data.c_str();
  const size_t size = data.size();
  CheckWithoutGil([&] {
    return tileplan_plan_deserialize(bytes, size, static_cast<tileplan_plan_format>(format), &plan);
  });
  return new Plan(plan);
}

// An array argument: C-contiguous, of `dtype`, on the host or a CUDA device.
using Array = nb::ndarray<nb::c_contig>;

template <typename T>
T* Data(const Array& a, const char* what) {
  if (a.dtype() != nb::dtype<T>()) {
    throw nb::type_error((std::string(what) + " has the wrong dtype (" +
                          (std::is_same_v<T, float> ? "float32" : "int32") + " expected)")
                             .c_str());
  }
  if (a.device_type() != nb::device::cpu::value && a.device_type() != nb::device::cuda::value) {
    throw nb::type_error((std::string(what) + " is neither host nor CUDA memory").c_str());
  }
  return static_cast<T*>(a.data());
}

tileplan_stream Stream(uintptr_t s) { return reinterpret_cast<tileplan_stream>(s); }

class Runtime {
 public:
  Runtime(const Plan& plan, const std::optional<std::string>& checkpoint, uint64_t seed, int device,
          bool host_launches) {
    tileplan_runtime_options o;
    tileplan_runtime_options_init(&o);
    o.checkpoint = checkpoint ? checkpoint->c_str() : nullptr;
    o.seed = seed;
    o.device = device;
    o.host_launches = host_launches ? 1 : 0;
    CheckWithoutGil([&] { return tileplan_runtime_create(plan.get(), &o, &rt_); });
  }
  ~Runtime() { tileplan_runtime_free(rt_); }
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  int64_t vocab_size() const { return tileplan_runtime_vocab_size(rt_); }
  int64_t max_context() const { return tileplan_runtime_max_context(rt_); }
  int64_t prefill_batch() const { return tileplan_runtime_prefill_batch(rt_); }

  void Prefill(uintptr_t stream, const Array& tokens, int64_t batch, int64_t num_tokens,
               std::optional<Array> logits) {
    const int32_t* t = Data<int32_t>(tokens, "tokens");
    float* l = logits ? Data<float>(*logits, "logits") : nullptr;
    Need(tokens, batch * num_tokens, "tokens");
    if (logits) Need(*logits, batch * vocab_size(), "logits", /*at_least=*/true);
    CheckWithoutGil(
        [&] { return tileplan_runtime_prefill(rt_, Stream(stream), t, batch, num_tokens, l); });
  }
  void Decode(uintptr_t stream, const Array& tokens, const Array& positions, int64_t batch,
              const Array& logits) {
    const int32_t* t = Data<int32_t>(tokens, "tokens");
    const int32_t* p = Data<int32_t>(positions, "positions");
    float* l = Data<float>(logits, "logits");
    Need(tokens, batch, "tokens");
    Need(positions, batch, "positions");
    Need(logits, batch * vocab_size(), "logits");
    CheckWithoutGil([&] { return tileplan_runtime_decode(rt_, Stream(stream), t, p, batch, l); });
  }
  void Generate(uintptr_t stream, const Array& prompts, int64_t batch, int64_t num_tokens,
                int64_t new_tokens, const Array& out) {
    const int32_t* p = Data<int32_t>(prompts, "prompts");
    int32_t* o = Data<int32_t>(out, "out");
    Need(prompts, batch * num_tokens, "prompts");
    Need(out, batch * new_tokens, "out");
    CheckWithoutGil([&] {
      return tileplan_runtime_generate(rt_, Stream(stream), p, batch, num_tokens, new_tokens, o);
    });
  }
  void Synchronize(uintptr_t stream) {
    CheckWithoutGil([&] { return tileplan_runtime_synchronize(rt_, Stream(stream)); });
  }

 private:
  // The array holds exactly (or, for prefill logits, at least) n elements.
  static void Need(const Array& a, int64_t n, const char* what, bool at_least = false) {
    const int64_t size = static_cast<int64_t>(a.size());
    if (size == n || (at_least && size >= n)) return;
    throw nb::value_error((std::string(what) + " has " + std::to_string(size) +
                           " elements; the call needs " + std::to_string(n))
                              .c_str());
  }

  tileplan_runtime* rt_ = nullptr;
};

}  // namespace

NB_MODULE(_tileplan, m) {
  m.doc() = "tileplan's C API, bound for python/tileplan (use the tileplan package)";
  m.def("version", [] { return std::string(tileplan_version()); });
  m.def("api_version", &tileplan_api_version);
  m.def("device_count", &tileplan_device_count);
  m.def("_set_error_type", [](nb::handle type) {
    Py_XINCREF(type.ptr());
    error_type = type.ptr();
  });
  m.attr("FORMAT_TABLE") = static_cast<int>(TILEPLAN_PLAN_TABLE);
  m.attr("FORMAT_TEXTPROTO") = static_cast<int>(TILEPLAN_PLAN_TEXTPROTO);
  m.attr("FORMAT_JSON") = static_cast<int>(TILEPLAN_PLAN_JSON);
  m.attr("FORMAT_BINARY") = static_cast<int>(TILEPLAN_PLAN_BINARY);

  nb::class_<Plan>(m, "Plan")
      .def("serialize", &Plan::Serialize)
      .def_prop_ro("num_phases", &Plan::num_phases)
      .def("phase_name", &Plan::phase_name)
      .def("phase_launches", &Plan::phase_launches)
      .def("phase_estimated_us", &Plan::phase_estimated_us);
  m.def("plan_create", &CreatePlan, nb::arg("model"), nb::arg("target").none(), nb::arg("prefill"),
        nb::arg("decode"), nb::arg("batch"), nb::arg("max_context"), nb::arg("last_token_logits"),
        nb::arg("tactic_cache").none(), nb::arg("freeze"), nb::arg("tp"), nb::arg("rank"),
        nb::rv_policy::take_ownership);
  m.def("plan_deserialize", &DeserializePlan, nb::arg("data"), nb::arg("format"));

  nb::class_<Runtime>(m, "Runtime")
      .def(nb::init<const Plan&, const std::optional<std::string>&, uint64_t, int, bool>(),
           nb::arg("plan"), nb::arg("checkpoint").none(), nb::arg("seed"), nb::arg("device"),
           nb::arg("host_launches"))
      .def_prop_ro("vocab_size", &Runtime::vocab_size)
      .def_prop_ro("max_context", &Runtime::max_context)
      .def_prop_ro("prefill_batch", &Runtime::prefill_batch)
      .def("prefill", &Runtime::Prefill, nb::arg("stream"), nb::arg("tokens"), nb::arg("batch"),
           nb::arg("num_tokens"), nb::arg("logits").none())
      .def("decode", &Runtime::Decode)
      .def("generate", &Runtime::Generate)
      .def("synchronize", &Runtime::Synchronize);
}
