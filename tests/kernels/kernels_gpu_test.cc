// GPU conformance of every CUDA-template family against the float32 CPU reference backend
// (runtime/cpu), in the manner of one harness for all kernels: each case is a small graph
// whose last region is the kernel under test (earlier regions are views, so strided
// operands are covered), run on fresh random inputs under the target's default tactic and
// a few explicit ones (odd sizes, split-K/KV, several rows per CTA). Results are poisoned
// (all bits set: NaN for floats, -1 for ints) before every launch, every case runs twice
// (the second launch checks that the single-launch split reductions re-arm their
// counters), and outputs are compared with a tolerance per dtype relative to max |ref|:
//   bf16 1e-2: a stored bf16 value carries up to 2^-9 relative rounding, and fused kernels
//              round a few intermediates (attention's probabilities before P V), so a few
//              ulps of max |ref| separate a right kernel from the reference while an
//              indexing or masking error moves values by O(max |ref|);
//   f16  4e-3 (10 mantissa bits), f32 1e-4 (float accumulation against the reference's
//   double), i32 exact.
// Without a usable GPU the device tests are skipped with the reason from Device::Open;
// KernelsGpuCasesTest still checks every case on the CPU (graphs, reference, tactics and
// launch preparation), so the cases are known good before a GPU sees them. Label: gpu.
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "device/device.h"
#include "device/device_buffer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/core/kernel_family.h"
#include "kernels/core/template_launch.h"
#include "kernels/families/registry.h"
#include "kernels/launch/kernel_loader.h"
#include "kernels/launch/nvrtc_compiler.h"
#include "regions/parser.h"
#include "regions/verifier.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/cpu/cpu_kernels.h"
#include "targets/target.h"

namespace tileplan::kernels {
namespace {

using device::Device;
using device::DeviceBuffer;
using runtime::cpu::HostTensor;
using Params = std::map<std::string, int64_t>;

// One conformance case: a graph whose last region runs on `family`, the int inputs it needs
// (floats are random), the symbol bindings, and explicit tactics besides the default.
struct Case {
  std::string graph;
  std::string family;
  ShapeBindings bindings;
  int64_t context = 1;
  std::map<std::string, std::vector<int32_t>> ints;
  // Float declarations whose rows (along the last dim) are scaled, row r by factor
  // r % size: rows of different magnitudes, so a kernel that mixes up per-row statistics
  // (an RMSNorm factor) shows.
  std::map<std::string, std::vector<float>> row_scales;
  std::vector<Params> tactics;
};

struct Output {
  ir::DType dtype = ir::DType::kF32;
  std::vector<float> f;
  std::vector<int32_t> i;
};

// Everything about a case that needs no GPU: the bound graph, its random declarations, the
// CPU reference outputs and the validated tactics (the target's default first).
struct PreparedCase {
  std::unique_ptr<ir::Graph> graph;
  std::optional<BoundGraph> bound;
  int region = 0;  // the last region, the one under test
  const KernelFamily* family = nullptr;
  std::map<ir::ValueId, HostTensor> declared;
  std::vector<HostTensor> reference;
  std::vector<Tactic> tactics;
  bool ok = false;  // set when every step above succeeded
};

// Fills `out`; gtest failures (fatal ones return early) on any problem.
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
      const int64_t cols = shape.empty() ? 1 : shape.back();
      for (size_t k = 0; k < data.size(); ++k) {
        const float scale =
            scales == nullptr ? 1.0f : (*scales)[static_cast<size_t>(k / cols) % scales->size()];
        data[k] = RoundToDType(v.type.dtype, scale * uniform(rng));
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

  absl::StatusOr<CandidateTable> table = out.family->Candidates(region, target);
  ASSERT_TRUE(table.ok()) << table.status();
  out.tactics = {table->default_tactic};
  for (const Params& params : c.tactics) {
    out.tactics.push_back(Tactic{std::string(out.family->name()), out.family->version(), params});
  }
  for (const Tactic& tactic : out.tactics) {
    const absl::Status valid = out.family->ValidateTactic(tactic, region, target);
    ASSERT_TRUE(valid.ok()) << region.Label() << ": " << valid;
  }
  out.ok = true;
}

// The device, compiler and loader shared by every GPU test of the binary.
class GpuEnvironment {
 public:
  // Opens them once; the status says why there is no GPU.
  static const absl::Status& Init() {
    static const absl::Status* status = [] {
      absl::StatusOr<std::unique_ptr<Device>> device = Device::Open(0);
      if (!device.ok()) return new absl::Status(device.status());
      device_ = device->release();
      NvrtcCompiler::Options options;  // the default disk cache, when it can be opened
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
      return new absl::Status();
    }();
    return *status;
  }
  static const Device& device() { return *device_; }
  static KernelLoader& loader() { return *loader_; }
  // The bundled target matching the device (its sm alias), else the H200 description.
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
};

// Skips the test (with the reason) when there is no usable GPU.
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

// Elements of `layout` read out of its root's bytes.
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

// Runs a prepared case on the GPU under every tactic, twice each, and compares.
void RunOnDevice(const PreparedCase& p) {
  const ir::Graph& graph = *p.graph;
  const BoundGraph& bound = *p.bound;
  const BoundRegion region(bound, p.region);
  const Device& device = GpuEnvironment::device();
  for (const Tactic& tactic : p.tactics) {
    SCOPED_TRACE(absl::StrCat("tactic ", tactic.ParamsString()));
    // Device storage per root value; declarations uploaded, results poisoned.
    std::map<ir::ValueId, DeviceBuffer> roots;
    for (int id = 0; id < graph.num_values(); ++id) {
      if (bound.layout(id).root != id) continue;
      absl::StatusOr<DeviceBuffer> buffer =
          DeviceBuffer::Allocate(device, std::max<int64_t>(16, bound.storage_bytes(id)));
      ASSERT_TRUE(buffer.ok()) << buffer.status();
      roots[id] = *std::move(buffer);
    }
    RegionBuffers buffers;
    auto address = [&](ir::ValueId id) {
      const Layout& l = bound.layout(id);
      return static_cast<void*>(roots[l.root].as<char>() +
                                l.offset * ir::DTypeSize(graph.value(id).type.dtype));
    };
    for (int i = 0; i < region.num_operands(); ++i) {
      buffers.operands.push_back(address(region.operand_id(i)));
    }
    for (int i = 0; i < region.num_results(); ++i) {
      buffers.results.push_back(address(region.result_id(i)));
    }
    absl::StatusOr<DeviceBuffer> workspace =
        DeviceBuffer::Allocate(device, p.family->WorkspaceBytes(tactic, region));
    ASSERT_TRUE(workspace.ok()) << workspace.status();
    ASSERT_TRUE(workspace->Fill(0xff).ok());  // scratch: any contents
    buffers.workspace = workspace->data();
    absl::StatusOr<DeviceBuffer> counters =
        DeviceBuffer::Allocate(device, p.family->CounterBytes(tactic, region));
    ASSERT_TRUE(counters.ok()) << counters.status();
    ASSERT_TRUE(counters->Fill(0).ok());  // zeroed once, before the first of the two runs
    buffers.counters = counters->data();
    absl::StatusOr<DeviceBuffer> error = DeviceBuffer::Allocate(device, 4);
    ASSERT_TRUE(error.ok()) << error.status();
    ASSERT_TRUE(error->Fill(0).ok());
    buffers.error = error->as<int>();
    DeviceBuffer inv_freq;
    if (region.region().attrs.Has("theta")) {
      absl::StatusOr<ir::RopeParams> rope = ir::RopeParamsFromAttributes(region.region().attrs);
      ASSERT_TRUE(rope.ok()) << rope.status();
      const std::vector<float> freqs = ir::RopeInvFreq(*rope, region.result(0).shape.back());
      absl::StatusOr<DeviceBuffer> b =
          DeviceBuffer::Allocate(device, static_cast<int64_t>(freqs.size() * 4));
      ASSERT_TRUE(b.ok()) << b.status();
      ASSERT_TRUE(b->CopyFromHost(freqs.data(), b->size()).ok());
      inv_freq = *std::move(b);
      buffers.rope_inv_freq = inv_freq.as<float>();
    }
    absl::StatusOr<KernelInstance> instance = InstanceFor(*p.family, region, tactic);
    ASSERT_TRUE(instance.ok()) << instance.status();

    for (int run = 0; run < 2; ++run) {
      SCOPED_TRACE(absl::StrCat("run ", run));
      for (auto& [id, buffer] : roots) {
        if (graph.value(id).kind == ir::ValueKind::kResult) {
          ASSERT_TRUE(buffer.Fill(0xff).ok());
        }
      }
      for (const auto& [id, t] : p.declared) {
        const std::string bytes =
            t.dtype == ir::DType::kI32
                ? std::string(reinterpret_cast<const char*>(t.i.data()), t.i.size() * 4)
                : EncodeFloats(t.dtype, t.f);
        ASSERT_TRUE(roots[id].CopyFromHost(bytes.data(), static_cast<int64_t>(bytes.size())).ok());
      }
      absl::StatusOr<std::vector<KernelLaunch>> launches =
          PrepareLaunches(*p.family, region, tactic, buffers);
      ASSERT_TRUE(launches.ok()) << launches.status();
      const absl::Status ran = GpuEnvironment::loader().Run(*instance, *launches, {});
      ASSERT_TRUE(ran.ok()) << ran;
      const absl::Status synced = device.Synchronize();
      ASSERT_TRUE(synced.ok()) << synced;
      int error_word = -1;
      ASSERT_TRUE(error->CopyToHost(&error_word, 4).ok());
      EXPECT_EQ(error_word, 0) << "the kernel reported a bad token id or position";
      for (size_t j = 0; j < graph.outputs().size(); ++j) {
        const ir::ValueId id = graph.outputs()[j];
        const Layout& l = bound.layout(id);
        std::string bytes(static_cast<size_t>(bound.storage_bytes(l.root)), '\0');
        ASSERT_TRUE(
            roots[l.root].CopyToHost(bytes.data(), static_cast<int64_t>(bytes.size())).ok());
        ExpectClose(absl::StrCat("%", graph.value(id).name), p.reference[j],
                    Gather(graph.value(id).type.dtype, l, bytes));
      }
    }
  }
}

std::vector<int32_t> Iota(int n, int start) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = start + i;
  return v;
}

// ---- embedding_gather -------------------------------------------------------------------

std::vector<Case> EmbeddingGatherCases() {
  std::vector<Case> cases;
  Case c;
  c.graph = R"(graph @g {
  input %ids: i32[3,5]
  weight %table: bf16[1000,72] = "table"
  %out: bf16[3,5,72] = embedding(%ids, %table)
  output %out
})";
  c.family = "embedding_gather";
  c.ints["ids"] = {0, 999, 5, 17, 17, 300, 1, 2, 998, 41, 512, 7, 0, 64, 3};
  c.tactics = {{{"threads", 64}, {"tokens_per_cta", 4}, {"vec", 8}},
               {{"threads", 32}, {"tokens_per_cta", 8}, {"vec", 2}}};
  cases.push_back(std::move(c));
  return cases;
}

