// GPU conformance of the cuBLASLt runner (the launch half of cublaslt_gemm) against the
// float32 CPU reference backend (runtime/cpu), in the manner of kernels_gpu_test: each case
// is a small graph whose last region runs on cuBLASLt, fresh random inputs rounded to their
// dtype, results (and the linear_swiglu workspace) poisoned with 0xFF bytes (NaN) before
// every launch, and a tolerance relative to max |ref| per output dtype (bf16 1e-2, f16 4e-3,
// f32 1e-4; see kernels_gpu_test.cc). Launches go to a non-default stream.
//
// Covered: linear with and without bias for M in {1, 7, 128, 300}, odd N and K a multiple
// of 8, a strided view as x, f16; linear_residual writing over its residual; linear_swiglu
// with bias; lm_head's float logits; the heuristic's own configuration written as a raw
// config (algo_id and every configuration field) and every candidate configuration the
// heuristic offers for several shapes, each run against the reference; a rejected algo_id
// and a rejected raw config; a Launch captured into a CUDA graph and replayed. Without a usable GPU
// the device tests skip with the reason; CublasLtCasesTest still checks every case on the CPU.
// Label: gpu.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "device/device.h"
#include "device/device_buffer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/core/kernel_family.h"
#include "kernels/core/template_launch.h"
#include "kernels/cublaslt/cublaslt_runner.h"
#include "kernels/families/registry.h"
#include "kernels/launch/kernel_loader.h"
#include "kernels/launch/nvrtc_compiler.h"
#include "regions/parser.h"
#include "regions/verifier.h"
#include "runtime/cpu/cpu_backend.h"
#include "targets/target.h"

