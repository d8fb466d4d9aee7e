#include "tests/kernels/gpu_harness.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "device/cuda_status.h"
#include "kernels/families/registry.h"
#include "regions/parser.h"
#include "regions/rope.h"
#include "regions/verifier.h"
#include "targets/target.h"

namespace tileplan::kernels::testing {

using device::Device;
using device::DeviceBuffer;
using runtime::cpu::HostTensor;

void PrintTo(const CaseGroup& group, std::ostream* os) { *os << group.name; }

void PrepareCase(const Case& c, const TargetDescription& target, unsigned seed, PreparedCase& out) {
  absl::StatusOr<ir::Graph> parsed = ir::ParseGraph(c.graph);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_TRUE(ir::Verify(*parsed).ok()) << ir::Verify(*parsed);
  out.graph = std::make_unique<ir::Graph>(*std::move(parsed));
  const ir::Graph& graph = *out.graph;
  absl::StatusOr<BoundGraph> bound = BoundGraph::Create(graph, c.bindings, c.context);
  ASSERT_TRUE(bound.ok()) << bound.status();
  out.bound.emplace(*std::move(bound));
  out.region = static_cast<int>(graph.regions().size()) - 1;
  const BoundRegion region(*out.bound, out.region);
  out.family = GlobalKernelRegistry().Find(c.family);
  ASSERT_NE(out.family, nullptr) << c.family;
  const absl::Status can = out.family->CanImplement(region, target);
  ASSERT_TRUE(can.ok()) << region.Label() << ": " << can;
  if (c.result_over_operand >= 0) {
    ASSERT_TRUE(out.family->MayOverwriteOperand(region, 0, c.result_over_operand))
        << region.Label() << ": result 0 may not overwrite operand " << c.result_over_operand;
  }
  out.result_over_operand = c.result_over_operand;

  // Fresh random inputs, rounded to their dtype so that both sides see the same values.
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::map<std::string, HostTensor> inputs, weights;
  for (int id = 0; id < graph.num_values(); ++id) {
    const ir::Value& v = graph.value(id);
    if (v.kind == ir::ValueKind::kResult) continue;
    ASSERT_NE(v.kind, ir::ValueKind::kState) << "cases declare caches as inputs";
    const std::vector<int64_t>& shape = out.bound->shape(id);
    HostTensor t;
    if (v.type.dtype == ir::DType::kI32) {
      ASSERT_TRUE(c.ints.count(v.name)) << "no values for %" << v.name;
      t = HostTensor::Int(shape, c.ints.at(v.name));
    } else {
      std::vector<float> data(static_cast<size_t>(out.bound->layout(id).NumElements()));
      const std::vector<float>* scales =
          c.row_scales.count(v.name) ? &c.row_scales.at(v.name) : nullptr;
      const std::vector<float>* given = c.floats.count(v.name) ? &c.floats.at(v.name) : nullptr;
      ASSERT_TRUE(given == nullptr || given->size() == data.size())
          << "%" << v.name << " has " << data.size() << " elements, " << given->size()
          << " values given";
      const int64_t cols = shape.empty() ? 1 : shape.back();
      for (size_t k = 0; k < data.size(); ++k) {
        const float scale =
            scales == nullptr ? 1.0f : (*scales)[static_cast<size_t>(k / cols) % scales->size()];
        data[k] = RoundToDType(v.type.dtype, given != nullptr ? (*given)[k] : scale * uniform(rng));
      }
      t = HostTensor::Float(shape, std::move(data));
      t.dtype = v.type.dtype;
    }
    out.declared[id] = t;
    (v.kind == ir::ValueKind::kWeight ? weights : inputs)[v.name] = std::move(t);
  }
  runtime::cpu::CpuBackend::Options options;
  options.batch = c.bindings.count("B") ? c.bindings.at("B") : 1;
  options.max_seq = c.bindings.count("Smax") ? c.bindings.at("Smax") : 1;
  absl::StatusOr<std::unique_ptr<runtime::cpu::CpuBackend>> cpu =
      runtime::cpu::CpuBackend::CreateWithWeights(graph, weights, options);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  absl::StatusOr<std::vector<HostTensor>> reference = (*cpu)->Execute(inputs);
  ASSERT_TRUE(reference.ok()) << reference.status();
  out.reference = *std::move(reference);

  absl::StatusOr<Tactic> default_tactic = out.family->DefaultTactic(region, target);
  ASSERT_TRUE(default_tactic.ok()) << default_tactic.status();
  out.tactics = {*std::move(default_tactic)};
  for (const Params& params : c.tactics) {
    out.tactics.push_back(Tactic{std::string(out.family->name()), out.family->version(), params});
  }
  for (const Tactic& tactic : out.tactics) {
    const absl::Status valid = out.family->ValidateTactic(tactic, region, target);
    ASSERT_TRUE(valid.ok()) << region.Label() << ": " << valid;
  }
  out.ok = true;
}

void CheckCaseOnCpu(const Case& c, const TargetDescription& target) {
  PreparedCase p;
  PrepareCase(c, target, 1, p);
  if (!p.ok || p.family->launch_kind() != LaunchKind::kTemplates) return;
  const BoundRegion region(*p.bound, p.region);
  RegionBuffers buffers;
  auto fake = [](int i) { return reinterpret_cast<void*>(static_cast<uintptr_t>(i + 1) << 20); };
  for (int i = 0; i < region.num_operands(); ++i) buffers.operands.push_back(fake(i));
  for (int i = 0; i < region.num_results(); ++i) buffers.results.push_back(fake(16 + i));
  if (p.result_over_operand >= 0) {
    buffers.results[0] = buffers.operands[static_cast<size_t>(p.result_over_operand)];
  }
  buffers.workspace = fake(32);
  buffers.counters = fake(34);
  buffers.rope_inv_freq = static_cast<const float*>(fake(33));
  for (const Tactic& tactic : p.tactics) {
    const absl::StatusOr<std::vector<KernelLaunch>> launches =
        PrepareLaunches(*p.family, region, tactic, buffers);
    EXPECT_TRUE(launches.ok()) << launches.status();
  }
}

namespace {

struct Environment {
  std::unique_ptr<Device> device;
  std::unique_ptr<StepLauncher> launcher;
  cudaStream_t stream = nullptr;
};

// Opened once by GpuEnvironment::Init; the tests share it to the end, when an exit handler
// frees it (its buffers, the cuBLASLt workspace among them, before the CUDA runtime's own exit
// handlers run, so that a leak check at exit sees none).
Environment* environment = nullptr;

void CloseEnvironment() {
  if (environment == nullptr) return;
  if (environment->stream != nullptr) cudaStreamDestroy(environment->stream);
  delete environment;
  environment = nullptr;
}

absl::Status OpenEnvironment() {
  auto env = std::make_unique<Environment>();
  TP_ASSIGN_OR_RETURN(env->device, Device::Open(0));
  StepLauncher::Options options;  // the default disk cache, when it can be opened
  absl::StatusOr<std::unique_ptr<StepLauncher>> launcher =
      StepLauncher::Create(*env->device, options);
  if (!launcher.ok()) {
    options.compiler.use_disk_cache = false;
    launcher = StepLauncher::Create(*env->device, options);
  }
  TP_RETURN_IF_ERROR(launcher.status());
  env->launcher = *std::move(launcher);
  TP_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&env->stream, cudaStreamNonBlocking));
  environment = env.release();
  std::atexit(CloseEnvironment);
  return absl::OkStatus();
}

}  // namespace