// ---- rms_norm ---------------------------------------------------------------------------

std::vector<Case> RmsNormOddRowsCases() {
  std::vector<Case> cases;
  Case c;
  c.graph = R"(graph @g {
  input %x: bf16[5,3,200]
  weight %w: bf16[200] = "w"
  %y: bf16[5,3,200] = rms_norm(%x, %w) {eps = 1e-06}
  output %y
})";
  c.family = "rms_norm";
  c.tactics = {{{"row_threads", 32}, {"rows_per_cta", 4}, {"vec", 8}},
               {{"row_threads", 256}, {"rows_per_cta", 1}, {"vec", 4}},
               {{"row_threads", 64}, {"rows_per_cta", 2}, {"vec", 1}}};
  cases.push_back(std::move(c));
  return cases;
}

std::vector<Case> RmsNormLongRowsReadAgainCases() {
  std::vector<Case> cases;
  Case c;
  c.graph = R"(graph @g {
  input %x: f32[3,4096]
  weight %w: f32[4096] = "w"
  %y: f32[3,4096] = rms_norm(%x, %w) {eps = 1e-05}
  output %y
})";
  c.family = "rms_norm";
  c.tactics = {{{"row_threads", 32}, {"rows_per_cta", 2}, {"vec", 4}},
               {{"row_threads", 1024}, {"rows_per_cta", 1}, {"vec", 4}}};
  cases.push_back(std::move(c));
  return cases;
}

std::vector<Case> RmsNormPerHeadOfAPackedViewCases() {
  std::vector<Case> cases;
  Case c;
  c.graph = R"(graph @g {
  input %qkv: bf16[2,3,256]
  weight %w: bf16[64] = "w"
  %q: bf16[2,3,128] view(%qkv), %kv: bf16[2,3,128] view(%qkv) = split(%qkv) {sizes = [128, 128]}
  %heads: bf16[2,3,2,64] view(%q) = reshape(%q)
  %y: bf16[2,3,2,64] = rms_norm(%heads, %w) {eps = 1e-06}
  output %y
})";
  c.family = "rms_norm";
  c.tactics = {{{"row_threads", 32}, {"rows_per_cta", 8}, {"vec", 8}}};
  cases.push_back(std::move(c));
  return cases;
}

std::vector<Case> AddRmsNormCases() {
  std::vector<Case> cases;
  Case c;
  c.graph = R"(graph @g {
  input %a: bf16[4,200]
  input %b: bf16[4,200]
  weight %w: bf16[200] = "w"
  %sum: bf16[4,200], %y: bf16[4,200] = add_rms_norm(%a, %b, %w) {eps = 1e-06}
  output %sum
  output %y
})";
  c.family = "rms_norm";
  c.tactics = {{{"row_threads", 32}, {"rows_per_cta", 4}, {"vec", 8}},
               {{"row_threads", 128}, {"rows_per_cta", 1}, {"vec", 2}}};
  cases.push_back(std::move(c));
  return cases;
}

// ---- elementwise ------------------------------------------------------------------------

std::vector<Case> AddOfSplitViewsCases() {
  std::vector<Case> cases;
  Case c;
  c.graph = R"(graph @g {
  input %x: bf16[3,5,96]
  %a: bf16[3,5,48] view(%x), %b: bf16[3,5,48] view(%x) = split(%x) {sizes = [48, 48]}
  %y: bf16[3,5,48] = add(%a, %b)
  output %y
})";
  c.family = "elementwise";
  c.tactics = {{{"items", 1}, {"threads", 128}, {"vec", 8}},
               {{"items", 8}, {"threads", 512}, {"vec", 2}}};
  cases.push_back(std::move(c));
  return cases;
}

