#include "runtime/cpu/cpu_backend.h"

#include <algorithm>
#include <limits>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "base/text.h"
#include "models/lowering.h"
#include "regions/verifier.h"
#include "runtime/cpu/collectives.h"
#include "runtime/cpu/cpu_kernels.h"
#include "runtime/cpu/thread_pool.h"

namespace tileplan::runtime::cpu {
namespace {

using ir::AliasKind;
using ir::ValueId;

// Upper bound on the elements of one tensor, so a bad symbol binding fails cleanly instead
// of attempting a huge allocation.
constexpr int64_t kMaxElements = int64_t{1} << 32;

bool IsInt(ir::DType dtype) { return dtype == ir::DType::kI32; }

// The concrete shape of `type` under `symbols`; `what` names the value in messages.
absl::StatusOr<std::vector<int64_t>> ResolveShape(const ir::TensorType& type,
                                                  const std::map<std::string, int64_t>& symbols,
                                                  absl::string_view what) {
  std::vector<int64_t> shape;
  int64_t total = 1;
  for (const ir::Dim& d : type.dims) {
    int64_t extent;
    if (d.is_static()) {
      extent = d.extent();
    } else {
      auto it = symbols.find(d.symbol());
      if (it == symbols.end()) {
        return absl::InvalidArgumentError(absl::StrCat("symbol '", d.symbol(), "' in the type ",
                                                       type.ToString(), " of ", what,
                                                       " is not bound"));
      }
      extent = it->second;
    }
    if (extent < 0 || (extent > 0 && total > kMaxElements / extent)) {
      return absl::InvalidArgumentError(absl::StrCat("type ", type.ToString(), " of ", what,
                                                     " has a negative or too large extent"));
    }
    total *= extent;
    shape.push_back(extent);
  }
  return shape;
}

int64_t NumElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::shared_ptr<HostTensor> Allocate(ir::DType dtype, std::vector<int64_t> shape) {
  auto t = std::make_shared<HostTensor>();
  t->dtype = dtype;
  const size_t n = static_cast<size_t>(NumElements(shape));
  if (IsInt(dtype)) {
    t->i.assign(n, 0);
  } else {
    t->f.assign(n, 0.0f);
  }
  t->shape = std::move(shape);
  return t;
}

// Checks that a host tensor's data matches its shape and dtype class.
absl::Status CheckHostTensor(const HostTensor& t, absl::string_view what) {
  const int64_t n = t.num_elements();
  const bool ok = IsInt(t.dtype) ? (static_cast<int64_t>(t.i.size()) == n && t.f.empty())
                                 : (static_cast<int64_t>(t.f.size()) == n && t.i.empty());
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": data size does not match shape ",
                                                   ShapeString(t.shape), " and dtype ",
                                                   ir::DTypeName(t.dtype)));
  }
  return absl::OkStatus();
}

// A value during one Execute: its concrete shape and its (possibly shared) storage.
struct Slot {
  std::vector<int64_t> shape;
  std::shared_ptr<HostTensor> storage;
};

TensorArg ArgFor(const Slot& slot, ir::DType dtype) {
  TensorArg arg;
  arg.dtype = dtype;
  arg.shape = slot.shape;
  if (IsInt(dtype)) {
    arg.i = slot.storage->i.data();
  } else {
    arg.f = slot.storage->f.data();
  }
  return arg;
}

std::string RegionLabel(const ir::Graph& graph, size_t index) {
  const ir::Region& r = graph.regions()[index];
  std::string label = absl::StrCat("region ", index, " '", r.kind, "'");
  if (!r.results.empty()) absl::StrAppend(&label, " (%", graph.value(r.results[0]).name, ")");
  return label;
}

}  // namespace

int64_t HostTensor::num_elements() const { return NumElements(shape); }

HostTensor HostTensor::Float(std::vector<int64_t> shape, std::vector<float> data) {
  HostTensor t;
  t.dtype = ir::DType::kF32;
  t.shape = std::move(shape);
  t.f = std::move(data);
  return t;
}

HostTensor HostTensor::Int(std::vector<int64_t> shape, std::vector<int32_t> data) {
  HostTensor t;
  t.dtype = ir::DType::kI32;
  t.shape = std::move(shape);
  t.i = std::move(data);
  return t;
}

std::vector<std::string> CpuSupportedKinds() { return KindNames(); }