namespace tileplan::kernels {
namespace {

using device::Device;
using device::DeviceBuffer;
using runtime::cpu::HostTensor;
using ::testing::HasSubstr;

// One case: a graph whose last region runs on cublaslt_gemm.
struct Case {
  std::string name;
  std::string graph;
  // linear_residual: the result is written over the residual's buffer (C == D).
  bool result_over_residual = false;
};

// The bound graph, random declarations and CPU reference of a case.
struct PreparedCase {
  std::unique_ptr<ir::Graph> graph;
  std::optional<BoundGraph> bound;
  int region = 0;
  std::map<ir::ValueId, HostTensor> declared;
  std::vector<HostTensor> reference;
  Tactic default_tactic;  // the target's default: no algo_id, so the heuristic's algo
  bool ok = false;
};

const KernelFamily& Family() { return *GlobalKernelRegistry().Find("cublaslt_gemm"); }

void PrepareCase(const Case& c, const TargetDescription& target, unsigned seed, PreparedCase& out) {
  absl::StatusOr<ir::Graph> parsed = ir::ParseGraph(c.graph);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_TRUE(ir::Verify(*parsed).ok()) << ir::Verify(*parsed);
  out.graph = std::make_unique<ir::Graph>(*std::move(parsed));
  const ir::Graph& graph = *out.graph;
  absl::StatusOr<BoundGraph> bound = BoundGraph::Create(graph, {}, 1);
  ASSERT_TRUE(bound.ok()) << bound.status();
  out.bound.emplace(*std::move(bound));
  out.region = static_cast<int>(graph.regions().size()) - 1;
  const BoundRegion region(*out.bound, out.region);
  const absl::Status can = Family().CanImplement(region, target);
  ASSERT_TRUE(can.ok()) << region.Label() << ": " << can;
  absl::StatusOr<GemmProblem> problem = GemmProblemFor(region);
  ASSERT_TRUE(problem.ok()) << problem.status();

  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::map<std::string, HostTensor> inputs, weights;
  for (int id = 0; id < graph.num_values(); ++id) {
    const ir::Value& v = graph.value(id);
    if (v.kind == ir::ValueKind::kResult) continue;
    std::vector<float> data(static_cast<size_t>(out.bound->layout(id).NumElements()));
    for (float& x : data) x = RoundToDType(v.type.dtype, uniform(rng));
    HostTensor t = HostTensor::Float(out.bound->shape(id), std::move(data));
    t.dtype = v.type.dtype;
    out.declared[id] = t;
    (v.kind == ir::ValueKind::kWeight ? weights : inputs)[v.name] = std::move(t);
  }
  runtime::cpu::CpuBackend::Options options;
  options.max_seq = 1;  // no symbols and no state
  absl::StatusOr<std::unique_ptr<runtime::cpu::CpuBackend>> cpu =
      runtime::cpu::CpuBackend::CreateWithWeights(graph, weights, options);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  absl::StatusOr<std::vector<HostTensor>> reference = (*cpu)->Execute(inputs);
  ASSERT_TRUE(reference.ok()) << reference.status();
  out.reference = *std::move(reference);
  absl::StatusOr<Tactic> tactic = Family().DefaultTactic(region, target);
  ASSERT_TRUE(tactic.ok()) << tactic.status();
  out.default_tactic = *tactic;
  out.ok = true;
}

// The device, compiler, loader and runner shared by every GPU test of the binary.
class GpuEnvironment {
 public:
  static const absl::Status& Init() {
    static const absl::Status* status = [] {
      absl::StatusOr<std::unique_ptr<Device>> device = Device::Open(0);
      if (!device.ok()) return new absl::Status(device.status());
      device_ = device->release();
      NvrtcCompiler::Options options;
      absl::StatusOr<std::unique_ptr<NvrtcCompiler>> compiler = NvrtcCompiler::Create(options);
      if (!compiler.ok()) {
        options.use_disk_cache = false;
        compiler = NvrtcCompiler::Create(options);
      }
      if (!compiler.ok()) return new absl::Status(compiler.status());
      compiler_ = compiler->release();
      absl::StatusOr<std::unique_ptr<KernelLoader>> loader =
          KernelLoader::Create(*device_, *compiler_);
      if (!loader.ok()) return new absl::Status(loader.status());
      loader_ = loader->release();
      absl::StatusOr<std::unique_ptr<CublasLtRunner>> runner =
          CublasLtRunner::Create(*device_, *loader_);
      if (!runner.ok()) return new absl::Status(runner.status());
      runner_ = runner->release();
      if (cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking) != cudaSuccess) {
        return new absl::Status(absl::InternalError("cudaStreamCreateWithFlags failed"));
      }
      return new absl::Status();
    }();
    return *status;
  }
  static const Device& device() { return *device_; }
  static CublasLtRunner& runner() { return *runner_; }
  static cudaStream_t stream() { return stream_; }
  static TargetDescription Target() {
    absl::StatusOr<TargetDescription> target =
        targets::FindTarget(absl::StrCat("sm_", device_->sm()));
    if (!target.ok()) target = targets::FindTarget("h200");
    return *target;
  }

 private:
  static inline Device* device_ = nullptr;
  static inline NvrtcCompiler* compiler_ = nullptr;
  static inline KernelLoader* loader_ = nullptr;
  static inline CublasLtRunner* runner_ = nullptr;
  static inline cudaStream_t stream_ = nullptr;
};

#define TP_REQUIRE_GPU()                                          \
  do {                                                            \
    const absl::Status& gpu_status_ = GpuEnvironment::Init();     \
    if (!gpu_status_.ok()) GTEST_SKIP() << gpu_status_.message(); \
  } while (false)

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

void ExpectClose(const std::string& what, const HostTensor& ref, ir::DType dtype,
                 const std::vector<float>& got) {
  ASSERT_EQ(got.size(), ref.f.size()) << what;
  double max_ref = 0;
  for (float v : ref.f) max_ref = std::max(max_ref, static_cast<double>(std::fabs(v)));
  const double tol = Tolerance(dtype) * std::max(max_ref, 1e-6);
  int mismatches = 0;
  double worst = 0;
  for (size_t k = 0; k < ref.f.size(); ++k) {
    const double err = std::fabs(static_cast<double>(got[k]) - ref.f[k]);
    if (!(err <= tol) && ++mismatches <= 5) {  // NaN (a poisoned element) fails too
      ADD_FAILURE() << what << "[" << k << "] = " << got[k] << ", reference " << ref.f[k]
                    << " (tolerance " << tol << ")";
    }
    if (err > worst || std::isnan(err)) worst = err;
  }
  EXPECT_EQ(mismatches, 0) << what << ": " << mismatches << " of " << ref.f.size()
                           << " elements off, worst error " << worst << ", max |ref| " << max_ref;
}

// Device storage of a prepared case: one buffer per root, the declarations uploaded.
class DeviceCase {
 public:
  DeviceCase(const PreparedCase& p, const Case& c) : p_(p), c_(c) {}