std::vector<Case> MulAndSiluOddWidthCases() {
  std::vector<Case> cases;
  for (const char* op : {"mul", "silu"}) {
    Case c;
    const bool binary = std::string(op) == "mul";
    c.graph = absl::StrCat(R"(graph @g {
  input %a: f32[7,37]
  input %b: f32[7,37]
  %y: f32[7,37] = )",
                           op, binary ? "(%a, %b)" : "(%a)", R"(
  output %y
})");
    c.family = "elementwise";
    c.tactics = {{{"items", 4}, {"threads", 128}, {"vec", 1}}};
    cases.push_back(std::move(c));
  }
  return cases;
}

std::vector<Case> SwigluCases() {
  std::vector<Case> cases;
  Case c;
  c.graph = R"(graph @g {
  input %x: bf16[2,3,400]
  %y: bf16[2,3,200] = swiglu(%x)
  output %y
})";
  c.family = "elementwise";
  c.tactics = {{{"items", 2}, {"threads", 128}, {"vec", 4}}};
  cases.push_back(std::move(c));
  return cases;
}

// ---- gemv -------------------------------------------------------------------------------

const std::vector<Params> kGemvTactics = {
    {{"rows_per_cta", 1}, {"split_k", 1}, {"threads", 64}, {"vec", 8}},
    {{"rows_per_cta", 4}, {"split_k", 2}, {"threads", 128}, {"vec", 8}},
    {{"rows_per_cta", 16}, {"split_k", 4}, {"threads", 256}, {"vec", 8}},
    {{"rows_per_cta", 2}, {"split_k", 16}, {"threads", 512}, {"vec", 4}},
};

std::vector<Case> LinearWithBiasOddSizesCases() {
  std::vector<Case> cases;
  Case c;
  c.graph = R"(graph @g {
  input %x: bf16[3,1,1000]
  weight %w: bf16[37,1000] = "w"
  weight %bias: bf16[37] = "bias"
  %y: bf16[3,1,37] = linear(%x, %w, %bias)
  output %y
})";
  c.family = "gemv";
  c.tactics = kGemvTactics;
  cases.push_back(std::move(c));
  return cases;
}

std::vector<Case> LinearSixteenRowsCases() {
  std::vector<Case> cases;
  Case c;
  c.graph = R"(graph @g {
  input %x: bf16[16,1,512]
  weight %w: bf16[300,512] = "w"
  %y: bf16[16,1,300] = linear(%x, %w)
  output %y
})";
  c.family = "gemv";
  c.tactics = kGemvTactics;
  cases.push_back(std::move(c));
  return cases;
}

std::vector<Case> LinearResidualCases() {
  std::vector<Case> cases;
  Case c;
  c.graph = R"(graph @g {
  input %x: bf16[2,1,768]
  weight %w: bf16[130,768] = "w"
  input %r: bf16[2,1,130]
  %y: bf16[2,1,130] = linear_residual(%x, %w, %r)
  output %y
})";
  c.family = "gemv";
  c.tactics = kGemvTactics;
  cases.push_back(std::move(c));
  return cases;
}

std::vector<Case> LinearSwigluWithBiasCases() {
  std::vector<Case> cases;
  Case c;
  c.graph = R"(graph @g {
  input %x: bf16[5,1,256]
  weight %w: bf16[2000,256] = "w"
  weight %bias: bf16[2000] = "bias"
  %y: bf16[5,1,1000] = linear_swiglu(%x, %w, %bias)
  output %y
})";
  c.family = "gemv";
  c.tactics = kGemvTactics;
  cases.push_back(std::move(c));
  return cases;
}

std::vector<Case> LmHeadFloatLogitsCases() {
  std::vector<Case> cases;
  Case c;
  c.graph = R"(graph @g {
  input %x: bf16[1,1,384]
  weight %w: bf16[1001,384] = "w"
  %y: f32[1,1,1001] = lm_head(%x, %w)
  output %y
})";
  c.family = "gemv";
  c.tactics = kGemvTactics;
  cases.push_back(std::move(c));
  return cases;
}

// gemv cases over `graphs`, their tactics kGemvTactics, with the rows of %x (or of %xx, the
// input %x is a view of) scaled by `scales`.
std::vector<Case> ScaledRowGemvCases(const std::vector<float>& scales,
                                     const std::vector<std::string>& graphs) {
  std::vector<Case> cases;
  for (const std::string& graph : graphs) {
    Case c;
    c.graph = graph;
    c.family = "gemv";
    c.row_scales = {{"x", scales}, {"xx", scales}};
    c.tactics = kGemvTactics;
    cases.push_back(std::move(c));
  }
  return cases;
}

// The RMSNorm prologue (rms_norm_linear, rms_norm_linear_swiglu): one row (batch 1), 2 to 4
// rows and 16 (the kernel's bound), rows whose magnitudes differ by up to 32x, so every
// row's own factor must be used (the results do not depend on a row's scale); with and
// without bias; split_k 1 and above (every CTA sums the squares of the whole row, not just
// its slice, also past the end of a shorter last slice: K = 1000 at vec 4 and split_k 16);
// several feature passes (rows_per_cta 16); a norm weight in bf16 and in f32; x a strided
// view.
std::vector<Case> RmsNormLinearCases() {
  const std::vector<std::string> graphs = {
      R"(graph @g {
  input %x: bf16[1,1,1000]
  weight %norm: bf16[1000] = "norm"
  weight %w: bf16[37,1000] = "w"
  weight %bias: bf16[37] = "bias"
  %y: bf16[1,1,37] = rms_norm_linear(%x, %norm, %w, %bias) {eps = 1e-06} fused(rms_norm, linear)
  output %y
})",
      R"(graph @g {
  input %x: bf16[3,1,1024]
  weight %norm: f32[1024] = "norm"
  weight %w: bf16[130,1024] = "w"
  %y: bf16[3,1,130] = rms_norm_linear(%x, %norm, %w) {eps = 1e-05} fused(rms_norm, linear)
  output %y
})",
      R"(graph @g {
  input %xx: bf16[2,1,1536]
  weight %norm: bf16[512] = "norm"
  weight %w: bf16[300,512] = "w"
  weight %bias: bf16[300] = "bias"
  %a: bf16[2,1,1024] view(%xx), %x: bf16[2,1,512] view(%xx) = split(%xx) {sizes = [1024, 512]}
  %y: bf16[2,1,300] = rms_norm_linear(%x, %norm, %w, %bias) {eps = 1e-06} fused(rms_norm, linear)
  output %y
})",
      R"(graph @g {
  input %x: bf16[16,1,256]
  weight %norm: bf16[256] = "norm"
  weight %w: bf16[70,256] = "w"
  %y: bf16[16,1,70] = rms_norm_linear(%x, %norm, %w) {eps = 1e-06} fused(rms_norm, linear)
  output %y
})"};
  return ScaledRowGemvCases({1.0f, 8.0f, 0.25f, 3.0f}, graphs);
}