// One graph the backend runs: its weights and states (shared with the backend's other graph
// by name) and, per value, the last region reading it (-1 if none), by ValueId.
struct CpuBackend::Program {
  ir::Graph graph;
  std::vector<std::shared_ptr<HostTensor>> weights;  // null for non-weights
  std::vector<std::shared_ptr<HostTensor>> states;   // null for non-states
  std::vector<int32_t> last_use;
};

CpuBackend::CpuBackend(const Options& options) : options_(options) {
  int threads = options.threads;
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  pool_ = std::make_unique<ThreadPool>(threads);
  static_symbols_ = {{"B", options_.batch}, {"Smax", options_.max_seq}};
}

CpuBackend::~CpuBackend() = default;

int CpuBackend::num_threads() const { return pool_->num_threads(); }

namespace {

absl::Status CheckOptions(const CpuBackend::Options& options) {
  if (options.group != nullptr && (options.rank < 0 || options.rank >= options.group->ranks())) {
    return absl::InvalidArgumentError(absl::StrCat("cpu backend options: rank ", options.rank,
                                                   " is outside the group of ",
                                                   options.group->ranks(), " ranks"));
  }
  if (options.batch < 1 || options.max_seq < 1 || options.threads < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cpu backend options: batch and max_seq must be >= 1 and threads >= 0; got batch ",
        options.batch, ", max_seq ", options.max_seq, ", threads ", options.threads));
  }
  return absl::OkStatus();
}

// Weights loaded as float32, keyed by the checkpoint tensors (and slices of them) they bind,
// so two graphs of one model share each weight.
using LoadedWeights = std::map<std::pair<std::vector<std::string>, std::vector<ir::TensorSlice>>,
                               std::shared_ptr<HostTensor>>;

// The weights of `graph` by value name, read from `checkpoint` (models::BindCheckpoint) or
// found in `loaded`, which this extends.
absl::StatusOr<std::map<std::string, std::shared_ptr<HostTensor>>> LoadWeights(
    const ir::Graph& graph, const models::Checkpoint& checkpoint, LoadedWeights& loaded) {
  TP_ASSIGN_OR_RETURN(std::vector<std::vector<const models::TensorView*>> bound,
                      models::BindCheckpoint(graph, checkpoint));
  std::map<std::string, std::shared_ptr<HostTensor>> weights;
  for (size_t k = 0; k < bound.size(); ++k) {
    const ir::Value& w = graph.value(graph.weights()[k]);
    std::shared_ptr<HostTensor>& tensor = loaded[{w.checkpoint_tensors, w.checkpoint_slices}];
    if (tensor == nullptr) {
      // A packed weight is its parts concatenated along dim 0: with row-major data, their
      // element sequences one after the other (BindCheckpoint checked the trailing dims).
      // A stacked part is one slice of dim 0; either way the data is the parts' in order.
      // A sliced part contributes the elements of its slice.
      TP_ASSIGN_OR_RETURN(std::vector<int64_t> shape, ResolveShape(w.type, {}, w.name));
      std::vector<float> data;
      for (size_t part = 0; part < bound[k].size(); ++part) {
        TP_ASSIGN_OR_RETURN(std::vector<float> values,
                            models::PartToFloat32(*bound[k][part], w.slice(part)));
        data.insert(data.end(), values.begin(), values.end());
      }
      tensor = std::make_shared<HostTensor>(HostTensor::Float(std::move(shape), std::move(data)));
    }
    weights[w.name] = tensor;
  }
  return weights;
}

}  // namespace

absl::StatusOr<std::unique_ptr<CpuBackend>> CpuBackend::Create(const ir::Graph& graph,
                                                               const models::Checkpoint& checkpoint,
                                                               const Options& options) {
  TP_RETURN_IF_ERROR(CheckOptions(options));
  LoadedWeights loaded;
  TP_ASSIGN_OR_RETURN(auto weights, LoadWeights(graph, checkpoint, loaded));
  std::unique_ptr<CpuBackend> backend(new CpuBackend(options));
  TP_RETURN_IF_ERROR(backend->AddGraph(graph, std::move(weights)));
  return backend;
}