  // Allocates, uploads, and fills `buffers` for the region under `tactic`.
  void Setup(const Tactic& tactic) {
    const Device& device = GpuEnvironment::device();
    const ir::Graph& graph = *p_.graph;
    const BoundRegion region(*p_.bound, p_.region);
    for (int id = 0; id < graph.num_values(); ++id) {
      if (p_.bound->layout(id).root != id) continue;
      absl::StatusOr<DeviceBuffer> buffer =
          DeviceBuffer::Allocate(device, std::max<int64_t>(16, p_.bound->storage_bytes(id)));
      ASSERT_TRUE(buffer.ok()) << buffer.status();
      roots_[id] = *std::move(buffer);
    }
    for (int i = 0; i < region.num_operands(); ++i) {
      buffers.operands.push_back(Address(region.operand_id(i)));
    }
    buffers.results.push_back(c_.result_over_residual ? buffers.operands[2]
                                                      : Address(region.result_id(0)));
    absl::StatusOr<DeviceBuffer> workspace = DeviceBuffer::Allocate(
        device, std::max<int64_t>(16, Family().WorkspaceBytes(tactic, region)));
    ASSERT_TRUE(workspace.ok()) << workspace.status();
    workspace_ = *std::move(workspace);
    buffers.workspace = workspace_.data();
    ASSERT_NO_FATAL_FAILURE(Reset());
  }

  // Uploads the declarations again and poisons the results and the workspace.
  void Reset() {
    const ir::Graph& graph = *p_.graph;
    for (auto& [id, buffer] : roots_) {
      if (graph.value(id).kind == ir::ValueKind::kResult) {
        ASSERT_TRUE(buffer.Fill(0xff).ok());
      }
    }
    ASSERT_TRUE(workspace_.Fill(0xff).ok());
    for (const auto& [id, t] : p_.declared) {
      const std::string bytes = EncodeFloats(t.dtype, t.f);
      ASSERT_TRUE(roots_[id].CopyFromHost(bytes.data(), static_cast<int64_t>(bytes.size())).ok());
    }
  }

  // Compares the graph's output (read where the result was written) with the reference.
  void Check() {
    const ir::Graph& graph = *p_.graph;
    const BoundRegion region(*p_.bound, p_.region);
    const ir::ValueId id = c_.result_over_residual ? region.operand_id(2) : graph.outputs()[0];
    const Layout& l = p_.bound->layout(id);
    ASSERT_TRUE(l.IsContiguous());
    const ir::DType dtype = graph.value(graph.outputs()[0]).type.dtype;
    std::string bytes(static_cast<size_t>(l.NumElements() * ir::DTypeSize(dtype)), '\0');
    ASSERT_TRUE(roots_[l.root]
                    .CopyToHost(bytes.data(), static_cast<int64_t>(bytes.size()),
                                l.offset * ir::DTypeSize(dtype))
                    .ok());
    ExpectClose(absl::StrCat("%", graph.value(graph.outputs()[0]).name), p_.reference[0], dtype,
                DecodeFloats(dtype, bytes));
  }

  // Whether every byte of the output is still the poison.
  bool OutputPoisoned() {
    const ir::Graph& graph = *p_.graph;
    const Layout& l = p_.bound->layout(graph.outputs()[0]);
    std::string bytes(static_cast<size_t>(p_.bound->storage_bytes(l.root)), '\0');
    if (!roots_[l.root].CopyToHost(bytes.data(), static_cast<int64_t>(bytes.size())).ok()) {
      return false;
    }
    return bytes.find_first_not_of('\xff') == std::string::npos;
  }

  RegionBuffers buffers;

 private:
  void* Address(ir::ValueId id) {
    const Layout& l = p_.bound->layout(id);
    return roots_[l.root].as<char>() + l.offset * ir::DTypeSize(p_.graph->value(id).type.dtype);
  }