const absl::Status& GpuEnvironment::Init() {
  static const absl::Status* status = new absl::Status(OpenEnvironment());
  return *status;
}

const Device& GpuEnvironment::device() { return *environment->device; }
StepLauncher& GpuEnvironment::launcher() { return *environment->launcher; }
cudaStream_t GpuEnvironment::stream() { return environment->stream; }

TargetDescription GpuEnvironment::Target() {
  absl::StatusOr<TargetDescription> target =
      targets::FindTarget(absl::StrCat("sm_", environment->device->sm()));
  if (!target.ok()) target = targets::FindTarget("h200");
  return *target;
}

double Tolerance(ir::DType dtype) {
  switch (dtype) {
    case ir::DType::kBF16:
      return 1e-2;
    case ir::DType::kF16:
      return 4e-3;
    default:
      return 1e-4;
  }
}

Output Gather(ir::DType dtype, const Layout& layout, const std::string& root_bytes) {
  Output out;
  out.dtype = dtype;
  const int64_t n = layout.NumElements();
  std::vector<int64_t> index(layout.shape.size(), 0);
  const int64_t es = ir::DTypeSize(dtype);
  std::vector<float> all;
  if (dtype != ir::DType::kI32) all = DecodeFloats(dtype, root_bytes);
  for (int64_t k = 0; k < n; ++k) {
    int64_t at = layout.offset;
    for (size_t d = 0; d < index.size(); ++d) at += index[d] * layout.strides[d];
    if (dtype == ir::DType::kI32) {
      int32_t v;
      std::memcpy(&v, root_bytes.data() + at * es, 4);
      out.i.push_back(v);
    } else {
      out.f.push_back(all[static_cast<size_t>(at)]);
    }
    for (size_t d = index.size(); d-- > 0;) {
      if (++index[d] < layout.shape[d]) break;
      index[d] = 0;
    }
  }
  return out;
}