std::vector<Case> RmsNormLinearSwigluCases() {
  const std::vector<std::string> graphs = {
      R"(graph @g {
  input %x: bf16[1,1,512]
  weight %norm: bf16[512] = "norm"
  weight %w: bf16[600,512] = "w"
  %y: bf16[1,1,300] = rms_norm_linear_swiglu(%x, %norm, %w) {eps = 1e-06} fused(rms_norm, linear, split, silu, mul)
  output %y
})",
      R"(graph @g {
  input %x: bf16[4,1,1000]
  weight %norm: bf16[1000] = "norm"
  weight %w: bf16[250,1000] = "w"
  weight %bias: bf16[250] = "bias"
  %y: bf16[4,1,125] = rms_norm_linear_swiglu(%x, %norm, %w, %bias) {eps = 1e-06} fused(rms_norm, linear, split, silu, mul)
  output %y
})",
      R"(graph @g {
  input %x: bf16[2,1,768]
  weight %norm: f32[768] = "norm"
  weight %w: bf16[1000,768] = "w"
  %y: bf16[2,1,500] = rms_norm_linear_swiglu(%x, %norm, %w) {eps = 1e-05} fused(rms_norm, linear, split, silu, mul)
  output %y
})"};
  return ScaledRowGemvCases({0.5f, 16.0f, 1.0f, 4.0f}, graphs);
}

// ---- rope_kv_write ----------------------------------------------------------------------

std::vector<Case> RopeDefaultAndLlama3Cases() {
  std::vector<Case> cases;
  for (
      const char* attrs :
      {R"({rope_type = "default", theta = 1000000.0})",
       R"({factor = 8.0, high_freq_factor = 4.0, low_freq_factor = 1.0, original_max_position_embeddings = 8192, rope_type = "llama3", theta = 500000.0})"}) {
    Case c;
    c.graph = absl::StrCat(R"(graph @g {
  input %x: bf16[2,3,4,128]
  input %positions: i32[2,3]
  %y: bf16[2,3,4,128] = rope(%x, %positions) )",
                           attrs, R"(
  output %y
})");
    c.family = "rope_kv_write";
    c.ints["positions"] = {0, 1, 2, 7000, 30000, 131071};
    c.tactics = {{{"heads_per_cta", 1}}, {{"heads_per_cta", 16}}};
    cases.push_back(std::move(c));
  }
  return cases;
}

std::vector<Case> KvWriteOfAViewCases() {
  std::vector<Case> cases;
  Case c;
  c.graph = R"(graph @g {
  input %cache: bf16[2,2,40,64]
  input %kv: bf16[2,3,256]
  input %positions: i32[2,3]
  %k: bf16[2,3,128] view(%kv), %v: bf16[2,3,128] view(%kv) = split(%kv) {sizes = [128, 128]}
  %kh: bf16[2,3,2,64] view(%k) = reshape(%k)
  %out: bf16[2,2,40,64] inplace(%cache) = kv_write(%cache, %kh, %positions)
  output %out
})";
  c.family = "rope_kv_write";
  c.ints["positions"] = {5, 6, 7, 0, 39, 20};
  c.tactics = {{{"heads_per_cta", 1}}, {{"heads_per_cta", 4}}};
  cases.push_back(std::move(c));
  return cases;
}

std::vector<Case> RopeKvWriteGqaCases() {
  std::vector<Case> cases;
  Case c;
  c.graph = R"(graph @g {
  input %qkv: bf16[2,3,512]
  input %k_cache: bf16[2,2,16,64]
  input %v_cache: bf16[2,2,16,64]
  input %positions: i32[2,3]
  %q: bf16[2,3,4,64], %k: bf16[2,2,16,64] inplace(%k_cache), %v: bf16[2,2,16,64] inplace(%v_cache) = rope_kv_write(%qkv, %k_cache, %v_cache, %positions) {num_heads = 4, num_kv_heads = 2, rope_type = "default", theta = 10000.0}
  output %q
  output %k
  output %v
})";
  c.family = "rope_kv_write";
  c.ints["positions"] = {3, 4, 5, 13, 14, 15};
  c.tactics = {{{"heads_per_cta", 2}}, {{"heads_per_cta", 8}}};
  cases.push_back(std::move(c));
  return cases;
}

std::vector<Case> QkNormRopeKvWriteCases() {
  std::vector<Case> cases;
  for (int dim : {64, 128}) {
    Case c;
    const int row = (8 + 2 * 2) * dim;
    c.graph = absl::StrCat(
        R"(graph @g {
  input %qkv: bf16[1,2,)",
        row, R"(]
  weight %q_norm: bf16[)",
        dim, R"(] = "q_norm"
  weight %k_norm: bf16[)",
        dim, R"(] = "k_norm"
  input %k_cache: bf16[1,2,32,)",
        dim, R"(]
  input %v_cache: bf16[1,2,32,)",
        dim, R"(]
  input %positions: i32[1,2]
  %q: bf16[1,2,8,)",
        dim, R"(], %k: bf16[1,2,32,)", dim, R"(] inplace(%k_cache), %v: bf16[1,2,32,)", dim,
        R"(] inplace(%v_cache) = qk_norm_rope_kv_write(%qkv, %q_norm, %k_norm, %k_cache, %v_cache, %positions) {eps = 1e-06, num_heads = 8, num_kv_heads = 2, rope_type = "default", theta = 1000000.0}
  output %q
  output %k
  output %v
})");
    c.family = "rope_kv_write";
    c.ints["positions"] = {30, 31};
    c.tactics = {{{"heads_per_cta", 1}}, {{"heads_per_cta", 4}}};
    cases.push_back(std::move(c));
  }
  return cases;
}

// ---- attention --------------------------------------------------------------------------

std::string AttentionGraph(int batch, int tokens, int q_heads, int kv_heads, int capacity, int dim,
                           const std::string& dtype, int window) {
  const std::string q = absl::StrCat(dtype, "[", batch, ",", tokens, ",", q_heads, ",", dim, "]");
  const std::string cache =
      absl::StrCat(dtype, "[", batch, ",", kv_heads, ",", capacity, ",", dim, "]");
  return absl::StrCat(
      "graph @g {\n  input %q: ", q, "\n  input %k: ", cache, "\n  input %v: ", cache,
      "\n  input %positions: i32[", batch, ",", tokens, "]\n  %o: ", q,
      " = attention(%q, %k, %v, %positions) {scale = ", 1.0 / std::sqrt(static_cast<double>(dim)),
      ", sliding_window = ", window, "}\n  output %o\n}\n");
}

std::vector<Case> AttentionDecodeSplitKvCases() {
  std::vector<Case> cases;
  for (int window : {0, 64}) {
    Case c;
    c.graph = AttentionGraph(2, 1, 8, 2, 300, 128, "bf16", window);
    c.family = "attention_decode";
    c.context = 300;
    c.ints["positions"] = {250, 37};
    c.tactics = {{{"kv_chunk", 64}, {"splits", 1}, {"warps", 4}},
                 {{"kv_chunk", 64}, {"splits", 4}, {"warps", 2}},
                 {{"kv_chunk", 128}, {"splits", 2}, {"warps", 8}}};
    cases.push_back(std::move(c));
  }
  return cases;
}