absl::StatusOr<std::unique_ptr<CpuBackend>> CpuBackend::CreatePhased(
    const ir::Graph& prefill, const ir::Graph& decode, const models::Checkpoint& checkpoint,
    const Options& options) {
  TP_RETURN_IF_ERROR(CheckOptions(options));
  std::unique_ptr<CpuBackend> backend(new CpuBackend(options));
  LoadedWeights loaded;
  for (const auto& [graph, name] : {std::pair{&prefill, "prefill"}, std::pair{&decode, "decode"}}) {
    absl::Status added = [&, graph = graph]() -> absl::Status {
      TP_ASSIGN_OR_RETURN(auto weights, LoadWeights(*graph, checkpoint, loaded));
      return backend->AddGraph(*graph, std::move(weights));
    }();
    if (!added.ok()) {
      return absl::Status(added.code(), absl::StrCat(name, " graph: ", added.message()));
    }
  }
  // AddGraph refused states of the decode graph that the prefill graph lacks; the converse:
  for (const auto& [name, state] : backend->states_) {
    const ir::ValueId id = decode.FindValue(name);
    if (id == ir::kNoValue || decode.value(id).kind != ir::ValueKind::kState) {
      return absl::InvalidArgumentError(absl::StrCat("decode graph: has no state %", name,
                                                     ", which the prefill graph declares; the two "
                                                     "graphs must share their state"));
    }
  }
  return backend;
}

absl::StatusOr<std::unique_ptr<CpuBackend>> CpuBackend::CreateWithWeights(
    const ir::Graph& graph, std::map<std::string, HostTensor> weights, const Options& options) {
  TP_RETURN_IF_ERROR(CheckOptions(options));
  std::map<std::string, std::shared_ptr<HostTensor>> shared;
  for (auto& [name, tensor] : weights) {
    shared[name] = std::make_shared<HostTensor>(std::move(tensor));
  }
  std::unique_ptr<CpuBackend> backend(new CpuBackend(options));
  TP_RETURN_IF_ERROR(backend->AddGraph(graph, std::move(shared)));
  return backend;
}

absl::Status CpuBackend::AddGraph(const ir::Graph& graph,
                                  std::map<std::string, std::shared_ptr<HostTensor>> weights) {
  auto program = std::make_unique<Program>();
  program->graph = graph;
  const ir::Graph& g = program->graph;
  const int num_values = g.num_values();

  // The verifier guarantees SSA order, operand counts, types and aliasing against the kind
  // registry, and that no value is read after an in-place update of its storage, nor a view
  // or weight updated in place: the storage sharing in Execute relies on that. What remains
  // is whether this backend implements every kind, and that each kernel gets the operand
  // count it indexes.
  TP_RETURN_IF_ERROR(ir::Verify(g));
  for (size_t ri = 0; ri < g.regions().size(); ++ri) {
    const ir::Region& r = g.regions()[ri];
    const KindInfo* info = FindKind(r.kind);
    if (info == nullptr) {
      return absl::UnimplementedError(
          absl::StrCat(RegionLabel(g, ri), ": the cpu backend does not implement region kind '",
                       r.kind, "'; it implements: ", absl::StrJoin(KindNames(), ", ")));
    }
    const int num_operands = static_cast<int>(r.operands.size());
    const int num_results = static_cast<int>(r.results.size());
    if (num_operands < info->min_operands || num_operands > info->max_operands ||
        (info->num_results >= 0 ? num_results != info->num_results : num_results < 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat(RegionLabel(g, ri), " has ", num_operands, " operands and ", num_results,
                       " results, which the cpu kernel does not take"));
    }
  }

  // Weights: exactly the graph's, with their declared static shapes.
  program->weights.assign(static_cast<size_t>(num_values), nullptr);
  for (ValueId id : g.weights()) {
    const ir::Value& v = g.value(id);
    const std::string what = absl::StrCat("weight %", v.name);
    auto it = weights.find(v.name);
    if (it == weights.end()) {
      return absl::NotFoundError(absl::StrCat("no data for ", what, " (", v.type.ToString(), ")"));
    }
    const HostTensor& t = *it->second;
    TP_ASSIGN_OR_RETURN(std::vector<int64_t> shape, ResolveShape(v.type, {}, what));
    TP_RETURN_IF_ERROR(CheckHostTensor(t, what));
    if (t.shape != shape || IsInt(t.dtype) != IsInt(v.type.dtype)) {
      return absl::InvalidArgumentError(absl::StrCat(what, " is declared ", v.type.ToString(),
                                                     ", got ", ir::DTypeName(t.dtype),
                                                     ShapeString(t.shape)));
    }
    program->weights[id] = std::move(it->second);
    weights.erase(it);
  }
  if (!weights.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("data given for '", weights.begin()->first,
                                                   "', which is not a weight of the graph"));
  }

  // States: allocated once, zeroed, with B and Smax bound; a state of an earlier graph is
  // shared when this one declares it too, which needs the same shape and dtype.
  program->states.assign(static_cast<size_t>(num_values), nullptr);
  for (ValueId id : g.states()) {
    const ir::Value& v = g.value(id);
    TP_ASSIGN_OR_RETURN(std::vector<int64_t> shape,
                        ResolveShape(v.type, static_symbols_, absl::StrCat("state %", v.name)));
    std::shared_ptr<HostTensor>& state = states_[v.name];
    if (state == nullptr) {
      if (!programs_.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("declares state %", v.name,
                         ", which the prefill graph does not declare; the two "
                         "graphs must share their state"));
      }
      state = Allocate(v.type.dtype, std::move(shape));
    } else if (state->shape != shape || state->dtype != v.type.dtype) {
      return absl::InvalidArgumentError(absl::StrCat(
          "state %", v.name, " is ", ir::DTypeName(v.type.dtype), ShapeString(shape), ", but ",
          ir::DTypeName(state->dtype), ShapeString(state->shape), " in the prefill graph"));
    }
    program->states[id] = state;
  }

  program->last_use.assign(static_cast<size_t>(num_values), -1);
  for (size_t ri = 0; ri < g.regions().size(); ++ri) {
    for (ValueId u : g.regions()[ri].operands) program->last_use[u] = static_cast<int32_t>(ri);
  }
  for (ValueId out : g.outputs()) program->last_use[out] = std::numeric_limits<int32_t>::max();
  programs_.push_back(std::move(program));
  return absl::OkStatus();
}