  const PreparedCase& p_;
  const Case& c_;
  std::map<ir::ValueId, DeviceBuffer> roots_;
  DeviceBuffer workspace_;
};

void Synchronize() {
  ASSERT_EQ(cudaStreamSynchronize(GpuEnvironment::stream()), cudaSuccess);
  const absl::Status synced = GpuEnvironment::device().Synchronize();
  ASSERT_TRUE(synced.ok()) << synced;
}

// Prepares, launches twice (inputs re-uploaded, outputs re-poisoned) and compares.
void RunOnDevice(const PreparedCase& p, const Case& c, const Tactic& tactic) {
  SCOPED_TRACE(absl::StrCat("tactic ", tactic.ParamsString()));
  const BoundRegion region(*p.bound, p.region);
  absl::StatusOr<std::unique_ptr<PreparedGemm>> gemm =
      GpuEnvironment::runner().Prepare(region, tactic);
  ASSERT_TRUE(gemm.ok()) << gemm.status();
  std::printf("%s\n", (*gemm)->Describe().c_str());
  DeviceCase d(p, c);
  ASSERT_NO_FATAL_FAILURE(d.Setup(tactic));
  for (int run = 0; run < 2; ++run) {
    SCOPED_TRACE(absl::StrCat("run ", run));
    if (run > 0) {
      ASSERT_NO_FATAL_FAILURE(d.Reset());
    }
    const absl::Status launched =
        GpuEnvironment::runner().Launch(**gemm, d.buffers, GpuEnvironment::stream());
    ASSERT_TRUE(launched.ok()) << launched;
    ASSERT_NO_FATAL_FAILURE(Synchronize());
    ASSERT_NO_FATAL_FAILURE(d.Check());
  }
}

std::string LinearGraph(int m, bool bias, const char* dtype = "bf16") {
  return absl::StrCat(
      "graph @g {\n  input %x: ", dtype, "[", m, ",136]\n  weight %w: ", dtype,
      "[200,136] = \"w\"\n", bias ? absl::StrCat("  weight %b: ", dtype, "[200] = \"b\"\n") : "",
      "  %y: ", dtype, "[", m, ",200] = linear(%x, %w", bias ? ", %b" : "", ")\n  output %y\n}\n");
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (int m : {1, 7, 128, 300}) {
    for (bool bias : {false, true}) {
      cases.push_back({absl::StrCat("Linear", bias ? "Bias" : "", "M", m), LinearGraph(m, bias)});
    }
  }
  cases.push_back({"LinearF16", LinearGraph(33, true, "f16")});
  cases.push_back({"LinearOfAStridedView", R"(graph @g {
  input %xx: bf16[2,9,200]
  weight %w: bf16[200,136] = "w"
  %a: bf16[2,9,64] view(%xx), %x: bf16[2,9,136] view(%xx) = split(%xx) {sizes = [64, 136]}
  %y: bf16[2,9,200] = linear(%x, %w)
  output %y
})"});
  cases.push_back({"LinearResidualInPlace", R"(graph @g {
  input %x: bf16[2,64,136]
  weight %w: bf16[200,136] = "w"
  input %r: bf16[2,64,200]
  weight %b: bf16[200] = "b"
  %y: bf16[2,64,200] = linear_residual(%x, %w, %r, %b)
  output %y
})",
                   true});
  cases.push_back({"LinearResidual", R"(graph @g {
  input %x: bf16[7,136]
  weight %w: bf16[200,136] = "w"
  input %r: bf16[7,200]
  %y: bf16[7,200] = linear_residual(%x, %w, %r)
  output %y
})"});
  cases.push_back({"LinearSwigluWithBias", R"(graph @g {
  input %x: bf16[3,50,136]
  weight %w: bf16[400,136] = "w"
  weight %b: bf16[400] = "b"
  %y: bf16[3,50,200] = linear_swiglu(%x, %w, %b)
  output %y
})"});
  cases.push_back({"LmHeadFloatLogits", R"(graph @g {
  input %x: bf16[1,5,136]
  weight %w: bf16[1001,136] = "w"
  %y: f32[1,5,1001] = lm_head(%x, %w)
  output %y
})"});
  return cases;
}

const Case& CaseNamed(const std::string& name) {
  static const std::vector<Case>* cases = new std::vector<Case>(Cases());
  for (const Case& c : *cases) {
    if (c.name == name) return c;
  }
  ADD_FAILURE() << "no case " << name;
  return cases->front();
}