std::vector<Case> AttentionDecodeSeveralTokensAndHeadDimsCases() {
  std::vector<Case> cases;
  struct Shape {
    int tokens, q_heads, kv_heads, dim;
    const char* dtype;
  };
  for (const Shape& s : {Shape{4, 4, 1, 64, "bf16"}, Shape{1, 6, 2, 96, "bf16"},
                         Shape{2, 2, 2, 32, "f32"}, Shape{16, 14, 2, 64, "bf16"}}) {
    Case c;
    c.graph = AttentionGraph(1, s.tokens, s.q_heads, s.kv_heads, 200, s.dim, s.dtype, 0);
    c.family = "attention_decode";
    c.context = 180;
    c.ints["positions"] = Iota(s.tokens, 180 - s.tokens);
    c.tactics = {{{"kv_chunk", 64}, {"splits", 3}, {"warps", 4}}};
    cases.push_back(std::move(c));
  }
  return cases;
}

std::vector<Case> AttentionPrefillFlashCases() {
  std::vector<Case> cases;
  struct Shape {
    int tokens, first, dim, window;
    const char* dtype;
  };
  for (const Shape& s :
       {Shape{37, 0, 64, 0, "bf16"}, Shape{37, 20, 128, 0, "bf16"}, Shape{100, 0, 96, 16, "bf16"},
        Shape{64, 5, 128, 0, "f16"}, Shape{24, 0, 16, 6, "bf16"}, Shape{50, 3, 32, 0, "bf16"}}) {
    Case c;
    c.graph = AttentionGraph(2, s.tokens, 4, 2, 160, s.dim, s.dtype, s.window);
    c.family = "attention_prefill";
    c.context = s.first + s.tokens;
    std::vector<int32_t> positions = Iota(s.tokens, s.first);
    const std::vector<int32_t> second = Iota(s.tokens, s.first + 3);
    positions.insert(positions.end(), second.begin(), second.end());
    c.ints["positions"] = positions;
    c.tactics = {{{"pack_gqa", 0},
                  {"splits", 1},
                  {"stages", 1},
                  {"tile_kv", 32},
                  {"tile_q", 64},
                  {"warps", 4}},
                 {{"pack_gqa", 0},
                  {"splits", 1},
                  {"stages", 3},
                  {"tile_kv", 64},
                  {"tile_q", 128},
                  {"warps", 8}},
                 {{"pack_gqa", 0},
                  {"splits", 1},
                  {"stages", 2},
                  {"tile_kv", 128},
                  {"tile_q", 64},
                  {"warps", 4}},
                 {{"pack_gqa", 1},
                  {"splits", 1},
                  {"stages", 2},
                  {"tile_kv", 64},
                  {"tile_q", 64},
                  {"warps", 4}},
                 // Split-KV: runs of whole key tiles, some of them empty on the first row
                 // tiles, merged by the last CTA of each row tile.
                 {{"pack_gqa", 0},
                  {"splits", 2},
                  {"stages", 2},
                  {"tile_kv", 32},
                  {"tile_q", 16},
                  {"warps", 1}},
                 {{"pack_gqa", 1},
                  {"splits", 3},
                  {"stages", 1},
                  {"tile_kv", 32},
                  {"tile_q", 64},
                  {"warps", 4}},
                 // 16 runs: most of them empty here, one item per merge batch.
                 {{"pack_gqa", 0},
                  {"splits", 16},
                  {"stages", 2},
                  {"tile_kv", 32},
                  {"tile_q", 64},
                  {"warps", 4}}};
    cases.push_back(std::move(c));
  }
  return cases;
}

// The flash kernel with the GQA group packed into the query rows: decode-sized steps of a
// 7-heads-per-kv-head model (Qwen2-7B's grouping) at batch 3 with contexts in different
// tiles, a window, two new tokens, and a prefill of an odd length whose tiles mix tokens.
std::vector<Case> AttentionPrefillPackedGqaCases() {
  std::vector<Case> cases;
  struct Shape {
    int batch, tokens, q_heads, kv_heads, dim, window;
    std::vector<int32_t> positions;
  };
  const std::vector<Shape> shapes = {
      {3, 1, 14, 2, 128, 0, {0, 130, 299}},
      {3, 1, 14, 2, 128, 50, {17, 200, 64}},
      {2, 2, 8, 2, 64, 0, {40, 41, 250, 251}},
      {1, 37, 8, 2, 128, 0, Iota(37, 11)},
  };
  for (const Shape& s : shapes) {
    Case c;
    c.graph =
        AttentionGraph(s.batch, s.tokens, s.q_heads, s.kv_heads, 300, s.dim, "bf16", s.window);
    c.family = "attention_prefill";
    c.context = *std::max_element(s.positions.begin(), s.positions.end()) + 1;
    c.ints["positions"] = s.positions;
    c.tactics = {{{"pack_gqa", 1},
                  {"splits", 1},
                  {"stages", 1},
                  {"tile_kv", 64},
                  {"tile_q", 16},
                  {"warps", 1}},
                 {{"pack_gqa", 1},
                  {"splits", 1},
                  {"stages", 3},
                  {"tile_kv", 32},
                  {"tile_q", 64},
                  {"warps", 4}},
                 {{"pack_gqa", 1},
                  {"splits", 1},
                  {"stages", 2},
                  {"tile_kv", 128},
                  {"tile_q", 128},
                  {"warps", 8}},
                 {{"pack_gqa", 0},
                  {"splits", 1},
                  {"stages", 2},
                  {"tile_kv", 64},
                  {"tile_q", 16},
                  {"warps", 1}},
                 // Split-KV over the packed group (Qwen2-7B's decode form): runs of uneven
                 // length, empty runs on short contexts, and a split of an unpacked tile.
                 {{"pack_gqa", 1},
                  {"splits", 4},
                  {"stages", 2},
                  {"tile_kv", 32},
                  {"tile_q", 16},
                  {"warps", 1}},
                 {{"pack_gqa", 1},
                  {"splits", 3},
                  {"stages", 1},
                  {"tile_kv", 64},
                  {"tile_q", 64},
                  {"warps", 4}},
                 {{"pack_gqa", 0},
                  {"splits", 2},
                  {"stages", 3},
                  {"tile_kv", 32},
                  {"tile_q", 16},
                  {"warps", 1}},
                 {{"pack_gqa", 1},
                  {"splits", 8},
                  {"stages", 2},
                  {"tile_kv", 32},
                  {"tile_q", 128},
                  {"warps", 4}}};
    cases.push_back(std::move(c));
  }
  return cases;
}

// ---- attention_decode: RoPE + KV write + attention ------------------------------------