void ExpectClose(const std::string& what, const HostTensor& ref, const Output& got) {
  if (ref.dtype == ir::DType::kI32) {
    ASSERT_EQ(got.i.size(), ref.i.size()) << what;
    int mismatches = 0;
    for (size_t k = 0; k < ref.i.size(); ++k) {
      if (got.i[k] != ref.i[k] && ++mismatches <= 5) {
        ADD_FAILURE() << what << "[" << k << "] = " << got.i[k] << ", reference " << ref.i[k];
      }
    }
    EXPECT_EQ(mismatches, 0) << what;
    return;
  }
  ASSERT_EQ(got.f.size(), ref.f.size()) << what;
  double max_ref = 0;
  for (float v : ref.f) max_ref = std::max(max_ref, static_cast<double>(std::fabs(v)));
  const double tol = Tolerance(got.dtype) * std::max(max_ref, 1e-6);
  int mismatches = 0;
  double worst = 0;
  for (size_t k = 0; k < ref.f.size(); ++k) {
    const double err = std::fabs(static_cast<double>(got.f[k]) - ref.f[k]);
    if (!(err <= tol)) {  // NaN (an unwritten, poisoned element) fails too
      if (++mismatches <= 5) {
        ADD_FAILURE() << what << "[" << k << "] = " << got.f[k] << ", reference " << ref.f[k]
                      << " (tolerance " << tol << ")";
      }
    }
    if (err > worst || std::isnan(err)) worst = err;
  }
  EXPECT_EQ(mismatches, 0) << what << ": " << mismatches << " of " << ref.f.size()
                           << " elements off, worst error " << worst << ", max |ref| " << max_ref;
}

void DeviceCase::Setup(const Tactic& tactic) {
  const Device& device = GpuEnvironment::device();
  const ir::Graph& graph = *p_.graph;
  const BoundGraph& bound = *p_.bound;
  const BoundRegion region(bound, p_.region);
  absl::StatusOr<std::unique_ptr<PreparedStep>> step = PrepareStep(*p_.family, region, tactic);
  ASSERT_TRUE(step.ok()) << step.status();
  step_ = *std::move(step);
  // Device storage per root value.
  for (int id = 0; id < graph.num_values(); ++id) {
    if (bound.layout(id).root != id) continue;
    absl::StatusOr<DeviceBuffer> buffer =
        DeviceBuffer::Allocate(device, std::max<int64_t>(16, bound.storage_bytes(id)));
    ASSERT_TRUE(buffer.ok()) << buffer.status();
    roots_[id] = *std::move(buffer);
  }
  auto address = [&](ir::ValueId id) {
    const Layout& l = bound.layout(id);
    return static_cast<void*>(roots_[l.root].as<char>() +
                              l.offset * ir::DTypeSize(graph.value(id).type.dtype));
  };
  for (int i = 0; i < region.num_operands(); ++i) {
    buffers_.operands.push_back(address(region.operand_id(i)));
  }
  for (int i = 0; i < region.num_results(); ++i) {
    buffers_.results.push_back(i == 0 && p_.result_over_operand >= 0
                                   ? buffers_.operands[static_cast<size_t>(p_.result_over_operand)]
                                   : address(region.result_id(i)));
  }
  absl::StatusOr<DeviceBuffer> workspace =
      DeviceBuffer::Allocate(device, p_.family->WorkspaceBytes(tactic, region));
  ASSERT_TRUE(workspace.ok()) << workspace.status();
  workspace_ = *std::move(workspace);
  buffers_.workspace = workspace_.data();
  absl::StatusOr<DeviceBuffer> counters =
      DeviceBuffer::Allocate(device, p_.family->CounterBytes(tactic, region));
  ASSERT_TRUE(counters.ok()) << counters.status();
  counters_ = *std::move(counters);
  ASSERT_TRUE(counters_.Fill(0).ok());  // zeroed once, before the first of the runs
  buffers_.counters = counters_.data();
  absl::StatusOr<DeviceBuffer> error = DeviceBuffer::Allocate(device, 4);
  ASSERT_TRUE(error.ok()) << error.status();
  error_ = *std::move(error);
  ASSERT_TRUE(error_.Fill(0).ok());
  buffers_.error = error_.as<int>();
  if (ir::HasRope(region.region())) {
    absl::StatusOr<ir::RopeParams> rope = ir::RopeParamsFromAttributes(region.region().attrs);
    ASSERT_TRUE(rope.ok()) << rope.status();
    const std::vector<float> freqs =
        ir::RopeInvFreq(*rope, region.result(ir::RopeHeadResult(region.region())).shape.back());
    absl::StatusOr<DeviceBuffer> table =
        DeviceBuffer::Allocate(device, static_cast<int64_t>(freqs.size() * 4));
    ASSERT_TRUE(table.ok()) << table.status();
    ASSERT_TRUE(table->CopyFromHost(freqs.data(), table->size()).ok());
    rope_inv_freq_ = *std::move(table);
    buffers_.rope_inv_freq = rope_inv_freq_.as<float>();
  }
  const absl::StatusOr<int> binding = step_->Bind(buffers_);
  ASSERT_TRUE(binding.ok()) << binding.status();
  binding_ = *binding;
  ASSERT_NO_FATAL_FAILURE(Reset());
}