TEST(CublasLtCasesTest, EveryCaseBuildsOnTheCpu) {
  const TargetDescription target = *targets::FindTarget("h200");
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    PreparedCase p;
    PrepareCase(c, target, 1, p);
    EXPECT_TRUE(p.ok);
  }
}

class CublasLtGpuTest : public ::testing::TestWithParam<Case> {};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

TEST_P(CublasLtGpuTest, MatchesTheCpuReference) {
  TP_REQUIRE_GPU();
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  PreparedCase p;
  PrepareCase(GetParam(), GpuEnvironment::Target(), seed, p);
  if (!p.ok) return;
  RunOnDevice(p, GetParam(), p.default_tactic);
}

INSTANTIATE_TEST_SUITE_P(Kinds, CublasLtGpuTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.name;
                         });

// Expects `algo` to be exactly the raw config `tactic` names.
void ExpectRunsConfig(const ResolvedAlgo& algo, const Tactic& tactic) {
  EXPECT_FALSE(algo.from_heuristic);
  EXPECT_EQ(algo.algo_id, tactic.params.at("algo_id"));
  EXPECT_EQ(algo.tile_id, tactic.params.at("tile_id"));
  EXPECT_EQ(algo.stages_id, tactic.params.at("stages_id"));
  EXPECT_EQ(algo.split_k, tactic.params.at("split_k"));
  EXPECT_EQ(algo.reduction_scheme, tactic.params.at("reduction_scheme"));
  EXPECT_EQ(algo.swizzle, tactic.params.at("swizzle"));
  EXPECT_EQ(algo.custom_option, tactic.params.at("custom_option"));
  EXPECT_EQ(algo.inner_shape_id, tactic.params.at("inner_shape_id"));
  EXPECT_EQ(algo.cluster_shape_id, tactic.params.at("cluster_shape_id"));
}

// The heuristic's own configuration, written as a raw config (its algo_id and every
// configuration field read back), runs exactly that algo, whatever its tile and stages.
TEST(CublasLtGpuDeviceTest, ExplicitAlgoIdRunsThatAlgo) {
  TP_REQUIRE_GPU();
  const Case& c = CaseNamed("LinearBiasM300");
  PreparedCase p;
  PrepareCase(c, GpuEnvironment::Target(), 7, p);
  ASSERT_TRUE(p.ok);
  const BoundRegion region(*p.bound, p.region);
  absl::StatusOr<std::unique_ptr<PreparedGemm>> heuristic =
      GpuEnvironment::runner().Prepare(region, p.default_tactic);
  ASSERT_TRUE(heuristic.ok()) << heuristic.status();
  const ResolvedAlgo h = (*heuristic)->algo();
  EXPECT_TRUE(h.from_heuristic);
  const Tactic tactic = ConfigTactic(h, p.default_tactic);
  const absl::Status valid = Family().ValidateTactic(tactic, region, GpuEnvironment::Target());
  ASSERT_TRUE(valid.ok()) << valid << "\nheuristic: " << (*heuristic)->Describe();
  absl::StatusOr<std::unique_ptr<PreparedGemm>> explicit_algo =
      GpuEnvironment::runner().Prepare(region, tactic);
  ASSERT_TRUE(explicit_algo.ok()) << explicit_algo.status()
                                  << "\nheuristic: " << (*heuristic)->Describe();
  ExpectRunsConfig((*explicit_algo)->algo(), tactic);
  // Describe reads back the configuration of the heuristic's pick (the workspace each
  // reports aside).
  auto config = [](const PreparedGemm& gemm) {
    std::string text = gemm.Describe();
    text = text.substr(0, text.find(", workspace "));
    const size_t from = text.find(" (heuristic)");
    if (from != std::string::npos) text.replace(from, 12, " (tactic)");
    return text;
  };
  EXPECT_EQ(config(**explicit_algo), config(**heuristic));
  EXPECT_THAT((*explicit_algo)->Describe(),
              HasSubstr(absl::StrCat("cuBLASLt algo ", h.algo_id, " (tactic), tile ",
                                     CublasLtTileName(h.tile_id))));
  RunOnDevice(p, c, tactic);
}