// One region of qk_norm_rope_kv_write_attention (`norms`) or rope_kv_write_attention: `batch`
// sequences of `tokens` new tokens, `q_heads` and `kv_heads` heads of `dim`, a cache of
// `capacity` rows. With `pad` > 0 the qkv rows are a view of wider rows (`pad` more
// elements per token), so the token stride differs from the row width. Outputs: the
// attention result and both caches whole (the new rows and every row left alone).
std::string RopeAttentionGraph(bool norms, int batch, int tokens, int q_heads, int kv_heads,
                               int capacity, int dim, const std::string& dtype, int window,
                               const std::string& rope, int pad = 0) {
  const int width = (q_heads + 2 * kv_heads) * dim;
  const std::string cache =
      absl::StrCat(dtype, "[", batch, ",", kv_heads, ",", capacity, ",", dim, "]");
  const std::string bt = absl::StrCat(batch, ",", tokens);
  std::string text = "graph @g {\n";
  if (pad > 0) {
    absl::StrAppend(&text, "  input %rows: ", dtype, "[", bt, ",", width + pad, "]\n");
  } else {
    absl::StrAppend(&text, "  input %qkv: ", dtype, "[", bt, ",", width, "]\n");
  }
  if (norms) {
    absl::StrAppend(&text, "  weight %q_norm: ", dtype, "[", dim, "] = \"q_norm\"\n",
                    "  weight %k_norm: ", dtype, "[", dim, "] = \"k_norm\"\n");
  }
  absl::StrAppend(&text, "  input %k_cache: ", cache, "\n  input %v_cache: ", cache,
                  "\n  input %positions: i32[", bt, "]\n");
  if (pad > 0) {
    absl::StrAppend(&text, "  %qkv: ", dtype, "[", bt, ",", width, "] view(%rows), %pad: ", dtype,
                    "[", bt, ",", pad, "] view(%rows) = split(%rows) {sizes = [", width, ", ", pad,
                    "]}\n");
  }
  absl::StrAppend(&text, "  %o: ", dtype, "[", bt, ",", q_heads, ",", dim, "], %kc: ", cache,
                  " inplace(%k_cache), %vc: ", cache, " inplace(%v_cache) = ",
                  norms ? "qk_norm_rope_kv_write_attention(%qkv, %q_norm, %k_norm, "
                        : "rope_kv_write_attention(%qkv, ",
                  "%k_cache, %v_cache, %positions) {", norms ? "eps = 1e-06, " : "",
                  "num_heads = ", q_heads, ", num_kv_heads = ", kv_heads, ", ", rope,
                  ", scale = ", 1.0 / std::sqrt(static_cast<double>(dim)),
                  ", sliding_window = ", window, "}\n  output %o\n  output %kc\n  output %vc\n}\n");
  return text;
}

constexpr char kQwenRope[] = R"(rope_type = "default", theta = 1000000.0)";
constexpr char kLlama3Rope[] =
    R"(factor = 8.0, high_freq_factor = 4.0, low_freq_factor = 1.0, original_max_position_embeddings = 8192, rope_type = "llama3", theta = 500000.0)";

// Qwen3-0.6B's attention (head_dim 128, 16 q heads over 8 kv heads, QK-norm) at contexts 1,
// 37 and 600: the new row lands in the first chunk, inside a later one, and past several
// splits' worth of chunks.
std::vector<Case> RopeKvWriteAttentionQwen3ContextsCases() {
  std::vector<Case> cases;
  for (int context : {1, 37, 600}) {
    Case c;
    c.graph = RopeAttentionGraph(true, 1, 1, 16, 8, 640, 128, "bf16", 0, kQwenRope);
    c.family = "attention_decode";
    c.context = context;
    c.ints["positions"] = {context - 1};
    c.tactics = {{{"kv_chunk", 32}, {"splits", 16}, {"warps", 4}},
                 {{"kv_chunk", 64}, {"splits", 4}, {"warps", 2}},
                 {{"kv_chunk", 128}, {"splits", 1}, {"warps", 8}},
                 {{"kv_chunk", 256}, {"splits", 3}, {"warps", 4}}};
    cases.push_back(std::move(c));
  }
  return cases;
}

// Two new tokens per sequence whose rows fall in different chunks (63 | 64 with 32-row
// chunks: written by different CTAs, and token 64 attends to row 63), a sliding window, GQA
// groups of 4 and 1, batch 2, with and without norms, head_dim 64 and 128.
std::vector<Case> RopeKvWriteAttentionTwoTokensAcrossChunksCases() {
  std::vector<Case> cases;
  struct Shape {
    bool norms;
    int q_heads, kv_heads, dim, window;
  };
  for (const Shape& s : {Shape{false, 4, 1, 64, 16}, Shape{true, 4, 1, 64, 0},
                         Shape{true, 4, 4, 128, 40}, Shape{false, 6, 3, 128, 0}}) {
    Case c;
    c.graph = RopeAttentionGraph(s.norms, 2, 2, s.q_heads, s.kv_heads, 640, s.dim, "bf16", s.window,
                                 kQwenRope);
    c.family = "attention_decode";
    c.context = 600;
    c.ints["positions"] = {63, 64, 598, 599};
    c.tactics = {{{"kv_chunk", 32}, {"splits", 8}, {"warps", 4}},
                 {{"kv_chunk", 32}, {"splits", 3}, {"warps", 2}},
                 {{"kv_chunk", 64}, {"splits", 1}, {"warps", 4}},
                 {{"kv_chunk", 512}, {"splits", 2}, {"warps", 8}}};
    cases.push_back(std::move(c));
  }
  return cases;
}

// Short contexts (rows 0 and 36, one token per sequence), llama3 RoPE, f16 and f32, a qkv
// that is a strided view of wider rows (the rope vector narrows to the stride).
std::vector<Case> RopeKvWriteAttentionDtypesAndViewsCases() {
  std::vector<Case> cases;
  struct Shape {
    bool norms;
    int q_heads, kv_heads, dim, pad;
    const char* dtype;
    const char* rope;
  };
  for (const Shape& s :
       {Shape{true, 8, 4, 128, 0, "f16", kQwenRope},
        Shape{false, 8, 2, 128, 0, "bf16", kLlama3Rope}, Shape{true, 4, 2, 64, 0, "f32", kQwenRope},
        Shape{true, 8, 4, 64, 8, "bf16", kQwenRope},
        Shape{false, 2, 1, 128, 2, "bf16", kLlama3Rope}}) {
    Case c;
    c.graph = RopeAttentionGraph(s.norms, 2, 1, s.q_heads, s.kv_heads, 48, s.dim, s.dtype, 0,
                                 s.rope, s.pad);
    c.family = "attention_decode";
    c.context = 37;
    c.ints["positions"] = {0, 36};
    c.tactics = {{{"kv_chunk", 32}, {"splits", 2}, {"warps", 4}},
                 {{"kv_chunk", 32}, {"splits", 1}, {"warps", 2}}};
    cases.push_back(std::move(c));
  }
  return cases;
}

// ---- argmax -----------------------------------------------------------------------------

std::vector<Case> ArgmaxOddVocabCases() {
  std::vector<Case> cases;
  Case c;
  c.graph = R"(graph @g {
  input %logits: f32[3,1,1001]
  %next: i32[3,1] = argmax(%logits)
  output %next
})";
  c.family = "argmax";
  c.tactics = {{{"splits", 1}, {"threads", 256}},
               {{"splits", 4}, {"threads", 512}},
               {{"splits", 64}, {"threads", 1024}}};
  cases.push_back(std::move(c));
  return cases;
}

// ---- the harness ------------------------------------------------------------------------

struct CaseGroup {
  const char* name;
  std::vector<Case> (*make)();
};