const CpuBackend::Program& CpuBackend::ProgramFor(ir::Phase phase) const {
  return phase == ir::Phase::kDecode ? *programs_.back() : *programs_.front();
}

const ir::Graph& CpuBackend::graph(ir::Phase phase) const { return ProgramFor(phase).graph; }

bool CpuBackend::phased() const { return programs_.size() > 1; }

void CpuBackend::Reset() {
  for (const auto& [name, s] : states_) {
    std::fill(s->f.begin(), s->f.end(), 0.0f);
    std::fill(s->i.begin(), s->i.end(), 0);
  }
}

absl::StatusOr<HostTensor> CpuBackend::ReadState(absl::string_view name) const {
  auto it = states_.find(std::string(name));
  if (it == states_.end()) return absl::NotFoundError(absl::StrCat("graph has no state %", name));
  return *it->second;
}

absl::StatusOr<std::vector<HostTensor>> CpuBackend::Execute(
    const std::map<std::string, HostTensor>& inputs, ir::Phase phase) {
  const Program& program = ProgramFor(phase);
  const ir::Graph& g = program.graph;
  std::map<std::string, int64_t> symbols = static_symbols_;
  std::vector<Slot> env(static_cast<size_t>(g.num_values()));

  for (const auto& [name, tensor] : inputs) {
    const ValueId id = g.FindValue(name);
    if (id == ir::kNoValue || g.value(id).kind != ir::ValueKind::kInput) {
      return absl::InvalidArgumentError(absl::StrCat("'", name, "' is not an input of the graph"));
    }
  }
  for (ValueId id : g.inputs()) {
    const ir::Value& v = g.value(id);
    const std::string what = absl::StrCat("input %", v.name);
    auto it = inputs.find(v.name);
    if (it == inputs.end()) return absl::InvalidArgumentError(absl::StrCat("missing ", what));
    const HostTensor& t = it->second;
    TP_RETURN_IF_ERROR(CheckHostTensor(t, what));
    if (IsInt(t.dtype) != IsInt(v.type.dtype) || t.shape.size() != v.type.dims.size()) {
      return absl::InvalidArgumentError(absl::StrCat(what, " is declared ", v.type.ToString(),
                                                     ", got ", ir::DTypeName(t.dtype),
                                                     ShapeString(t.shape)));
    }
    for (size_t d = 0; d < t.shape.size(); ++d) {
      const ir::Dim& dim = v.type.dims[d];
      int64_t want = t.shape[d];
      if (dim.is_static()) {
        want = dim.extent();
      } else if (auto s = symbols.find(dim.symbol()); s != symbols.end()) {
        want = s->second;
      } else {
        symbols[dim.symbol()] = t.shape[d];
      }
      if (t.shape[d] != want) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, " has shape ", ShapeString(t.shape), " but its type ",
                         v.type.ToString(), " needs extent ", want, " in dim ", d,
                         dim.is_static() ? "" : absl::StrCat(" (symbol ", dim.symbol(), ")")));
      }
    }
    env[id] = Slot{t.shape, std::make_shared<HostTensor>(t)};
  }
  for (ValueId id : g.weights()) env[id] = Slot{program.weights[id]->shape, program.weights[id]};
  for (ValueId id : g.states()) env[id] = Slot{program.states[id]->shape, program.states[id]};

  for (size_t ri = 0; ri < g.regions().size(); ++ri) {
    const ir::Region& r = g.regions()[ri];
    KernelContext ctx;
    ctx.region = &r;
    ctx.label = RegionLabel(g, ri);
    ctx.pool = pool_.get();
    ctx.group = options_.group;
    ctx.rank = options_.rank;
    for (ValueId u : r.operands) ctx.operands.push_back(ArgFor(env[u], g.value(u).type.dtype));
    for (size_t j = 0; j < r.results.size(); ++j) {
      const ir::Value& v = g.value(r.results[j]);
      TP_ASSIGN_OR_RETURN(std::vector<int64_t> shape,
                          ResolveShape(v.type, symbols, absl::StrCat("%", v.name)));
      const ir::ResultAlias& alias = r.result_aliases[j];
      // In-place results and reshape views share the aliased operand's storage; split views
      // are read-only copies of their slices.
      const bool shares = alias.kind == AliasKind::kInPlace ||
                          (alias.kind == AliasKind::kView && r.kind == "reshape");
      Slot& slot = env[r.results[j]];
      if (shares) {
        slot = Slot{std::move(shape), env[r.operands[alias.operand]].storage};
      } else {
        slot = Slot{shape, Allocate(v.type.dtype, shape)};
      }
      ctx.results.push_back(ArgFor(slot, v.type.dtype));
    }
    TP_RETURN_IF_ERROR(FindKind(r.kind)->kernel(ctx));
    for (ValueId u : r.operands) {
      if (program.last_use[u] == static_cast<int32_t>(ri)) env[u].storage.reset();
    }
  }

  std::vector<HostTensor> outputs;
  for (ValueId id : g.outputs()) {
    const Slot& slot = env[id];
    HostTensor t = *slot.storage;
    t.dtype = g.value(id).type.dtype;
    t.shape = slot.shape;
    outputs.push_back(std::move(t));
  }
  return outputs;
}