// Every configuration the heuristic offers, as a raw config: valid for the family, run as
// itself, and as right as the CPU reference.
TEST(CublasLtGpuDeviceTest, EveryHeuristicCandidateMatchesTheCpuReference) {
  TP_REQUIRE_GPU();
  for (const char* name : {"LinearBiasM300", "LinearM1", "LinearM7", "LinearF16",
                           "LinearResidualInPlace", "LinearSwigluWithBias", "LmHeadFloatLogits"}) {
    SCOPED_TRACE(name);
    const Case& c = CaseNamed(name);
    PreparedCase p;
    PrepareCase(c, GpuEnvironment::Target(), 11, p);
    ASSERT_TRUE(p.ok);
    const BoundRegion region(*p.bound, p.region);
    absl::StatusOr<std::vector<Tactic>> candidates =
        GpuEnvironment::runner().Candidates(region, p.default_tactic);
    ASSERT_TRUE(candidates.ok()) << candidates.status();
    ASSERT_FALSE(candidates->empty());
    std::printf("%s: %zu heuristic candidates\n", name, candidates->size());
    // The heuristic's top pick first.
    absl::StatusOr<std::unique_ptr<PreparedGemm>> heuristic =
        GpuEnvironment::runner().Prepare(region, p.default_tactic);
    ASSERT_TRUE(heuristic.ok()) << heuristic.status();
    EXPECT_EQ(candidates->front(), ConfigTactic((*heuristic)->algo(), p.default_tactic));
    std::set<std::string> seen;
    for (const Tactic& tactic : *candidates) {
      SCOPED_TRACE(tactic.ParamsString());
      EXPECT_TRUE(seen.insert(tactic.ParamsString()).second) << "a duplicate";
      const absl::Status valid = Family().ValidateTactic(tactic, region, GpuEnvironment::Target());
      EXPECT_TRUE(valid.ok()) << valid;
      absl::StatusOr<std::unique_ptr<PreparedGemm>> gemm =
          GpuEnvironment::runner().Prepare(region, tactic);
      ASSERT_TRUE(gemm.ok()) << gemm.status();
      ExpectRunsConfig((*gemm)->algo(), tactic);
      RunOnDevice(p, c, tactic);
    }
    // A limit of one is the top pick alone.
    absl::StatusOr<std::vector<Tactic>> one =
        GpuEnvironment::runner().Candidates(region, p.default_tactic, 1);
    ASSERT_TRUE(one.ok()) << one.status();
    ASSERT_EQ(one->size(), 1u);
    EXPECT_EQ(one->front(), candidates->front());
  }
}