const CaseGroup kCaseGroups[] = {
    {"EmbeddingGather", &EmbeddingGatherCases},
    {"RmsNormOddRows", &RmsNormOddRowsCases},
    {"RmsNormLongRowsReadAgain", &RmsNormLongRowsReadAgainCases},
    {"RmsNormPerHeadOfAPackedView", &RmsNormPerHeadOfAPackedViewCases},
    {"AddRmsNorm", &AddRmsNormCases},
    {"AddOfSplitViews", &AddOfSplitViewsCases},
    {"MulAndSiluOddWidth", &MulAndSiluOddWidthCases},
    {"Swiglu", &SwigluCases},
    {"LinearWithBiasOddSizes", &LinearWithBiasOddSizesCases},
    {"LinearSixteenRows", &LinearSixteenRowsCases},
    {"LinearResidual", &LinearResidualCases},
    {"LinearSwigluWithBias", &LinearSwigluWithBiasCases},
    {"LmHeadFloatLogits", &LmHeadFloatLogitsCases},
    {"RmsNormLinear", &RmsNormLinearCases},
    {"RmsNormLinearSwiglu", &RmsNormLinearSwigluCases},
    {"RopeDefaultAndLlama3", &RopeDefaultAndLlama3Cases},
    {"KvWriteOfAView", &KvWriteOfAViewCases},
    {"RopeKvWriteGqa", &RopeKvWriteGqaCases},
    {"QkNormRopeKvWrite", &QkNormRopeKvWriteCases},
    {"AttentionDecodeSplitKv", &AttentionDecodeSplitKvCases},
    {"AttentionDecodeSeveralTokensAndHeadDims", &AttentionDecodeSeveralTokensAndHeadDimsCases},
    {"AttentionPrefillFlash", &AttentionPrefillFlashCases},
    {"AttentionPrefillPackedGqa", &AttentionPrefillPackedGqaCases},
    {"RopeKvWriteAttentionQwen3Contexts", &RopeKvWriteAttentionQwen3ContextsCases},
    {"RopeKvWriteAttentionTwoTokensAcrossChunks", &RopeKvWriteAttentionTwoTokensAcrossChunksCases},
    {"RopeKvWriteAttentionDtypesAndViews", &RopeKvWriteAttentionDtypesAndViewsCases},
    {"ArgmaxOddVocab", &ArgmaxOddVocabCases},
};

// Every case on the CPU: graph, reference, tactics, and launch preparation with fake
// (aligned, never dereferenced) buffers.
void CheckCaseOnCpu(const Case& c, const TargetDescription& target) {
  PreparedCase p;
  PrepareCase(c, target, 1, p);
  if (!p.ok) return;
  const BoundRegion region(*p.bound, p.region);
  RegionBuffers buffers;
  auto fake = [](int i) { return reinterpret_cast<void*>(static_cast<uintptr_t>(i + 1) << 20); };
  for (int i = 0; i < region.num_operands(); ++i) buffers.operands.push_back(fake(i));
  for (int i = 0; i < region.num_results(); ++i) buffers.results.push_back(fake(16 + i));
  buffers.workspace = fake(32);
  buffers.counters = fake(34);
  buffers.rope_inv_freq = static_cast<const float*>(fake(33));
  for (const Tactic& tactic : p.tactics) {
    const absl::StatusOr<std::vector<KernelLaunch>> launches =
        PrepareLaunches(*p.family, region, tactic, buffers);
    EXPECT_TRUE(launches.ok()) << launches.status();
  }
}

TEST(KernelsGpuCasesTest, EveryCasePreparesOnTheCpu) {
  const TargetDescription target = *targets::FindTarget("h200");
  for (const CaseGroup& group : kCaseGroups) {
    SCOPED_TRACE(group.name);
    for (const Case& c : group.make()) CheckCaseOnCpu(c, target);
  }
}

// Names the group in test names and failure messages.
void PrintTo(const CaseGroup& group, std::ostream* os) { *os << group.name; }

class KernelsGpuTest : public ::testing::TestWithParam<CaseGroup> {};

