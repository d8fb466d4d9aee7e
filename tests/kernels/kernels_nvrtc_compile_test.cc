// Compiles the template instances of the families' candidate lists for the typical
// regions (tests/kernels/candidate_instances.h, Coverage::kEachValue: every row default and
// every tunable value) with NVRTC, for every architecture row this NVRTC supports. sm_80 and
// sm_90, whose code paths differ (sm_90 adds clusters, programmatic dependent launch and the
// architecture-specific instances, wgmma_gemm's, compiled for sm_90a only), get every
// instance; sm_100 and sm_120, which take sm_90's code paths, get the instances of their own
// targets' candidate rows (b200's, rtx-pro-6000's: what a plan there runs untuned), which
// keeps the test to minutes on two cores. No GPU needed. Distinct instances are compiled once
// per architecture, several per NVRTC program, on all cores; a failure prints the
// instantiations and NVRTC's log. (The full product of the tunables is the tuner's search
// space, compiled on demand there; its launch preparation is checked for every combination
// by cuda_launch_test.)
#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/core/template_launch.h"
#include "kernels/launch/kernel_loader.h"
#include "kernels/launch/nvrtc_compiler.h"
#include "tests/kernels/candidate_instances.h"

namespace tileplan::kernels {
namespace {

// Instantiations compiled together in one NVRTC program (one front-end pass).
constexpr size_t kInstancesPerProgram = 4;

// The instances compiled for `sm`: every candidate's for sm_80 and sm_90, the candidates of
// the row's own target for the others (the file comment says why), and the runtime's own
// kernels for every row.
std::set<KernelInstance> InstancesFor(int sm) {
  static const auto* candidates =
      new testing::CandidateSet(testing::TypicalCandidates(testing::Coverage::kEachValue));
  const std::vector<std::string> row_targets = testing::RowTargets();  // sm_80, 90, 100, 120
  const std::map<int, std::string> own_target = {{100, row_targets[2]}, {120, row_targets[3]}};
  const auto own = own_target.find(sm);
  std::set<KernelInstance> set;
  for (const testing::Candidate& c : candidates->candidates) {
    if (own != own_target.end() && c.target != own->second) continue;
    const BoundRegion region(candidates->bound_graphs[static_cast<size_t>(c.bound_graph)],
                             c.region);
    absl::StatusOr<KernelInstance> instance = InstanceFor(*c.family, region, c.tactic);
    EXPECT_TRUE(instance.ok()) << instance.status() << " (tactic " << c.tactic.ParamsString()
                               << ")";
    if (instance.ok()) set.insert(*std::move(instance));
  }
  for (ir::DType dtype : {ir::DType::kBF16, ir::DType::kF16, ir::DType::kF32}) {
    set.insert(FillUniformInstance(dtype));
  }
  set.insert(DecodeAdvanceInstance());
  set.insert(TrapFaultInstance());
  return set;
}

class KernelsNvrtcCompileTest : public ::testing::TestWithParam<int> {};

TEST_P(KernelsNvrtcCompileTest, EveryCandidateInstanceCompiles) {
  const int sm = GetParam();
  NvrtcCompiler::Options options;
  options.use_disk_cache = false;  // measure and check the compiler, not the cache
  absl::StatusOr<std::unique_ptr<NvrtcCompiler>> compiler = NvrtcCompiler::Create(options);
  ASSERT_TRUE(compiler.ok()) << compiler.status();
  const std::vector<int>& archs = (*compiler)->supported_archs();
  if (!std::binary_search(archs.begin(), archs.end(), sm)) {
    GTEST_SKIP() << "NVRTC " << (*compiler)->nvrtc_version() << " does not support sm_" << sm;
  }

  // Group the name expressions per template file (and architecture-specific variant: those
  // compile for sm_90a alone, the one variant they have), then cut them into programs.
  std::map<std::pair<std::string, bool>, std::vector<std::string>> by_source;
  size_t kernels = 0;
  for (const KernelInstance& instance : InstancesFor(sm)) {
    if (instance.arch_specific && sm != 90) continue;
    std::vector<std::string>& names = by_source[{instance.source, instance.arch_specific}];
    for (const std::string& name : instance.name_expressions) {
      if (std::find(names.begin(), names.end(), name) == names.end()) {
        names.push_back(name);
        ++kernels;
      }
    }
  }
  ASSERT_GT(kernels, 0u);
  std::vector<CompileRequest> requests;
  for (const auto& [source, names] : by_source) {
    for (size_t i = 0; i < names.size(); i += kInstancesPerProgram) {
      CompileRequest request;
      request.source = source.first;
      request.sm = sm;
      request.arch_specific = source.second;
      request.name_expressions.assign(names.begin() + static_cast<std::ptrdiff_t>(i),
                                      names.begin() + static_cast<std::ptrdiff_t>(std::min(
                                                          names.size(), i + kInstancesPerProgram)));
      requests.push_back(std::move(request));
    }
  }

  const auto start = std::chrono::steady_clock::now();
  std::atomic<size_t> next{0};
  std::mutex mu;
  std::vector<std::string> failures;
  std::map<std::string, size_t> compiled_per_source;
  auto worker = [&] {
    for (size_t i = next++; i < requests.size(); i = next++) {
      absl::StatusOr<CompiledModule> module = (*compiler)->Compile(requests[i]);
      std::lock_guard<std::mutex> lock(mu);
      if (!module.ok()) {
        failures.push_back(std::string(module.status().message()));
      } else {
        compiled_per_source[requests[i].source] += module->lowered_names.size();
      }
    }
  };
  std::vector<std::thread> threads;
  const unsigned count = std::max(1u, std::thread::hardware_concurrency());
  for (unsigned t = 0; t < count; ++t) threads.emplace_back(worker);
  for (std::thread& t : threads) t.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  for (const std::string& failure : failures) ADD_FAILURE() << failure;
  std::string summary;
  for (const auto& [source, n] : compiled_per_source)
    absl::StrAppend(&summary, " ", source, "=", n);
  std::printf("sm_%d: %zu kernels in %zu programs on %u threads, %.1f s:%s\n", sm, kernels,
              requests.size(), count, seconds, summary.c_str());
  EXPECT_TRUE(failures.empty());
}

INSTANTIATE_TEST_SUITE_P(Archs, KernelsNvrtcCompileTest, ::testing::Values(80, 90, 100, 120),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return absl::StrCat("sm_", info.param);
                         });

}  // namespace
}  // namespace tileplan::kernels