absl::StatusOr<std::vector<float>> CpuBackend::Run(const std::vector<int32_t>& tokens,
                                                   const std::vector<int32_t>& positions) {
  if (tokens.size() != positions.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("run: ", tokens.size(), " tokens but ", positions.size(), " positions"));
  }
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n == 0 || n % options_.batch != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("run: the number of tokens (", n,
                     ") must be a positive multiple of the batch size (", options_.batch, ")"));
  }
  for (int64_t k = 0; k < n; ++k) {
    if (positions[k] < 0 || positions[k] >= options_.max_seq) {
      return absl::OutOfRangeError(absl::StrCat("run: position ", positions[k], " of token ", k,
                                                " is outside the KV cache [0, ", options_.max_seq,
                                                "): the context is longer than max_seq"));
    }
  }
  const int64_t t = n / options_.batch;
  std::map<std::string, HostTensor> inputs;
  inputs["tokens"] = HostTensor::Int({options_.batch, t}, tokens);
  inputs["positions"] = HostTensor::Int({options_.batch, t}, positions);
  const ir::Phase phase = t == 1 ? ir::Phase::kDecode : ir::Phase::kPrefill;
  TP_ASSIGN_OR_RETURN(std::vector<HostTensor> outputs, Execute(inputs, phase));
  if (outputs.size() != 1 || IsInt(outputs[0].dtype)) {
    return absl::FailedPreconditionError(
        absl::StrCat("run: graph '", graph(phase).name(),
                     "' must have exactly one floating-point output (logits)"));
  }
  return std::move(outputs[0].f);
}

}  // namespace tileplan::runtime::cpu