TEST_P(KernelsGpuTest, MatchesTheCpuReference) {
  TP_REQUIRE_GPU();
  for (const Case& c : GetParam().make()) {
    const unsigned seed = std::random_device{}();
    SCOPED_TRACE(absl::StrCat("seed ", seed));
    PreparedCase p;
    PrepareCase(c, GpuEnvironment::Target(), seed, p);
    if (!p.ok) return;
    RunOnDevice(p);
    if (HasFatalFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(Families, KernelsGpuTest, ::testing::ValuesIn(kCaseGroups),
                         [](const ::testing::TestParamInfo<CaseGroup>& info) {
                           return std::string(info.param.name);
                         });

// ---- error reporting --------------------------------------------------------------------

TEST(KernelsGpuDeviceTest, BadTokenIdsAndPositionsRaiseTheErrorWord) {
  TP_REQUIRE_GPU();
  absl::StatusOr<ir::Graph> graph = ir::ParseGraph(R"(graph @g {
  input %ids: i32[1,4]
  weight %table: bf16[10,64] = "table"
  %out: bf16[1,4,64] = embedding(%ids, %table)
  output %out
})");
  ASSERT_TRUE(graph.ok()) << graph.status();
  absl::StatusOr<BoundGraph> bound = BoundGraph::Create(*graph, {}, 1);
  ASSERT_TRUE(bound.ok());
  const BoundRegion region(*bound, 0);
  const KernelFamily* family = GlobalKernelRegistry().Find("embedding_gather");
  const Tactic tactic{
      "embedding_gather", family->version(), {{"threads", 32}, {"tokens_per_cta", 1}, {"vec", 8}}};
  absl::StatusOr<DeviceBuffer> ids = DeviceBuffer::Allocate(GpuEnvironment::device(), 16);
  absl::StatusOr<DeviceBuffer> table =
      DeviceBuffer::Allocate(GpuEnvironment::device(), 10 * 64 * 2);
  absl::StatusOr<DeviceBuffer> out = DeviceBuffer::Allocate(GpuEnvironment::device(), 4 * 64 * 2);
  absl::StatusOr<DeviceBuffer> error = DeviceBuffer::Allocate(GpuEnvironment::device(), 4);
  ASSERT_TRUE(ids.ok() && table.ok() && out.ok() && error.ok());
  const int32_t host_ids[4] = {1, 10, 2, -3};
  ASSERT_TRUE(ids->CopyFromHost(host_ids, 16).ok());
  ASSERT_TRUE(table->Fill(0x3f).ok());
  ASSERT_TRUE(out->Fill(0xff).ok());
  ASSERT_TRUE(error->Fill(0).ok());
  RegionBuffers buffers;
  buffers.operands = {ids->data(), table->data()};
  buffers.results = {out->data()};
  buffers.error = error->as<int>();
  absl::StatusOr<std::vector<KernelLaunch>> launches =
      PrepareLaunches(*family, region, tactic, buffers);
  ASSERT_TRUE(launches.ok()) << launches.status();
  absl::StatusOr<KernelInstance> instance = InstanceFor(*family, region, tactic);
  ASSERT_TRUE(instance.ok());
  ASSERT_TRUE(GpuEnvironment::loader().Run(*instance, *launches, {}).ok());
  ASSERT_TRUE(GpuEnvironment::device().Synchronize().ok());
  int error_word = 0;
  ASSERT_TRUE(error->CopyToHost(&error_word, 4).ok());
  EXPECT_EQ(error_word, 4);  // the last bad token (index 3) + 1
  std::vector<uint16_t> rows(4 * 64);
  ASSERT_TRUE(out->CopyToHost(rows.data(), 4 * 64 * 2).ok());
  for (int t = 0; t < 4; ++t) {
    const uint16_t want = (t == 1 || t == 3) ? 0 : 0x3f3f;  // bad ids give zero rows
    EXPECT_EQ(rows[static_cast<size_t>(t) * 64], want) << "token " << t;
    EXPECT_EQ(rows[static_cast<size_t>(t) * 64 + 63], want) << "token " << t;
  }
}

// The fused RoPE + KV-write + attention kernel keeps rope_kv_write's contract for a position
// outside the cache: that token writes no cache row and raises the error word (token 1 of 2:
// the word reads 2), its output row is zero, and the other token is served as usual.
TEST(KernelsGpuDeviceTest, RopeKvWriteAttentionReportsPositionsOutsideTheCache) {
  TP_REQUIRE_GPU();
  constexpr int kCapacity = 16, kDim = 64, kQHeads = 2;
  absl::StatusOr<ir::Graph> graph = ir::ParseGraph(
      RopeAttentionGraph(false, 1, 2, kQHeads, 1, kCapacity, kDim, "bf16", 0, kQwenRope));
  ASSERT_TRUE(graph.ok()) << graph.status();
  absl::StatusOr<BoundGraph> bound = BoundGraph::Create(*graph, {}, kCapacity);
  ASSERT_TRUE(bound.ok()) << bound.status();
  const BoundRegion region(*bound, 0);
  const KernelFamily* family = GlobalKernelRegistry().Find("attention_decode");
  const Tactic tactic{
      "attention_decode", family->version(), {{"kv_chunk", 32}, {"splits", 1}, {"warps", 2}}};
  const Device& device = GpuEnvironment::device();
  const int64_t cache_bytes = kCapacity * kDim * 2;
  absl::StatusOr<DeviceBuffer> qkv = DeviceBuffer::Allocate(device, 2 * 4 * kDim * 2);
  absl::StatusOr<DeviceBuffer> k_cache = DeviceBuffer::Allocate(device, cache_bytes);
  absl::StatusOr<DeviceBuffer> v_cache = DeviceBuffer::Allocate(device, cache_bytes);
  absl::StatusOr<DeviceBuffer> positions = DeviceBuffer::Allocate(device, 8);
  absl::StatusOr<DeviceBuffer> out = DeviceBuffer::Allocate(device, 2 * kQHeads * kDim * 2);
  absl::StatusOr<DeviceBuffer> inv_freq = DeviceBuffer::Allocate(device, kDim / 2 * 4);
  absl::StatusOr<DeviceBuffer> error = DeviceBuffer::Allocate(device, 4);
  ASSERT_TRUE(qkv.ok() && k_cache.ok() && v_cache.ok() && positions.ok() && out.ok() &&
              inv_freq.ok() && error.ok());
  const int32_t host_positions[2] = {5, kCapacity};
  ASSERT_TRUE(positions->CopyFromHost(host_positions, 8).ok());
  ASSERT_TRUE(qkv->Fill(0x40).ok());  // bf16 3.0
  ASSERT_TRUE(k_cache->Fill(0x3f).ok());
  ASSERT_TRUE(v_cache->Fill(0x3f).ok());
  ASSERT_TRUE(out->Fill(0xff).ok());
  ASSERT_TRUE(error->Fill(0).ok());
  absl::StatusOr<ir::RopeParams> rope = ir::RopeParamsFromAttributes(region.region().attrs);
  ASSERT_TRUE(rope.ok()) << rope.status();
  const std::vector<float> freqs = ir::RopeInvFreq(*rope, kDim);
  ASSERT_TRUE(inv_freq->CopyFromHost(freqs.data(), kDim / 2 * 4).ok());
  RegionBuffers buffers;
  buffers.operands = {qkv->data(), k_cache->data(), v_cache->data(), positions->data()};
  buffers.results = {out->data(), k_cache->data(), v_cache->data()};
  buffers.rope_inv_freq = inv_freq->as<float>();
  buffers.error = error->as<int>();
  absl::StatusOr<std::vector<KernelLaunch>> launches =
      PrepareLaunches(*family, region, tactic, buffers);
  ASSERT_TRUE(launches.ok()) << launches.status();
  absl::StatusOr<KernelInstance> instance = InstanceFor(*family, region, tactic);
  ASSERT_TRUE(instance.ok()) << instance.status();
  ASSERT_TRUE(GpuEnvironment::loader().Run(*instance, *launches, {}).ok());
  ASSERT_TRUE(device.Synchronize().ok());
  int error_word = 0;
  ASSERT_TRUE(error->CopyToHost(&error_word, 4).ok());
  EXPECT_EQ(error_word, 2);
  std::vector<uint16_t> k(kCapacity * kDim), v(kCapacity * kDim), o(2 * kQHeads * kDim);
  ASSERT_TRUE(k_cache->CopyToHost(k.data(), cache_bytes).ok());
  ASSERT_TRUE(v_cache->CopyToHost(v.data(), cache_bytes).ok());
  ASSERT_TRUE(out->CopyToHost(o.data(), static_cast<int64_t>(o.size()) * 2).ok());
  for (int row = 0; row < kCapacity; ++row) {
    const uint16_t k0 = k[static_cast<size_t>(row) * kDim];
    const uint16_t v0 = v[static_cast<size_t>(row) * kDim];
    if (row == 5) {
      EXPECT_NE(k0, 0x3f3f) << "the rotated k row of token 0";
      EXPECT_EQ(v0, 0x4040) << "the v row of token 0";
    } else {
      EXPECT_EQ(k0, 0x3f3f) << "row " << row;
      EXPECT_EQ(v0, 0x3f3f) << "row " << row;
    }
  }
  for (size_t e = 0; e < kQHeads * kDim; ++e) {
    EXPECT_NE(o[e] & 0x7f80, 0x7f80) << "token 0, element " << e << " is not finite";
    EXPECT_EQ(o[kQHeads * kDim + e], 0) << "token 1, element " << e;
  }
}

TEST(KernelsGpuDeviceTest, DeviceIsDescribed) {
  TP_REQUIRE_GPU();
  const device::DeviceProperties& p = GpuEnvironment::device().properties();
  EXPECT_GE(p.sm, device::kMinSm);
  EXPECT_GT(p.sm_count, 0);
  EXPECT_GT(p.total_memory_bytes, 0);
  std::printf("%s: %d SMs, L2 %lld bytes, %lld bytes of shared memory per block, driver %d\n",
              GpuEnvironment::device().Label().c_str(), p.sm_count,
              static_cast<long long>(p.l2_bytes),
              static_cast<long long>(p.shared_memory_per_block_optin_bytes), p.driver_version);
}

TEST(KernelsGpuDeviceTest, OutOfMemoryNamesTheSizes) {
  TP_REQUIRE_GPU();
  absl::StatusOr<DeviceBuffer> huge =
      DeviceBuffer::Allocate(GpuEnvironment::device(), int64_t{1} << 50);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(huge.status().message()),
              ::testing::HasSubstr("cannot allocate 1125899906842624 bytes on device"));
  EXPECT_THAT(std::string(huge.status().message()), ::testing::HasSubstr("bytes free of"));
}

}  // namespace
}  // namespace tileplan::kernels