void DeviceCase::Reset() {
  const ir::Graph& graph = *p_.graph;
  for (auto& [id, buffer] : roots_) {
    if (graph.value(id).kind == ir::ValueKind::kResult) {
      ASSERT_TRUE(buffer.Fill(0xff).ok());
    }
  }
  ASSERT_TRUE(workspace_.Fill(0xff).ok());  // scratch: its contents must not matter
  for (const auto& [id, t] : p_.declared) {
    const std::string bytes =
        t.dtype == ir::DType::kI32
            ? std::string(reinterpret_cast<const char*>(t.i.data()), t.i.size() * 4)
            : EncodeFloats(t.dtype, t.f);
    ASSERT_TRUE(roots_[id].CopyFromHost(bytes.data(), static_cast<int64_t>(bytes.size())).ok());
  }
  // A copy from pageable memory may return before it lands, and launches go to a stream that
  // does not wait for the legacy default stream.
  const absl::Status synced = GpuEnvironment::device().Synchronize();
  ASSERT_TRUE(synced.ok()) << synced;
}

absl::Status DeviceCase::Enqueue() { return step_->Enqueue(binding_, GpuEnvironment::stream()); }

const Layout& DeviceCase::OutputLayout(size_t j) const {
  const ir::ValueId id = p_.graph->outputs()[j];
  const BoundRegion region(*p_.bound, p_.region);
  if (p_.result_over_operand >= 0 && id == region.result_id(0)) {
    return p_.bound->layout(region.operand_id(p_.result_over_operand));
  }
  return p_.bound->layout(id);
}

absl::StatusOr<std::string> DeviceCase::RootBytes(ir::ValueId root) {
  std::string bytes(static_cast<size_t>(p_.bound->storage_bytes(root)), '\0');
  TP_RETURN_IF_ERROR(roots_[root].CopyToHost(bytes.data(), static_cast<int64_t>(bytes.size())));
  return bytes;
}

void DeviceCase::Check() {
  const ir::Graph& graph = *p_.graph;
  int error_word = -1;
  ASSERT_TRUE(error_.CopyToHost(&error_word, 4).ok());
  EXPECT_EQ(error_word, 0) << "the kernel reported a bad token id or position";
  for (size_t j = 0; j < graph.outputs().size(); ++j) {
    const ir::Value& output = graph.value(graph.outputs()[j]);
    const Layout& l = OutputLayout(j);
    absl::StatusOr<std::string> bytes = RootBytes(l.root);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    ExpectClose(absl::StrCat("%", output.name), p_.reference[j],
                Gather(output.type.dtype, l, *bytes));
  }
}

bool DeviceCase::OutputPoisoned() {
  absl::StatusOr<std::string> bytes = RootBytes(OutputLayout(0).root);
  return bytes.ok() && bytes->find_first_not_of('\xff') == std::string::npos;
}

absl::Status Synchronize() {
  TP_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(GpuEnvironment::stream()));
  return GpuEnvironment::device().Synchronize();
}

absl::StatusOr<std::unique_ptr<PreparedStep>> PrepareStep(const KernelFamily& family,
                                                          const BoundRegion& region,
                                                          const Tactic& tactic) {
  StepLauncher& launcher = GpuEnvironment::launcher();
  TP_ASSIGN_OR_RETURN(std::unique_ptr<PreparedStep> step,
                      launcher.Prepare(family, region, tactic, {}, region.Label()));
  TP_RETURN_IF_ERROR(launcher.Load({step.get()}));
  return step;
}

void RunOnDevice(const PreparedCase& p, const std::vector<Tactic>& tactics) {
  for (const Tactic& tactic : tactics) {
    SCOPED_TRACE(absl::StrCat("tactic ", tactic.ParamsString()));
    DeviceCase d(p);
    ASSERT_NO_FATAL_FAILURE(d.Setup(tactic));
    if (d.step().kind() == LaunchKind::kLibrary) std::printf("%s\n", d.step().Describe().c_str());
    for (int run = 0; run < 2; ++run) {
      SCOPED_TRACE(absl::StrCat("run ", run));
      if (run > 0) {
        ASSERT_NO_FATAL_FAILURE(d.Reset());
      }
      ASSERT_EQ(d.Enqueue(), absl::OkStatus());
      ASSERT_EQ(Synchronize(), absl::OkStatus());
      ASSERT_NO_FATAL_FAILURE(d.Check());
    }
  }
}

}  // namespace tileplan::kernels::testing