// A raw config cuBLASLt does not take is FailedPrecondition naming the config, never the
// heuristic's algo instead.
TEST(CublasLtGpuDeviceTest, RejectedRawConfigNamesTheConfig) {
  TP_REQUIRE_GPU();
  PreparedCase p;
  PrepareCase(CaseNamed("LinearM7"), GpuEnvironment::Target(), 1, p);
  ASSERT_TRUE(p.ok);
  const BoundRegion region(*p.bound, p.region);
  absl::StatusOr<std::unique_ptr<PreparedGemm>> heuristic =
      GpuEnvironment::runner().Prepare(region, p.default_tactic);
  ASSERT_TRUE(heuristic.ok()) << heuristic.status();
  Tactic tactic = ConfigTactic((*heuristic)->algo(), p.default_tactic);
  tactic.params["algo_id"] = 1000000;
  absl::StatusOr<std::unique_ptr<PreparedGemm>> gemm =
      GpuEnvironment::runner().Prepare(region, tactic);
  ASSERT_FALSE(gemm.ok());
  EXPECT_EQ(gemm.status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string message(gemm.status().message());
  EXPECT_THAT(message, HasSubstr("'linear' (%y)"));
  EXPECT_THAT(message, HasSubstr(absl::StrCat("cuBLASLt rejects config ", tactic.ParamsString(),
                                              " for m=200 n=7 k=136")));
}

TEST(CublasLtGpuDeviceTest, RejectedAlgoIdNamesTheRegionAndTactic) {
  TP_REQUIRE_GPU();
  PreparedCase p;
  PrepareCase(CaseNamed("LinearM7"), GpuEnvironment::Target(), 1, p);
  ASSERT_TRUE(p.ok);
  Tactic tactic = p.default_tactic;
  tactic.params["algo_id"] = 1000000;
  absl::StatusOr<std::unique_ptr<PreparedGemm>> gemm =
      GpuEnvironment::runner().Prepare(BoundRegion(*p.bound, p.region), tactic);
  ASSERT_FALSE(gemm.ok());
  EXPECT_EQ(gemm.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(gemm.status().message());
  EXPECT_THAT(message, HasSubstr("'linear' (%y)"));
  EXPECT_THAT(message, HasSubstr("cuBLASLt rejects tactic algo_id=1000000,"));
}

TEST(CublasLtGpuDeviceTest, MisalignedBufferIsRefused) {
  TP_REQUIRE_GPU();
  const Case& c = CaseNamed("LinearM7");
  PreparedCase p;
  PrepareCase(c, GpuEnvironment::Target(), 1, p);
  ASSERT_TRUE(p.ok);
  absl::StatusOr<std::unique_ptr<PreparedGemm>> gemm =
      GpuEnvironment::runner().Prepare(BoundRegion(*p.bound, p.region), p.default_tactic);
  ASSERT_TRUE(gemm.ok()) << gemm.status();
  DeviceCase d(p, c);
  ASSERT_NO_FATAL_FAILURE(d.Setup(p.default_tactic));
  d.buffers.operands[0] = static_cast<char*>(d.buffers.operands[0]) + 2;
  const absl::Status launched =
      GpuEnvironment::runner().Launch(**gemm, d.buffers, GpuEnvironment::stream());
  EXPECT_EQ(launched.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(launched.message()), HasSubstr("x (operand 0)"));
}

// Launch only enqueues on its stream, so it captures into a CUDA graph: the GEMM and the
// swiglu kernel of linear_swiglu, replayed twice on fresh inputs. (The first, eager launch
// loads cuBLASLt's kernels, as a runtime warms up before it captures.)
TEST(CublasLtGpuDeviceTest, LaunchCapturesIntoACudaGraph) {
  TP_REQUIRE_GPU();
  const Case& c = CaseNamed("LinearSwigluWithBias");
  PreparedCase p;
  PrepareCase(c, GpuEnvironment::Target(), 3, p);
  ASSERT_TRUE(p.ok);
  absl::StatusOr<std::unique_ptr<PreparedGemm>> gemm =
      GpuEnvironment::runner().Prepare(BoundRegion(*p.bound, p.region), p.default_tactic);
  ASSERT_TRUE(gemm.ok()) << gemm.status();
  DeviceCase d(p, c);
  ASSERT_NO_FATAL_FAILURE(d.Setup(p.default_tactic));
  cudaStream_t stream = GpuEnvironment::stream();
  ASSERT_TRUE(GpuEnvironment::runner().Launch(**gemm, d.buffers, stream).ok());
  ASSERT_NO_FATAL_FAILURE(Synchronize());
  ASSERT_NO_FATAL_FAILURE(d.Check());

  ASSERT_NO_FATAL_FAILURE(d.Reset());
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  const absl::Status captured = GpuEnvironment::runner().Launch(**gemm, d.buffers, stream);
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  ASSERT_TRUE(captured.ok()) << captured;
  ASSERT_EQ(ended, cudaSuccess) << cudaGetErrorString(ended);
  size_t nodes = 0;
  ASSERT_EQ(cudaGraphGetNodes(graph, nullptr, &nodes), cudaSuccess);
  EXPECT_GE(nodes, 2u);  // at least the GEMM and the swiglu kernel
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_NO_FATAL_FAILURE(Synchronize());
  EXPECT_TRUE(d.OutputPoisoned()) << "Launch ran work while the stream was capturing";
  for (int replay = 0; replay < 2; ++replay) {
    SCOPED_TRACE(absl::StrCat("replay ", replay));
    ASSERT_NO_FATAL_FAILURE(d.Reset());
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_NO_FATAL_FAILURE(Synchronize());
    ASSERT_NO_FATAL_FAILURE(d.Check());
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

}  // namespace
}  // namespace tileplan::kernels
